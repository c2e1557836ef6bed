"""Command line: ``catengine evaluate``, ``catengine serve`` (subprocess, hostile input) and ``demo``."""

import csv
import json
import re
import subprocess
import sys

import numpy as np
import pytest

import naive_engine as naive
from catengine import open_item_bank, write_item_bank
from catengine.cli import main
from catengine.responses import load_subject_answers as load_responses


@pytest.fixture(scope="module")
def lart_bank(tmp_path_factory):
    root = tmp_path_factory.mktemp("banks")
    path = write_item_bank(naive.make_bank("lart", 60, seed=31, bank_id="clibank"), root / "clibank")
    return open_item_bank(path)


def _wide_files(tmp_path, bank, n_subjects=3, missing=()):
    acc, cot = tmp_path / "acc.csv", tmp_path / "cot.csv"
    rows_a, rows_c = [], []
    for k in range(n_subjects):
        oracle, _ = naive.make_oracle(bank.params, seed=100 + k)
        ra, rc = [f"llm_{k}"], [f"llm_{k}"]
        for j in range(bank.n_items):
            c, t = oracle[j]
            ra.append("NA" if bank.item_ids[j] in missing else str(c))
            rc.append("NA" if bank.item_ids[j] in missing else str(int(t)))
        rows_a.append(ra)
        rows_c.append(rc)
    for path, rows in ((acc, rows_a), (cot, rows_c)):
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow([""] + list(bank.item_ids))
            w.writerows(rows)
    return acc, cot


def test_evaluate_replays_a_wide_response_file(tmp_path, lart_bank, capsys):
    acc, cot = _wide_files(tmp_path, lart_bank, missing={"q0010", "q0011", "q0012"})
    rc = main(["evaluate", "--bank", lart_bank.source, "--responses", str(acc), "--cot", str(cot),
               "--subject", "llm_1", "--max-items", "60", "--target-sd", "0.2", "--json"])
    assert rc == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    steps, summary = lines[:-1], lines[-1]["summary"]
    assert [s["step"] for s in steps] == list(range(1, len(steps) + 1))
    assert not {"q0010", "q0011", "q0012"} & {s["item"] for s in steps}
    assert summary["n_items"] == len(steps) and summary["full_n_items"] == 57
    assert summary["theta_sd"] <= 0.2 or summary["n_items"] == 57
    assert all(s["tau"] is not None and s["cot_length"] is not None for s in steps)
    # the table form prints the trajectory and the 95% interval
    rc = main(["evaluate", "--bank", lart_bank.source, "--responses", str(acc), "--cot", str(cot),
               "--subject", "llm_0", "--selector", "mfi", "--estimator", "eap", "--max-items", "8", "--no-cot"])
    out = capsys.readouterr().out
    assert rc == 0 and "95% interval" in out and "adaptive: theta" in out and out.count("\n   ") >= 1
    assert "reached 8 items" in out


def test_evaluate_stops_once_the_score_is_known_to_within(tmp_path, lart_bank, capsys):
    acc, cot = _wide_files(tmp_path, lart_bank)
    rc = main(["evaluate", "--bank", lart_bank.source, "--responses", str(acc), "--cot", str(cot), "--subject", "llm_0",
               "--max-items", "60", "--target-sd", "0", "--score-within", "0.1", "--json"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])["summary"]
    assert "known to within" in summary["stop_reason"], summary["stop_reason"]
    score = summary["score"]
    assert 0.5 * (score["high"] - score["low"]) <= 0.1


def test_evaluate_says_when_the_file_ran_out_of_answers(tmp_path, lart_bank, capsys):
    """A file with fewer answers than the test would use: the stop names the file, not the bank."""
    ids = list(lart_bank.item_ids)
    path = tmp_path / "answers.csv"
    path.write_text("item,correct,cot_tokens\n" + "".join(f"{i},{k % 2},{300 + k}\n" for k, i in enumerate(ids[:4])))
    rc = main(["evaluate", "--bank", lart_bank.source, "--responses", str(path), "--json"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])["summary"]
    assert summary["n_items"] == 4
    assert summary["stop_reason"] == (f"every available answer is used (4 of the bank's {len(ids)} items have one; the "
                                      "others cannot be administered)")
    rc = main(["evaluate", "--bank", lart_bank.source, "--responses", str(path)])
    out = capsys.readouterr().out
    assert rc == 0 and "stopped: every available answer is used" in out and "no item left" not in out


def test_evaluate_sd_scale_widens_the_reported_sd(tmp_path, lart_bank, capsys):
    acc, cot = _wide_files(tmp_path, lart_bank)
    summaries = []
    for scale in ("1", "2"):
        rc = main(["evaluate", "--bank", lart_bank.source, "--responses", str(acc), "--cot", str(cot), "--subject", "llm_2", "--selector", "mfi",
                   "--max-items", "10", "--target-sd", "0", "--sd-scale", scale, "--json"])
        assert rc == 0
        summaries.append(json.loads(capsys.readouterr().out.splitlines()[-1])["summary"])
    plain, wide = summaries
    assert wide["theta"] == pytest.approx(plain["theta"]) and wide["theta_sd"] == pytest.approx(2 * plain["theta_sd"])
    assert main(["evaluate", "--bank", lart_bank.source, "--responses", str(acc), "--subject", "llm_2", "--sd-scale", "0"]) == 2
    assert "sd_scale must be a finite number > 0, got 0.0" in capsys.readouterr().err


def test_evaluate_errors_are_reported_not_raised(tmp_path, lart_bank, capsys):
    acc, _ = _wide_files(tmp_path, lart_bank)
    assert main(["evaluate", "--bank", lart_bank.source, "--responses", str(acc), "--subject", "nobody"]) == 2
    assert "no row 'nobody'" in capsys.readouterr().err
    assert main(["evaluate", "--bank", lart_bank.source, "--responses", str(acc), "--subject", "llm_0",
                 "--selector", "bogus"]) == 2
    assert "unknown selector" in capsys.readouterr().err
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"x1": 1, "x2": 0}))
    assert main(["evaluate", "--bank", lart_bank.source, "--responses", str(other)]) == 2
    assert "none of the 2 item ids" in capsys.readouterr().err


def test_load_responses_formats(tmp_path):
    long = tmp_path / "long.csv"
    long.write_text("subject,item,correct,cot_tokens\na,q1,1,300\na,q2,0,NA\nb,q1,0,10\na,q3,NA,5\n")
    assert load_responses(long, "a") == {"q1": (1, 300.0), "q2": (0, None)}
    js = tmp_path / "r.json"
    js.write_text(json.dumps({"q1": 1, "q2": {"correct": 0, "cot_tokens": 42}}))
    assert load_responses(js) == {"q1": (1, None), "q2": (0, 42.0)}
    jl = tmp_path / "r.jsonl"
    jl.write_text('{"subject": "a", "item": "q1", "correct": 1}\n{"subject": "b", "item": "q1", "correct": 0}\n')
    assert load_responses(jl, "b") == {"q1": (0, None)}
    bad = tmp_path / "bad.csv"
    bad.write_text("item,correct\nq1,2\n")
    with pytest.raises(ValueError, match="0 or 1"):
        load_responses(bad)


def _reply_validators():
    from jsonschema import Draft202012Validator

    from catengine.session.serve import protocol_schema

    schema = protocol_schema()
    Draft202012Validator.check_schema(schema)
    every = Draft202012Validator(schema)
    per_op = {name[: -len("_reply")]: Draft202012Validator({**schema, "$ref": f"#/$defs/{name}"})
              for name in schema["$defs"] if name.endswith("_reply")}
    return every, per_op


def check_reply(reply: dict, request=None) -> dict:
    """Validate one serve reply against the shipped JSON Schema: the whole schema, and the reply
    definition of the request's op (error_reply for a failure). Every serve test calls this."""
    every, per_op = _VALIDATORS
    every.validate(reply)
    op = request.get("op") if isinstance(request, dict) else None
    if not reply["ok"]:
        per_op["error"].validate(reply)
    elif op in per_op:
        per_op[op].validate(reply)
    else:
        raise AssertionError(f"successful reply {reply} to a request without a known op: {request!r}")
    return reply


_VALIDATORS = _reply_validators()


def _serve(bank, log, requests, extra=()):
    cmd = [sys.executable, "-m", "catengine.cli", "serve", "--bank", bank.source, "--log", str(log), *extra]
    proc = subprocess.run(cmd, input="".join(r if isinstance(r, str) else json.dumps(r) + "\n" for r in requests),
                          capture_output=True, text=True, timeout=180)
    replies = [json.loads(line) for line in proc.stdout.splitlines()]
    sent = [r for r in requests if not (isinstance(r, str) and not r.strip())]  # blank lines get no reply
    assert len(replies) == len(sent), (proc.stderr, replies)
    for request, reply in zip(sent, replies):
        if isinstance(request, str):
            try:
                request = json.loads(request)
            except ValueError:
                request = None
        check_reply(reply, request)
    return proc, replies


def test_serve_survives_hostile_input_and_resumes(tmp_path, lart_bank):
    log = tmp_path / "serve.jsonl"
    oracle, _ = naive.make_oracle(lart_bank.params, seed=7)
    reqs = [
        "this is not json\n",
        "[1, 2, 3]\n",
        {"op": "fly", "subject": "m1"},
        {"op": "record", "subject": "ghost", "item": "q0001", "correct": 1},
        {"op": "next", "subject": "m1", "id": 17},
        {"op": "record", "subject": "m1", "item": "no-such-item", "correct": 1},
        {"op": "record", "subject": "m1", "item": "q0001", "correct": 3},
        {"op": "record", "subject": "m1", "item": "q0001", "correct": 1, "cot_length": -5},
        {"op": "record", "subject": "m1", "item": "q0001"},
        {"op": "next", "subject": 42},
        "\n",
    ]
    proc, replies = _serve(lart_bank, log, reqs, extra=("--seed", "3", "--max-items", "30"))
    assert proc.returncode == 0, proc.stderr  # closed stdin: clean exit
    assert len(replies) == 10
    assert [r["ok"] for r in replies] == [False, False, False, False, True, False, False, False, False, False]
    assert replies[0]["error"] == "MalformedJSON"
    assert "unknown op" in replies[2]["message"]
    assert replies[3]["error"] == "UnknownSubjectError" and "ghost" in replies[3]["message"]
    first = replies[4]
    assert first["id"] == 17 and first["item"] in lart_bank.item_ids and first["finished"] is False
    assert replies[5]["error"] == "UnknownItemError"
    assert replies[6]["error"] == "InvalidResponseError" and replies[7]["error"] == "InvalidResponseError"
    assert "correct" in replies[8]["message"]
    # second run: the log is resumed; the pending proposal survives; answer a few items
    reqs = [{"op": "next", "subject": "m1"}]
    proc, replies = _serve(lart_bank, log, reqs + [{"op": "estimate", "subject": "m1"}])
    assert proc.returncode == 0 and replies[0]["item"] == first["item"] and "resumed 1 session" in proc.stderr
    reqs = []
    item = first["item"]
    for _ in range(3):
        c, t = oracle[lart_bank.index_of(item)]
        reqs.append({"op": "record", "subject": "m1", "item": item, "correct": c, "cot_length": t})
        reqs.append({"op": "next", "subject": "m1"})
    proc = subprocess.Popen([sys.executable, "-m", "catengine.cli", "serve", "--bank", lart_bank.source, "--log", str(log)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    got = []
    for r in reqs:  # interactive: each next item depends on the previous answer
        if r["op"] == "record":
            r["item"] = item
            c, t = oracle[lart_bank.index_of(item)]
            r["correct"], r["cot_length"] = c, t
        proc.stdin.write(json.dumps(r) + "\n")
        proc.stdin.flush()
        reply = check_reply(json.loads(proc.stdout.readline()), r)
        assert reply["ok"], reply
        got.append(reply)
        if r["op"] == "next":
            item = reply["item"]
    proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
    proc.stdin.flush()
    assert check_reply(json.loads(proc.stdout.readline()), {"op": "quit"})["bye"] is True
    assert proc.wait(timeout=60) == 0
    proc.stdout.close()
    proc.stderr.close()
    proc.stdin.close()
    assert got[-2]["estimate"]["n_items"] == 3 and "tau" in got[-2]["estimate"]
    # the log replays to the state the server reported
    from catengine.session import Engine

    e = Engine.resume(log, lart_bank)
    est = e.session("m1").estimate
    assert est.n_items == 3 and est.theta == pytest.approx(got[-2]["estimate"]["theta"], abs=0)
    e.close()


def test_demo_prints_trajectory_and_interval(capsys):
    assert main(["demo", "--seed", "3", "--max-items", "12", "--target-sd", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "95% interval" in out and "speed   tau" in out
    table = [line for line in out.splitlines() if line[:4].strip().isdigit()]
    assert len(table) == 12 and "reached 12 items" in out


def test_load_responses_reads_one_row_of_a_response_netcdf(tmp_path):
    from calibration import ResponseData

    data = ResponseData.from_arrays([[1, 0, -1], [0, 1, 1]], [[10.0, np.nan, 3.0], [1.0, 2.0, 3.0]],
                                    subject_ids=["m1", "m2"], item_ids=["q1", "q2", "q3"])
    path = data.to_netcdf(tmp_path / "r.nc")
    assert load_responses(path, "m1") == {"q1": (1, 10.0), "q2": (0, None)}
    with pytest.raises(ValueError, match="name one with --subject"):
        load_responses(path)
    with pytest.raises(ValueError, match="no subject 'm9'"):
        load_responses(path, "m9")


def test_serve_marks_answers_to_items_it_did_not_propose(tmp_path, lart_bank):
    log = tmp_path / "serve.jsonl"
    reqs = [
        {"op": "next", "subject": "m1"},
        {"op": "quit"},
    ]
    _, replies = _serve(lart_bank, log, reqs)
    proposed = replies[0]["item"]
    other = next(i for i in lart_bank.item_ids if i != proposed)
    reqs = [
        {"op": "record", "subject": "m1", "item": proposed, "correct": 1},
        {"op": "record", "subject": "m1", "item": other, "correct": 0},
        {"op": "estimate", "subject": "m1"},
        {"op": "quit"},
    ]
    _, replies = _serve(lart_bank, log, reqs)
    assert replies[0]["ok"] and replies[0]["proposed"] is True and replies[0]["n_unproposed"] == 0
    assert replies[1]["ok"] and replies[1]["proposed"] is False and replies[1]["n_unproposed"] == 1
    assert replies[2]["n_unproposed"] == 1
    records = [json.loads(line) for line in log.read_text().splitlines() if '"record"' in line]
    assert [r["proposed"] for r in records if r.get("event", r.get("type")) == "record"] == [True, False]


def test_session_counts_unproposed_answers(lart_bank):
    from catengine import CATSession

    s = CATSession(lart_bank, rng=1)
    first = s.next_item()
    s.record(first, 1)
    s.record(next(i for i in lart_bank.item_ids if i != first and i != s.pending_item), 0)
    assert s.n_unproposed == 1 and [r.proposed for r in s.history] == [True, False]
    assert s.to_dataset().attrs["n_unproposed"] == 1


def test_serve_batches_every_op_and_the_help(tmp_path, lart_bank):
    log = tmp_path / "batch.jsonl"
    oracle, _ = naive.make_oracle(lart_bank.params, seed=9)
    proc, replies = _serve(lart_bank, log, [{"op": "info"}, {"op": "next_batch", "subject": "m", "k": 4, "id": "b1"},
                                            {"op": "next_batch", "subject": "m", "k": 0},
                                            {"op": "next_batch", "subject": "m"}], extra=("--max-items", "6"))
    info, batch = replies[0], replies[1]
    assert info["bank"] == {"bank_id": "clibank", "version": lart_bank.version, "response_model": "lart", "n_items": 60}
    assert "next_batch" in info["ops"] and all(r["protocol"] == 1 for r in replies)
    items = batch["items"]
    assert batch["id"] == "b1" and len(set(items)) == 4 and batch["step"] == 1 and batch["finished"] is False
    assert replies[2]["error"] == "InvalidRequestError" and "positive integer" in replies[2]["message"]
    assert "'k'" in replies[3]["message"]

    def rec(item):
        c, t = oracle[lart_bank.index_of(item)]
        return {"op": "record", "subject": "m", "item": item, "correct": c, "cot_length": t}

    # a restarted server keeps the batch; two answers come back out of order, then the rest
    reqs = [rec(items[2]), rec(items[0]), {"op": "estimate", "subject": "m"}, {"op": "next", "subject": "m"},
            {"op": "next_batch", "subject": "m", "k": 9}, {"op": "exclude", "subject": "m", "item": items[3]},
            rec(items[1]), {"op": "next_batch", "subject": "m", "k": 3}, {"op": "start", "subject": "m"},
            {"op": "subjects"}]
    proc, replies = _serve(lart_bank, log, reqs)
    assert proc.returncode == 0, proc.stderr
    assert replies[2]["pending"] == [items[1], items[3]] and replies[2]["administered"] == [items[2], items[0]]
    assert replies[3]["item"] == items[1] and replies[4]["items"] == [items[1], items[3]]
    second = replies[7]["items"]
    assert len(second) == 3 and not set(second) & set(items) and replies[7]["step"] == 4
    assert replies[8]["n_items"] == 3 and replies[9]["subjects"] == ["m"]
    reqs = [rec(i) for i in second] + [{"op": "next_batch", "subject": "m", "k": 2}, {"op": "next", "subject": "m"},
                                       {"op": "next_batch", "subject": "m", "k": 2, "force": True}, {"op": "quit"}]
    proc, replies = _serve(lart_bank, log, reqs)
    assert replies[2]["finished"] is True and replies[3]["items"] == [] and replies[3]["finished"] is True
    assert "6 items" in replies[3]["reason"] and replies[3]["estimate"]["n_items"] == 6
    assert replies[4]["item"] is None and len(replies[5]["items"]) == 2 and replies[6]["bye"] is True
    # the protocol is in --help
    help_text = subprocess.run([sys.executable, "-m", "catengine.cli", "serve", "--help"], capture_output=True,
                               text=True, timeout=120).stdout
    for op in ("next", "next_batch", "record", "estimate", "start", "exclude", "subjects", "info", "quit"):
        assert f'"op": "{op}"' in help_text
    assert '"protocol": 1' in help_text and "serve_protocol.schema.json" in help_text


def test_serve_schema_rejects_malformed_replies():
    from jsonschema import ValidationError

    good = {"ok": True, "protocol": 1, "item": "q1", "finished": False, "step": 3}
    check_reply(good, {"op": "next"})
    check_reply({**good, "predicted_score": 0.7}, {"op": "next"})  # unknown fields are allowed
    est = {"theta": 0.1, "theta_sd": 0.3, "n_items": 2, "theta_95": [-0.5, 0.7]}
    bad = [
        ({k: v for k, v in good.items() if k != "protocol"}, "next"),
        ({**good, "protocol": 2}, "next"),
        ({**good, "item": None}, "next"),  # no item but not finished
        ({"ok": True, "protocol": 1, "finished": False, "reason": None}, "record"),  # no estimate
        ({"ok": True, "protocol": 1, "estimate": {**est, "theta_95": [0.1]}, "finished": False, "reason": None}, "record"),
        ({"ok": True, "protocol": 1, "items": ["a", "a"], "finished": False, "step": 1}, "next_batch"),
        ({"ok": False, "protocol": 1, "message": "x"}, "next"),  # an error without its name
    ]
    for reply, op in bad:
        with pytest.raises(ValidationError):
            check_reply(reply, {"op": op})


def test_selector_help_names_every_selector_and_the_default_rule():
    """`--selector`'s help is written out (the CLI does not import the registry to build it): it must
    name every registered selector, and say that the default is the bank's own, as
    default_selector_for decides."""
    from catengine.cli.options import SELECTOR_HELP
    from catengine.selection import SELECTORS

    listed = SELECTOR_HELP.split(" (default:")[0].split(" | ")
    assert sorted(listed) == sorted(SELECTORS)
    for phrase in ("score-factor-d when it carries score factors", "lart-theta for LaRT banks",
                   "pei for banks with item-parameter uncertainty", "mfi otherwise", "randomised instead when"):
        assert phrase in SELECTOR_HELP


# ----------------------------------------------------------------------------- the default stop
@pytest.fixture(scope="module")
def ranked_bank(tmp_path_factory):
    """A LaRT bank with calibration LLMs (their traits), so that sessions report a standing."""
    import xarray as xr

    thetas = np.linspace(-2.0, 2.0, 40)
    subjects = xr.Dataset({"theta": ("subject", thetas), "theta_sd": ("subject", np.full(40, 0.2))},
                          coords={"subject": [f"llm_{k}" for k in range(40)]})
    root = tmp_path_factory.mktemp("ranked")
    path = write_item_bank(naive.make_bank("lart", 60, seed=32, bank_id="rankedbank", subjects=subjects), root / "b")
    return open_item_bank(path)


RESULT = re.compile(r"^predicted full-benchmark accuracy (\d+\.\d)% \(95% interval (\d+\.\d)-(\d+\.\d)%, "
                    r"\+-(\d+\.\d) points\), from (\d+) of (\d+) items$", flags=re.M)


def _result(out: str):
    """(accuracy, low, high, half-width, items used, bank size) of the printed result line, and the stop line."""
    found = RESULT.findall(out)
    assert len(found) == 1, out
    stops = [line for line in out.splitlines() if line.strip().startswith("stopped: ")]
    assert len(stops) == 1, out
    acc, low, high, half, used, n = found[0]
    return (float(acc), float(low), float(high), float(half), int(used), int(n)), stops[0].strip()[len("stopped: "):]


def test_stopping_options_replace_their_part_of_the_default_rule():
    """No stopping option = catengine.stopping.default_stopping(n); each option replaces its part."""
    from catengine.stopping import default_stopping_parts, stopping_with_overrides
    from catengine.stopping import (AllOf, AnyOf, InformationBelow, MaxItems, MinItems, ScoreIntervalBelow,
                                    StandardErrorBelow, default_stopping)
    from catengine.stopping.rules import item_limit

    n = 400
    default = default_stopping(n)
    floor, precision, cap = default_stopping_parts(n)
    assert cap == item_limit(default) and precision
    assert stopping_with_overrides(n) == default
    assert stopping_with_overrides(n, max_items=cap, min_items=floor) == default  # the default's own values
    assert stopping_with_overrides(n, score_within=0.1) == AnyOf(AllOf(MinItems(floor), ScoreIntervalBelow(0.1)),
                                                                 MaxItems(cap))
    assert stopping_with_overrides(n, target_sd=0.2, score_within=0.1) == AnyOf(
        AllOf(MinItems(floor), AnyOf(StandardErrorBelow(0.2), ScoreIntervalBelow(0.1))), MaxItems(cap))
    assert stopping_with_overrides(n, target_sd=0) == MaxItems(cap)  # every precision rule off: the cap alone
    assert stopping_with_overrides(n, target_sd=0, max_items=0) == MaxItems(n)  # 0 = the whole bank
    assert stopping_with_overrides(n, max_items=10 * n) == stopping_with_overrides(n, max_items=n)  # never past the bank
    only = precision[0] if len(precision) == 1 else AnyOf(*precision)
    assert stopping_with_overrides(n, min_items=0) == AnyOf(only, MaxItems(cap))
    assert stopping_with_overrides(n, min_information=0.01) == AnyOf(AllOf(MinItems(floor), only),
                                                                     InformationBelow(0.01), MaxItems(cap))


def test_stopping_help_states_the_default_rule(capsys):
    from catengine.stopping import default_stopping_parts
    from catengine.console import describe_stopping
    from catengine.stopping import ScoreIntervalBelow, default_stopping

    n = 10**6
    floor, precision, cap = default_stopping_parts(n)
    for command in (["evaluate"], ["serve"], ["demo"], ["lm-eval", "next"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert describe_stopping(default_stopping(n)) in text, command
        assert f"(default {floor})" in text and f"(default {cap}, or the whole bank when it is smaller" in text
        within = next((r.half_width for r in precision if isinstance(r, ScoreIntervalBelow)), None)
        assert f"(default {'off' if within is None else format(within, 'g')}; 0 = off)" in text


def test_evaluate_by_default_stops_by_the_default_rule_and_prints_the_score(tmp_path, ranked_bank, capsys):
    from catengine.console import describe_stopping
    from catengine.session import CATSession
    from catengine.stopping import default_stopping
    from catengine.stopping.rules import item_limit

    acc, cot = _wide_files(tmp_path, ranked_bank)
    log = tmp_path / "default.jsonl"
    assert main(["evaluate", "--bank", ranked_bank.source, "--responses", str(acc), "--cot", str(cot),
                 "--subject", "llm_0", "--seed", "4", "--log", str(log)]) == 0
    out = capsys.readouterr().out
    rule = default_stopping(ranked_bank.n_items)
    assert describe_stopping(rule) in out
    (accuracy, low, high, half, used, n), reason = _result(out)
    replayed = CATSession.resume(log, ranked_bank)  # the session the command ran, from its log
    assert replayed.stopping == rule and replayed.n_items == used <= item_limit(rule) and n == ranked_bank.n_items
    assert reason == replayed.stop_reason
    score = replayed.predicted_score()
    assert (accuracy, low, high) == pytest.approx((100 * score.accuracy, 100 * score.low, 100 * score.high), abs=0.051)
    assert half == pytest.approx(50 * (score.high - score.low), abs=0.051)
    # one ranking statement: the score's percentile among the calibration LLM runs
    assert f"standing: ahead of {100 * score.percentile:.0f}% of the 40 calibration LLM runs" in out
    assert "ranks above" not in out and "% of the calibration population" not in out
    replayed.close()
    # --json: the same rule, reason and standing
    assert main(["evaluate", "--bank", ranked_bank.source, "--responses", str(acc), "--cot", str(cot),
                 "--subject", "llm_0", "--seed", "4", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])["summary"]
    assert summary["stopping"] == describe_stopping(rule) and summary["stop_reason"] == reason
    assert summary["n_items"] == used and summary["standing"].startswith(f"ahead of {100 * score.percentile:.0f}% of")


def test_serve_by_default_stops_by_the_default_rule(tmp_path, ranked_bank, capsys, monkeypatch):
    """`serve` without stopping options runs default_stopping(n); the reply that finishes the test says
    why, with the predicted score and its percentile among the calibration LLM runs."""
    import io

    from catengine.console import describe_stopping
    from catengine.session import Engine
    from catengine.session.serve import handle
    from catengine.stopping import default_stopping
    from catengine.stopping.rules import item_limit

    log = tmp_path / "serve.jsonl"
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps({"op": "start", "subject": "m"}) + "\n"))
    assert main(["serve", "--bank", ranked_bank.source, "--log", str(log), "--seed", "2"]) == 0
    rule = default_stopping(ranked_bank.n_items)
    assert describe_stopping(rule) in capsys.readouterr().err
    engine = Engine.resume(log, ranked_bank)
    oracle, _ = naive.make_oracle(ranked_bank.params, seed=12)
    reply = handle(engine, {"op": "next", "subject": "m"})
    while not reply["finished"]:
        c, t = oracle[ranked_bank.index_of(reply["item"])]
        last = handle(engine, {"op": "record", "subject": "m", "item": reply["item"], "correct": c, "cot_length": t})
        reply = handle(engine, {"op": "next", "subject": "m"})
    session = engine.session("m")
    assert session.stopping == rule and session.n_items <= item_limit(rule)
    assert last["finished"] is True and last["reason"] == reply["reason"] == session.stop_reason
    assert last["score"]["n_observed"] == session.n_items and 0 <= last["score"]["percentile"] <= 1
    engine.close()


def test_demo_by_default_stops_by_the_default_rule_and_prints_the_score(ranked_bank, capsys):
    from catengine.console import describe_stopping
    from catengine.demo import run_demo
    from catengine.stopping import default_stopping
    from catengine.stopping.rules import item_limit

    assert main(["demo", "--bank", ranked_bank.source, "--seed", "5"]) == 0
    out = capsys.readouterr().out
    rule = default_stopping(ranked_bank.n_items)
    assert describe_stopping(rule) in out
    (_, _, _, _, used, n), reason = _result(out)
    _, steps, session = run_demo(ranked_bank, rng=5)  # the same seeded run, from Python
    assert session.stopping == rule and len(steps) == used <= item_limit(rule) and n == ranked_bank.n_items
    assert reason == session.stop_reason
    assert len([line for line in out.splitlines() if line[:4].strip().isdigit()]) == used
    score = session.predicted_score()
    assert f"standing: ahead of {100 * score.percentile:.0f}% of the 40 calibration LLM runs" in out
    assert "ranks above" not in out and "% of the calibration population" not in out


@pytest.mark.parametrize("command", ["evaluate", "demo"])
@pytest.mark.parametrize("option, value, expected", [
    ("--score-within", "0.5", "--score-within must be a proportion of the benchmark >= 0 and < 0.5 (0.05 = 5 points; "
                              "0 = off), got 0.5"),
    ("--min-items", "-2", "--min-items must be an integer >= 0, got -2"),
    ("--max-items", "-1", "--max-items must be an integer >= 0 (0 = the whole bank), got -1"),
])
def test_stopping_options_out_of_range_are_named_by_their_flag(tmp_path, ranked_bank, capsys, command, option, value,
                                                               expected):
    answers = tmp_path / "a.csv"
    answers.write_text("item,correct\n" + "".join(f"{i},1\n" for i in ranked_bank.item_ids[:3]))
    extra = ["--responses", str(answers)] if command == "evaluate" else []
    assert main([command, "--bank", ranked_bank.source, *extra, option, value]) == 2
    assert expected in capsys.readouterr().err
