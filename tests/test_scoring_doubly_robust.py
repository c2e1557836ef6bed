"""The doubly robust default score (docs/math.md §7.8): the combination rule by closed forms, the
design part's unbiasedness and variance by simulation, and whole sessions under a right and a
deliberately wrong bank."""

import math

import numpy as np
import pytest
from scipy.special import expit
from scipy.stats import t as student_t

from catengine import CATSession, ItemBank
from catengine.scoring.design import design_estimate, design_terms
from catengine.scoring.doubly_robust import EVIDENCE, combine_model_and_design
from catengine.scoring.standing import Population, extrapolation_flag, trait_standing
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


# ---------------------------------------------------------------- the combination rule, closed forms

def test_agreement_keeps_the_model_and_its_interval():
    # d^2 = 0.0004 <= P + s^2 = 0.0009 + 0.0025: weight 0, the model's estimate and interval
    e = combine_model_and_design(0.60, 0.03, 0.54, 0.66, 0.62, 0.05, 20, bounds=(0, 1))
    assert e.weight == 0.0 and e.mean == pytest.approx(0.60)
    assert e.low <= 0.54 + 1e-12 and e.high >= 0.66 - 1e-12


def test_disagreement_moves_to_the_design_and_widens():
    P, s, n = 0.03**2, 0.04, 25
    d = 0.20  # five times the design's SE
    e = combine_model_and_design(0.70, 0.03, 0.64, 0.76, 0.90, s, n, bounds=(0, 1))
    assert e.weight == pytest.approx(1 - EVIDENCE**2 * (P + s * s) / d**2)
    assert e.mean == pytest.approx(0.70 + e.weight * d)
    # the precision-weighted interval: P_e = d^2 - s^2
    P_e = d * d - s * s
    centre = 0.70 + P_e / (P_e + s * s) * d
    half = student_t.ppf(0.975, n - 1) * math.sqrt(P_e * s * s / (P_e + s * s))
    assert e.high == pytest.approx(centre + half)
    assert e.low == pytest.approx(min(0.64, centre - half))
    assert e.low <= 0.90 <= e.high  # holds the design estimate
    widths = [combine_model_and_design(0.70, 0.03, 0.64, 0.76, 0.70 + dd, s, n).high
              - combine_model_and_design(0.70, 0.03, 0.64, 0.76, 0.70 + dd, s, n).low for dd in (0.0, 0.05, 0.1, 0.2)]
    assert all(b >= a - 1e-12 for a, b in zip(widths, widths[1:]))  # wider the more they disagree


def test_extrapolating_takes_the_design_estimate_and_holds_its_interval():
    P, s, n = 0.03**2, 0.05, 25
    e = combine_model_and_design(0.70, 0.03, 0.64, 0.76, 0.80, s, n, bounds=(0, 1), extrapolating=True)
    q = student_t.ppf(0.975, n - 1)
    assert e.weight == 1.0 and e.mean == pytest.approx(0.80)
    # the hull of the precision-weighted combination's interval and the design's, not the model's
    d = 0.10
    P_e = max(P, d * d - s * s)
    centre, half = 0.70 + P_e / (P_e + s * s) * d, q * math.sqrt(P_e * s * s / (P_e + s * s))
    assert e.low == pytest.approx(min(centre - half, 0.80 - q * s)) and e.high == pytest.approx(max(centre + half, 0.80 + q * s))
    assert e.low > 0.64  # the model's interval [0.64, 0.76] is not part of it
    inside = combine_model_and_design(0.70, 0.03, 0.64, 0.76, 0.80, s, n, bounds=(0, 1))
    assert inside.weight == 0.0  # inside the population: 2 SDs of disagreement not reached
    assert inside.low == pytest.approx(0.64) and inside.high == pytest.approx(max(0.76, centre + half))


def test_bounds_project_and_bad_input_is_named():
    e = combine_model_and_design(0.95, 0.03, 0.89, 1.0, 1.05, 0.05, 25, bounds=(0.2, 0.99))
    assert e.high <= 0.99 and e.mean <= 0.99
    with pytest.raises(ValueError, match="at least 2 design draws"):
        combine_model_and_design(0.5, 0.1, 0.3, 0.7, 0.5, 0.1, 1)
    with pytest.raises(ValueError, match="finite"):
        combine_model_and_design(math.nan, 0.1, 0.3, 0.7, 0.5, 0.1, 5)


# ---------------------------------------------------------------- the design part, by simulation

@pytest.mark.slow
def test_design_part_unbiased_with_its_variance_under_a_wrong_prediction():
    """A fixed LLM, predictions 0.25 too low on every item (the saturating model), 40 draws from 300
    items with sqrt-variance-like known probabilities: over 2000 draws of the design the estimate is
    unbiased and its estimated variance matches the Monte-Carlo variance within 10%."""
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
        terms = design_terms(order, y[order], np.ones(n, bool), prob, np.tile(f, (n, 1)))[:, 0]
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
    assert sel == DoublyRobustSelection()  # the default
    assert from_config(to_config(sel)) == sel
    assert [scheduled_design_draw(t, 0.5) for t in range(6)] == [False, True, False, True, False, True]
    assert all(scheduled_design_draw(t, 1.0) for t in range(6))
    answers = (rng.random(J) < 0.5).astype(int)
    s = run(bank, answers, 12, selector=sel, rng=2)
    # the opening draws, then the schedule (these answers keep the LLM inside the population)
    assert sel.opening == 5
    assert [r.design for r in s.history] == [True] * 5 + [scheduled_design_draw(t, 0.5) for t in range(5, 12)]
    score = s.predicted_score(by=False)
    assert score.method == "doubly-robust" and score.n_design == 5 + 4
    plain = run(bank, answers, 12, selector=DoublyRobustSelection(opening=0), rng=2)
    assert [r.design for r in plain.history] == [False, True] * 6
    assert score.percentile is not None and 0 <= score.percentile <= 1
    with pytest.raises(ValueError, match="share"):
        DoublyRobustSelection(share=0.0)
    with pytest.raises(ValueError, match="at least share"):
        DoublyRobustSelection(share=0.6, extrapolation_share=0.5)
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="opening"):
            DoublyRobustSelection(opening=bad)
    with pytest.raises(TypeError, match="RandomisedSelection"):
        DoublyRobustSelection(design=DoublyRobustSelection())


def test_standing_percentile_and_flag_by_hand():
    pop = Population(np.arange(100, dtype=float))  # traits 0..99: 5th / 95th percentiles 4.95 / 94.05
    assert trait_standing(pop, 49.5).percentile == pytest.approx(0.5)
    assert trait_standing(pop, 50.0).percentile == pytest.approx(50.5 / 100)  # ties count half
    assert trait_standing(pop, 95.0).extrapolation == "above"
    assert trait_standing(pop, 4.0).extrapolation == "below"
    assert trait_standing(pop, 60.0).extrapolation == ""
    assert trait_standing(None, 1.0) is None
    # the selectors' shortcut says what the standing says, at and beside both edges
    for theta in (-1.0, 4.0, 4.95, np.nextafter(4.95, 5.0), 50.0, np.nextafter(94.05, 94.0), 94.05, 95.0, 200.0):
        assert extrapolation_flag(pop, theta) == trait_standing(pop, theta).extrapolation, theta
    assert extrapolation_flag(None, 1.0) == extrapolation_flag(pop, math.nan) == extrapolation_flag(pop, None) == ""


def sessions_of(banks, thetas, a, b, n, rng, reps=2):
    """Per bank name: (doubly robust error, model-only error, interval held the truth, random mean's MAE)
    of default-selection sessions of ``n`` items for LLMs of traits ``thetas`` (true 2PL items a, b)."""
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
    prediction, about 25 points too low for a strong LLM). Calibration traits N(0, 1)."""
    a = rng.lognormal(0.0, 0.3, J)
    b = rng.normal(0.0, 1.2, J)
    thetas = rng.normal(0, 1, n_calibration)
    flat = np.arange(J) % 2 == 1
    banks = {"right": bank_2pl(J, a, b, thetas=thetas),
             "wrong": bank_2pl(J, np.where(flat, 0.05, a), np.where(flat, math.log(0.3 / 0.7), b), thetas=thetas)}
    return banks, a, b


@pytest.mark.slow
def test_inside_the_population_a_right_model_keeps_its_error():
    """LLMs inside the calibration population (traits within its middle 80%): with the right bank
    the doubly robust error is within 10% of the model-only error on the same sessions, and the
    intervals cover; 40 LLMs x 2 default sessions of 50 items from 200."""
    rng = np.random.default_rng(5)
    banks, a, b = wrong_and_right(rng)
    r = sessions_of({"right": banks["right"]}, rng.uniform(-1.2, 1.2, 40), a, b, 50, rng)["right"]
    mae_dr, mae_model = np.abs(r[:, 0]).mean(), np.abs(r[:, 1]).mean()
    print(f"inside, right bank: MAE doubly robust {mae_dr:.4f}, model {mae_model:.4f}, cover {r[:, 2].mean():.3f}, "
          f"flagged {r[:, 4].mean():.2f}")
    assert mae_dr <= 1.10 * mae_model
    assert r[:, 2].mean() >= 0.90


@pytest.mark.slow
def test_beyond_the_population_the_score_is_unbiased_and_never_worse_than_random_items():
    """LLMs stronger than every calibration LLM (trait 2.5 +- 0.3 against calibration traits N(0, 1)),
    30 LLMs x 2 default sessions of 50 items from 200. The extrapolation flag fires for at least 90%
    of the sessions, and for those the score is the design estimate: with the grossly wrong bank
    (the model alone 15+ points too low) it is unbiased (within 3 Monte-Carlo SEs) and its error is
    at most that of the mean of as many random items (exact expected MAE, up to 2 Monte-Carlo SEs of
    the sessions' MAE); with the right bank it is within 10% of the better of the model alone and
    random items. Every session's interval (flagged or not) covers at least 90% of the time."""
    rng = np.random.default_rng(6)
    banks, a, b = wrong_and_right(rng)
    res = sessions_of(banks, rng.normal(2.5, 0.3, 30), a, b, 50, rng)
    for name, r in res.items():
        err, merr, cover, rand, flag = r.T
        f = flag.astype(bool)
        print(f"beyond, {name} bank: flagged {f.mean():.2f}; flagged sessions: MAE doubly robust {np.abs(err[f]).mean():.4f} "
              f"(bias {err[f].mean():+.4f}), model {np.abs(merr[f]).mean():.4f} (bias {merr[f].mean():+.4f}), random items "
              f"{rand[f].mean():.4f}; all sessions cover {cover.mean():.3f}")
    for name, r in res.items():
        err, merr, cover, rand, flag = r.T
        f = flag.astype(bool)
        assert f.mean() >= 0.90
        assert cover.mean() >= 0.90
        per_llm = np.abs(err).reshape(-1, 2)[f.reshape(-1, 2).all(axis=1)].mean(axis=1)  # the two sessions of an LLM together
        mc_se = per_llm.std(ddof=1) / math.sqrt(per_llm.size)
        mae = np.abs(err[f]).mean()
        if name == "right":
            assert mae <= 1.10 * min(np.abs(merr[f]).mean(), rand[f].mean()) + 2 * mc_se
        else:
            assert merr[f].mean() < -0.15  # the wrong bank under-predicts
            assert mae <= rand[f].mean() + 2 * mc_se
            assert abs(err[f].mean()) < 3 * err[f].std(ddof=1) / math.sqrt(f.sum())


def test_randomised_sessions_keep_the_design_estimate():
    J = 50
    rng = np.random.default_rng(2)
    bank = bank_2pl(J, rng.lognormal(0, 0.3, J), rng.normal(0, 1, J))
    s = run(bank, (rng.random(J) < 0.6).astype(int), 10, selector=RandomisedSelection(), rng=3)
    assert all(r.design for r in s.history)
    assert s.predicted_score(by=False).method == "design"


def test_combined_interval_of_a_right_model_covers_at_least_nominal_without_the_few_draws_penalty():
    """A right model (M ~ Normal(A, P), P known from the bank's check) and n design terms
    D_t ~ Normal(A, sigma^2): the doubly robust interval covers A at least as often as the model's
    interval (0.95). Where the design is noisier than the model (a short test), the combination's
    Welch-Satterthwaite degrees of freedom keep it below 0.985 (n - 1 degrees of freedom gave
    0.994 with 5 draws). A closed-form check of the degrees of freedom beside it."""
    from scipy.stats import t as t_dist

    rng = np.random.default_rng(3)
    A, P = 0.6, 0.03**2
    reps = 20000
    for n in (5, 10):
        for ratio in (1.0, 4.0, 16.0):  # the design estimate's variance sigma^2 / n over P
            sigma = math.sqrt(ratio * P * n)
            M = A + math.sqrt(P) * rng.standard_normal(reps)
            D = A + sigma * rng.standard_normal((reps, n))
            Dbar, se = D.mean(axis=1), D.std(axis=1, ddof=1) / math.sqrt(n)
            covered = 0
            for m, dm, s in zip(M, Dbar, se):
                e = combine_model_and_design(m, math.sqrt(P), m - 1.959964 * math.sqrt(P), m + 1.959964 * math.sqrt(P),
                                             dm, s, n)
                covered += e.low <= A <= e.high
            cov = covered / reps
            print(f"n={n} design var / P={ratio}: coverage {cov:.4f}")
            assert cov >= 0.95, (n, ratio, cov)
            if ratio >= 4.0:
                assert cov <= 0.985, (n, ratio, cov)
    # agreement (P_e = P): the combination's half-width uses (n - 1)(1 + s^2 / P)^2 degrees of freedom
    n, s = 5, 0.06
    # d^2 - s^2 < P: P_e = P; a narrow model interval, so that the combination's ends are the interval's
    e = combine_model_and_design(0.60, 0.03, 0.59, 0.61, 0.62, s, n)
    nu = (n - 1) * (1 + s * s / 0.03**2) ** 2
    half = t_dist.ppf(0.975, nu) * math.sqrt(0.03**2 * s * s / (0.03**2 + s * s))
    centre = 0.60 + 0.03**2 / (0.03**2 + s * s) * 0.02
    assert e.low == pytest.approx(centre - half) and e.high == pytest.approx(centre + half)
    assert half < t_dist.ppf(0.975, n - 1) * math.sqrt(0.03**2 * s * s / (0.03**2 + s * s))
