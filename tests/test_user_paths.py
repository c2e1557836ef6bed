"""The paths a new user takes through the library, each ending in a clear word instead of a silent
surprise: a resumed ``lm-eval`` log whose configuration differs from the options given, bare item
ids against a bank nobody named, the docs' Inspect example run twice in one folder
(``CATSession.open``), and a CoT length beyond what the bank's calibration saw."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings

import pytest

from catengine import CATSession, open_item_bank
from catengine.cli import main
from catengine.session import SessionLogError
from catengine.stopping import MaxItems
from cli_support import evaluate_recorded

MATH500_IDS = ["--task", "hendrycks_math500", "--item-id", "math500/{doc_id}"]


@pytest.fixture(scope="module")
def math500():
    return open_item_bank("math500_lart")


# ----------------------------------------------------------------------------- (a) lm-eval next on a resumed log
def _inspect_example_log(bank, path):
    """The log the docs' Inspect example leaves: subject 'simulated-llm', stopping MaxItems(20)."""
    session = CATSession(bank, log=path, subject="simulated-llm", stopping=MaxItems(20))
    for item in session.next_items(3):
        session.record(item, 1, 500.0)
    session.close()
    return path.read_bytes()


def test_lm_eval_next_refuses_options_that_differ_from_the_resumed_log(tmp_path, math500, capsys):
    log = tmp_path / "run.jsonl"
    before = _inspect_example_log(math500, log)
    status = main(["lm-eval", "next", "--log", str(log), "--k", "10", "--max-items", "30", *MATH500_IDS])
    err = capsys.readouterr().err
    assert status == 2, err
    assert "catengine lm-eval: error:" in err and str(log) in err
    # the differing setting, what the log records and what was given, and how to go on
    assert "stopping rule (--max-items 30)" in err
    assert "recorded: stop once 20 items are answered" in err
    assert re.search(r"given: stop once .* or 30 items are answered", err), err
    assert "Omit these options" in err and "another --log" in err
    assert log.read_bytes() == before  # nothing was written to the log

    # several differing options: each on its own line
    status = main(["lm-eval", "next", "--log", str(log), "--k", "10", "--estimator", "eap", "--selector", "random",
                   "--seed", "5", *MATH500_IDS])
    err = capsys.readouterr().err
    assert status == 2, err
    assert "selector (--selector random): recorded:" in err and "estimator (--estimator eap): recorded: map" in err
    assert "--seed 5" in err
    assert log.read_bytes() == before

    # no strategy option given: the log is resumed with its own configuration
    assert main(["lm-eval", "next", "--log", str(log), "--k", "10", *MATH500_IDS]) == 0
    captured = capsys.readouterr()
    assert sum(len(v) for v in json.loads(captured.out).values()) == 10
    from catengine.session import Engine

    with Engine.resume(log) as engine:
        assert engine.config()["stopping"] == {"type": "max-items", "n": 20}


def test_lm_eval_next_resumes_when_the_options_given_are_the_recorded_ones(tmp_path, math500, capsys):
    """The docs' loop passes the same options to every round: each later round resumes the log."""
    log = tmp_path / "run.jsonl"
    options = ["--k", "5", "--max-items", "10", "--seed", "3", "--estimator", "map", *MATH500_IDS]
    assert main(["lm-eval", "next", "--log", str(log), *options]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(["lm-eval", "next", "--log", str(log), *options]) == 0  # the same pending batch again
    assert json.loads(capsys.readouterr().out) == first
    assert main(["lm-eval", "next", "--log", str(log), *options[:4], "--max-items", "12", *MATH500_IDS]) == 2
    err = capsys.readouterr().err
    assert "stopping rule (--max-items 12)" in err and "or 10 items are answered" in err


# ----------------------------------------------------------------------------- (b) bare ids need a named bank
def test_bare_ids_against_the_default_bank_are_an_error_naming_it(capsys):
    code, out, err = evaluate_recorded(capsys, "amc23")  # --bank forgotten: AMC23 answers keyed 0 .. 39
    assert code == 2 and not out, err
    assert "no --bank was given" in err and "'math500_lart'" in err
    assert "'0' .. '39'" in err and "--bank" in err and "--item-prefix" in err
    assert "'amc23_lart'" in err  # the shipped banks these ids would fit
    # the bank named: read with its prefix, as before
    code, out, err = evaluate_recorded(capsys, "amc23", "--bank", "amc23_lart")
    assert code == 0, err
    assert "with the bank's prefix 'amc23/'" in err
    assert all(json.loads(line)["item"].startswith("amc23/") for line in out.splitlines()[:-1])
    # --item-prefix names the benchmark even with the default bank
    code, out, err = evaluate_recorded(capsys, "math500", "--item-prefix", "math500/")
    assert code == 0, err
    assert json.loads(out.splitlines()[-1])["summary"]["full_n_items"] == 500


def test_map_item_ids_maps_bare_ids_only_to_a_named_bank():
    from catengine.itembank.ids import map_item_ids

    bank = [f"math500/{k}" for k in range(500)]
    with pytest.raises(ValueError, match=r"no --bank was given.*'math500_lart' was assumed"):
        map_item_ids([str(k) for k in range(40)], bank, source="answers.csv", assumed="math500_lart")
    assert map_item_ids(["math500/1"], bank, assumed="math500_lart").mapping == {}
    assert map_item_ids(["1"], bank, prefix="math500/", assumed="math500_lart").mapping == {"1": "math500/1"}
    assert map_item_ids(["1"], bank).mapping == {"1": "math500/1"}


# ----------------------------------------------------------------------------- (c) start or resume
def test_open_starts_then_resumes_and_checks_the_strategies(tmp_path, math500):
    from catengine.session import LogConfigMismatchError

    log = tmp_path / "run.jsonl"
    session = CATSession.open(math500, log=log, subject="llm", stopping=MaxItems(6), rng=1)
    items = session.next_items(4)
    for item in items[:3]:
        session.record(item, 1, 400.0)
    state = session.state_summary()
    session.close()
    again = CATSession.open(math500, log=log, subject="llm", stopping=MaxItems(6), rng=1)
    assert again.state_summary()["history"] == state["history"] and again.pending_items == items[3:]
    again.close()
    again = CATSession.open(math500, log=log, subject="llm")  # no strategies: the log's own
    assert again.stopping == MaxItems(6)
    again.close()
    with pytest.raises(LogConfigMismatchError) as exc:
        CATSession.open(math500, log=log, subject="llm", stopping=MaxItems(20), rng=2)
    message = str(exc.value)
    assert "stopping" in message and "recorded" in message and "given" in message and "rng" in message
    assert isinstance(exc.value, SessionLogError)
    with pytest.raises(SessionLogError, match="holds the session of 'llm', not 'other'"):
        CATSession.open(math500, log=log, subject="other")
    CATSession.open(math500, log=log, subject="llm").close()  # the refusals released the log's lock


def test_docs_inspect_example_runs_twice_in_one_folder(tmp_path):
    from test_harness_docs import _GUARD, _blocks, _env

    code = _blocks("## Inspect AI", "python")[0]
    script = tmp_path / "example.py"
    script.write_text(_GUARD + "\n" + code, encoding="utf-8")
    outputs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append(done.stdout.splitlines()[0])
    assert "20 of 500 items answered" in outputs[0] and outputs[1] == outputs[0]  # the second run resumed it
    assert len(list((tmp_path / "inspect-logs").glob("*.eval"))) == 2  # and asked nothing again


# ----------------------------------------------------------------------------- (d) CoT length beyond calibration
def test_a_cot_length_beyond_the_calibration_warns_once_per_session(math500):
    from catengine.session import CoTBeyondCalibrationWarning

    session = CATSession(math500, subject="llm")
    items = session.next_items(4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        session.record(items[0], 1, 9000)  # within what the calibration saw
    with pytest.warns(CoTBeyondCalibrationWarning) as caught:
        session.record(items[1], 1, cot_length=50000)
    message = str(caught[0].message)
    assert "50000" in message and "23,482" in message and "tau" in message and "extrapolat" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        session.record(items[2], 0, 60000)  # once per session
    assert issubclass(CoTBeyondCalibrationWarning, UserWarning)


def test_without_stored_lengths_the_protocols_output_cap_is_the_bound(math500):
    from catengine.session import CoTBeyondCalibrationWarning
    from catengine.itembank.bank import ItemBank

    bank = ItemBank(math500.to_datatree().drop_nodes("responses"), source=math500.source)
    assert bank.responses is None and bank.protocol["calibration_runs"]["max_output_tokens"] == 10240
    session = CATSession(bank, subject="llm")
    with pytest.warns(CoTBeyondCalibrationWarning, match=r"12000 .*10,240"):
        session.record(session.next_item(), 1, 12000)


def test_the_cot_length_is_defined_where_it_is_recorded():
    doc = CATSession.record.__doc__
    assert "completion tokens" in doc and "reasoning" in doc
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "data_formats.md").read_text(encoding="utf-8")
    assert "completion tokens of the reply" in text
