"""The default score (docs/math.md §7.8): the design-based estimate with the model as its control
variate, each draw's model weight tuned on the draws before it. Its pieces by hand, its
unbiasedness and variance by simulation, the standing by hand, and whole sessions under a right
and a deliberately wrong bank (tests/test_score_misspecification.py: banks fitted to data they
cannot represent)."""

import math

import numpy as np
import pytest
from scipy.special import expit

from catengine import CATSession, ItemBank
from catengine.scoring.design import design_estimate, design_terms, power_tuning, predictable_power_tuning
from catengine.scoring.doubly_robust import aipw_terms, known_before
from catengine.scoring.standing import MARGIN, Population, extrapolation_flag, standing, trait_standing
from catengine.selection import DoublyRobustSelection, RandomisedSelection, default_selector_for
from catengine.selection.doubly_robust import scheduled_design_draw
from catengine.session import from_config, to_config
from catengine.session.bank_log import item_table
from catengine.stopping import MaxItems


def bank_2pl(J, a, b, thetas=None):
    bank = ItemBank.from_params("2pl", [f"i{j:03d}" for j in range(J)], bank_id="dr", a=a, b=b)
    if thetas is not None:
        import xarray as xr

        thetas = np.asarray(thetas, dtype=float)
        bank = bank.with_group("subjects", xr.Dataset({"theta": ("subject", thetas),
                                                       "theta_sd": ("subject", np.full(thetas.size, 0.2))},
                                                      coords={"subject": [f"s{i}" for i in range(thetas.size)]}))
    return bank


# ---------------------------------------------------------------- the estimator's pieces, by hand

def test_each_draw_weighs_the_model_by_the_draws_known_before_it():
    rng = np.random.default_rng(0)
    without = rng.normal(0.6, 0.3, (8, 2))
    with_model = without + rng.normal(-0.1, 0.2, (8, 2))
    terms, lam = aipw_terms(without, with_model)
    want = [0.0, 0.0, 0.0] + [power_tuning(without[:t, 0], with_model[:t, 0]) for t in range(3, 8)]
    np.testing.assert_allclose(lam, want)  # the Horvitz-Thompson term until three draws are known
    np.testing.assert_allclose(terms, without + lam[:, None] * (with_model - without))
    # a draw's weight depends on the past only: changing the last draw changes no weight
    changed = with_model.copy()
    changed[-1] += 5.0
    np.testing.assert_array_equal(aipw_terms(without, changed)[1], lam)
    # in a batch, draws whose answers were not in when a draw was made are not known to it
    known = known_before(done=[1, 2, 3, 6, 6, 6, 7, 8], answered=[0, 1, 2, 3, 3, 3, 6, 7])
    assert known[3].tolist() == [True, True, True, False, False, False, False, False]
    assert known[6].tolist() == [True] * 6 + [False, False]
    np.testing.assert_array_equal(known_before(np.arange(1, 9), np.arange(8)), np.tri(8, 8, -1, dtype=bool))
    assert predictable_power_tuning(without[:, 0], with_model[:, 0], known)[4] == power_tuning(
        without[:3, 0], with_model[:3, 0])
    with pytest.raises(ValueError, match="one shape"):
        aipw_terms(without, with_model[:, :1])
    # an outcome whose Horvitz-Thompson terms are far noisier than the model's (token counts) opens
    # with the model's weight 1; the later weights are the same
    opened = aipw_terms(without, with_model, opening=1.0)[1]
    np.testing.assert_allclose(opened, [1.0, 1.0, 1.0] + want[3:])
    with pytest.raises(ValueError, match="opening"):
        predictable_power_tuning(without[:, 0], with_model[:, 0], opening=1.5)


# ---------------------------------------------------------------- the design part, by simulation

@pytest.mark.slow
def test_design_part_unbiased_with_its_variance_under_a_wrong_prediction():
    """A fixed LLM, predictions 0.25 too low on every item (the saturating model), 40 draws from 300
    items with sqrt-variance-like known probabilities, each draw's model weight tuned on the draws
    before it: over 2000 draws of the design the estimate is unbiased and its estimated variance
    matches the Monte-Carlo variance within 10%."""
    rng = np.random.default_rng(0)
    J, n, reps = 300, 40, 2000
    truth_p = expit(rng.normal(1.0, 1.5, J))
    y = (rng.random(J) < truth_p).astype(float)
    f = np.clip(truth_p - 0.25, 0.01, 0.99)  # a wrong model: under-predicts every item
    w = np.sqrt(f * (1 - f))
    est, se2 = np.empty(reps), np.empty(reps)
    for r in range(reps):
        remaining = np.ones(J, dtype=bool)
        order, prob = [], []
        for _ in range(n):
            pi = np.where(remaining, 0.5 * w / w[remaining].sum() + 0.5 / remaining.sum(), 0.0)
            cdf = np.cumsum(pi)
            j = min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")), J - 1)
            order.append(j)
            prob.append(pi[j] / cdf[-1])
            remaining[j] = False
        without = design_terms(order, y[order], np.ones(n, bool), prob, np.zeros((n, J)))
        with_model = design_terms(order, y[order], np.ones(n, bool), prob, np.tile(f, (n, 1)))
        terms = aipw_terms(without, with_model)[0][:, 0]
        e = design_estimate(terms, n_items=J)
        est[r], se2[r] = terms.mean(), e.se ** 2
    truth = y.mean()
    mc_se = est.std() / math.sqrt(reps)
    print(f"design: bias {est.mean() - truth:+.5f} (MC SE {mc_se:.5f}); mean se^2 / MC var {se2.mean() / est.var():.3f}")
    assert abs(est.mean() - truth) < 3 * mc_se
    assert abs(se2.mean() / est.var() - 1) < 0.10


# ---------------------------------------------------------------- whole sessions

def run(bank, y, n, selector=None, rng=None):
    selector = DoublyRobustSelection() if selector is None else selector
    s = CATSession(bank, selector=selector, stopping=MaxItems(n), rng=rng)
    while not s.finished:
        item = s.next_item()
        s.record(item, int(y[bank.index_of(item)]))
    return s


def test_doubly_robust_selector_schedules_design_draws_and_round_trips():
    J = 60
    rng = np.random.default_rng(1)
    bank = bank_2pl(J, rng.lognormal(0, 0.3, J), rng.normal(0, 1, J), thetas=rng.normal(0, 1, 80))
    sel = default_selector_for(item_table(bank))
    assert sel == DoublyRobustSelection()  # the default: every step a design draw
    assert from_config(to_config(sel)) == sel
    assert [scheduled_design_draw(t, 0.5) for t in range(6)] == [False, True, False, True, False, True]
    assert all(scheduled_design_draw(t, 1.0) for t in range(6))
    answers = (rng.random(J) < 0.5).astype(int)
    s = run(bank, answers, 12, selector=sel, rng=2)
    assert all(r.design for r in s.history)
    score = s.predicted_score(by=False)
    assert score.method == "doubly-robust" and score.n_design == 12
    assert (score.accuracy, score.low, score.high) == pytest.approx(
        tuple(getattr(s.predicted_score(method="design", by=False), k) for k in ("accuracy", "low", "high")))
    assert score.percentile is not None and 0 <= score.percentile <= 1
    # with half the steps adaptive: the opening draws, then the schedule (inside the population)
    half = run(bank, answers, 12, selector=DoublyRobustSelection(share=0.5), rng=2)
    assert [r.design for r in half.history] == [True] * 5 + [scheduled_design_draw(t, 0.5) for t in range(5, 12)]
    assert half.predicted_score(by=False).n_design == 5 + 4
    plain = run(bank, answers, 12, selector=DoublyRobustSelection(share=0.5, opening=0), rng=2)
    assert [r.design for r in plain.history] == [False, True] * 6
    with pytest.raises(ValueError, match="share"):
        DoublyRobustSelection(share=0.0)
    with pytest.raises(ValueError, match="at least share"):
        DoublyRobustSelection(share=0.6, extrapolation_share=0.5)
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="opening"):
            DoublyRobustSelection(opening=bad)
    with pytest.raises(TypeError, match="RandomisedSelection"):
        DoublyRobustSelection(design=DoublyRobustSelection())


def _band_flag_by_hand(runs, items, y):
    """The flag of the module docstring, written out loop by loop: the two runs (2 x 5% of 20,
    rounded up) with the lowest / highest accuracy over their answered items form the bands."""
    acc = {r: np.mean([runs[r, j] for j in range(runs.shape[1]) if runs[r, j] >= 0])
           for r in range(runs.shape[0]) if np.any(runs[r] >= 0)}
    ranked = sorted(acc, key=lambda r: acc[r])  # stable: ties keep the row order
    z = []
    for band in (ranked[:2], ranked[-2:]):
        num = var = 0.0
        for k, j in enumerate(items):
            answers = [runs[r, j] for r in band if runs[r, j] >= 0]
            if answers:
                q = (sum(answers) + 0.5) / (len(answers) + 1)
                num += y[k] - sum(answers) / len(answers)
                var += q * (1 - q)
        z.append(num / math.sqrt(var) if var > 0 else 0.0)
    up, down = z[1] - MARGIN, -z[0] - MARGIN
    return "above" if up > 0 and up >= down else "below" if down > 0 else ""


def test_standing_percentile_and_flag_by_hand():
    # from the calibration runs' answers to the session's items: 20 runs, 4 items
    runs = np.zeros((20, 6), dtype=np.int8)
    runs[:, :4] = (np.arange(20)[:, None] * np.array([1, 2, 3, 5]) % 7 < 3)
    runs[:, 0], runs[:, 3] = 1, 0  # every run solves item 0 and misses item 3
    runs[0, :] = -1  # a run with no answer at all: a tie
    runs[1, 2] = -1  # a run compared on the items it answered
    runs[:, 5] = -1  # an item no run answered
    pop = Population(np.linspace(-2, 2, 20), responses=runs)
    items, y = np.array([0, 1, 2, 3]), np.array([1, 1, 0, 1])
    d = [sum(y[k] - runs[r, j] for k, j in enumerate(items) if runs[r, j] >= 0) for r in range(20)]
    want = (sum(x > 0 for x in d) + 0.5 * sum(x == 0 for x in d)) / 20
    st = standing(pop, 0.0, items, y)
    assert st.percentile == pytest.approx(want) and st.n_calibration == 20
    cases = [(items, y), ([], []), ([0, 1, 3], [1, 1, 1]), ([0, 1, 3], [0, 0, 0]), ([0, 1, 2, 3], [0, 0, 0, 0]),
             ([1, 2], [1, 0]), ([2], [1]), ([4, 5], [1, 1]), ([5], [1])]
    flags = [standing(pop, 0.0, it, yy).extrapolation for it, yy in cases]
    assert flags == [_band_flag_by_hand(runs, it, yy) for it, yy in cases]
    assert {"above", "below", ""} <= set(flags)  # the cases reach every outcome
    assert standing(pop, 0.0, [], []).percentile == 0.5  # before any answer: every run ties
    assert standing(pop, 0.0, [0, 1, 3], [1, 1, 1]).percentile == pytest.approx(19.5 / 20)  # ahead of every run that answered
    assert standing(pop, 0.0, [0, 1, 3], [1, 1, 1]).extrapolation == "above"
    assert standing(pop, 0.0, [0, 1, 3], [0, 0, 0]).extrapolation == "below"
    assert standing(pop, 99.0, [0, 1, 2, 3], [0, 0, 0, 0]).extrapolation == "below"  # the trait does not enter
    assert standing(pop, 0.0, [5], [1]).extrapolation == ""  # an item no run answered: no evidence
    for items_, y_ in cases:
        assert extrapolation_flag(pop, 0.0, items_, y_) == standing(pop, 0.0, items_, y_).extrapolation
    # a bank that stores no answers: the trait among the calibration traits
    pop = Population(np.arange(100, dtype=float))  # traits 0..99: 5th / 95th percentiles 4.95 / 94.05
    assert standing(pop, 49.5).percentile == pytest.approx(0.5)
    assert trait_standing(pop, 50.0).percentile == pytest.approx(50.5 / 100)  # ties count half
    assert trait_standing(pop, 95.0).extrapolation == "above"
    assert trait_standing(pop, 4.0).extrapolation == "below"
    assert trait_standing(pop, 60.0).extrapolation == ""
    assert trait_standing(None, 1.0) is None and standing(None, 1.0) is None
    # the selectors' shortcut says what the standing says, at and beside both edges
    for theta in (-1.0, 4.0, 4.95, np.nextafter(4.95, 5.0), 50.0, np.nextafter(94.05, 94.0), 94.05, 95.0, 200.0):
        assert extrapolation_flag(pop, theta) == trait_standing(pop, theta).extrapolation, theta
    assert extrapolation_flag(None, 1.0) == extrapolation_flag(pop, math.nan) == extrapolation_flag(pop, None) == ""


def sessions_of(banks, thetas, a, b, n, rng, reps=2):
    """Per bank name: (default error, model-only error, interval held the truth, random mean's MAE,
    flagged) of default sessions of ``n`` items for LLMs of traits ``thetas`` (true 2PL items a, b)."""
    from catengine.scoring import random_mean_mae

    J = a.size
    out = {name: [] for name in banks}
    for theta in thetas:
        y = (rng.random(J) < expit(a * theta + b)).astype(int)
        truth = y.mean()
        for name, bank in banks.items():
            for _ in range(reps):
                s = run(bank, y, n, rng=rng)
                dr = s.predicted_score(by=False)
                model = s.predicted_score(method="model", by=False)
                assert dr.method == "doubly-robust"
                out[name].append((dr.accuracy - truth, model.accuracy - truth, dr.low <= truth <= dr.high,
                                  random_mean_mae(truth, J, n), bool(dr.extrapolation)))
    return {name: np.array(v, dtype=float) for name, v in out.items()}


def wrong_and_right(rng, J=200, n_calibration=150):
    """A true 2PL bank and a grossly wrong one: half of the items, in truth ordinary 2PL items,
    carry in the bank a slope of 0.05 and a 30% success rate whatever the trait (the saturating
    prediction, about 25 points too low for a strong LLM). Calibration traits N(0, 1), their
    answers (from the true items) stored in both banks."""
    import xarray as xr

    a = rng.lognormal(0.0, 0.3, J)
    b = rng.normal(0.0, 1.2, J)
    thetas = rng.normal(0, 1, n_calibration)
    answers = (rng.random((n_calibration, J)) < expit(np.outer(thetas, a) + b)).astype(np.int8)
    responses = xr.Dataset({"correct": (("subject", "item"), answers)},
                           coords={"subject": [f"s{i}" for i in range(n_calibration)], "item": [f"i{j:03d}" for j in range(J)]})
    flat = np.arange(J) % 2 == 1
    banks = {"right": bank_2pl(J, a, b, thetas=thetas),
             "wrong": bank_2pl(J, np.where(flat, 0.05, a), np.where(flat, math.log(0.3 / 0.7), b), thetas=thetas)}
    return {name: bank.with_group("responses", responses) for name, bank in banks.items()}, a, b, float(thetas.max())


@pytest.mark.slow
def test_inside_the_population_a_right_model_makes_the_score_beat_random_items():
    """LLMs inside the calibration population (traits within its middle 80%), the right bank: the
    default score errs no more than the mean of as many random items (up to 2 Monte-Carlo SEs; with
    these weakly discriminating items the gain of the model as control variate is small), its
    intervals cover and the flag rarely fires; 100 LLMs x 2 default sessions of 50 items from 200."""
    rng = np.random.default_rng(5)
    banks, a, b, _ = wrong_and_right(rng)
    r = sessions_of({"right": banks["right"]}, rng.uniform(-1.2, 1.2, 100), a, b, 50, rng)["right"]
    mae, mae_model, rand = np.abs(r[:, 0]).mean(), np.abs(r[:, 1]).mean(), r[:, 3].mean()
    per_llm = np.abs(r[:, 0]).reshape(-1, 2).mean(axis=1)
    mc_se = per_llm.std(ddof=1) / math.sqrt(per_llm.size)
    print(f"inside, right bank: MAE default {mae:.4f}, model {mae_model:.4f}, random items {rand:.4f}, "
          f"cover {r[:, 2].mean():.3f}, flagged {r[:, 4].mean():.2f}")
    assert mae <= rand + 2 * mc_se
    assert r[:, 2].mean() >= 0.90
    assert r[:, 4].mean() <= 0.10


@pytest.mark.slow
def test_beyond_the_population_the_score_is_unbiased_and_never_worse_than_random_items():
    """LLMs stronger than every calibration LLM (traits 0.2-1.0 above the strongest of 150 calibration
    traits N(0, 1)), 30 LLMs x 2 default sessions of 50 items from 200. The extrapolation flag (their answers against
    the calibration runs' answers to the same items) fires for at least 90% of the sessions; with
    the grossly wrong bank (the model alone 15+ points too low) and with the right one the score is
    unbiased (within 3 Monte-Carlo SEs) and its error is at most that of the mean of as many random
    items (exact expected MAE, up to 2 Monte-Carlo SEs of the sessions' MAE). Every session's
    interval covers at least 90% of the time."""
    rng = np.random.default_rng(6)
    banks, a, b, strongest = wrong_and_right(rng)
    res = sessions_of(banks, strongest + rng.uniform(0.2, 1.0, 30), a, b, 50, rng)
    for name, r in res.items():
        err, merr, cover, rand, flag = r.T
        print(f"beyond, {name} bank: flagged {flag.mean():.2f}; MAE default {np.abs(err).mean():.4f} (bias "
              f"{err.mean():+.4f}), model {np.abs(merr).mean():.4f} (bias {merr.mean():+.4f}), random items "
              f"{rand.mean():.4f}; cover {cover.mean():.3f}")
    for name, r in res.items():
        err, merr, cover, rand, flag = r.T
        assert flag.mean() >= 0.90
        assert cover.mean() >= 0.90
        per_llm = np.abs(err).reshape(-1, 2).mean(axis=1)  # the two sessions of an LLM together
        mc_se = per_llm.std(ddof=1) / math.sqrt(per_llm.size)
        assert np.abs(err).mean() <= rand.mean() + 2 * mc_se
        assert abs(err.mean()) < 3 * err.std(ddof=1) / math.sqrt(err.size)
        if name == "wrong":
            assert merr.mean() < -0.15  # the wrong bank under-predicts; the score does not follow it


def test_randomised_sessions_keep_the_design_estimate():
    J = 50
    rng = np.random.default_rng(2)
    bank = bank_2pl(J, rng.lognormal(0, 0.3, J), rng.normal(0, 1, J))
    s = run(bank, (rng.random(J) < 0.6).astype(int), 10, selector=RandomisedSelection(), rng=3)
    assert all(r.design for r in s.history)
    assert s.predicted_score(by=False).method == "design"
