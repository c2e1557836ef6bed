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

    monkeypatch.setattr(socket.socket, "connect", guarded)
    yield tmp_path
    assert attempts == [], f"something tried to reach the network: {attempts}"


def _world(seed=3):
    """A LaRT bank, an Inspect task with one sample per item (ids = item ids), and a simulated LLM:
    its recorded answer (correct, CoT tokens) to every item."""
    from inspect_ai import Task
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.scorer import match
    from inspect_ai.solver import generate

    bank = naive.make_bank("lart", N_ITEMS, seed=seed)
    oracle, _ = naive.make_oracle(bank.params, seed=seed + 1)
    samples = [Sample(input=f"[{bank.item_ids[j]}] What is {j} + 100?", target=str(j + 100), id=bank.item_ids[j])
               for j in range(N_SAMPLES)]
    task = Task(dataset=MemoryDataset(samples), solver=generate(), scorer=match(), name="arith")
    return bank, oracle, task


def _mock_model(bank, oracle, *, fail_items=(), calls=None):
    """Inspect's mockllm/model answering like the simulated LLM: the right number when the oracle says
    correct, a wrong one otherwise; the CoT length as the output's token usage."""
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
        out.usage = ModelUsage(input_tokens=20, output_tokens=int(tokens), total_tokens=20 + int(tokens))
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
