"""Inspect AI adapter, end to end with the real inspect-ai package and its local mock model (no network)."""

import socket

import pytest

import naive_engine as naive
from catengine.errors import CatEngineError
from catengine.session import CATSession
from catengine.stopping import MaxItems

import inspect_ai  # noqa: F401,E402  (the test extra installs it: this test must run, never skip)

N_ITEMS, N_SAMPLES = 30, 26  # the bank's last 4 items have no sample in the task


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """Inspect's directories under tmp_path, no default model from the environment, and any attempt
    to open a non-local network connection fails the test."""
    monkeypatch.setenv("INSPECT_LOG_DIR", str(tmp_path / "inspect-logs"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    for var in ("INSPECT_EVAL_MODEL", "INSPECT_TELEMETRY", "INSPECT_API_KEY_OVERRIDE"):
        monkeypatch.delenv(var, raising=False)
    attempts = []
    real_connect = socket.socket.connect

    def guarded(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
            attempts.append(address)
            raise OSError(f"test is offline: connection to {address!r} refused")
        return real_connect(self, address)

    real_getaddrinfo = socket.getaddrinfo

    def guarded_lookup(host, *args, **kwargs):  # a name lookup fails before any connect
        if host not in (None, "127.0.0.1", "::1", "localhost") and not str(host).startswith("127."):
            attempts.append(host)
            raise socket.gaierror(f"test is offline: lookup of {host!r} refused")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_lookup)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken-cache"))  # no tokenizer files cached
    yield tmp_path
    assert attempts == [], f"something tried to reach the network: {attempts}"


def _world(seed=3, n_items=N_ITEMS, n_samples=N_SAMPLES, subjects=None):
    """A LaRT bank, an Inspect task with one sample per item (ids = item ids) for its first
    ``n_samples`` items, and a simulated LLM: its recorded answer (correct, CoT tokens) to every item."""
    from inspect_ai import Task
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.scorer import match
    from inspect_ai.solver import generate

    bank = naive.make_bank("lart", n_items, seed=seed, subjects=subjects)
    oracle, _ = naive.make_oracle(bank.params, seed=seed + 1)
    samples = [Sample(input=f"[{bank.item_ids[j]}] What is {j} + 100?", target=str(j + 100), id=bank.item_ids[j])
               for j in range(n_samples)]
    task = Task(dataset=MemoryDataset(samples), solver=generate(), scorer=match(), name="arith")
    return bank, oracle, task


def _mock_model(bank, oracle, *, fail_items=(), calls=None, tokens_of=None, usage=True):
    """Inspect's mockllm/model answering like the simulated LLM: the right number when the oracle says
    correct, a wrong one otherwise; the CoT length as the output's token usage (``tokens_of``: item ->
    the output_tokens to report instead; ``usage=False``: no usage at all, as ModelOutput.from_content)."""
    from inspect_ai.model import ModelOutput, ModelUsage, get_model

    def answer(messages, tools, tool_choice, config):
        text = messages[-1].text
        item = text[1:text.index("]")]
        if calls is not None:
            calls.append(item)
        if item in fail_items:
            raise RuntimeError(f"provider down while answering {item}")
        j = bank.index_of(item)
        correct, tokens = oracle[j]
        reply = f"Let me think step by step... the answer is {j + 100 if correct else j + 7}"
        out = ModelOutput.from_content("mockllm/model", reply)
        if usage:
            tokens = (tokens_of or {}).get(item, int(tokens))
            out.usage = ModelUsage(input_tokens=20, output_tokens=tokens, total_tokens=20 + tokens)
        return out

    return get_model("mockllm/model", custom_outputs=answer)


def _reference(bank, oracle, k, n):
    """The same adaptive test driven directly (batches of k, answers straight from the oracle)."""
    ref = CATSession(bank, rng=0, stopping=MaxItems(n))
    for j in range(N_SAMPLES, N_ITEMS):
        ref.exclude(bank.item_ids[j])
    batches = []
    while not ref.finished:
        batch = ref.next_items(k)
        batches.append(batch)
        for item in batch:
            ref.record(item, *oracle[bank.index_of(item)])
    return ref, batches


def test_adapter_inspect_runs_a_task_adaptively_batch_by_batch(offline):
    from inspect_ai.log import read_eval_log

    from catengine.adapters.inspect import run_adaptive

    bank, oracle, task = _world()
    calls = []
    log = offline / "session.jsonl"
    session = CATSession(bank, rng=0, stopping=MaxItems(12), log=log, subject="mock-llm")
    result = run_adaptive(task, session, model=_mock_model(bank, oracle, calls=calls), k=5,
                          log_dir=str(offline / "inspect-logs"))
    assert result.rounds == 3 and session.finished and session.n_items == 12
    assert sorted(result.excluded) == list(bank.item_ids[N_SAMPLES:]) and result.failed == []
    # scores from the task's scorer, CoT lengths from the output's token usage
    for rec in session.history:
        correct, tokens = oracle[bank.index_of(rec.item)]
        assert (rec.correct, rec.cot_length) == (correct, tokens) and rec.proposed
    assert sorted(calls) == sorted(session.administered)  # the model saw exactly the proposed items, once each
    # the same batches and estimate as the engine driven directly
    ref, batches = _reference(bank, oracle, 5, 12)
    assert [sorted(b) for b in batches] == [sorted(session.administered[i:i + 5]) for i in (0, 5, 10)]
    assert result.estimate.theta == pytest.approx(ref.estimate.theta, abs=1e-8)
    assert result.estimate.theta_sd == pytest.approx(ref.estimate.theta_sd, abs=1e-8)
    # the predicted score comes from the session when it offers one (CATSession.predicted_score)
    assert (result.predicted_score is not None) == hasattr(session, "predicted_score")
    # every round is an ordinary Inspect log with exactly that batch
    assert len(result.eval_logs) == 3
    first = read_eval_log(result.eval_logs[0])
    assert first.status == "success" and sorted(s.id for s in first.samples) == sorted(batches[0])
    assert first.eval.metadata["catengine_items"] == batches[0]
    session.close()
    resumed = CATSession.resume(log, bank)
    assert resumed.state_summary()["history"] == session.state_summary()["history"]
    resumed.close()


def test_adapter_inspect_by_default_stops_by_the_default_rule_and_reports_the_score(offline):
    """issue 32: a session created without stopping= runs default_stopping(n); the result says why it
    stopped and words the predicted accuracy, the items used and the standing as every entry point does."""
    import re

    import numpy as np
    import xarray as xr

    from catengine.adapters.inspect import run_adaptive
    from catengine.stopping import default_stopping
    from catengine.stopping.rules import item_limit

    subjects = xr.Dataset({"theta": ("subject", np.linspace(-2, 2, 30)), "theta_sd": ("subject", np.full(30, 0.2))},
                          coords={"subject": [f"llm_{k}" for k in range(30)]})
    n = 60
    bank, oracle, task = _world(n_items=n, n_samples=n - 4, subjects=subjects)
    session = CATSession(bank, rng=0)
    rule = default_stopping(n)
    assert session.stopping == rule
    result = run_adaptive(task, session, model=_mock_model(bank, oracle), k=10, log_dir=str(offline / "inspect-logs"))
    assert session.finished and result.stop_reason == session.stop_reason
    assert session.n_items <= item_limit(rule) and result.rounds == len(result.eval_logs)
    score = result.predicted_score
    text = str(result).splitlines()
    assert text[0] == (f"predicted full-benchmark accuracy {100 * score.accuracy:.1f}% (95% interval "
                       f"{100 * score.low:.1f}-{100 * score.high:.1f}%, +-{50 * (score.high - score.low):.1f} points), "
                       f"from {session.n_items} of {n - 4} items")  # the 4 items without a sample are excluded
    assert text[1] == f"stopped: {session.stop_reason}"
    assert re.fullmatch(r"standing: ahead of \d+% of the 30 calibration LLM runs(; (above|below) the calibration "
                        r"population: the model extrapolates)?", text[2])
    assert f"{100 * score.percentile:.0f}%" in text[2]


def test_adapter_inspect_rounds_never_run_past_the_default_item_cap(offline):
    """An unreachable precision keeps the default rule's cap: the rounds stop exactly at it, the last one
    cut to what is left."""
    from catengine.adapters.inspect import run_adaptive
    from catengine.stopping import default_stopping_parts, stopping_with_overrides

    n = 130
    _, _, cap = default_stopping_parts(n)
    k = 40 if cap % 40 else 45  # a batch size that does not divide the cap
    bank, oracle, task = _world(n_items=n, n_samples=n)
    calls = []
    session = CATSession(bank, rng=0, stopping=stopping_with_overrides(n, score_within=0.001))
    result = run_adaptive(task, session, model=_mock_model(bank, oracle, calls=calls), k=k,
                          log_dir=str(offline / "inspect-logs"))
    assert session.n_items == len(calls) == cap and result.rounds == -(-cap // k)
    assert result.stop_reason == session.stop_reason and str(cap) in result.stop_reason


def test_adapter_inspect_resumes_a_half_answered_batch(offline):
    from catengine.adapters.inspect import run_adaptive

    bank, oracle, task = _world()
    ref, batches = _reference(bank, oracle, 4, 10)
    broken = batches[1][2]  # the provider fails on one item of the second batch
    log = offline / "session.jsonl"
    session = CATSession(bank, rng=0, stopping=MaxItems(10), log=log)
    with pytest.raises(CatEngineError, match="still pending"):
        run_adaptive(task, session, model=_mock_model(bank, oracle, fail_items={broken}), k=4,
                     log_dir=str(offline / "inspect-logs"))
    assert session.n_items == 7 and session.pending_items == [broken]
    session.close()
    del session  # the harness process ends; a new one resumes from the session log
    resumed = CATSession.resume(log, bank)
    assert resumed.pending_items == [broken]
    calls = []
    result = run_adaptive(task, resumed, model=_mock_model(bank, oracle, calls=calls), k=4,
                          log_dir=str(offline / "inspect-logs"))
    assert calls[0] == broken and len(calls) == 1 + 2  # the pending item alone, then a last batch of 2
    assert result.rounds == 2 and resumed.n_items == 10
    assert sorted(resumed.administered) == sorted(ref.administered)
    assert result.estimate.theta == pytest.approx(ref.estimate.theta, abs=1e-8)
    resumed.close()


def test_adapter_inspect_maps_items_to_sample_ids_and_checks_scores(offline):
    from inspect_ai import Task
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.scorer import match
    from inspect_ai.solver import generate

    from catengine.adapters.inspect import _selector, run_adaptive

    bank, oracle, task = _world()
    # integer sample ids 1..N (Inspect's own numbering) mapped by a function
    int_task = Task(dataset=MemoryDataset([Sample(input=s.input, target=s.target, id=j + 1)
                                           for j, s in enumerate(task.dataset)]),
                    solver=generate(), scorer=match(), name="arith_int")
    session = CATSession(bank, rng=0, stopping=MaxItems(3))
    result = run_adaptive(int_task, session, model=_mock_model(bank, oracle), k=3,
                          sample_ids=lambda item: bank.index_of(item) + 1, log_dir=str(offline / "logs"))
    assert result.rounds == 1 and session.n_items == 3
    assert [r.correct for r in session.history] == [oracle[bank.index_of(r.item)][0] for r in session.history]
    # nothing maps: a clear error naming both sides
    with pytest.raises(ValueError, match="none of the bank's 30 items maps to a sample of task 'arith_int'"):
        run_adaptive(int_task, CATSession(bank), model=_mock_model(bank, oracle))
    with pytest.raises(ValueError, match="epochs=1"):
        run_adaptive(task, CATSession(bank), model=_mock_model(bank, oracle), epochs=3)
    # ids are fnmatch patterns and "<task>:" prefixes in Inspect: the selector matches one id literally
    from inspect_ai._eval.task.util import resolve_task_sample_ids, sample_id_filter

    for sid in ("q*1", "a[b]?", "arith:7", "plain"):
        sel = resolve_task_sample_ids("arith", _selector(sid, "arith"))
        matcher = sample_id_filter(sel)
        assert matcher.matches(sid) and not matcher.matches(sid + "x") and not matcher.matches("q11")
    # a partial-credit score is rejected, naming the sample
    from catengine.adapters.inspect import _correct

    class _S:
        id = "q0003"
        scores = {"match": type("Score", (), {"value": "P"})()}

    with pytest.raises(ValueError, match="'q0003'.*not binary"):
        _correct(_S(), None)


def test_adapter_inspect_records_every_valid_answer_of_a_round_with_bad_token_counts(offline):
    """issue 34 row 4: one sample reporting 2e9 (beyond the session's plausible range) and one -5
    output tokens. Every valid answer of the round is recorded (none left pending to be paid for
    again); the error names each bad sample, its value and the Inspect log; only the bad ones stay
    pending, and the next run asks only them."""
    from catengine.adapters.inspect import run_adaptive

    bank, oracle, task = _world()
    ref, batches = _reference(bank, oracle, 5, 10)
    first = batches[0]
    huge, negative = first[1], first[3]
    session = CATSession(bank, rng=0, stopping=MaxItems(10), log=offline / "session.jsonl")
    calls = []
    with pytest.raises(CatEngineError) as info:
        run_adaptive(task, session, model=_mock_model(bank, oracle, calls=calls,
                                                      tokens_of={huge: 2_000_000_000, negative: -5}),
                     k=5, log_dir=str(offline / "inspect-logs"))
    message = str(info.value)
    assert f"sample {huge!r}" in message and "output_tokens = 2e+09" in message
    assert f"sample {negative!r}" in message and "output_tokens = -5" in message
    logs = sorted((offline / "inspect-logs").glob("*.eval"))
    assert len(logs) == 1 and logs[0].name in message
    assert "3 valid answer(s) recorded" in message
    from catengine.adapters.inspect import BatchAnswerError

    assert isinstance(info.value, BatchAnswerError)
    valid = [i for i in first if i not in (huge, negative)]
    assert sorted(r.item for r in session.history) == sorted(valid)
    assert sorted(info.value.recorded) == sorted(valid)
    assert sorted(session.pending_items) == sorted([huge, negative]) == sorted(info.value.pending)
    for rec in session.history:
        assert (rec.correct, rec.cot_length) == oracle[bank.index_of(rec.item)]
    # a fixed provider: only the two bad items are asked again, then the test goes on
    calls.clear()
    result = run_adaptive(task, session, model=_mock_model(bank, oracle, calls=calls), k=5,
                          log_dir=str(offline / "inspect-logs"))
    assert sorted(calls[:2]) == sorted([huge, negative]) and len(calls) == 2 + 5
    assert session.n_items == 10 and result.rounds == 2
    session.close()


def test_adapter_inspect_mock_model_without_usage_runs_offline(offline):
    """issue 34 row 10: mockllm/model outputs with usage=None (ModelOutput.from_content) make
    Inspect count tokens with tiktoken, which downloads its tokenizer files; the adapter runs offline
    (the fixture refuses every lookup and connection, and no tokenizer file is cached)."""
    from catengine.adapters.inspect import run_adaptive

    bank, oracle, task = _world()
    session = CATSession(bank, rng=0, stopping=MaxItems(4))
    result = run_adaptive(task, session, model=_mock_model(bank, oracle, usage=False), k=4,
                          log_dir=str(offline / "inspect-logs"))
    assert result.rounds == 1 and session.n_items == 4
    assert [r.correct for r in session.history] == [oracle[bank.index_of(r.item)][0] for r in session.history]
    # Inspect's mock reports the completion's length as its output tokens: recorded as the CoT length
    assert all(r.cot_length is not None and r.cot_length > 0 for r in session.history)


def test_read_inspect_logs_reads_the_eval_files_inspect_writes_in_a_fresh_process(offline):
    """issue 34 row 5: the .eval logs inspect_ai writes are zip archives of zstd-compressed members;
    read_inspect_logs reads them in a process that never imported inspect_ai (Python's zipfile
    alone cannot), and a truncated .eval is an error naming the file."""
    import json
    import subprocess
    import sys
    import zipfile

    from catengine.adapters.inspect import run_adaptive
    from catengine.responses.readers import read_inspect_logs

    bank, oracle, task = _world()
    session = CATSession(bank, rng=0, stopping=MaxItems(3))
    result = run_adaptive(task, session, model=_mock_model(bank, oracle), k=3, log_dir=str(offline / "inspect-logs"))
    log = result.eval_logs[0]
    with zipfile.ZipFile(log) as zf:
        assert {i.compress_type for i in zf.infolist()} == {93}  # zstd: what the reader must handle
    script = (
        "import json, sys\n"
        "from catengine.responses.readers import read_inspect_logs\n"
        f"data = read_inspect_logs({log!r}, item_id='{{id}}')\n"
        "assert 'inspect_ai' not in sys.modules and 'zipfile_zstd' not in sys.modules\n"
        "print(json.dumps({'items': list(data.item_ids), 'correct': data.correct[0].tolist(),"
        " 'cot': data.cot_length[0].tolist(), 'subjects': list(data.subject_ids)}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    read = json.loads(done.stdout)
    recorded = {r.item: (r.correct, r.cot_length) for r in session.history}
    assert read["subjects"] == ["mockllm/model"]
    assert {i: (c, t) for i, c, t in zip(read["items"], read["correct"], read["cot"])} == recorded
    # a truncated .eval (an interrupted write, a partial copy) names the file
    cut = offline / "cut.eval"
    data = open(log, "rb").read()
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"cut\.eval: truncated or corrupt \.eval archive"):
        read_inspect_logs(cut)


def _paired_models(bank, oracles, *, calls, fail_items=()):
    """Two of Inspect's mock models answering like two simulated LLMs (``oracles``), each logging the
    items it was asked in ``calls[side]``; not memoised, so that the two stay two."""
    from inspect_ai.model import ModelOutput, ModelUsage, get_model

    def make(side):
        oracle = oracles[side]

        def answer(messages, tools, tool_choice, config):
            text = messages[-1].text
            item = text[1:text.index("]")]
            calls[side].append(item)
            if side == 1 and item in fail_items:
                raise RuntimeError(f"provider down while answering {item}")
            j = bank.index_of(item)
            correct, tokens = oracle[j]
            out = ModelOutput.from_content("mockllm/model", f"the answer is {j + 100 if correct else j + 7}")
            out.usage = ModelUsage(input_tokens=20, output_tokens=int(tokens), total_tokens=20 + int(tokens))
            return out

        return get_model("mockllm/model", custom_outputs=answer, memoize=False)

    return make(0), make(1)


def test_adapter_inspect_compares_two_models_item_by_item(offline):
    from catengine import PairedSession
    from catengine.adapters.inspect import run_paired, task_items
    from catengine.paired import PairedStopping

    bank, _, task = _world()
    oracles = [naive.make_oracle(bank.params, seed=11, theta=theta)[0] for theta in (2.5, -2.5)]
    calls = ([], [])
    model_a, model_b = _paired_models(bank, oracles, calls=calls)
    items = task_items(task, bank)
    assert items == list(bank.item_ids[:N_SAMPLES])
    stopping = PairedStopping(max_items=6, on_decision=False)
    with pytest.raises(ValueError, match="task_items"):  # every item compared needs a sample
        run_paired(task, PairedSession(bank, rng=0), model_a=model_a, model_b=model_b)
    log = offline / "pair.jsonl"
    pair = PairedSession(bank, items=items, rng=0, stopping=stopping, log=log, subjects=("strong", "weak"))
    result = run_paired(task, pair, model_a=model_a, model_b=model_b, log_dir=str(offline / "inspect-logs"))
    assert result.rounds == 6 and pair.finished and len(result.eval_logs) == 12
    # each model saw exactly the items drawn, once each, and both answers were recorded from its scorer
    drawn = [s.item for s in pair.history]
    assert calls[0] == calls[1] == drawn
    for s in pair.history:
        j = bank.index_of(s.item)
        assert (s.correct_a, s.cot_length_a) == oracles[0][j] and (s.correct_b, s.cot_length_b) == oracles[1][j]
    # the same comparison as the paired session driven directly
    ref = PairedSession(bank, items=items, rng=0, stopping=stopping, subjects=("strong", "weak"))
    while not ref.finished:
        item = ref.next_item()
        j = bank.index_of(item)
        ref.record(item, oracles[0][j][0], oracles[1][j][0], oracles[0][j][1], oracles[1][j][1])
    assert [s.item for s in ref.history] == drawn and ref.comparison() == result.comparison
    assert str(result).startswith("strong - weak:") and result.stop_reason == "reached 6 items"
    pair.close()


def test_adapter_inspect_paired_round_with_a_failed_model_records_nothing(offline):
    from catengine import PairedSession
    from catengine.adapters.inspect import run_paired, task_items
    from catengine.errors import CatEngineError as Error

    bank, _, task = _world()
    oracles = [naive.make_oracle(bank.params, seed=11, theta=theta)[0] for theta in (1.0, 0.0)]
    log = offline / "pair.jsonl"
    pair = PairedSession(bank, items=task_items(task, bank), rng=1, stopping=4, log=log)
    first = pair.next_item()
    calls = ([], [])
    model_a, model_b = _paired_models(bank, oracles, calls=calls, fail_items={first})
    with pytest.raises(Error, match=r"(?s)model b .*item '" + first + r"'.*nothing was recorded"):
        run_paired(task, pair, model_a=model_a, model_b=model_b, log_dir=str(offline / "inspect-logs"))
    assert pair.n_items == 0 and pair.pending_item == first
    pair.close()
    resumed = PairedSession.resume(log, bank)  # the item stays proposed in the log: it is asked again
    model_a, model_b = _paired_models(bank, oracles, calls=calls)
    result = run_paired(task, resumed, model_a=model_a, model_b=model_b, log_dir=str(offline / "inspect-logs"))
    assert resumed.history[0].item == first and result.comparison.n_items == resumed.n_items
    resumed.close()
