"""``catengine run`` / ``run_model`` against a real chat-completions server on 127.0.0.1
(``tests/llm_server.py``) through the real ``openai`` client: the summary, the evidence in the log,
faults survived or reported, budgets, resuming after SIGKILL without asking a recorded item
again, refused configuration changes, and regrading."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from catengine import open_item_bank
from catengine.clients import Budget, OpenAIChatClient
from catengine.runner import RunConfigurationError, run_model
from catengine.session.log import read_log
from catengine.stopping import MaxItems
from llm_server import LLMServer, ServerProcess
from real_data import AMC23_PROBLEMS, ROOT, amc23_problems_missing

pytestmark = pytest.mark.xdist_group("runner")  # they start servers and subprocesses: one worker


def _records(log: Path) -> list[dict]:
    return [e for e in read_log(log).events if e.get("event") == "record"]


def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "catengine.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)


@pytest.mark.parametrize("bank_id, theta", [("math500_lart", 0.8), ("chembench_2pl", 0.0)])
def test_run_prints_score_interval_stop_items_and_tokens(tmp_path, bank_id, theta):
    with LLMServer(bank_id, theta=theta, seed=3, model="sim-llm") as server:
        done = _cli("run", "--bank", bank_id, "--model", "sim-llm", "--base-url", server.base_url,
                    "--concurrency", "8", "--log", str(tmp_path / "run.jsonl"), "--seed", "1", "--no-progress")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "predicted full-benchmark accuracy" in out and "95% interval" in out
    assert "stopped:" in out and "completion tokens" in out and re.search(r"the whole benchmark( less the \d+ items left out)? would have taken", out)
    records = _records(tmp_path / "run.jsonl")
    assert records and all(isinstance(r["evidence"]["text"], str) for r in records)
    evidence = records[0]["evidence"]
    assert evidence["grader"] == open_item_bank(bank_id).protocol["grader"]["name"]
    assert evidence["model"] == "sim-llm" and evidence["completion_tokens"] > 0
    # each verdict on a complete reply is the simulated LLM's truth (the grader reads every spelling it
    # writes); a reply stopped at the output cap is cut before its answer and graded wrong
    complete = [r for r in records if r["evidence"]["finish_reason"] != "length"]
    wrong = [r["item"] for r in complete if bool(r["correct"]) != server.llm.truth(r["item"])]
    assert not wrong, wrong
    assert all(r["correct"] == 0 for r in records if r["evidence"]["finish_reason"] == "length")
    assert not server.asked_more_than_once()


def test_run_json_summary_matches_the_log(tmp_path):
    bank = open_item_bank("math500_2pl")
    with LLMServer(bank, theta=0.3, seed=5) as server:
        done = _cli("run", "--bank", "math500_2pl", "--model", "sim-llm", "--base-url", server.base_url,
                    "--log", str(tmp_path / "run.jsonl"), "--json", "--max-items", "30", "--seed", "2")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    summary = lines[-1]["summary"]
    assert summary["n_items"] == 30 == len(lines) - 1 == len(_records(tmp_path / "run.jsonl"))
    assert summary["stop_reason"] == "reached 30 items" and summary["error"] is None
    assert summary["completion_tokens"] == sum(r["evidence"]["completion_tokens"] for r in _records(tmp_path / "run.jsonl"))
    assert 0 <= summary["score"]["low"] <= summary["score"]["accuracy"] <= summary["score"]["high"] <= 1
    flagged = {c.item for c in bank.contents() if c.grading_note}
    assert set(summary["excluded_flagged"]) == flagged and not flagged & {r["item"] for r in _records(tmp_path / "run.jsonl")}
    # the default score (the model as a control variate only), over the items the run could ask
    assert summary["score"]["method"] == "doubly-robust" and summary["score"]["n_items"] == bank.n_items - len(flagged)


def test_amc23_run_needs_and_verifies_the_content_file(tmp_path):
    reason = amc23_problems_missing()
    if reason:
        pytest.skip(reason)
    with LLMServer("amc23_lart", theta=0.5, seed=2, content={"amc23_lart": AMC23_PROBLEMS}) as server:
        done = _cli("run", "--bank", "amc23_lart", "--model", "sim-llm", "--base-url", server.base_url,
                    "--log", str(tmp_path / "a.jsonl"), "--no-progress")
        assert done.returncode == 2 and "only their sha256" in done.stderr
        done = _cli("run", "--bank", "amc23_lart", "--model", "sim-llm", "--base-url", server.base_url,
                    "--content", str(AMC23_PROBLEMS), "--log", str(tmp_path / "b.jsonl"), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "predicted full-benchmark accuracy" in done.stdout


def test_faults_are_survived_and_nothing_recorded_is_lost(tmp_path):
    """429 with Retry-After, 500s, a slow reply, malformed bodies, empty content, a length stop and a
    restart of the server mid-run: the run completes; the empty and the truncated replies are
    recorded as what they are (graded wrong, with their reason)."""
    bank = open_item_bank("math500_2pl")
    log = tmp_path / "run.jsonl"
    with LLMServer(bank, theta=0.5, seed=7) as server:
        # waits of up to 0.2, 0.4, 0.8, 1, 1 s between retries (seeded jitter): longer together than the outage
        client = OpenAIChatClient("sim-llm", base_url=server.base_url, timeout=5, backoff_base=0.2, backoff_max=1.0,
                                  jitter_seed=1)
        server.inject("429", times=2, retry_after=0.2)
        server.inject("500", times=3)
        server.inject("slow", times=1, delay=0.3)
        server.inject("malformed", times=1)
        server.inject("empty", times=1)
        server.inject("length", times=1)
        answered = []

        def on_answer(progress, session):
            answered.append(progress.items)
            if progress.items == 10:
                server.outage(0.2)

        result = run_model(bank, client, log=log, concurrency=4, stopping=MaxItems(24), seed=3, on_answer=on_answer)
    assert result.completed and result.stop_reason == "reached 24 items", result.error
    records = _records(log)
    assert len(records) == 24 == len({r["item"] for r in records})
    reasons = {r["evidence"]["reason"] for r in records}
    assert "empty response" in reasons
    truncated = [r for r in records if r["evidence"]["finish_reason"] == "length"]
    assert truncated and all(r["correct"] == 0 for r in truncated)
    assert max(r["evidence"]["attempts"] for r in records) >= 2


def test_an_endpoint_that_stays_down_ends_the_run_naming_url_and_item(tmp_path):
    bank = open_item_bank("math500_2pl")
    log = tmp_path / "run.jsonl"
    with LLMServer(bank, theta=0.5, seed=7) as server:
        client = OpenAIChatClient("sim-llm", base_url=server.base_url, timeout=2, max_retries=2, backoff_base=0.01,
                                  backoff_max=0.02)

        def on_answer(progress, session):
            if progress.items == 6:
                server.inject("500", times=None)

        result = run_model(bank, client, log=log, concurrency=2, stopping=MaxItems(30), seed=1, on_answer=on_answer)
        assert not result.completed and result.stop_reason == "the endpoint failed"
        assert server.base_url in result.error and "while asking item 'math500/" in result.error
        assert "500" in result.error
        kept = _records(log)
        assert len(kept) >= 6
        server.clear_faults()
        # the same call resumes: nothing recorded is asked again
        before = dict(server.counts)
        again = run_model(bank, client, log=log, concurrency=2, stopping=MaxItems(30), seed=1)
    assert again.completed and again.session.n_items == 30
    recorded_before = {r["item"] for r in kept}
    asked_after = {item for item, n in server.counts.items() if n > before.get(item, 0)}
    assert not recorded_before & asked_after


def test_a_budget_stops_the_run_before_the_cap_and_it_resumes(tmp_path):
    bank = open_item_bank("math500_2pl")
    with LLMServer(bank, theta=0.5, seed=7) as server:
        client = OpenAIChatClient("sim-llm", base_url=server.base_url, budget=Budget(max_requests=12))
        result = run_model(bank, client, log=tmp_path / "run.jsonl", concurrency=4, stopping=MaxItems(40), seed=1)
        assert result.stop_reason == "budget exhausted" and "request cap of 12" in result.error
        assert len(server.requests) <= 12 and result.session.n_items <= 12


def test_a_resumed_log_refuses_other_settings(tmp_path):
    bank = open_item_bank("math500_2pl")
    log = tmp_path / "run.jsonl"
    with LLMServer(bank, theta=0.5, seed=7) as server:
        client = OpenAIChatClient("sim-llm", base_url=server.base_url)
        run_model(bank, client, log=log, concurrency=2, stopping=MaxItems(4), seed=1)
        with pytest.raises(RunConfigurationError, match=r"max_tokens: log 10240, options 2048"):
            run_model(bank, client, log=log, concurrency=2, stopping=MaxItems(8), max_tokens=2048)
        with pytest.raises(RunConfigurationError, match=r"sampling"):
            run_model(bank, client, log=log, sampling={"temperature": 0.7})
        opened = OpenAIChatClient("sim-llm", base_url=server.base_url, inline_reasoning="opened")
        with pytest.raises(RunConfigurationError, match=r"inline_reasoning: log 'auto', options 'opened'"):
            run_model(bank, opened, log=log)


def test_the_inline_reasoning_option_reaches_the_client_and_the_log(tmp_path):
    with LLMServer("math500_2pl", theta=0.5, seed=4) as server:
        log = tmp_path / "opened.jsonl"
        done = _cli("run", "--bank", "math500_2pl", "--model", "sim-llm", "--base-url", server.base_url,
                    "--log", str(log), "--max-items", "3", "--no-progress", "--inline-reasoning", "opened")
    assert done.returncode == 0, done.stderr
    notes = [e for e in read_log(log).events if e.get("event") == "note" and e.get("kind") == "run"]
    assert notes and notes[0]["inline_reasoning"] == "opened"


def test_regrade_is_one_command_and_names_changed_verdicts(tmp_path):
    with LLMServer("chembench_2pl", theta=0.5, seed=4) as server:
        log = tmp_path / "chem.jsonl"
        done = _cli("run", "--bank", "chembench_2pl", "--model", "sim-llm", "--base-url", server.base_url,
                    "--log", str(log), "--max-items", "40", "--no-progress", "--include-flagged")
    assert done.returncode == 0, done.stderr
    same = _cli("regrade", "--log", str(log), "--json")
    assert same.returncode == 0, same.stderr
    report = json.loads(same.stdout)
    assert report["n_answers"] == 40 and report["n_changed"] == 0
    other = _cli("regrade", "--log", str(log), "--grader", "chembench-corrected")
    assert other.returncode == 0 and "regraded by chembench-corrected" in other.stdout


def _run_process(base_url: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "catengine.cli", "run", "--bank", "math500_2pl", "--model", "sim-llm",
                             "--base-url", base_url, "--log", str(log), "--concurrency", "4", "--max-items", "100",
                             "--seed", "11", "--no-progress"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_ten_sigkills_then_resume_end_like_an_uninterrupted_run(tmp_path):
    """A runner killed with SIGKILL at ten random moments and resumed each time ends with the same
    answers and score as an uninterrupted run; no recorded item is asked again; only in-flight items
    (at most the batch of 4 at each kill) are asked twice (counted by the server)."""
    with ServerProcess("math500_2pl", theta=0.4, seed=9, delay=0.05) as server:
        reference = tmp_path / "reference.jsonl"
        done = _run_process(server.base_url, reference)
        done.communicate(timeout=300)
        assert done.returncode == 0
        before = server.stats()["counts"]
        log = tmp_path / "killed.jsonl"
        rnd = random.Random(20261206)
        kills = 0
        recorded_at_kill = []
        while kills < 10:
            proc = _run_process(server.base_url, log)
            time.sleep(rnd.uniform(1.0, 2.2))  # a process starts in about 1 s, then asks 4 items per 50 ms
            if proc.poll() is not None:
                break  # finished before this kill
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
            recorded_at_kill.append({r["item"] for r in _records(log)} if log.exists() else set())
        final = _run_process(server.base_url, log)
        out, err = final.communicate(timeout=300)
        assert final.returncode == 0, err
        after = server.stats()["counts"]
        counts = {item: n - before.get(item, 0) for item, n in after.items() if n > before.get(item, 0)}
    assert kills >= 5  # the run outlives at least five kills
    ref, got = _records(reference), _records(log)
    assert [r["item"] for r in got] and {r["item"] for r in got} == {r["item"] for r in ref}
    assert [r["correct"] for r in sorted(got, key=lambda r: r["item"])] == \
        [r["correct"] for r in sorted(ref, key=lambda r: r["item"])]
    assert np.isclose(got[-1]["estimate"]["theta"], ref[-1]["estimate"]["theta"], rtol=0, atol=1e-6)
    twice = {item: n for item, n in counts.items() if n > 1}
    assert all(n <= 1 + kills for n in twice.values())
    assert len(twice) <= 4 * kills
    for k, recorded in enumerate(recorded_at_kill):  # nothing recorded before a kill was asked after it
        for item in recorded:
            assert counts[item] == 1 or item in twice and counts[item] <= k + 2
