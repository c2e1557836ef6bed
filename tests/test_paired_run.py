"""``run_pair`` / ``catengine run --compare-with``: two LLMs compared on the same items against two real
chat-completions servers on 127.0.0.1 (``tests/llm_server.py``) through the real ``openai`` client:
the decision, the evidence and CoT lengths in the log, resuming after a crash without asking a
recorded item again, an endpoint that stays down, and the command line."""

from __future__ import annotations

import json

import pytest

from catengine import open_item_bank
from catengine.clients import Budget, OpenAIChatClient
from catengine.paired import PairedSession, PairedStopping, read_paired_log
from catengine.runner import RunConfigurationError, run_pair
from llm_server import LLMServer

pytestmark = pytest.mark.xdist_group("runner")  # they start servers: one worker


def _events(log, kind):
    return [e for e in read_paired_log(log)[1] if e.get("event") == kind]


def _client(server, **kwargs):
    return OpenAIChatClient(server.model, base_url=server.base_url, **kwargs)


def _truth(server, bank, items):
    return sum(server.llm.truth(i) for i in items) / len(items)


def test_a_stronger_llm_is_found_better_with_every_answer_in_the_log(tmp_path):
    bank = open_item_bank("math500_lart")
    log = tmp_path / "pair.jsonl"
    with LLMServer(bank, theta=2.0, seed=1, model="strong") as a, LLMServer(bank, theta=-1.0, seed=2, model="weak") as b:
        seen = []
        result = run_pair(bank, _client(a), _client(b), log=log, seed=3, stopping=60,
                          on_answer=lambda progress, session: seen.append(progress.items))
    assert result.completed and result.stop_reason.startswith("decided") and result.error is None
    c = result.comparison
    assert c.decision == "a" and c.low > 0 and c.subject_a == "strong" and c.subject_b == "weak"
    compared = [i for i in bank.item_ids if not bank.content(i).grading_note]
    truth = _truth(a, bank, compared) - _truth(b, bank, compared)
    assert c.low <= truth <= c.high and c.n_bank_items == len(compared)
    records = _events(log, "record")
    assert len(records) == c.n_items == result.progress.items == len(seen) and seen == list(range(1, c.n_items + 1))
    items = [r["item"] for r in records]
    # both servers were asked the same items, each once, in the order drawn; flagged items left out
    assert not a.asked_more_than_once() and not b.asked_more_than_once()
    assert set(a.counts) == set(b.counts) == set(items)
    assert not set(items) & set(result.excluded_flagged) and result.excluded_flagged
    for r in records:  # the grades are the simulated LLMs' truths (unless a reply stopped at the cap)
        for side, server in (("a", a), ("b", b)):
            evidence = r["evidence"][side]
            assert evidence["model"] == server.model and evidence["grader"] == bank.protocol["grader"]["name"]
            assert r[f"cot_length_{side}"] == evidence["completion_tokens"]  # LaRT: the CoT length recorded
            if evidence["finish_reason"] != "length":
                assert r[f"correct_{side}"] == int(server.llm.truth(r["item"]))
    p = result.progress
    assert p.a.completion_tokens == sum(r["evidence"]["a"]["completion_tokens"] for r in records) > 0
    assert p.b.completion_tokens == sum(r["evidence"]["b"]["completion_tokens"] for r in records) > 0
    assert p.a.correct == sum(r["correct_a"] for r in records) and p.a.requests == len(records)
    assert c.cot_total_a is not None and c.cot_total_b is not None  # LaRT: each side's predicted CoT total
    assert _events(log, "note")[0]["kind"] == "paired-run"


def test_equal_llms_get_no_decision_in_the_wrong_direction(tmp_path):
    bank = open_item_bank("math500_2pl")
    with LLMServer(bank, theta=0.5, seed=4, model="x") as a, LLMServer(bank, theta=0.5, seed=5, model="y") as b:
        result = run_pair(bank, _client(a), _client(b), log=tmp_path / "pair.jsonl", seed=1, stopping=40)
    c = result.comparison
    compared = [i for i in bank.item_ids if not bank.content(i).grading_note]
    truth = _truth(a, bank, compared) - _truth(b, bank, compared)
    assert result.completed and c.n_items <= 40
    assert c.low <= truth <= c.high
    assert c.decision not in ("a", "b") or (truth > 0) == (c.decision == "a")


class _Crash(RuntimeError):
    pass


class _CrashingClient:
    """A client that dies (not an endpoint error: a crash of the process) on its ``n``-th request."""

    def __init__(self, client, n):
        self.client, self.n, self.calls = client, n, 0
        self.model, self.endpoint, self.inline_reasoning = client.model, client.endpoint, client.inline_reasoning

    def complete(self, prompt, *, max_tokens=None):
        self.calls += 1
        if self.calls == self.n:
            raise _Crash("killed")
        return self.client.complete(prompt, max_tokens=max_tokens)


def test_a_crashed_comparison_resumes_without_asking_a_recorded_item_again(tmp_path):
    bank = open_item_bank("math500_2pl")
    log = tmp_path / "pair.jsonl"
    never = PairedStopping(max_items=14, on_decision=False, on_tie=False)
    with LLMServer(bank, theta=1.0, seed=1, model="a") as a, LLMServer(bank, theta=0.0, seed=2, model="b") as b:
        # a crash after a recorded answer (the callback raises) ...
        def crash(progress, session):
            if progress.items == 4:
                raise _Crash("killed")

        with pytest.raises(_Crash):
            run_pair(bank, _client(a), _client(b), log=log, seed=7, stopping=never, on_answer=crash)
        assert len(_events(log, "record")) == 4
        # ... and one while both requests of the next item are in flight (b's dies, a's is answered)
        with pytest.raises(_Crash):
            run_pair(bank, _client(a), _CrashingClient(_client(b), 3), log=log)
        records = _events(log, "record")
        assert len(records) == 6
        in_flight = _events(log, "propose")[-1]["item"]
        assert in_flight not in {r["item"] for r in records}
        before_a, before_b = dict(a.counts), dict(b.counts)
        result = run_pair(bank, _client(a), _client(b), log=log)
    assert result.completed and result.comparison.n_items == 14 and result.resumed_items == 6
    recorded = {r["item"] for r in records}
    for server, before in ((a, before_a), (b, before_b)):
        asked_after = {item for item, n in server.counts.items() if n > before.get(item, 0)}
        assert not recorded & asked_after  # nothing recorded is asked again
        assert {i: n for i, n in server.counts.items() if n > 1} in ({}, {in_flight: 2})  # only the one in flight
    # the resumed session is the one a run without the crashes gives: the same draws and answers
    fresh = PairedSession.resume(log, bank)
    assert [s.item for s in fresh.history] == [r["item"] for r in _events(log, "record")]
    fresh.close()
    assert result.progress.items == 14 and result.progress.a.completion_tokens > 0


def test_an_endpoint_that_stays_down_ends_the_run_naming_it_and_the_item(tmp_path):
    bank = open_item_bank("math500_2pl")
    log = tmp_path / "pair.jsonl"
    with LLMServer(bank, theta=1.0, seed=1, model="a") as a, LLMServer(bank, theta=0.0, seed=2, model="b") as b:
        down = _client(b, timeout=2, max_retries=2, backoff_base=0.01, backoff_max=0.02)

        def outage(progress, session):
            if progress.items == 3:
                b.stop()

        result = run_pair(bank, _client(a), down, log=log, seed=2, stopping=10, on_answer=outage)
        assert not result.completed and result.stop_reason == "an endpoint failed"
        assert b.base_url in result.error and "model b (b)" in result.error
        assert "while asking item 'math500/" in result.error and "3 paired answer(s) recorded" in result.error
        assert result.comparison.n_items == 3
        # a's reply to the item in flight is kept in the log: the resume does not ask a again
        kept = [e for e in _events(log, "note") if e.get("kind") == "reply"]
        assert [k["side"] for k in kept] == ["a"]
        item = kept[0]["item"]
        assert a.counts[item] == 1
        b.start()
        again = run_pair(bank, _client(a), _client(b), log=log)
    assert again.completed and again.comparison.n_items == 10
    assert a.counts[item] == 1 and b.counts[item] >= 1 and not a.asked_more_than_once()
    assert _events(log, "record")[3]["item"] == item and _events(log, "record")[3]["evidence"]["a"] == kept[0]["evidence"]


def test_a_resumed_comparison_refuses_other_settings_and_a_budget_stops_it(tmp_path):
    bank = open_item_bank("math500_2pl")
    log = tmp_path / "pair.jsonl"
    with LLMServer(bank, theta=1.0, seed=1, model="a") as a, LLMServer(bank, theta=0.0, seed=2, model="b") as b:
        run_pair(bank, _client(a), _client(b), log=log, seed=2, stopping=PairedStopping(max_items=3, on_decision=False))
        with pytest.raises(RunConfigurationError, match=r"model_b: log 'b', options 'a'"):
            run_pair(bank, _client(a), _client(a), log=log)
        with pytest.raises(RunConfigurationError, match=r"max_tokens"):
            run_pair(bank, _client(a), _client(b), log=log, max_tokens=100)
        with pytest.raises(RunConfigurationError, match=r"another design.*margin"):
            run_pair(bank, _client(a), _client(b), log=log, margin=0.05)
        budget = Budget(max_requests=6)
        result = run_pair(bank, _client(a, budget=budget), _client(b, budget=budget), log=tmp_path / "budget.jsonl",
                          seed=1, stopping=20)
    assert result.stop_reason == "budget exhausted" and "request cap of 6" in result.error
    assert result.comparison.n_items <= 3


def _cli_pair(a, b, *extra):
    from catengine.cli import main

    return main(["run", "--bank", "math500_2pl", "--model", a.model, "--base-url", a.base_url, "--compare-with",
                 b.model, "--compare-base-url", b.base_url, *extra])


def test_catengine_run_compare_with_prints_the_comparison(tmp_path, capsys):
    bank = open_item_bank("math500_2pl")
    log = tmp_path / "pair.jsonl"
    with LLMServer(bank, theta=2.0, seed=1, model="strong") as a, LLMServer(bank, theta=-1.0, seed=2, model="weak") as b:
        assert _cli_pair(a, b, "--log", str(log), "--seed", "1", "--max-items", "60", "--json") == 0
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        final = lines[-1]
        assert set(final) == {"comparison", "summary"}
        c, summary = final["comparison"], final["summary"]
        assert c["decision"] == "a" and c["low"] > 0 and c["subject_a"] == "strong" and c["n_items"] == len(lines) - 1
        assert summary["error"] is None and summary["completion_tokens_a"] > 0 and summary["completion_tokens_b"] > 0
        assert summary["completion_tokens_a"] == lines[-2]["completion_tokens_a"]
        # the same command again: the finished comparison is resumed, nothing asked again
        asked = len(a.requests) + len(b.requests)
        assert _cli_pair(a, b, "--log", str(log), "--no-progress") == 0
        out = capsys.readouterr().out
        assert "strong is better" in out and "completion tokens" in out and f"({c['n_items']} recorded before" in out
        assert len(a.requests) + len(b.requests) == asked
        # options of a single run that a comparison does not use, and comparison options without one
        assert _cli_pair(a, b, "--log", str(tmp_path / "x.jsonl"), "--concurrency", "4") == 2
        assert "--concurrency does not apply to a comparison" in capsys.readouterr().err
        from catengine.cli import main

        assert main(["run", "--bank", "math500_2pl", "--model", "strong", "--base-url", a.base_url, "--margin", "2",
                     "--log", str(tmp_path / "y.jsonl")]) == 2
        assert "--margin applies to a comparison" in capsys.readouterr().err


def test_catengine_run_compare_with_reports_a_down_endpoint(tmp_path, capsys):
    bank = open_item_bank("math500_2pl")
    with LLMServer(bank, theta=1.0, seed=1, model="a") as a, LLMServer(bank, theta=0.0, seed=2, model="b") as b:
        b.stop()
        assert _cli_pair(a, b, "--log", str(tmp_path / "pair.jsonl"), "--retries", "1", "--timeout", "2",
                         "--json") == 3
    out = capsys.readouterr()
    final = json.loads(out.out.splitlines()[-1])
    assert b.base_url in final["summary"]["error"] and final["comparison"]["n_items"] == 0
