"""Batch-adaptive selection (CATSession.next_items): k = 1 is the sequential engine, the batch is the
greedy optimum under the fantasised posterior, controls hold per slot, and logs resume a half-answered batch."""

import math
import warnings

import numpy as np
import pytest

import naive_engine as naive
from catengine.errors import BankExhaustedError
from catengine.estimation import EAPEstimator, MAPEstimator
from catengine.models import fisher_information, lart
from catengine.selection import SELECTORS, ContentBalance, KullbackLeiblerIndex, Randomesque, SympsonHetter
from catengine.selection.batch import fantasise
from catengine.session import CATSession, Engine
from catengine.stopping import MaxItems


def _setup(case):
    """(bank, CATSession keyword arguments) for one selector / bank type / control combination."""
    model, selector, extra = case
    bank = naive.make_bank(model, 60, seed=hash(case[0]) % 97 + 3, b_sd=(selector == "pei"))
    sel = SELECTORS[selector](n_fixed=4) if selector == "lart-replication" else SELECTORS[selector]()
    kw = dict(selector=sel, stopping=MaxItems(18))
    if extra == "controls":
        kw["exposure"] = (SympsonHetter(control=tuple(np.linspace(0.3, 1.0, 60))),
                          ContentBalance("benchmark", {"alpha": 0.4, "beta": 0.3, "gamma": 0.3}), Randomesque(3))
    if extra == "eap":
        kw["estimator"] = EAPEstimator()
    if extra == "sd_scale":
        kw["estimator"] = MAPEstimator(sd_scale=1.4)
    return bank, kw


CASES = [("2pl", "mfi", None), ("4pl", "pwi", None), ("2pl", "kl", "controls"), ("2pl", "pei", "eap"),
         ("lart", "lart-theta", None), ("lart", "kl", "controls"), ("lart", "lart-replication", "sd_scale"),
         ("4pl", "random", "controls")]


@pytest.mark.parametrize("case", CASES, ids=["-".join(str(x) for x in c) for c in CASES])
def test_batch_of_one_is_the_sequential_engine(case):
    bank, kw = _setup(case)
    for seed in (0, 1):
        oracle, _ = naive.make_oracle(bank.params, seed=seed + 40)
        seq = CATSession(bank, rng=seed, **kw)
        bat = CATSession(bank, rng=seed, **kw)
        while not seq.finished:
            item = seq.next_item()
            seq.record(item, *oracle[bank.index_of(item)])
            (got,) = bat.next_items(1)
            assert got == item
            bat.record(got, *oracle[bank.index_of(got)])
        assert bat.finished
        a, b = seq.state_summary(), bat.state_summary()
        assert a["history"] == b["history"] and a["estimate"] == b["estimate"] and a["rng"] == b["rng"]


def test_fantasised_precision_is_the_information_update():
    # logistic: 1/sd'^2 = 1/sd^2 + u / s^2 (reported SDs carry sd_scale s)
    bank = naive.make_bank("2pl", 30, seed=4)
    s = CATSession(bank, rng=0, estimator=MAPEstimator(sd_scale=1.5))
    est = s.estimate
    new, dq = fantasise(est, 0.7, 0.0, 1.5)
    assert new.theta == est.theta and dq == 0.7
    assert math.isclose(new.theta_sd ** -2, est.theta_sd ** -2 + 0.7 / 1.5**2, rel_tol=1e-12)
    # LaRT: the 2 x 2 covariance is the inverse of P + diag(u, v), and dq the gain in theta's marginal precision
    bank = naive.make_bank("lart", 30, seed=5)
    oracle, _ = naive.make_oracle(bank.params, seed=6)
    s = CATSession(bank, rng=0)
    for j in range(4):
        s.record(bank.item_ids[j], *oracle[j])
    est = s.estimate
    u, v = lart.item_information(bank.params, est.theta, [9])
    new, dq = fantasise(est, float(u[0]), float(v[0]))
    cov = np.linalg.inv(np.linalg.inv(est.covariance()) + np.diag([u[0], v[0]]))
    assert np.allclose(new.covariance(), cov, rtol=1e-12)
    assert math.isclose(dq, 1 / cov[0, 0] - 1 / est.theta_sd**2, rel_tol=1e-10)
    assert new.theta == est.theta and new.tau == est.tau


def adaptive_default(bank):
    """The bank's adaptive rule (what the default doubly robust selector uses on its adaptive steps)."""
    from catengine.selection import DoublyRobustSelection
    from catengine.session.bank_log import item_table

    return DoublyRobustSelection().adaptive_for(item_table(bank))


def test_point_information_batch_is_the_top_k():
    bank = naive.make_bank("4pl", 50, seed=7)
    oracle, _ = naive.make_oracle(bank.params, seed=8)
    s = CATSession(bank, selector=adaptive_default(bank), rng=0)
    for j in (3, 11, 20):
        s.record(bank.item_ids[j], *oracle[j])
    batch = s.next_items(8)
    info = fisher_information(bank.params, s.estimate.theta)
    info[[3, 11, 20]] = -np.inf
    assert [bank.index_of(i) for i in batch] == list(np.argsort(-info, kind="stable")[:8])


def test_lart_batch_is_greedy_in_the_fantasised_posterior_variance():
    """Each slot minimises Var(theta) after the batch so far plus that item (brute force over the bank)."""
    bank = naive.make_bank("lart", 40, seed=9)
    oracle, _ = naive.make_oracle(bank.params, seed=10)
    s = CATSession(bank, selector=adaptive_default(bank), rng=0)
    for j in (0, 5):
        s.record(bank.item_ids[j], *oracle[j])
    batch = [bank.index_of(i) for i in s.next_items(6)]
    est = s.estimate
    u, v = lart.item_information(bank.params, est.theta)
    P = np.linalg.inv(est.covariance())
    taken = {0, 5}
    for j_got in batch:
        var = np.full(40, np.inf)
        for j in set(range(40)) - taken:
            var[j] = np.linalg.inv(P + np.diag([u[j], v[j]]))[0, 0]
        assert j_got == int(np.argmin(var))
        P = P + np.diag([u[j_got], v[j_got]])
        taken.add(j_got)


def test_lart_batch_stops_buying_cot_information_once_tau_is_pinned():
    """Ten items rich in CoT information (about tau, hence theta through rho) and ten accurate ones:
    the sequential criterion ranks all CoT-rich items first; the batch takes one, then switches."""
    from catengine import ItemBank

    n = 20
    a = np.r_[np.full(10, 1.2), np.full(10, 0.4)] + np.linspace(0, 0.01, n)
    phi = np.r_[np.full(10, 0.2), np.full(10, 3.0)]
    bank = ItemBank.from_params("lart", [f"i{k}" for k in range(n)], bank_id="t", a=a, b=np.zeros(n),
                                omega=np.full(n, 6.0), phi=phi, lam=np.ones(n), rho=-0.8, cot_offset=1.0)
    s = CATSession(bank, selector=adaptive_default(bank), rng=0)
    top = s.selector.candidates(bank.params, _state(s), s.rng, 6)[0]
    assert all(j >= 10 for j in top)  # sequential ranking: CoT-rich items only
    batch = [bank.index_of(i) for i in s.next_items(6)]
    assert batch == [19, 9, 8, 7, 6, 5]


def _state(s):
    from catengine.selection import SelectionState

    return SelectionState(s.estimate, s.eligible_mask(), s._responses, s.items, s._log_posterior)


def test_batch_respects_content_and_exposure_controls():
    bank = naive.make_bank("2pl", 60, seed=12)
    blocked = np.zeros(60)
    blocked[::2] = 1.0  # Sympson-Hetter K = 1 for even items, 0 for odd ones: odd items never appear
    groups = bank.item_metadata("benchmark")
    kw = dict(exposure=(SympsonHetter(control=tuple(blocked)),
                        ContentBalance("benchmark", {"alpha": 0.5, "beta": 0.5})))
    s = CATSession(bank, rng=3, **kw)
    batch = [bank.index_of(i) for i in s.next_items(10)]
    assert len(set(batch)) == 10 and all(j % 2 == 0 for j in batch)
    counts = {g: sum(groups[j] == g for j in batch) for g in ("alpha", "beta")}
    assert counts == {"alpha": 5, "beta": 5}


def test_batch_is_answered_in_any_order_and_kept_until_done():
    bank = naive.make_bank("lart", 40, seed=13)
    oracle, _ = naive.make_oracle(bank.params, seed=14)
    s = CATSession(bank, rng=0)
    batch = s.next_items(5)
    assert len(set(batch)) == 5 and s.pending_items == batch
    for item in (batch[3], batch[0]):
        s.record(item, *oracle[bank.index_of(item)])
    rest = [batch[1], batch[2], batch[4]]
    assert s.next_items(5) == rest and s.next_item() == batch[1] and s.pending_items == rest
    s.exclude(batch[2])
    assert s.pending_items == [batch[1], batch[4]]
    other = next(i for i in bank.item_ids if i not in batch)
    s.record(other, *oracle[bank.index_of(other)])  # an unproposed answer leaves the batch alone
    assert s.pending_items == [batch[1], batch[4]]
    for item in (batch[4], batch[1]):
        s.record(item, *oracle[bank.index_of(item)])
    h = s.history
    assert [r.proposed for r in h] == [True, True, False, True, True]
    assert all(math.isfinite(r.criterion) for r in h if r.proposed)
    assert s.pending_items == [] and s.next_items(2)[0] not in batch
    # the estimate after a whole batch does not depend on the answer order (same posterior mode)
    t = CATSession(bank, rng=0)
    for r in reversed(h):
        t.record(r.item, r.correct, r.cot_length)
    assert abs(t.estimate.theta - h[-1].theta) < 1e-7 and abs(t.estimate.theta_sd - h[-1].theta_sd) < 1e-7


def test_batch_shrinks_at_the_end_of_the_bank():
    bank = naive.make_bank("2pl", 7, seed=15)
    s = CATSession(bank, rng=0)
    s.exclude(bank.item_ids[0])
    batch = s.next_items(10)
    assert sorted(batch) == sorted(bank.item_ids[1:])
    for item in batch:
        s.record(item, 1)
    with pytest.raises(BankExhaustedError):
        s.next_items(3)
    with pytest.raises(ValueError, match="positive integer"):
        CATSession(bank).next_items(0)


def test_half_answered_batch_resumes_from_the_log(tmp_path):
    bank = naive.make_bank("lart", 60, seed=16)
    kw = dict(selector=KullbackLeiblerIndex(), stopping=MaxItems(24),
              exposure=(ContentBalance("benchmark", {"alpha": 0.4, "beta": 0.3, "gamma": 0.3}), Randomesque(3)))
    oracle, _ = naive.make_oracle(bank.params, seed=17)

    def run(session, stop_after=None):
        answered = 0
        while not session.finished:
            batch = session.next_items(5)
            for item in reversed(batch):  # answers come back out of order
                if stop_after is not None and answered == stop_after:
                    return session
                session.record(item, *oracle[bank.index_of(item)])
                answered += 1
        return session

    ref = run(CATSession(bank, rng=5, log=tmp_path / "ref.jsonl", **kw))
    log = tmp_path / "run.jsonl"
    half = run(CATSession(bank, rng=5, log=log, **kw), stop_after=8)
    pending = half.pending_items
    assert len(pending) == 2
    del half  # the process dies with 3 of the second batch's 5 items answered
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resumed = CATSession.resume(log, bank)
    assert resumed.pending_items == pending and resumed.n_items == 8
    run(resumed)
    a, b = ref.state_summary(), resumed.state_summary()
    for key in a:
        assert np.array_equal(a[key], b[key]) if isinstance(a[key], np.ndarray) else a[key] == b[key], key
    resumed.close()


def test_engine_proposes_batches_per_subject(tmp_path):
    bank = naive.make_bank("2pl", 40, seed=18)
    with Engine(bank, selector=adaptive_default(bank), rng=1, log=tmp_path / "e.jsonl") as eng:
        b1 = eng.next_items("llm-a", 4)
        b2 = eng.next_items("llm-b", 4)
        assert b1 == b2 and len(set(b1)) == 4  # same prior, deterministic selector
        eng.record("llm-a", b1[2], 1)
        assert eng.session("llm-a").pending_items == [b1[0], b1[1], b1[3]]
    resumed = Engine.resume(tmp_path / "e.jsonl", bank)
    assert resumed.session("llm-a").pending_items == [b1[0], b1[1], b1[3]]
    assert resumed.session("llm-b").pending_items == b2
    resumed.close()


def test_batches_stop_at_the_item_limit_of_the_stopping_rule():
    from catengine.stopping import AllOf, AnyOf, MinItems, StandardErrorBelow
    from catengine.stopping.rules import item_limit

    assert item_limit(MaxItems(9)) == 9 and item_limit(StandardErrorBelow(0.3)) is None
    assert item_limit(AnyOf([MaxItems(30), AllOf([MinItems(5), StandardErrorBelow(0.2)]), MaxItems(12)])) == 12
    assert item_limit(AllOf([MaxItems(10), MaxItems(20)])) == 20 and item_limit(AllOf([MaxItems(10), MinItems(3)])) is None
    bank = naive.make_bank("2pl", 40, seed=19)
    s = CATSession(bank, rng=0, stopping=AnyOf([MaxItems(7), StandardErrorBelow(0.01)]))
    assert len(s.next_items(5)) == 5
    for item in s.pending_items:
        s.record(item, 1)
    assert len(s.next_items(5)) == 2
    for item in s.pending_items:
        s.record(item, 0)
    assert s.finished and len(s.next_items(5)) == 5  # past the limit only when asked anyway
