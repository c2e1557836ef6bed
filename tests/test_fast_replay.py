"""The compiled replay (``catengine.session.fast_replay``) against sessions stepped in Python.

Every configuration ``CompiledReplay.for_session`` accepts must give what a ``CATSession`` gives
when the same recorded answers are fed to it one proposal at a time: the same items in the same
order, the same design flags, draw contexts and criterion values, the same estimates after every
answer (all fields of ``TraitEstimate``), and the generator left in the same state. Real MATH500
answers on the shipped banks (score factors, item uncertainty, a population and stored interval
curves, strong LLMs that trigger the extrapolation share) and a plain 2PL bank without any of them.
"""

import math

import numpy as np
import pytest

from calibration import ResponseData
from catengine import CATSession, ItemBank, open_item_bank
from catengine.estimation import EAPEstimator, MAPEstimator, TraitPrior
from catengine.selection import SELECTORS, DoublyRobustSelection, RandomisedSelection, Randomesque
from catengine.session.fast_replay import CompiledReplay
from catengine.stopping import MaxItems
from tests.real_data import lart_files

STEPS = 30


@pytest.fixture(scope="module")
def math500():
    data = ResponseData.from_wide_csv(*lart_files("math500"))
    accuracy = data.correct.mean(axis=1)
    # the weakest, the strongest (beyond the calibration population's edges) and some in between
    order = np.argsort(accuracy, kind="stable")
    # and, of the LLMs with no correct answer, the one with the shortest chains (below the LaRT bank's population)
    none_right = np.flatnonzero(accuracy == 0)
    shortest = none_right[np.argmin(np.nanmedian(data.cot_length[none_right], axis=1))]
    rows = [int(i) for i in order[[0, 40, 80, 120, -2, -1]]] + [int(shortest)]
    return data, rows


def _plain_2pl():
    rng = np.random.default_rng(3)
    J = 500
    return ItemBank.from_params("2pl", [f"math500/{j}" for j in range(J)], bank_id="plain",
                                a=rng.lognormal(0.0, 0.4, J), b=rng.normal(0.0, 1.2, J))


BANKS = {
    "lart": lambda: open_item_bank("item_banks/math500_lart/math500_lart_v12.nc"),
    "2pl": lambda: open_item_bank("item_banks/math500_2pl/math500_2pl_v12.nc"),
    "plain-2pl": _plain_2pl,
}
SELECTORS_TRIED = {
    "default": lambda: None,
    "mfi": lambda: SELECTORS["mfi"](),
    "randomised": lambda: RandomisedSelection(uniform_share=0.3, n_nodes=15),
    "doubly-robust-mfi": lambda: DoublyRobustSelection(adaptive=SELECTORS["mfi"](), share=0.25, opening=2,
                                                        extrapolation_share=0.75),
    # posterior-expected information over the items' (a, b): banks with item uncertainty only
    "pei": lambda: SELECTORS["pei"](),
    "doubly-robust-pei": lambda: DoublyRobustSelection(adaptive=SELECTORS["pei"](n_nodes=7), share=0.25, opening=2),
}
NEEDS_ITEM_UNCERTAINTY = {"pei", "doubly-robust-pei"}
ESTIMATORS = {
    "default": lambda: MAPEstimator(),
    "irt-only": lambda: MAPEstimator(use_cot=False),
    "sd-scale": lambda: MAPEstimator(sd_scale=1.3),
    "fixed-items-own-prior": lambda: MAPEstimator(item_uncertainty=False, prior=TraitPrior(0.3, 1.5, -0.2, 0.8, 0.4)),
}
CASES = [(b, s, e) for b in BANKS for s in SELECTORS_TRIED for e in ESTIMATORS
         if not (e == "irt-only" and b != "lart") and (e == "default" or s == "default")
         and not (s in NEEDS_ITEM_UNCERTAINTY and b == "plain-2pl")]
# the expected information without the estimator's item-uncertainty term (the selection still reads the bank's covariance)
CASES += [("2pl", "doubly-robust-pei", "fixed-items-own-prior")]


def _close(x, y, tol=1e-12):
    if x is None or y is None:
        return x is None and y is None
    if isinstance(x, str) or isinstance(x, bool):
        return x == y
    return math.isclose(x, y, rel_tol=tol, abs_tol=tol)


def _same_estimate(e, f):
    for name in ("theta", "theta_sd", "tau", "tau_sd", "theta_tau_cov", "theta_sd_fixed_items", "interval_factor",
                 "interval_z95", "n_items", "n_iter", "converged", "method", "interval_calibration"):
        assert _close(getattr(e, name), getattr(f, name)), (name, getattr(e, name), getattr(f, name))


@pytest.mark.parametrize("bank_name,selector_name,estimator_name", CASES)
def test_compiled_replay_gives_the_sessions_history(math500, bank_name, selector_name, estimator_name):
    data, rows = math500
    bank = BANKS[bank_name]()
    assert list(bank.item_ids) == [f"math500/{j}" for j in data.item_ids]
    selector, estimator = SELECTORS_TRIED[selector_name](), ESTIMATORS[estimator_name]()
    rng_session, rng_compiled = np.random.default_rng(11), np.random.default_rng(11)
    plan = CompiledReplay.for_session(CATSession(bank, selector=selector, estimator=estimator, rng=rng_compiled))
    assert plan is not None
    lart = bank.response_model == "lart"
    n_design = n_adaptive = 0
    for i in rows:
        y = data.correct[i].astype(float)
        cots = data.cot_length[i] if lart else None
        s = CATSession(bank, selector=selector, estimator=estimator, stopping=MaxItems(STEPS), rng=rng_session)
        for _ in range(STEPS):
            item = s.next_item()
            j = bank.index_of(item)
            s.record(item, int(y[j]), None if cots is None else float(cots[j]))
        run = plan.run(y, cots, STEPS, rng_compiled)
        history = plan.history(run, y, cots)
        assert [r.item for r in history] == [r.item for r in s.history]
        for mine, theirs in zip(history, s.history):
            assert (mine.step, mine.correct, mine.cot_length, mine.proposed, mine.design) == \
                (theirs.step, theirs.correct, theirs.cot_length, theirs.proposed, theirs.design)
            for name in ("theta", "theta_sd", "tau", "tau_sd", "criterion", "interval_factor", "interval_z95"):
                assert _close(getattr(mine, name), getattr(theirs, name)), (i, mine.step, name)
            assert (mine.draw is None) == (theirs.draw is None)
            if mine.draw is not None:
                assert (mine.draw.answered, mine.draw.selected) == (theirs.draw.answered, theirs.draw.selected)
                _same_estimate(mine.draw.estimate, theirs.draw.estimate)
        _same_estimate(plan.estimate(run, STEPS), s.estimate)
        lo, hi = s.estimate.interval(0.95)
        assert _close(plan.half_widths(run)[-1], hi - s.estimate.theta)
        # the design draws took the same uniforms and left the generator where the session left its own
        assert rng_compiled.bit_generator.state == rng_session.bit_generator.state
        n_design += int(run.design.sum())
        n_adaptive += int((~run.design).sum())
    if selector_name in ("mfi", "pei"):
        assert n_design == 0
    elif selector_name in ("randomised", "default"):  # the default draws every step by design
        assert n_adaptive == 0
    else:  # both kinds of step were compared
        assert n_design > 0 and n_adaptive > 0


@pytest.mark.parametrize("bank_name,side", [("2pl", "above"), ("lart", "above")])
def test_llms_beyond_the_population_reach_the_extrapolation_share(math500, bank_name, side):
    """Some of the LLMs compared above stand beyond the shipped bank's population by their answers
    against the calibration runs' answers to the same items (the strongest ones):
    with a design share of 1/4 inside and 1 beyond, every step after the opening at which the
    standing so far is flagged is a design draw, and such steps occur, so the comparison covered the
    switch to the extrapolation share."""
    from catengine.scoring.standing import extrapolation_flag
    from catengine.selection.doubly_robust import scheduled_design_draw

    data, rows = math500
    bank = BANKS[bank_name]()
    selector = DoublyRobustSelection(adaptive=SELECTORS["mfi"](), share=0.25, opening=2, extrapolation_share=1.0)
    plan = CompiledReplay.for_session(CATSession(bank, selector=selector, rng=0))
    population = plan.session.items.population
    assert population.responses is not None
    flagged_any = False
    for i in rows:
        y = data.correct[i].astype(float)
        cots = data.cot_length[i] if bank.response_model == "lart" else None
        run = plan.run(y, cots, STEPS, np.random.default_rng(0))
        for n in range(2, run.steps):
            flag = extrapolation_flag(population, run.estimates[0, n], run.items[:n], y[run.items[:n]])
            # the compiled standing agrees with the library's at every step: the schedule's share is 1
            # exactly where the flag fires
            assert run.design[n] == scheduled_design_draw(n, 1.0 if flag else 0.25), n
            if flag == side:
                assert run.design[n]
                flagged_any = True
    assert flagged_any


def test_unanswered_items_are_never_proposed_and_the_replay_stops_when_they_run_out(math500):
    data, rows = math500
    bank = BANKS["plain-2pl"]()
    plan = CompiledReplay.for_session(CATSession(bank, rng=0))
    y = data.correct[rows[2]].astype(float)
    y[np.random.default_rng(1).permutation(y.size)[:488]] = -1  # 12 answers left
    run = plan.run(y, None, STEPS, np.random.default_rng(2))
    assert run.steps == 12
    assert set(run.items.tolist()) == set(np.flatnonzero(y >= 0).tolist())


def test_configurations_it_does_not_reproduce_are_left_to_sessions():
    bank = _plain_2pl()
    assert CompiledReplay.for_session(CATSession(bank, estimator=EAPEstimator())) is None
    assert CompiledReplay.for_session(CATSession(bank, exposure=Randomesque(3))) is None
    assert CompiledReplay.for_session(CATSession(bank, selector=RandomisedSelection(weight="uniform"))) is None
    assert CompiledReplay.for_session(CATSession(bank, selector=SELECTORS["kl"]())) is None
    four = ItemBank.from_params("4pl", ["x", "y", "z"], bank_id="four", a=np.ones(3), b=np.zeros(3),
                                c=np.full(3, 0.1), d=np.full(3, 0.95))
    assert CompiledReplay.for_session(CATSession(four)) is None
    lart = BANKS["lart"]()
    s = CATSession(lart, selector=SELECTORS["mfi"]())
    s.record(s.next_item(), 1, 100.0)
    assert CompiledReplay.for_session(s) is None  # not a fresh session


def test_a_cot_length_a_session_refuses_is_refused_with_its_item(math500):
    data, rows = math500
    bank = BANKS["lart"]()
    plan = CompiledReplay.for_session(CATSession(bank, rng=0))
    cots = data.cot_length[rows[0]].copy()
    cots[7] = -3.0
    with pytest.raises(ValueError, match=r"-3\.0 of item 'math500/7'"):
        plan.run(data.correct[rows[0]].astype(float), cots, STEPS, np.random.default_rng(0))


def test_the_replay_audit_gives_the_same_figures_either_way(math500, monkeypatch):
    """``calibration.heldout.replay_llms`` (the held-out check's and replay audit's replays)
    with the compiled path and with sessions stepped in Python (``compiled=False``)."""
    from calibration.heldout import replay_llms

    data, rows = math500
    bank = BANKS["lart"]()
    selectors = [("default", None), ("mfi", SELECTORS["mfi"]())]
    args = (bank, data, rows, selectors, ["lart", "irt"], "map", 25, 1234, 0)
    calls = []
    original = CompiledReplay.run
    monkeypatch.setattr(CompiledReplay, "run", lambda self, *a: calls.append(1) or original(self, *a))
    fast = replay_llms(*args, keep_sessions=True)
    assert len(calls) == 2 * 2 * len(rows)  # every test of both selectors and scorings ran compiled
    slow = replay_llms(*args, keep_sessions=True, compiled=False)
    assert len(calls) == 2 * 2 * len(rows)
    for name in ("full", "full_sd", "est", "sd", "half"):
        np.testing.assert_allclose(fast[name], slow[name], rtol=1e-12, atol=1e-12, err_msg=name)
    for by_scoring_fast, by_scoring_slow in zip(fast["sessions"], slow["sessions"]):
        for mine, theirs in zip(by_scoring_fast, by_scoring_slow):
            for a, b in zip(mine, theirs):
                assert [r.item for r in a.history] == [r.item for r in b.history]
                assert [r.design for r in a.history] == [r.design for r in b.history]
                assert (a.bank, a.selector, a.estimator, a.cot_offset) == (b.bank, b.selector, b.estimator, b.cot_offset)


@pytest.mark.parametrize("bank_name,estimator_name", [("lart", "default"), ("lart", "irt-only"), ("2pl", "sd-scale"),
                                                      ("plain-2pl", "fixed-items-own-prior")])
def test_estimates_at_lengths_are_the_sessions_estimates_from_the_same_answers(math500, bank_name, estimator_name):
    """``CompiledReplay.estimates_at`` (the random tests of the interval check) against
    ``CATSession.estimate_from`` on each prefix of a random answer order: every field equal."""
    data, rows = math500
    bank = BANKS[bank_name]()
    session = CATSession(bank, selector=SELECTORS["random"](), estimator=ESTIMATORS[estimator_name]())
    plan = CompiledReplay.for_estimates(session)
    lengths = [1, 5, 10, 40, 100]
    ids = list(bank.item_ids)
    for i in rows[:4]:
        order = np.random.default_rng(i).permutation(np.flatnonzero(data.correct[i] >= 0))[:100]
        cots = data.cot_length[i] if bank.response_model == "lart" else None
        got = plan.estimates_at(order, data.correct[i], cots, lengths)
        for L, mine in zip(lengths, got):
            want = session.estimate_from([ids[j] for j in order[:L]], [int(data.correct[i, j]) for j in order[:L]],
                                         None if cots is None else [float(cots[j]) for j in order[:L]])
            _same_estimate(mine, want)
    assert CompiledReplay.for_estimates(CATSession(bank, estimator=EAPEstimator())) is None
