"""Regression tests of issue 18 (input files and protocol); the files are under fixtures/regressions.

12. `calibration fit` gives a named error (file, line, column, value), never a traceback, for
    blank first lines, over-long fields, truncated .gz, huge integers, deep nesting, latin-1 bytes;
13. nothing is silently accepted: `abc` / `-1` in a headerless matrix, JSON ids that are lists or objects;
14. `catengine evaluate` reads through the same readers (header order compared, conflicting
    duplicates and missing columns refused, negative CoT located, short rows, list values, .csv.gz);
15. `serve` answers every hostile line with a named protocol error and keeps going.
"""

import io
import json
from pathlib import Path

import pytest

import naive_engine as naive
from calibration import load_responses
from calibration.cli import main as calibration_main
from catengine import open_item_bank, write_item_bank
from catengine.responses import load_subject_answers as load_answers
from catengine.cli import main as catengine_main
from catengine.errors import ResponseFileError
from catengine.session import Engine
from catengine.session.serve import serve

REGRESSIONS = Path(__file__).resolve().parent / "fixtures" / "regressions"
PROTOCOL_ERRORS = {"MalformedJSON", "InvalidRequestError", "InternalError", "UnknownSubjectError", "UnknownItemError",
                   "ItemAlreadyAnsweredError", "InvalidResponseError", "CoTOutOfRangeError", "BankExhaustedError",
                   "SessionLogError"}


def _fixture(name):
    return REGRESSIONS / name


# ----------------------------------------------------------------------------- 12. no tracebacks
def test_a_blank_first_line_is_skipped():
    data = load_responses(_fixture("fit_blank_first_line.csv"))
    assert data.subject_ids == ("m1", "m2") and data.item_ids == ("q1",)


@pytest.mark.parametrize("name, fragments", [
    ("fit_field_too_long.csv", ["line 3", "CSV"]),
    ("fit_truncated.csv.gz", ["truncated or corrupt"]),
    ("fit_bigint.jsonl", ["line 2", "correct", "999"]),
    ("fit_deep_nesting.jsonl", ["line 2", "too deeply nested"]),
    ("fit_latin1.csv", ["line 3, column 7", "not UTF-8", "xe9"]),
])
def test_unreadable_files_give_a_named_error(name, fragments):
    with pytest.raises(ResponseFileError) as err:
        load_responses(_fixture(name))
    message = str(err.value)
    assert name in message and isinstance(err.value, ValueError)
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_calibration_fit_prints_the_error_not_a_traceback(tmp_path, capsys):
    for name in ("fit_field_too_long.csv", "fit_truncated.csv.gz", "fit_bigint.jsonl", "fit_deep_nesting.jsonl",
                 "fit_latin1.csv"):
        code = calibration_main(["fit", "--method", "cbmm", "--responses", str(_fixture(name)), "--bank-id", "x",
                                 "--out", str(tmp_path)])
        err = capsys.readouterr().err
        assert code == 2 and name in err and "Traceback" not in err, err


# ----------------------------------------------------------------------------- 13. no silent acceptance
@pytest.mark.parametrize("name, value", [("fit_headerless_abc.csv", "'abc'"), ("fit_headerless_minus1.csv", "'-1'")])
def test_a_headerless_matrix_rejects_non_binary_cells(name, value):
    with pytest.raises(ResponseFileError, match=rf"{name} line 2, column 2: {value}") as err:
        load_responses(_fixture(name))
    assert (err.value.line, err.value.column) == (2, 2)


@pytest.mark.parametrize("name", ["fit_jsonl_list_id.jsonl", "fit_jsonl_dict_id.jsonl"])
def test_json_ids_must_be_scalars(name):
    with pytest.raises(ResponseFileError, match=rf"{name} line 1: item id .* is a (list|dict)"):
        load_responses(_fixture(name))


# ----------------------------------------------------------------------------- 14. evaluate on the shared readers
@pytest.fixture(scope="module")
def bank(tmp_path_factory):
    path = write_item_bank(naive.make_bank("lart", 30, seed=31, bank_id="evalbank"), tmp_path_factory.mktemp("b") / "evalbank")
    return open_item_bank(path)


@pytest.mark.parametrize("name, cot, fragments", [
    ("eval_acc.csv", "eval_cot_other_order.csv", ["item columns differ", "'q0000' vs 'q0002'"]),
    ("eval_conflicting_duplicates.csv", None, ["conflicting duplicate rows", "'q0000'", "line 2", "line 4"]),
    ("eval_missing_correct_column.csv", None, ["missing required column 'correct'", "line 2"]),
    ("eval_negative_cot.csv", None, ["line 3", "'q0001'", "-5"]),
    ("eval_short_row.csv", None, ["line 3", "1 fields"]),
    ("eval_cot_list.json", None, ["'q0000'", "[3]"]),
])
def test_evaluate_rejects_what_calibration_rejects(name, cot, fragments, bank, capsys):
    with pytest.raises(ResponseFileError) as err:
        load_answers(_fixture(name), "m1" if cot else None, None if cot is None else _fixture(cot))
    for fragment in fragments:
        assert fragment in str(err.value), (fragment, str(err.value))
    argv = ["evaluate", "--bank", bank.source, "--responses", str(_fixture(name))]
    if cot:
        argv += ["--subject", "m1", "--cot", str(_fixture(cot))]
    assert catengine_main(argv) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_evaluate_reads_compressed_answers(bank, capsys):
    assert load_answers(_fixture("eval_ok.csv.gz")) == {"q0000": (1, 100.0), "q0001": (0, 250.0), "q0002": (1, 80.0)}
    assert catengine_main(["evaluate", "--bank", bank.source, "--responses", str(_fixture("eval_ok.csv.gz")),
                           "--json", "--max-items", "3"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["summary"]
    assert summary["full_n_items"] == 3


# ----------------------------------------------------------------------------- 15. serve
def test_serve_answers_hostile_lines_with_named_errors(bank):
    """Lone surrogates, a 400-digit CoT length, 100,000 open brackets, latin-1 bytes, an id nested
    5,000 deep, a CoT of 1e300, a list CoT, a list op; then a valid request still works."""
    raw = _fixture("serve_hostile_lines.jsonl").read_bytes()
    stdin = io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8")
    stdout = io.StringIO()
    assert serve(Engine(bank, rng=0), stdin, stdout) == 0
    replies = [json.loads(line) for line in stdout.getvalue().splitlines()]
    assert len(replies) == raw.count(b"\n")
    *hostile, last = replies
    assert all(not r["ok"] and r["error"] in PROTOCOL_ERRORS for r in hostile), hostile
    assert [r["error"] for r in hostile[:4]] == ["InvalidRequestError", "UnknownSubjectError", "MalformedJSON", "MalformedJSON"]
    assert last["ok"] and last["item"] in bank.item_ids
