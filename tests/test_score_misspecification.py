"""The default score under a deliberately wrong bank (docs/math.md §7.8), by simulation.

Banks are fitted as 2PL by cBMM, with every default but the interval check (the score's
unbiasedness does not depend on the model, and the check's refits would take most of this file's
time), on calibration LLMs whose answers come from models a 2PL cannot represent:

* ``guess``: guessing floors and ceilings, P = c + (d - c) logistic(a theta + b), c ~ U(0.15, 0.3),
  d ~ U(0.85, 1) (multiple-choice items);
* ``twofactor``: a second, independent ability, P = logistic(a theta + g eta + b);
* ``shuffled``: the ``guess`` answers with the items' columns shuffled before fitting, so that every
  item of the bank carries another item's parameters.

One fixed LLM inside the calibration population and one stronger than every calibration LLM answer
each world's items; the design draws are the only randomness, so the target is each LLM's own
full-benchmark accuracy. Checked over default sessions of 25 items: the default estimate's bias is
within Monte-Carlo error of zero, the martingale variance estimate sum_t w_t^2 (D_t - A^)^2 /
(1 - sum_t w_t^2) matches the Monte-Carlo variance of the estimate, and the reported 95% intervals hold the truth
0.93-0.97 of the time, after 25 answers and after 10. And the extrapolation flag, from the session's answers against the answer
rates of the calibration runs' top and bottom tenths on the same items, fires for LLMs beyond the
calibration maximum and rarely for those inside the middle 80%. Larger runs: ``python benchmarks/score_misspecification.py``.
"""

import math

import numpy as np
import pytest

from catengine import CATSession
from catengine.scoring.design import draw_weights
from catengine.scoring.standing import standing
from catengine.session.fast_replay import CompiledReplay
from catengine.session.scoring import design_parts
from catengine.stopping import MaxItems
from misspecified_worlds import J, WORLDS, fitted_bank, truth_model, world

N_ITEMS_ASKED, REPS = 25, 400
LENGTHS = (10, N_ITEMS_ASKED)  # the scores are read after 10 and 25 answers


@pytest.fixture(scope="module")
def sessions():
    """Per (world, inside / beyond): the LLM's accuracy and, per session, the reported estimate and
    interval, the mean of the design terms and their martingale variance estimate."""
    out = {}
    for w, kind in enumerate(WORLDS):
        bank, p, rng, strongest = world(kind, 10 + w)
        for where, theta in (("inside", 0.3), ("beyond", strongest + 0.8)):
            y = (rng.random(J) < p(np.array(theta), np.array(-0.5))).astype(int)
            rows = {n: [] for n in LENGTHS}
            for r in range(REPS):
                s = CATSession(bank, stopping=MaxItems(N_ITEMS_ASKED), rng=[w, r])
                while not s.finished:
                    item = s.next_item()
                    s.record(item, int(y[bank.index_of(item)]))
                    if len(s.history) not in rows:
                        continue
                    score = s.predicted_score(by=False)
                    terms = design_parts(s, by=False)["terms"][:, 0]
                    weights = draw_weights(terms.size, J)
                    raw = float(terms @ weights)  # the estimate before its projection onto the attainable range
                    rows[len(s.history)].append((score.accuracy, score.low, score.high, raw,
                                                 np.sum(weights**2 * (terms - raw) ** 2) / (1 - np.sum(weights**2))))
            out[kind, where] = (float(y.mean()), {n: np.array(v) for n, v in rows.items()})
    return out


def test_the_default_score_is_unbiased_with_an_honest_variance_under_wrong_banks(sessions):
    """Bias within 3 Monte-Carlo SEs in each of the six cases and within 2 pooled over the three
    worlds, inside and beyond the calibration range; the variance estimate within 10% of the
    Monte-Carlo variance (their ratio averaged over the cases; each case within 25%: with
    inverse-probability weights the variance of 400 sessions is itself uncertain by 10% and more);
    coverage 0.93-0.97 pooled, at least 0.92 in each case."""
    z = {"inside": [], "beyond": []}
    ratios, covered = [], []
    for (kind, where), (truth, by_length) in sessions.items():
        est, low, high, raw, se2 = by_length[N_ITEMS_ASKED].T
        mc_se = est.std(ddof=1) / math.sqrt(est.size)
        bias = est.mean() - truth
        ratio = se2.mean() / raw.var(ddof=1)
        cover = np.mean((low <= truth) & (truth <= high))
        print(f"{kind:9s} {where:6s} accuracy {truth:.3f}: bias {bias:+.4f} ({bias / mc_se:+.2f} MC SEs), "
              f"variance estimate / MC variance {ratio:.3f}, coverage {cover:.3f}")
        assert abs(bias) < 3 * mc_se, (kind, where)
        assert 0.75 < ratio < 1.25, (kind, where)
        assert cover >= 0.92, (kind, where)
        z[where].append(bias / mc_se)
        ratios.append(ratio)
        covered.append(cover)
    for where, values in z.items():
        assert abs(sum(values) / math.sqrt(len(values))) < 2, where
    assert abs(np.mean(ratios) - 1) < 0.10
    assert 0.93 <= np.mean(covered) <= 0.97


def test_short_tests_hold_the_nominal_coverage_inside_and_beyond(sessions):
    """After 10 answers the intervals hold the truth 0.93-0.97 of the time pooled over the six cases
    and 0.92-0.985 in each: neither too short for an LLM inside the population nor too long for one
    beyond it. The interval inverts the test of each hypothesised accuracy with the variance under
    that hypothesis (docs/math.md §7.8); an interval of the model's variance at its own prediction,
    pooled with the draws', held 0.997-1.000 beyond the population after 10 answers (its variance
    1.9-2.6 times the Monte-Carlo one), the draws' variance alone 0.55-0.70."""
    covered = []
    for (kind, where), (truth, by_length) in sessions.items():
        est, low, high, raw, se2 = by_length[10].T
        cover = float(np.mean((low <= truth) & (truth <= high)))
        print(f"{kind:9s} {where:6s} accuracy {truth:.3f}: coverage after 10 answers {cover:.3f}, "
              f"mean width {np.mean(high - low):.3f}")
        assert 0.92 <= cover <= 0.985, (kind, where)
        covered.append(cover)
    assert 0.93 <= np.mean(covered) <= 0.97


def test_the_score_of_an_llm_beyond_the_population_is_not_held_by_the_model(sessions):
    """The failure the estimator exists to avoid: for the LLM stronger than every calibration LLM the
    model alone predicts far too low, and the default estimate does not follow it."""
    bank, p, rng, strongest = world("guess", 10)
    truth, by_length = sessions["guess", "beyond"]
    rows = by_length[N_ITEMS_ASKED]
    y = (rng.random(J) < p(np.array(strongest + 0.8))).astype(int)
    s = CATSession(bank, stopping=MaxItems(N_ITEMS_ASKED), rng=0)
    while not s.finished:
        item = s.next_item()
        s.record(item, int(y[bank.index_of(item)]))
    model = s.predicted_score(method="model", by=False)
    assert model.accuracy < y.mean() - 0.05  # the saturating model
    assert abs(rows[:, 0].mean() - truth) < 0.01


def flagged(kind, seed, n_items=N_ITEMS_ASKED):
    """The extrapolation flags of simulated LLMs: (flags of the LLMs beyond the calibration maximum of
    a bank from the LLMs below the 60th accuracy percentile, tested above the 85th; flags of the
    LLMs inside the middle 80% of a bank from a random 60%), 400 LLMs x 300 items, one default
    test of ``n_items`` each (the compiled replay of the default session, scored as the session's
    standing: its answers against the calibration runs' bands on the same items)."""
    rng = np.random.default_rng(seed)
    n, n_items_bank = 400, 300
    p = truth_model("guess" if kind == "guess" else "twofactor", rng, n_items_bank)
    y = (rng.random((n, n_items_bank)) < p(rng.normal(0.0, 1.0, n), rng.normal(0.0, 1.0, n))).astype(np.int8)
    accuracy = y.mean(axis=1)
    ids = [f"q{j:03d}" for j in range(n_items_bank)]

    def flags(train, test):
        bank = fitted_bank(y[train], ids)
        plan = CompiledReplay.for_session(CATSession(bank, rng=0))
        population = plan.session.items.population
        out = []
        for i in test:
            run = plan.run(y[i].astype(float), None, n_items, np.random.default_rng([seed, int(i)]))
            out.append(standing(population, run.estimates[0, -1], run.items, y[i][run.items]).extrapolation)
        return np.array(out), accuracy[train], bank

    lo60, hi85 = np.quantile(accuracy, [0.60, 0.85])
    f, cal, bank = flags(np.flatnonzero(accuracy < lo60), np.flatnonzero(accuracy > hi85))
    beyond = f[accuracy[accuracy > hi85] > cal.max()]
    perm = rng.permutation(n)
    f, cal, _ = flags(perm[:240], perm[240:])
    acc = accuracy[perm[240:]]
    middle = f[(acc >= np.quantile(cal, 0.1)) & (acc <= np.quantile(cal, 0.9))]
    return beyond, middle, bank, y


def test_the_flag_fires_beyond_the_calibration_maximum_and_rarely_inside():
    """>= 90% of the LLMs beyond the calibration maximum flagged, <= 10% of those inside the middle
    80%, after 25 items, pooled over a guessing and a two-factor world (about 120 LLMs beyond, 260
    inside); the session reports the same flag as the replay's standing."""
    beyond, middle = [], []
    for kind, seed in (("guess", 1), ("twofactor", 2)):
        b, m, bank, y = flagged(kind, seed)
        print(f"{kind}: flagged {np.mean(b != ''):.3f} of {b.size} beyond the maximum, {np.mean(m != ''):.3f} of "
              f"{m.size} inside the middle 80%")
        beyond.append(b)
        middle.append(m)
    beyond, middle = np.concatenate(beyond), np.concatenate(middle)
    assert np.all(beyond[beyond != ""] == "above")
    assert np.mean(beyond != "") >= 0.90
    assert np.mean(middle != "") <= 0.10
    # a session of the last bank gives the replay's standing
    s = CATSession(bank, stopping=MaxItems(N_ITEMS_ASKED), rng=0)
    row = y[int(np.argmax(y.mean(axis=1)))]
    while not s.finished:
        item = s.next_item()
        s.record(item, int(row[bank.index_of(item)]))
    score = s.predicted_score(by=False)
    order = np.array([bank.index_of(r.item) for r in s.history])
    want = standing(s.items.population, s.estimate.theta, order, row[order])
    assert (score.percentile, score.extrapolation) == (want.percentile, want.extrapolation)


def test_category_intervals_hold_for_small_categories_under_a_wrong_bank():
    """The guessing world with its items in categories of 15 / 35 / 60 / 90 items: after 25 answers
    every category's interval holds its accuracy at least 0.92 of the time, for the LLM inside the
    calibration population and the one beyond it (200 sessions each). A category of 15 items gets
    one or two draws in 25; the pooled variance, read at the model's own prediction, held the
    15-item category's accuracy 0.86-0.90 of the time here (400 sessions,
    ``benchmarks/score_misspecification.py --categories 400``)."""
    bank, p, rng, strongest = world("guess", 10, categories=True)
    area = bank.item_metadata("area")
    for where, theta in (("inside", 0.3), ("beyond", strongest + 0.8)):
        y = (rng.random(J) < p(np.array(theta), np.array(-0.5))).astype(int)
        truth = {c: float(y[area == c].mean()) for c in np.unique(area)}
        held = {c: [] for c in truth}
        for r in range(200):
            s = CATSession(bank, stopping=MaxItems(N_ITEMS_ASKED), rng=[0, r])
            while not s.finished:
                item = s.next_item()
                s.record(item, int(y[bank.index_of(item)]))
            for c, e in s.predicted_score(by="area").by_category.items():
                held[c].append(e.low <= truth[c] <= e.high)
        cover = {c: float(np.mean(v)) for c, v in held.items()}
        print(where, {c: round(v, 3) for c, v in cover.items()})
        assert min(cover.values()) >= 0.92, (where, cover)
