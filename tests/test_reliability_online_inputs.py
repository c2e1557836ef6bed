"""Bad input on the online side is named, not absorbed: serve requests with mistyped fields, a CoT
length of the wrong type on a logistic bank, strategy options out of range (named by their flag),
unwritable or misnamed log paths, and a session-log header with a bad seed (issue 18's standard)."""

import io
import json

import pytest

import naive_engine as naive
from catengine.cli import main
from catengine.errors import CatEngineError
from catengine.session import CATSession, Engine
from catengine.session.serve import serve

LOGISTIC = naive.make_bank("2pl", 20, seed=5)


def _serve(lines: list[bytes]) -> list[dict]:
    payload = b"".join(line + b"\n" for line in lines)
    out = io.StringIO()
    assert serve(Engine(LOGISTIC, rng=0), io.TextIOWrapper(io.BytesIO(payload), encoding="utf-8"), out) == 0
    return [json.loads(r) for r in out.getvalue().splitlines()]


def test_serve_names_mistyped_fields_and_non_utf8_lines():
    replies = _serve([
        b'{"op": "next", "subject": 1}',
        b'{"subject": "m"}',
        b'{"op": "next", "subject": "m", "force": "no"}',
        b'{"op": "next", "subject": "\xff"}',
        b'{"op": "next", "subject": "m", "force": false}',
    ])
    assert [r["ok"] for r in replies] == [False, False, False, False, True]
    assert replies[0]["message"] == "'subject' must be a string, got int 1"
    assert replies[1]["message"].startswith("request lacks 'op'")
    assert replies[2]["message"] == "'force' must be true or false, got str \"no\""
    assert replies[3]["error"] == "MalformedJSON" and "not UTF-8" in replies[3]["message"]
    assert replies[4]["item"] is not None


def test_an_invalid_cot_length_is_an_error_even_on_a_logistic_bank():
    session = CATSession(LOGISTIC, rng=0)
    item = session.next_item()
    for bad in ("abc", {"x": 1}, -5, float("nan")):
        with pytest.raises(CatEngineError, match="cot_length must be"):
            session.record(item, 1, cot_length=bad)
    assert session.estimate.n_items == 0  # nothing was recorded
    with pytest.warns(Warning, match="ignored"):
        session.record(item, 1, cot_length=120)  # a valid length is ignored, with a warning


@pytest.mark.parametrize("option, value, expected", [
    ("--max-items", "-1", "--max-items must be an integer >= 0 (0 = the whole bank), got -1"),
    ("--target-sd", "-1", "--target-sd must be a number >= 0 (0 = off), got -1.0"),
    ("--randomesque", "0", "--randomesque must be an integer >= 1 (1 = off), got 0"),
    ("--seed", "-1", "--seed must be an integer >= 0, got -1"),
])
def test_strategy_options_out_of_range_are_named_by_their_flag(tmp_path, capsys, option, value, expected):
    answers = tmp_path / "a.csv"
    answers.write_text("item,correct\n" + "".join(f"{i},1\n" for i in LOGISTIC.item_ids[:3]))
    bank_dir = tmp_path / "bank"
    from catengine import write_item_bank

    write_item_bank(LOGISTIC, bank_dir)
    assert main(["evaluate", "--bank", str(bank_dir), "--responses", str(answers), option, value]) == 2
    assert expected in capsys.readouterr().err


def test_a_sympson_hetter_file_that_is_not_json_is_named(tmp_path, capsys):
    from catengine import write_item_bank

    write_item_bank(LOGISTIC, tmp_path / "bank")
    answers = tmp_path / "a.csv"
    answers.write_text(f"item,correct\n{LOGISTIC.item_ids[0]},1\n")
    junk = tmp_path / "control.txt"
    junk.write_text("not json")
    assert main(["evaluate", "--bank", str(tmp_path / "bank"), "--responses", str(answers),
                 "--sympson-hetter", str(junk)]) == 2
    assert f"Sympson-Hetter file {junk} is not a JSON side file" in capsys.readouterr().err


def test_an_unwritable_log_is_an_error_not_a_traceback(tmp_path, capsys, monkeypatch):
    """The operating system refuses the log file (a read-only directory; simulated, since root may
    write anywhere): `evaluate` says so and exits 2 instead of showing a PermissionError traceback."""
    import catengine.session.log as log_module
    from catengine import write_item_bank

    write_item_bank(LOGISTIC, tmp_path / "bank")
    answers = tmp_path / "a.csv"
    answers.write_text(f"item,correct\n{LOGISTIC.item_ids[0]},1\n")
    target = tmp_path / "ro" / "s.jsonl"

    def refuse(path, mode="r", *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(log_module.io, "FileIO", refuse)
    assert main(["evaluate", "--bank", str(tmp_path / "bank"), "--responses", str(answers), "--log", str(target)]) == 2
    err = capsys.readouterr().err
    assert "catengine evaluate: error:" in err and "Permission denied" in err and "s.jsonl" in err


def test_resuming_a_directory_or_a_log_with_a_bad_seed_is_refused(tmp_path):
    with pytest.raises(IsADirectoryError, match="is a directory, not a log file"):
        Engine.resume(tmp_path, LOGISTIC)
    log = tmp_path / "e.jsonl"
    engine = Engine(LOGISTIC, rng=3, log=log)
    session = engine.start("m")
    session.record(session.next_item(), 1)
    engine.close()
    lines = log.read_text().splitlines()
    for bad in ([1], "abc", 1.5, -2, True):
        header = json.loads(lines[0])
        header["seed_entropy"] = bad
        log.write_text("\n".join([json.dumps(header)] + lines[1:]) + "\n")
        with pytest.raises(CatEngineError, match="'seed_entropy' must be a non-negative integer"):
            Engine.resume(log, LOGISTIC)
