"""CATSession and Engine: the adaptive loop, bad input, durable logs and exact resume."""

import json
import math
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import naive_engine as naive
from catengine import open_item_bank, write_item_bank
from catengine.errors import BankExhaustedError, CatEngineError
from catengine.estimation import EAPEstimator, MAPEstimator, TraitPrior
from catengine.selection import (
    ContentBalance,
    KullbackLeiblerIndex,
    MaxFisherInformation,
    PosteriorExpectedInformation,
    RandomSelection,
    Randomesque,
    SympsonHetter,
    ThetaTargetedInformation,
)
from catengine.session import (
    CATSession,
    CorruptLogWarning,
    CoTIgnoredWarning,
    Engine,
    InvalidResponseError,
    ItemAlreadyAnsweredError,
    SessionLogError,
    UnknownItemError,
    UnknownSubjectError,
    from_config,
    read_log,
    to_config,
)
from catengine.stopping import AllOf, AnyOf, InformationBelow, MaxItems, MinItems, RivalOrderDecided, StandardErrorBelow

TESTS = Path(__file__).resolve().parent


def _drive(session, bank, oracle, n=None):
    """Answer proposed items from the oracle until finished (or n answers)."""
    while not session.finished and (n is None or session.n_items < n):
        item = session.next_item()
        session.record(item, *oracle[bank.index_of(item)])
    return session


# ----------------------------------------------------------------------------- the loop
def test_lart_session_uses_answers_and_cot_lengths():
    bank = naive.make_bank("lart", 80, seed=1)
    oracle, (theta, tau) = naive.make_oracle(bank.params, seed=2)
    s = _drive(CATSession(bank, stopping=MaxItems(25), rng=0), bank, oracle)
    est = s.estimate
    assert est.n_items == 25 and est.tau is not None and est.tau_sd > 0
    assert abs(est.theta - theta) < 3 * est.theta_sd + 0.2 and abs(est.tau - tau) < 3 * est.tau_sd + 0.2
    # the same answers without CoT lengths: tau comes only from rho, theta is less precise
    s2 = CATSession(bank, stopping=MaxItems(25), rng=0)
    for rec in s.history:
        s2.record(rec.item, rec.correct)
    assert s2.estimate.theta_sd > est.theta_sd and s2.estimate.tau_sd > est.tau_sd
    h = s.history
    assert [r.step for r in h] == list(range(1, 26)) and all(r.proposed for r in h)
    assert h[-1].theta == est.theta and all(math.isfinite(r.criterion) for r in h)
    ds = s.to_dataset()
    assert ds.sizes["step"] == 25 and list(ds["item"].values) == s.administered
    assert float(ds.attrs["theta"]) == est.theta and "tau" in ds


def test_logistic_session_ignores_cot_with_a_warning():
    bank = naive.make_bank("2pl", 20, seed=3)
    s = CATSession(bank, rng=0)
    item = s.next_item()
    with pytest.warns(CoTIgnoredWarning, match="ignored"):
        s.record(item, 1, cot_length=512)
    s2 = CATSession(bank, rng=0)
    s2.record(item, 1)
    assert s.estimate == s2.estimate and s.history[0].cot_length is None


def test_unproposed_answers_count_once_and_no_item_is_proposed_twice():
    bank = naive.make_bank("2pl", 15, seed=4)
    oracle, _ = naive.make_oracle(bank.params, seed=5)
    s = CATSession(bank, stopping=MaxItems(15), rng=0)
    proposed = s.next_item()
    other = next(i for i in bank.item_ids if i != proposed)
    s.record(other, 1)  # the user's choice
    assert s.n_items == 1 and s.history[0].proposed is False and math.isnan(s.history[0].criterion)
    with pytest.raises(ItemAlreadyAnsweredError):
        s.record(other, 0)
    seen = [other]
    while True:
        try:
            item = s.next_item()
        except BankExhaustedError as exc:
            assert "all 15 items" in str(exc)
            break
        assert item not in seen
        seen.append(item)
        s.record(item, *oracle[bank.index_of(item)])
    assert sorted(seen) == sorted(bank.item_ids) and s.finished


def test_proposal_is_stable_until_answered_and_exclude_moves_on():
    bank = naive.make_bank("2pl", 10, seed=6)
    s = CATSession(bank, selector=RandomSelection(), rng=3)
    first = s.next_item()
    assert all(s.next_item() == first for _ in range(5))
    assert s.pending_item == first and s.pending_criterion is None  # random selection has no criterion
    mfi = CATSession(bank)
    mfi.next_item()
    assert mfi.pending_criterion > 0
    s.exclude(first)
    second = s.next_item()
    assert second != first
    s.record(second, 1)
    with pytest.raises(ItemAlreadyAnsweredError):
        s.exclude(second)
    s.record(first, 0)  # an excluded item can still be answered (user's choice): it counts
    assert s.n_items == 2 and s.history[1].proposed is False


def test_bad_input_leaves_session_unchanged(tmp_path):
    bank = naive.make_bank("lart", 20, seed=7)
    oracle, _ = naive.make_oracle(bank.params, seed=8)
    log = tmp_path / "s.jsonl"
    s = _drive(CATSession(bank, stopping=MaxItems(20), rng=0, log=log), bank, oracle, n=4)
    pending = s.next_item()
    before = s.state_summary()
    size = log.stat().st_size
    done = s.administered[0]
    bad_calls = [
        (lambda: s.record("nope", 1), UnknownItemError, "not in bank"),
        (lambda: s.record(done, 1), ItemAlreadyAnsweredError, "already answered"),
        (lambda: s.record(pending, 2), InvalidResponseError, "0 or 1"),
        (lambda: s.record(pending, 0.5), InvalidResponseError, "0 or 1"),
        (lambda: s.record(pending, "1"), InvalidResponseError, "0 or 1"),
        (lambda: s.record(pending, None), InvalidResponseError, "0 or 1"),
        (lambda: s.record(pending, 1, cot_length=-3), InvalidResponseError, "tokens"),
        (lambda: s.record(pending, 1, cot_length=float("nan")), InvalidResponseError, "tokens"),
        (lambda: s.record(pending, 1, cot_length=float("inf")), InvalidResponseError, "tokens"),
        (lambda: s.record(pending, 1, cot_length="long"), InvalidResponseError, "tokens"),
        (lambda: s.exclude("nope"), UnknownItemError, "not in bank"),
        (lambda: s.exclude(done), ItemAlreadyAnsweredError, "already answered"),
    ]
    for call, exc, match in bad_calls:
        with pytest.raises(exc, match=match) as info:
            call()
        assert isinstance(info.value, CatEngineError)
        after = s.state_summary()
        assert after["history"] == before["history"] and after["pending"] == before["pending"]
        assert np.array_equal(after["available"], before["available"]) and after["rng"] == before["rng"]
        assert log.stat().st_size == size
    assert str(UnknownItemError("plain message")) == "plain message"
    s.record(pending, True, cot_length=np.int64(300))  # numpy scalars and bools are fine
    assert s.n_items == 5


def test_log_write_failure_rolls_back(tmp_path):
    bank = naive.make_bank("2pl", 10, seed=9)
    s = CATSession(bank, rng=0, log=tmp_path / "x.jsonl")
    item = s.next_item()
    s._writer.close()
    with pytest.raises(ValueError):
        s.record(item, 1)
    assert s.n_items == 0 and s._responses.n == 0 and s.pending_item == item


# ----------------------------------------------------------------------------- config round trip
def test_strategy_configs_round_trip():
    strategies = [
        MaxFisherInformation(), PosteriorExpectedInformation(n_nodes=5), KullbackLeiblerIndex(delta_scale=2.5),
        ThetaTargetedInformation(), MAPEstimator(prior=TraitPrior(theta_mean=0.5, rho=-0.3), use_cot=False),
        EAPEstimator(n_points=33, bounds=(-4, 4)), Randomesque(4), SympsonHetter(control=(0.2, 1.0, 0.5), target_rate=0.2),
        ContentBalance("benchmark", {"a": 0.25, "b": 0.75}),
        AnyOf(AllOf(MinItems(5), StandardErrorBelow(0.3)), MaxItems(40), InformationBelow(0.01),
              RivalOrderDecided(rivals=(("x", 0.1, 0.2),))),
    ]
    for obj in strategies:
        cfg = json.loads(json.dumps(to_config(obj)))
        assert from_config(cfg) == obj
    with pytest.raises(ValueError, match="unknown strategy"):
        from_config({"type": "nope"})


# ----------------------------------------------------------------------------- durable logs and resume
def _rng_heavy_setup(model="lart"):
    bank = naive.make_bank(model, 70, seed=10, b_sd=True)
    sh = SympsonHetter(control=tuple(np.linspace(0.3, 1.0, 70)))
    kw = dict(selector=KullbackLeiblerIndex(), stopping=MaxItems(30),
              exposure=(sh, ContentBalance("benchmark", {"alpha": 0.4, "beta": 0.3, "gamma": 0.3}), Randomesque(3)))
    return bank, kw


@pytest.mark.parametrize("cut", ["after-record", "after-propose", "torn-line"])
def test_killed_session_resumes_to_the_identical_state(tmp_path, cut):
    bank, kw = _rng_heavy_setup()
    oracle, _ = naive.make_oracle(bank.params, seed=11)
    ref = _drive(CATSession(bank, rng=123, log=tmp_path / "ref.jsonl", **kw), bank, oracle)

    log = tmp_path / "run.jsonl"
    s = _drive(CATSession(bank, rng=123, log=log, **kw), bank, oracle, n=12)
    if cut in ("after-propose", "torn-line"):
        s.next_item()
    if cut == "torn-line":
        with open(log, "ab") as fh:
            fh.write(b'{"event":"record","subject":"subject","ite')  # crash in the middle of a write
    del s  # the process "dies": nothing is closed or flushed beyond what record() already did
    if cut == "torn-line":
        with pytest.warns(CorruptLogWarning, match="last line"):
            resumed = CATSession.resume(log, bank)
        assert (tmp_path / "run.jsonl.corrupt").read_bytes().startswith(b'{"event":"record"')
    else:
        resumed = CATSession.resume(log, bank)
    assert resumed.n_items == 12
    _drive(resumed, bank, oracle)
    a, b = ref.state_summary(), resumed.state_summary()
    for key in a:
        assert np.array_equal(a[key], b[key]) if isinstance(a[key], np.ndarray) else a[key] == b[key], key
    resumed.close()
    # the resumed log reads cleanly and replays to the same state again
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = CATSession.resume(log, bank)
    assert again.state_summary()["history"] == a["history"]
    again.close()


def test_resume_after_a_real_process_kill(tmp_path):
    """A subprocess runs a logged session and SIGKILLs itself mid-way; resuming finishes the test
    exactly like an uninterrupted run."""
    bank, kw = _rng_heavy_setup("2pl")
    bank = open_item_bank(write_item_bank(bank, tmp_path / "banks" / "testbank"))  # on disk: resume can open it
    log = tmp_path / "killed.jsonl"
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(TESTS)!r})
        import naive_engine as naive
        from catengine import open_item_bank
        from catengine.session import CATSession
        from test_session import _rng_heavy_setup
        bank = open_item_bank({str(bank.source)!r})
        _, kw = _rng_heavy_setup("2pl")
        oracle, _ = naive.make_oracle(bank.params, seed=12)
        s = CATSession(bank, rng=7, log={str(log)!r}, **kw)
        while True:
            item = s.next_item()
            s.record(item, *oracle[bank.index_of(item)])
            if s.n_items == 9:
                s.next_item()
                os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    oracle, _ = naive.make_oracle(bank.params, seed=12)
    resumed = CATSession.resume(log)  # the bank is found through the log header
    assert resumed.n_items == 9 and resumed.pending_item is not None
    _drive(resumed, bank, oracle)
    ref = _drive(CATSession(bank, rng=7, **kw), bank, oracle)
    a, b = ref.state_summary(), resumed.state_summary()
    assert a["history"] == b["history"] and a["rng"] == b["rng"] and a["estimate"] == b["estimate"]
    resumed.close()


def test_corrupt_lines_and_wrong_bank(tmp_path):
    bank = naive.make_bank("2pl", 20, seed=13)
    oracle, _ = naive.make_oracle(bank.params, seed=14)
    log = tmp_path / "c.jsonl"
    s = _drive(CATSession(bank, stopping=MaxItems(20), rng=0, log=log), bank, oracle, n=5)
    s.close()
    good = log.read_bytes()
    # a complete but unparsable last line is reported and skipped too
    log.write_bytes(good + b"not json at all\n")
    with pytest.warns(CorruptLogWarning, match="not valid JSON"):
        r = CATSession.resume(log, bank)
    assert r.n_items == 5
    r.close()
    assert log.read_bytes() == good
    # a corrupt line in the middle is never skipped silently
    lines = good.split(b"\n")
    lines[3] = b'{"event": "record", "subject"'
    log.write_bytes(b"\n".join(lines))
    with pytest.raises(SessionLogError, match=":4: corrupt"):
        CATSession.resume(log, bank)
    log.write_bytes(good)
    with pytest.raises(SessionLogError, match="fingerprint"):
        CATSession.resume(log, naive.make_bank("2pl", 20, seed=99))
    with pytest.raises(SessionLogError, match="in-memory bank"):
        CATSession.resume(log)
    with pytest.raises(FileExistsError):
        CATSession(bank, log=log)
    contents = read_log(log)
    assert contents.header["config"]["selector"]["type"] == "doubly-robust"  # the default
    assert [e["event"] for e in contents.events][:3] == ["open", "propose", "record"]


# ----------------------------------------------------------------------------- many subjects
def test_engine_routes_interleaved_subjects_and_resumes(tmp_path):
    bank = naive.make_bank("lart", 50, seed=15, b_sd=True)
    oracles = {f"llm-{k}": naive.make_oracle(bank.params, seed=20 + k)[0] for k in range(4)}
    kw = dict(selector=RandomSelection(), stopping=MaxItems(12), exposure=(Randomesque(2),), rng=5)

    def run(engine, subjects, steps):
        for _ in range(steps):
            for subj in subjects:
                sess = engine.start(subj)
                if sess.finished:
                    continue
                item = engine.next_item(subj)
                engine.record(subj, item, *oracles[subj][bank.index_of(item)])

    ref = Engine(bank, **kw)
    run(ref, list(oracles), 12)
    log = tmp_path / "engine.jsonl"
    e = Engine(bank, log=log, **kw)
    run(e, list(oracles)[::-1], 5)  # a different arrival order
    e.next_item("llm-2")  # a pending proposal at the crash
    del e
    e2 = Engine.resume(log, bank)
    assert sorted(e2.sessions) == sorted(oracles)
    run(e2, list(oracles), 12)
    for subj in oracles:
        a, b = ref.session(subj).state_summary(), e2.session(subj).state_summary()
        assert a["history"] == b["history"] and a["rng"] == b["rng"], subj
    with pytest.raises(UnknownSubjectError, match="unknown subject"):
        e2.record("ghost", bank.item_ids[0], 1)
    with pytest.raises(UnknownSubjectError):
        e2.next_item("")
    e2.close()


def test_engine_rejects_bad_configuration():
    bank = naive.make_bank("2pl", 10, seed=16)
    with pytest.raises(TypeError, match="selector"):
        Engine(bank, selector="mfi")
    with pytest.raises(TypeError, match="rng"):
        Engine(bank, rng="seed")
    with pytest.raises(TypeError, match="ExposureControl"):
        CATSession(bank, exposure=[MaxItems(3)])
