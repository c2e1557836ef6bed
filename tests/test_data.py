"""ResponseData readers/writers: wide CSV (LaRT), long tables, netCDF, subset, sha256, bad inputs."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from calibration.data import ResponseData
from real_data import lart_files


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def wide_files(tmp_path):
    acc = _write(tmp_path / "acc.csv", ",q0,q1,q2\nm1,1,0,NA\nm2,0,,1\nm3,1,1,0\n")
    cot = _write(tmp_path / "cot.csv", ",q0,q1,q2\nm1,120,0,NA\nm2,35.5,7,\nm3,10240,3,99\n")
    return acc, cot


@pytest.fixture
def small():
    correct = np.array([[1, 0, -1, 1], [0, 1, 1, -1], [-1, -1, 0, 1]], dtype=np.int8)
    cot = np.array([[10.0, 0.0, np.nan, 3.5], [7.0, np.nan, 12.0, 1.0], [np.nan, 4.0, 2.0, 8.0]])
    return ResponseData.from_arrays(
        correct,
        cot,
        subject_ids=["llm-a", "llm-b", "llm-c"],
        item_ids=["i0", "i1", "i2", "i3"],
        item_metadata={"benchmark": ["math", "math", "code", "code"], "note": ["", "x", "", "y"]},
    )


# ------------------------------------------------------------------------------------ wide CSV
def test_from_wide_csv_parses_values_ids_and_missing(wide_files):
    d = ResponseData.from_wide_csv(*wide_files)
    assert d.shape == (3, 3)
    assert d.subject_ids == ("m1", "m2", "m3")
    assert d.item_ids == ("q0", "q1", "q2")
    np.testing.assert_array_equal(d.correct, [[1, 0, -1], [0, -1, 1], [1, 1, 0]])
    assert d.correct.dtype == np.int8
    np.testing.assert_array_equal(d.cot_length, [[120, 0, np.nan], [35.5, 7, np.nan], [10240, 3, 99]])


def test_from_wide_csv_without_cot_and_gzip(tmp_path, wide_files):
    acc, _ = wide_files
    gz = tmp_path / "acc.csv.gz"
    gz.write_bytes(gzip.compress(acc.read_bytes()))
    a = ResponseData.from_wide_csv(acc)
    b = ResponseData.from_wide_csv(gz)
    assert not a.has_cot
    assert a.sha256() == b.sha256()


def test_wide_csv_round_trip_preserves_sha(tmp_path, small):
    # item metadata is not part of the wide format: compare without it
    plain = ResponseData.from_arrays(small.correct, small.cot_length, subject_ids=small.subject_ids,
                                     item_ids=small.item_ids)
    plain.to_wide_csv(tmp_path / "a.csv", tmp_path / "c.csv")
    back = ResponseData.from_wide_csv(tmp_path / "a.csv", tmp_path / "c.csv")
    assert back.sha256() == plain.sha256()


def _assert_names_the_problem(fragments, read, *args):
    """``read(*args)`` raises a ValueError whose message holds every one of ``fragments``."""
    with pytest.raises(ValueError) as err:
        read(*args)
    for fragment in fragments:
        assert fragment in str(err.value), (fragment, str(err.value))


@pytest.mark.parametrize(
    "acc_text, expected",
    [
        (",q0,q1\nm1,1,0\nm2,2,1\n", ["line 3", "'m2'", "'q0'", "'2'", "not binary"]),
        (",q0,q1\nm1,1,yes\n", ["line 2", "'m1'", "'q1'", "'yes'"]),
        (",q0,q1\nm1,1,-1\n", ["line 2", "'q1'", "'-1'", "ambiguous"]),
        (",q0,q1\nm1,1,0\nm2,1\n", ["line 3", "'m2'", "2 fields", "header has 3"]),
        (",q0,q1\nm1,1,0\nm1,0,0\n", ["acc.csv: duplicate subject id 'm1' at line 2, column 1 and line 3, column 1"]),
        (",q0,q0\nm1,1,0\n", ["acc.csv: duplicate item id 'q0' at line 1, column 2 and line 1, column 3"]),
        (",q0,,q2\nm1,1,0,1\n", ["acc.csv: item id at line 1, column 3 is empty"]),
        (",q0,q1\nm1,1,0\n,0,1\n", ["acc.csv: subject id at line 3, column 1 is empty"]),
        (",q0,q1\nm1,1,0\nm2,NA,\n", ["acc.csv line 3", "'m2'", "no observed response"]),
        ("", ["empty"]),
        (",q0,q1\n", ["no data rows", "empty"]),
        ("label\nm1\n", ["no item columns"]),
    ],
)
def test_from_wide_csv_bad_accuracy_names_the_problem(tmp_path, acc_text, expected):
    acc = _write(tmp_path / "acc.csv", acc_text)
    _assert_names_the_problem(expected, ResponseData.from_wide_csv, acc)


@pytest.mark.parametrize(
    "cot_text, expected",
    [
        (",q0,q1\nm1,5,-3\nm2,1,1\n", ["cot.csv line 2", "'m1'", "'q1'", "'-3'", ">= 0"]),
        (",q0,q1\nm1,5,3\nm2,inf,1\n", ["line 3", "'m2'", "'q0'", "'inf'", "finite"]),
        (",q0,q1\nm1,5,3\nm2,abc,1\n", ["'abc'", "'q0'"]),
        (",q0,q1\nm1,5,3\nmX,1,1\n", ["row labels differ", "data row 2", "'m2'", "'mX'"]),
        (",q0,q1\nm1,5,3\n", ["row labels differ", "data row 2", "'m2'", "None", "2 vs 1 rows"]),
        (",q0,qZ\nm1,5,3\nm2,1,1\n", ["item columns differ", "column 2", "'q1'", "'qZ'"]),
        (",q1,q0\nm1,5,3\nm2,1,1\n", ["item columns differ", "column 1", "'q0'", "'q1'"]),
        (",q0,q1,q2\nm1,5,3,1\nm2,1,1,1\n", ["item columns differ", "column 3", "None", "'q2'"]),
        (",q0,q1\nm1,5,3\nm2,1\n", ["cot.csv line 3", "'m2'", "2 fields"]),  # not blamed on acc.csv
    ],
)
def test_from_wide_csv_bad_cot_names_the_problem(tmp_path, cot_text, expected):
    acc = _write(tmp_path / "acc.csv", ",q0,q1\nm1,1,0\nm2,0,1\n")
    cot = _write(tmp_path / "cot.csv", cot_text)
    _assert_names_the_problem(expected, ResponseData.from_wide_csv, acc, cot)


def test_a_cot_file_problem_is_not_blamed_on_the_accuracy_file(tmp_path):
    from calibration.io import load_responses

    acc = _write(tmp_path / "acc.csv", ",q0,q1\nm1,1,0\nm2,0,1\n")
    cot = _write(tmp_path / "cot.csv", ",q0,q1\nm1,5,3\nm2,1\n")
    with pytest.raises(ValueError) as err:
        load_responses(acc, cot=cot)
    assert str(err.value).startswith("cot.csv line 3"), str(err.value)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("subject,correct,cot_tokens\nm0,1,1208\nm1,0,300\n", ["t.csv", "'correct', 'cot_tokens'", "no 'item' column"]),
        ("item,correct\nq0,1\nq1,0\n", ["t.csv", "no 'subject' column"]),
        ("model,question,correct\nm0,q0,1\n", ["t.csv", "no 'subject' or 'item' column"]),
    ],
)
def test_a_long_table_missing_a_column_is_not_read_as_wide(tmp_path, text, expected):
    from calibration.io import load_responses

    _assert_names_the_problem(expected, load_responses, _write(tmp_path / "t.csv", text))


def test_evaluate_reader_names_a_missing_item_column(tmp_path):
    from catengine.responses import load_subject_answers

    path = _write(tmp_path / "answers.csv", "question,correct\nmath500/0,1\n")
    _assert_names_the_problem(["answers.csv", "no 'item' column"], load_subject_answers, path)


def test_items_as_rows_is_refused_for_files_that_name_every_cell(tmp_path):
    from calibration.io import load_responses

    data = ResponseData.from_arrays([[1, 0, 1], [0, 0, 1]], subject_ids=["m0", "m1"], item_ids=["q0", "q1", "q2"])
    long = _write(tmp_path / "long.csv", "subject,item,correct\n" + "".join(
        f"{s},{i},{int(data.correct[r, c])}\n" for r, s in enumerate(data.subject_ids) for c, i in enumerate(data.item_ids)))
    nc = tmp_path / "r.nc"
    data.to_netcdf(nc)
    for path, layout in ((long, "long"), (nc, "netCDF")):
        with pytest.raises(ValueError, match=rf"{path.name} is a {layout} file.*--items-as-rows"):
            load_responses(path, items_as_rows=True)


def test_a_bad_value_in_a_response_netcdf_names_the_subject_and_item(tmp_path):
    from calibration.io import load_responses

    data = ResponseData.from_arrays([[1, 0], [0, 1]], subject_ids=["m0", "m1"], item_ids=["q0", "q1"])
    ds = data.to_dataset()
    tampered = ds["correct"].values.copy()
    tampered[1, 0] = 5
    ds["correct"] = (ds["correct"].dims, tampered, ds["correct"].attrs)
    ds.attrs.pop("responses_sha256", None)
    path = tmp_path / "tampered.nc"
    ds.to_netcdf(path)
    _assert_names_the_problem(["tampered.nc", "subject 'm1', item 'q0'", "correct = 5", "not binary"], load_responses, path)


def test_row_is_observed_if_only_cot_present(tmp_path):
    # missingness of correctness and CoT length is independent: a row with only a CoT length is kept
    acc = _write(tmp_path / "acc.csv", ",q0\nm1,1\nm2,NA\n")
    cot = _write(tmp_path / "cot.csv", ",q0\nm1,5\nm2,17\n")
    d = ResponseData.from_wide_csv(acc, cot)
    assert d.correct[1, 0] == -1 and d.cot_length[1, 0] == 17


@pytest.mark.parametrize(
    "name, shape, mean_acc",
    [("math500", (158, 500), 0.484), ("amc23", (156, 40), 0.400)],  # SOURCE.md table
)
def test_real_lart_data_loads(name, shape, mean_acc):
    acc, cot = lart_files(name)  # data/lart: gzip-compressed, read as they are
    d = ResponseData.from_wide_csv(acc, cot)
    assert d.shape == shape
    assert d.has_cot
    assert d.missing_rate() == 0.0 and not np.isnan(d.cot_length).any()
    assert d.item_ids == tuple(str(k) for k in range(shape[1]))
    assert d.subject_ids[0] == "01_ai_Yi_34B_one_shot"
    assert abs(d.correct.mean() - mean_acc) < 5e-4
    assert d.cot_length.min() == 0.0  # zero-length chains exist (SOURCE.md)


# ------------------------------------------------------------------------------------ long format
LONG_CSV = """subject,item,correct,cot_tokens,benchmark
m1,q0,1,120,math
m1,q1,0,0,code
m2,q0,0,35,math
m2,q1,,7,code
m2,q0,0,35,math
m3,q2,1,,math
"""


def test_from_long_csv(tmp_path):
    d = ResponseData.from_long(_write(tmp_path / "t.csv", LONG_CSV))
    assert d.subject_ids == ("m1", "m2", "m3")
    assert d.item_ids == ("q0", "q1", "q2")
    np.testing.assert_array_equal(d.correct, [[1, 0, -1], [0, -1, -1], [-1, -1, 1]])
    np.testing.assert_array_equal(d.cot_length, [[120, 0, np.nan], [35, 7, np.nan], [np.nan, np.nan, np.nan]])
    assert d.item_metadata["benchmark"].tolist() == ["math", "code", "math"]


def test_from_long_jsonl_dicts_and_mapping_agree(tmp_path):
    rows = [
        {"subject": "m1", "item": "q0", "correct": True, "cot_tokens": 12, "benchmark": "a"},
        {"subject": "m1", "item": "q1", "correct": 0, "cot_tokens": None, "benchmark": "b"},
        {"subject": "m2", "item": "q1", "correct": 1.0, "cot_tokens": 3.5, "benchmark": "b"},
        {"subject": "m2", "item": "q0", "correct": None, "cot_tokens": 8, "benchmark": "a"},
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    mapping = {k: [r[k] for r in rows] for k in rows[0]}
    a = ResponseData.from_long(path)
    b = ResponseData.from_long(rows)
    c = ResponseData.from_long(mapping)
    assert a.sha256() == b.sha256() == c.sha256()
    np.testing.assert_array_equal(a.correct, [[1, 0], [-1, 1]])


def test_from_long_renamed_columns_and_fixed_order():
    rows = [{"model_name": "m1", "prompt": "p1", "score": 1}, {"model_name": "m2", "prompt": "p0", "score": 0}]
    d = ResponseData.from_long(
        rows, columns={"subject": "model_name", "item": "prompt", "correct": "score"}, item_ids=["p0", "p1", "p2"]
    )
    assert d.item_ids == ("p0", "p1", "p2") and not d.has_cot
    np.testing.assert_array_equal(d.correct, [[-1, 1, -1], [0, -1, -1]])
    with pytest.raises(ValueError, match=r"row 1: item 'p0' is not among the given item_ids"):
        ResponseData.from_long(rows, columns={"subject": "model_name", "item": "prompt", "correct": "score"},
                               item_ids=["p1"])


def test_from_long_metadata_columns_filter():
    rows = [
        {"subject": "m1", "item": "q0", "correct": 1, "benchmark": "a", "open_weights": "yes"},
        {"subject": "m2", "item": "q0", "correct": 0, "benchmark": "a", "open_weights": "no"},
    ]
    expected = ("'open_weights'", "item 'q0'", "'yes'", "'no'", "row 0", "row 1", "metadata_columns")
    _assert_names_the_problem(expected, ResponseData.from_long, rows)
    d = ResponseData.from_long(rows, metadata_columns=["benchmark"])
    assert list(d.item_metadata) == ["benchmark"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("subject,item,correct\nm1,q0,1\nm1,q0,0\n",
         ["conflicting duplicate", "'m1'", "'q0'", "correct=1", "correct=0", "line 2", "line 3"]),
        ("subject,item,correct,cot_tokens\nm1,q0,1,5\nm1,q0,1,6\n",
         ["conflicting duplicate", "'m1'", "'q0'", "cot_tokens=5", "cot_tokens=6"]),
        ("subject,item\nm1,q0\n", ["line 2", "missing required column 'correct'"]),
        ("subj,item,correct\nm1,q0,1\n", ["missing required column 'subject'"]),
        ("subject,item,correct\nm1,q0,1\nm2,q0,0.5\n", ["t.csv line 3", "'m2'", "'q0'", "'0.5'", "not binary"]),
        ("subject,item,correct,cot_tokens\nm1,q0,1,5\n\nm2,q0,1,-2\n", ["t.csv line 4", "'m2'", "'-2'"]),
        ("subject,item,correct,cot_tokens\nm1,q0,1,inf\n", ["line 2", "'inf'", "finite"]),
        ("subject,item,correct\nm1,q0,1\n,q1,1\n", ["line 3", "subject is empty"]),
        ("subject,item,correct\nm1,q0\n", ["line 2", "2 fields"]),
        ("subject,item,correct\n", ["no data rows", "empty"]),
        ("subject,item,correct\nm1,q0,NA\n", ["subject 'm1'", "no observed response"]),
        ("subject,item,correct,benchmark\nm1,q0,1,a\nm2,q0,1,b\n",
         ["'benchmark'", "item 'q0'", "'a'", "'b'", "line 2", "line 3"]),
    ],
)
def test_from_long_bad_csv_names_the_problem(tmp_path, text, expected):
    path = _write(tmp_path / "t.csv", text)
    _assert_names_the_problem(expected, ResponseData.from_long, path)


def test_from_long_bad_jsonl_names_line(tmp_path):
    path = _write(tmp_path / "t.jsonl", '{"subject": "m1", "item": "q0", "correct": 1}\n{"subject": "m2", "item": "q0", "correct": 3}\n')
    with pytest.raises(ValueError, match=r"t\.jsonl line 2: subject 'm2', item 'q0': correct = 3 is not binary"):
        ResponseData.from_long(path)
    path = _write(tmp_path / "u.jsonl", '{"subject": "m1", "item": "q0", "correct": 1}\n{broken\n')
    with pytest.raises(ValueError, match=r"u\.jsonl line 2: not valid JSON"):
        ResponseData.from_long(path)
    with pytest.raises(ValueError, match=r"unknown format '\.txt'"):
        ResponseData.from_long(tmp_path / "t.txt")


def test_from_long_in_memory_errors():
    with pytest.raises(ValueError, match=r"column 'correct' has 1 values but column 'subject' has 2"):
        ResponseData.from_long({"subject": ["a", "b"], "item": ["x", "y"], "correct": [1]})
    with pytest.raises(ValueError, match=r"no data rows"):
        ResponseData.from_long([])
    with pytest.raises(ValueError, match=r"row 1: expected a mapping"):
        ResponseData.from_long([{"subject": "a", "item": "x", "correct": 1}, ["a", "x", 1]])


def test_long_round_trip_preserves_sha(small, tmp_path):
    assert ResponseData.from_long(small.to_long()).sha256() == small.sha256()
    # also through a JSONL file
    path = tmp_path / "x.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in small.to_long()), encoding="utf-8")
    assert ResponseData.from_long(path).sha256() == small.sha256()
    # dropping missing cells loses the order of first appearance only; fixed ids restore it
    sparse = small.to_long(drop_missing=True)
    assert len(sparse) == 12 - 2  # cells (llm-a, i2) and (llm-c, i0) have neither value
    back = ResponseData.from_long(sparse, subject_ids=small.subject_ids, item_ids=small.item_ids)
    assert back.sha256() == small.sha256()


# ------------------------------------------------------------------------------------ netCDF
def test_netcdf_round_trip(small, tmp_path):
    path = small.to_netcdf(tmp_path / "resp.nc", attrs={"source": "unit test", "flag": True})
    back = ResponseData.from_netcdf(path)
    assert back.sha256() == small.sha256()
    assert back.subject_ids == small.subject_ids and back.item_ids == small.item_ids
    assert back.item_metadata["note"].tolist() == ["", "x", "", "y"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["resp.nc"]  # no temporary file left behind

    import xarray as xr

    with xr.open_dataset(path, mask_and_scale=False) as ds:
        assert ds["correct"].dtype == np.int8
        assert int(ds["correct"].values[0, 2]) == -1
        assert ds.attrs["responses_sha256"] == small.sha256()
        assert ds.attrs["source"] == "unit test" and ds.attrs["flag"] == 1


def test_netcdf_round_trip_without_cot_and_overwrite(tmp_path):
    d = ResponseData.from_arrays([[1, 0], [np.nan, 1]])
    path = tmp_path / "r.nc"
    d.to_netcdf(path)
    assert ResponseData.from_netcdf(path).sha256() == d.sha256()
    assert not ResponseData.from_netcdf(path).has_cot
    with pytest.raises(FileExistsError):
        d.to_netcdf(path, overwrite=False)
    with pytest.raises(ValueError, match="attr 'schema'"):
        d.to_netcdf(path, attrs={"schema": "x"})
    with pytest.raises(ValueError, match="attr 'bad'"):
        d.to_netcdf(path, attrs={"bad": [1, 2]})


def test_netcdf_detects_tampering(small, tmp_path):
    import netCDF4

    path = small.to_netcdf(tmp_path / "resp.nc")
    with netCDF4.Dataset(path, "a") as nc:
        nc["correct"][0, 0] = 0
    with pytest.raises(ValueError, match="responses_sha256"):
        ResponseData.from_netcdf(path)


# ------------------------------------------------------------------------------------ sha, subset, arrays
def test_sha256_sensitive_to_one_flipped_cell(small):
    flipped = small.correct.copy()
    flipped[1, 1] = 1 - flipped[1, 1]
    other = ResponseData.from_arrays(
        flipped, small.cot_length, subject_ids=small.subject_ids, item_ids=small.item_ids,
        item_metadata=small.item_metadata,
    )
    assert other.sha256() != small.sha256()
    same = ResponseData.from_arrays(
        small.correct.copy(), small.cot_length.copy(), subject_ids=small.subject_ids, item_ids=small.item_ids,
        item_metadata=small.item_metadata,
    )
    assert same.sha256() == small.sha256()


def test_subset(small):
    s = small.subset(subjects=["llm-c", "llm-a"], items=[3, 0])
    assert s.subject_ids == ("llm-c", "llm-a") and s.item_ids == ("i3", "i0")
    np.testing.assert_array_equal(s.correct, [[1, -1], [1, 1]])
    np.testing.assert_array_equal(s.cot_length, [[8.0, np.nan], [3.5, 10.0]])
    assert s.item_metadata["benchmark"].tolist() == ["code", "math"]
    m = small.subset(items=[True, False, True, False])
    assert m.item_ids == ("i0", "i2")
    assert small.subset().sha256() == small.sha256()
    with pytest.raises(ValueError, match="unknown subject id 'nope'"):
        small.subset(subjects=["nope"])
    with pytest.raises(ValueError, match="item index 9 is out of range"):
        small.subset(items=[9])
    with pytest.raises(ValueError, match="'i0' is selected more than once"):
        small.subset(items=[0, "i0"])
    with pytest.raises(ValueError, match="keeps no item"):
        small.subset(items=[])


@pytest.mark.parametrize(
    "correct, cot, expected",
    [
        ([[1, 2]], None, ["correct[0, 1]", "2", "not binary"]),
        ([[1, 0]], [[1.0, -4.0]], ["cot_length[0, 1]", "-4.0"]),
        ([[1, 0]], [[np.inf, 1.0]], ["cot_length[0, 0]", "inf"]),
        (np.zeros((0, 3)), None, ["empty"]),
        ([[1, 0], [-1, -1]], None, ["'subject_1'", "row 1", "no observed response"]),
    ],
)
def test_from_arrays_bad_input(correct, cot, expected):
    _assert_names_the_problem(expected, ResponseData.from_arrays, correct, cot)


def test_transposed_swaps_the_axes_and_refuses_what_would_lose_meaning(wide_files):
    acc, cot = wide_files
    data = ResponseData.from_wide_csv(acc, cot)
    flipped = data.transposed()
    assert flipped.subject_ids == data.item_ids and flipped.item_ids == data.subject_ids
    np.testing.assert_array_equal(flipped.correct, data.correct.T)
    np.testing.assert_array_equal(flipped.cot_length, data.cot_length.T)
    back = flipped.transposed()
    assert back.sha256() == data.sha256()
    with pytest.raises(ValueError, match="item metadata"):
        ResponseData.from_arrays(data.correct, item_metadata={"subject": np.array(["a", "b", "c"])}).transposed()
    with pytest.raises(ValueError, match="LLM groups"):
        ResponseData.from_arrays(data.correct, subject_groups=["x", "x", "y"]).transposed()


def test_items_as_rows_reads_an_items_by_llms_matrix(tmp_path, capsys):
    from calibration.cli import main
    from calibration.io import load_responses
    from catengine import open_item_bank

    g = np.random.default_rng(3)
    theta, a, b = g.normal(size=120), g.uniform(0.5, 2.0, 40), g.normal(size=40)
    correct = (g.random((120, 40)) < 1 / (1 + np.exp(-(np.outer(theta, a) + b)))).astype(np.int8)
    llms = ResponseData.from_arrays(correct, subject_ids=[f"llm{i}" for i in range(120)],
                                    item_ids=[f"q{j}" for j in range(40)])
    items_file = tmp_path / "items_x_models.csv"
    llms.transposed().to_wide_csv(items_file)  # one row per item, one column per LLM
    read = load_responses(items_file, wide=True, items_as_rows=True)
    assert read.sha256() == llms.sha256()
    # the CLI: without the flag the 40 x 120 file is read as 40 LLMs (no note: the rows do not outnumber
    # the columns); the transposed shape of a real items x LLMs file (many rows, few columns) gets a note
    out = tmp_path / "banks"
    assert main(["fit", "--method", "cbmm", "--responses", str(items_file), "--wide", "--items-as-rows",
                 "--bank-id", "flip", "--out", str(out), "--no-progress", "--tol", "1e-5"]) == 0
    bank = open_item_bank(out / "flip")
    assert bank.n_items == 40 and bank.attrs["n_subjects"] == 120
    assert "pass --items-as-rows" not in capsys.readouterr().err
    from calibration.cli.fit import warn_if_items_look_like_rows

    tall = llms.subset(items=list(range(10)))  # 120 rows, 10 columns
    warn_if_items_look_like_rows(tall, items_as_rows=False)
    assert "120 rows, read as LLMs, and 10 items" in capsys.readouterr().err
    warn_if_items_look_like_rows(tall, items_as_rows=True)
    assert capsys.readouterr().err == ""
