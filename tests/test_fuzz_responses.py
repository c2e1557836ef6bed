"""Fuzz: response files. Property: every reader returns ResponseData (or one subject's answers) or
raises ResponseFileError naming the file, never a foreign exception."""

import bz2
import gzip
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from fuzz_support import ScratchFolder, fuzz_settings

from catengine.errors import ResponseFileError
from catengine.responses import ResponseData, load_responses, load_subject_answers

FUZZ = fuzz_settings(100)  # bounded and deterministic in CI
SCRATCH = ScratchFolder("fuzz_responses_")
_scratch_folder = SCRATCH.fixture()

cells = st.sampled_from(["0", "1", "", "NA", "nan", "-1", "2", "abc", "1.0", "true", " 1 ", "1e400", "-0", "\"1,0\"",
                         "q1", "m1", "9" * 30, "é", "\x00", "[1]", "{}", "null", "100", "-5", "inf"])
csv_text = st.lists(st.lists(cells, min_size=1, max_size=5).map(",".join), min_size=0, max_size=6).map("\n".join)
headers = st.sampled_from(["subject,item,correct", "subject,item,correct,cot_tokens", "item,correct", ",q1,q2", "",
                           "item,correct,cot_length", "subject,item"])
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
                               ["subject", "item", "correct", "cot_tokens", "x"]), inner, max_size=4), max_leaves=8)


def _write(name: str, data: bytes, compression: str | None) -> Path:
    path = SCRATCH.new(f"_{name}")
    if compression == "gz":
        path, data = path.with_name(path.name + ".gz"), gzip.compress(data)
    elif compression == "bz2":
        path, data = path.with_name(path.name + ".bz2"), bz2.compress(data)
    path.write_bytes(data)
    return path


def _read_all_ways(path: Path):
    for read in (load_responses, load_subject_answers, lambda p: load_subject_answers(p, "m1")):
        try:
            out = read(path)
        except ResponseFileError as exc:
            assert path.name in str(exc), str(exc)
        else:
            assert isinstance(out, (ResponseData, dict))
            if isinstance(out, ResponseData):
                assert out.correct.dtype == np.int8 and set(np.unique(out.correct)) <= {-1, 0, 1}
                if out.cot_length is not None:
                    cot = out.cot_length[~np.isnan(out.cot_length)]
                    assert np.all((cot >= 0) & (cot <= 1e9))


@FUZZ
@given(header=headers, body=csv_text, compression=st.sampled_from([None, "gz", "bz2"]), cut=st.none() | st.integers(0, 200))
def test_fuzzed_csv_files(header, body, compression, cut):
    data = (header + "\n" + body + "\n").encode("utf-8")
    path = _write("r.csv", data, compression)
    if cut is not None:
        path.write_bytes(path.read_bytes()[:cut])
    _read_all_ways(path)


@FUZZ
@given(records=st.lists(json_values, max_size=5), garbage=st.sampled_from(["", "{", "[" * 3000, "\xe9", "9" * 5000]))
def test_fuzzed_jsonl_and_json_files(records, garbage):
    import json

    lines = [json.dumps(r) for r in records] + ([garbage] if garbage else [])
    text = "\n".join(lines) + "\n"
    _read_all_ways(_write("r.jsonl", text.encode("utf-8", "surrogatepass"), None))
    doc = records[0] if records and isinstance(records[0], (dict, list)) else records
    _read_all_ways(_write("r.json", (json.dumps(doc) + garbage).encode("utf-8", "surrogatepass"), None))


@FUZZ
@given(data=st.binary(max_size=300), suffix=st.sampled_from(["r.csv", "r.jsonl", "r.json", "r.nc", "r.csv.gz", "r.xz"]))
def test_fuzzed_raw_bytes(data, suffix):
    _read_all_ways(_write(suffix, data, None))
