"""The design-based full-benchmark estimate (docs/math.md §7.7, without replacement) and the randomised
selector: exact unbiasedness by enumeration, coverage by simulation, and a deliberately wrong bank
where the model-based interval fails and the design-based one holds."""

import itertools
import math

import numpy as np
import pytest
from scipy.special import expit

from catengine import CATSession, ItemBank
from catengine.scoring import DesignNotRandomisedError, design_estimate, design_terms
from catengine.selection import MaxFisherInformation, Randomesque, RandomisedSelection
from catengine.selection.base import SelectionState
from catengine.session import from_config, to_config
from catengine.stopping import MaxItems


def bank_2pl(J, seed=0, a=None, b=None):
    rng = np.random.default_rng(seed)
    a = rng.lognormal(0.2, 0.3, J) if a is None else a
    b = rng.normal(0, 1, J) if b is None else b
    meta = {"kind": np.array(["x", "y"])[np.arange(J) % 2]}
    return ItemBank.from_params("2pl", [f"i{j:03d}" for j in range(J)], bank_id="d", a=a, b=b, item_metadata=meta)


def test_design_terms_by_hand():
    # J = 3, first draw item 1 (pi 0.5), then item 0 (pi 0.25); predictions f1 and f2
    y = np.array([1.0, 0.0, 1.0])
    f1 = np.array([0.6, 0.3, 0.8])
    f2 = np.array([0.5, 0.2, 0.9])
    d = design_terms([1, 0], y[[1, 0]], [True, True], [0.5, 0.25], np.array([f1, f2]))[:, 0]
    d1 = (f1.sum() + (0.0 - 0.3) / 0.5) / 3
    d2 = (0.0 + 0.5 + 0.9 + (1.0 - 0.5) / 0.25) / 3  # item 1 now known (y = 0); item 0 drawn
    assert d == pytest.approx([d1, d2], abs=1e-15)
    e = design_estimate(d, n_items=3)
    assert e.mean == pytest.approx((d1 + d2) / 2)
    assert e.se == pytest.approx(abs(d1 - d2) / 2)  # sum of squares / (n (n - 1)) with n = 2


def test_exactly_unbiased_with_an_unbiased_variance_by_enumeration():
    """All ordered draws of 3 items out of 6, with probabilities and predictions that depend on the
    answers so far (a wrong model): E[A^] = A and E[se^2] = Var(A^) exactly."""
    J, n = 6, 3
    y = np.array([1, 0, 0, 1, 1, 0], float)
    base = np.array([0.9, 0.8, 0.2, 0.3, 0.6, 0.95])  # far from y: the model is wrong

    def predictions(known, values):
        shift = 0.1 * (values[known].sum() - 0.5 * known.sum()) if known.any() else 0.0
        return np.clip(base + shift, 0.05, 0.95)

    def probabilities(f, known):
        w = np.sqrt(f * (1 - f)) * ~known
        return 0.7 * w / w.sum() + 0.3 * (~known) / (~known).sum()

    mean = second = se2 = total_p = 0.0
    for order in itertools.permutations(range(J), n):
        known = np.zeros(J, bool)
        prob, fs, path_p = [], [], 1.0
        for j in order:
            f = predictions(known, y)
            pi = probabilities(f, known)
            path_p *= pi[j]
            prob.append(pi[j])
            fs.append(f)
            known[j] = True
        d = design_terms(list(order), y[list(order)], [True] * n, prob, np.array(fs))[:, 0]
        e = design_estimate(d, n_items=J)
        total_p += path_p
        mean += path_p * e.mean
        second += path_p * e.mean**2
        se2 += path_p * e.se**2
    assert total_p == pytest.approx(1.0, abs=1e-12)
    assert mean == pytest.approx(y.mean(), abs=1e-12)
    assert se2 == pytest.approx(second - mean**2, abs=1e-12)


@pytest.mark.parametrize("n", [2, 3, 5, 6])
def test_draw_weights_reduce_uniform_draws_to_simple_random_sampling(n):
    """Closed forms of simple random sampling without replacement, over every ordered sample of n of
    7 items (outcomes that are not 0/1, as CoT lengths): with uniform draws and no model, the
    weighted mean of the terms (``draw_weights``) is the mean of the drawn outcomes in every sample,
    and the weighted variance estimate averages to that mean's exact variance (1 - n / J) S^2 / n."""
    from catengine.scoring.design import draw_weights

    y = np.array([3.0, 0.0, 1.0, 4.0, 1.0, 5.0, 9.0])
    J = y.size
    w = draw_weights(n, J)
    assert w.sum() == pytest.approx(1.0, abs=1e-15) and np.all(w > 0)
    se2, count = 0.0, 0
    for order in itertools.permutations(range(J), n):
        order = list(order)
        d = design_terms(order, y[order], [True] * n, 1.0 / (J - np.arange(n)), np.zeros((n, J)))[:, 0]
        e = design_estimate(d, n_items=J, weights=w)
        assert e.mean == pytest.approx(y[order].mean(), rel=1e-12)
        se2 += e.se**2
        count += 1
    assert se2 / count == pytest.approx((1 - n / J) * y.var(ddof=1) / n, rel=1e-12)


def test_coverage_by_simulation_with_a_wrong_fixed_model():
    rng = np.random.default_rng(1)
    J, n, reps, eps = 100, 30, 1500, 0.5
    p_true = rng.beta(1.2, 1.0, J)
    y = (rng.random(J) < p_true).astype(float)
    f = np.clip(p_true + 0.3 * rng.standard_normal(J), 0.01, 0.99)  # wrong predictions
    est, se, cover = [], [], []
    for _ in range(reps):
        known = np.zeros(J, bool)
        order, prob = [], []
        for _ in range(n):
            w = np.sqrt(f * (1 - f)) * ~known
            pi = (1 - eps) * w / w.sum() + eps * (~known) / (~known).sum()
            j = int(rng.choice(J, p=pi))
            order.append(j)
            prob.append(pi[j])
            known[j] = True
        e = design_estimate(design_terms(order, y[order], np.ones(n, bool), prob, np.tile(f, (n, 1)))[:, 0], n_items=J)
        est.append(e.mean)
        se.append(e.se)
        cover.append(e.low <= y.mean() <= e.high)
    est, se = np.array(est), np.array(se)
    print(f"fixed wrong model: bias {est.mean() - y.mean():+.5f}, mean se^2 / var {np.mean(se**2) / est.var():.3f}, "
          f"coverage {np.mean(cover):.3f}")
    assert abs(est.mean() - y.mean()) < 4 * est.std() / math.sqrt(reps)
    assert 0.9 < np.mean(se**2) / est.var() < 1.1
    assert 0.93 <= np.mean(cover) <= 0.97


@pytest.mark.slow
def test_wrong_bank_model_interval_fails_design_interval_covers():
    """A deliberately wrong bank: half the items have slopes and intercepts tripled and intercepts
    shifted by +1.2 in the bank (maximum information prefers exactly those items). 60 simulated
    LLMs x 10 randomised sessions of 50 items from 200 (600 intervals: coverage SE ~0.009)."""
    rng = np.random.default_rng(3)
    J, n = 200, 50
    a = rng.lognormal(0.2, 0.3, J)
    b = rng.normal(0, 1.0, J)
    half = rng.random(J) < 0.5
    wrong = bank_2pl(J, a=np.where(half, 3 * a, a), b=np.where(half, 3 * b, b) + 1.2 * half)
    model_cover, design_cover, design_err = [], [], []
    for _ in range(60):
        y = (rng.random(J) < expit(a * rng.normal() + b)).astype(int)
        truth = y.mean()
        s = CATSession(wrong, selector=MaxFisherInformation(), stopping=MaxItems(n), rng=rng)
        while not s.finished:
            item = s.next_item()
            s.record(item, y[wrong.index_of(item)])
        m = s.predicted_score(by=False)
        model_cover.append(m.low <= truth <= m.high)
        for _ in range(10):
            s = CATSession(wrong, selector=RandomisedSelection(), stopping=MaxItems(n), rng=rng)
            while not s.finished:
                item = s.next_item()
                s.record(item, y[wrong.index_of(item)])
            d = s.predicted_score(method="design", by=False)
            design_cover.append(d.low <= truth <= d.high)
            design_err.append(d.accuracy - truth)
    design_err = np.array(design_err)
    print(f"wrong bank: model-based (max-info) coverage {np.mean(model_cover):.3f}, design-based coverage "
          f"{np.mean(design_cover):.3f}, design bias {design_err.mean():+.4f} (SE {design_err.std() / math.sqrt(design_err.size):.4f})")
    assert np.mean(model_cover) < 0.8
    assert 0.93 <= np.mean(design_cover) <= 0.97
    assert abs(design_err.mean()) < 3 * design_err.std() / math.sqrt(design_err.size)


def test_session_design_estimate_equals_a_recomputation_from_the_log(tmp_path):
    bank = bank_2pl(40)
    y = (np.arange(40) % 3 != 0).astype(int)
    log = tmp_path / "d.jsonl"
    s = CATSession(bank, selector=RandomisedSelection(), stopping=MaxItems(12), rng=5, log=log)
    while not s.finished:
        item = s.next_item()
        s.record(item, y[bank.index_of(item)])
    d = s.predicted_score(method="design")
    assert d.method == "design" and d.n_observed == 12
    # the selection probabilities are in the history (criterion) and match the selector's
    for r in s.history:
        assert 0 < r.criterion <= 1 and r.proposed
    assert sum(c.n_items for c in d.by_category.values()) == 40
    s.close()
    resumed = CATSession.resume(log, bank)
    assert resumed.predicted_score(method="design") == d
    resumed.close()


def test_design_predictions_use_the_model_posterior_and_the_probabilities_the_widened_one():
    """With widened trait SDs (here sd_scale=2, as a bank's interval curve widens them) the design's
    f_t are E_q P_j under the model's own posterior (SD / 2), while the selection probabilities are
    recomputed from the widened posterior the selector saw: the recomputed pi of every drawn item
    equals the logged criterion, and the estimate equals a recomputation from the terms by hand."""
    from catengine.estimation import MAPEstimator
    from catengine.scoring import expected_probabilities, model_variance_terms
    from catengine.scoring.model_based import HYPOTHESIS_THETAS, response
    from catengine.session.scoring import _initial_estimate, design_probabilities

    bank = bank_2pl(40)
    y = (np.arange(40) % 3 != 0).astype(int)
    s = CATSession(bank, selector=RandomisedSelection(), estimator=MAPEstimator(sd_scale=2.0), stopping=MaxItems(12),
                   rng=5)
    while not s.finished:
        item = s.next_item()
        s.record(item, y[bank.index_of(item)])
    h = s.history
    assert all(r.interval_factor == 2.0 for r in h)
    order = np.array([bank.index_of(r.item) for r in h])
    before = [_initial_estimate(s)] + list(h[:-1])
    steps = np.arange(len(h))
    widened = np.array([expected_probabilities(bank.params, b.theta, b.theta_sd, s.selector.n_nodes) for b in before])
    model = np.array([expected_probabilities(bank.params, b.theta, b.theta_sd / b.interval_factor, s.selector.n_nodes)
                      for b in before])
    assert np.max(np.abs(widened - model)) > 0.01  # the two differ here
    pi, remaining = design_probabilities(s, steps, before, order, widened)
    np.testing.assert_allclose(pi[steps, order], [r.criterion for r in h], rtol=1e-12)
    drawn, p_drawn = np.ones(len(h), bool), pi[steps, order]
    # each draw's weight of the predictions by its closed form -Cov(D(0), D(1) - D(0)) / Var(D(1) - D(0))
    # over the draws before it (0 until three are known)
    t0 = design_terms(order, y[order], drawn, p_drawn, np.zeros_like(model))[:, 0]
    diff = design_terms(order, y[order], drawn, p_drawn, model)[:, 0] - t0
    lam = np.array([0.0 if t < 3 else float(np.clip(-np.cov(t0[:t], diff[:t], bias=True)[0, 1] / diff[:t].var(), 0, 1))
                    for t in range(t0.size)])
    assert np.any((lam > 0) & (lam < 1))
    terms = design_terms(order, y[order], drawn, p_drawn, lam[:, None] * model)[:, 0]
    # each draw weighted by its index: 1 / ((J - t) (J - t - 1)), normalised
    w = 1 / ((40 - np.arange(12)) * (39 - np.arange(12)))
    w = w / w.sum()
    # the interval's hypotheses: the bank at each grid trait, the answered items at their answers
    family = response(bank.params, HYPOTHESIS_THETAS)
    rows = family.copy()
    rows[:, order] = y[order]
    variances = np.array([w**2 @ model_variance_terms(model, pi, remaining, weight=lam, means=r)[:, 0] for r in rows])
    unanswered = np.ones(40, dtype=bool)
    unanswered[order] = False
    accuracies = (y[order].sum() + family[:, unanswered].sum(axis=1)) / 40
    ref = design_estimate(terms, n_items=40, hypotheses=(accuracies, variances), weights=w,
                          bounds=(y[order].sum() / 40, 1 - (12 - y[order].sum()) / 40))
    d = s.predicted_score(method="design", by=False)
    assert d.accuracy == pytest.approx(ref.mean, rel=1e-12) and d.sd == pytest.approx(ref.se, rel=1e-12)
    assert (d.low, d.high) == pytest.approx((ref.low, ref.high), rel=1e-9)


def test_selector_probabilities_are_positive_known_and_followed():
    bank = bank_2pl(8)
    s = CATSession(bank, selector=RandomisedSelection(uniform_share=0.3), stopping=MaxItems(8), rng=0)
    s.record("i000", 1)
    s.record("i003", 0)
    state = SelectionState(s.estimate, s.eligible_mask(), s._responses, s.items)
    pi = s.selector.probabilities(s.params, state)
    assert pi.sum() == pytest.approx(1.0) and pi[0] == 0 and pi[3] == 0
    assert np.all(pi[s.eligible_mask()] >= 0.3 / 6 - 1e-15)
    rng = np.random.default_rng(4)
    draws = np.array([s.selector.candidates(s.params, state, rng)[0][0] for _ in range(6000)])
    freq = np.bincount(draws, minlength=8) / draws.size
    assert np.all(np.abs(freq - pi) < 4 * np.sqrt(pi * (1 - pi) / draws.size) + 1e-12)
    assert s.selector.candidates(s.params, state, np.random.default_rng(1))[1][0] in pi
    assert from_config(to_config(RandomisedSelection(weight="information"))) == RandomisedSelection(weight="information")
    with pytest.raises(ValueError, match="uniform_share"):
        RandomisedSelection(uniform_share=0.0)
    with pytest.raises(ValueError, match="weight"):
        RandomisedSelection(weight="bogus")


def test_design_refuses_sessions_that_were_not_randomised():
    bank = bank_2pl(20)
    s = CATSession(bank, selector=MaxFisherInformation(), stopping=MaxItems(5), rng=0)
    while not s.finished:
        s.record(s.next_item(), 1)
    with pytest.raises(DesignNotRandomisedError, match="MaxFisherInformation, which does not randomise"):
        s.predicted_score(method="design")
    s = CATSession(bank, selector=RandomisedSelection(), exposure=Randomesque(3), rng=0)
    s.record(s.next_item(), 1)
    with pytest.raises(DesignNotRandomisedError, match="exposure"):
        s.predicted_score(method="design")
    s = CATSession(bank, selector=RandomisedSelection(), rng=0)
    s.record(s.next_item(), 1)
    with pytest.raises(DesignNotRandomisedError, match="at least 2 randomised draws"):
        s.predicted_score(method="design")


def test_items_excluded_before_the_draws_leave_the_design_estimate_of_the_bank_without_them():
    """A session that excludes items before its first draw (the flagged items ``catengine run``
    leaves out, the items a harness has no sample for) gets the design-based estimate of the
    accuracy over the other items, exactly the one a session on the bank without those items gives
    (the same draws, probabilities, terms and interval), per category too."""
    J = 14
    rng = np.random.default_rng(4)
    a, b = rng.lognormal(0.2, 0.3, J), rng.normal(0, 1, J)
    ids = [f"i{j:03d}" for j in range(J)]
    kind = np.array(["x", "y"])[np.arange(J) % 2]
    y = dict(zip(ids, (rng.random(J) < 0.7).astype(int)))
    out = [2, 7, 9]
    keep = [j for j in range(J) if j not in out]
    full = ItemBank.from_params("2pl", ids, bank_id="d", a=a, b=b, item_metadata={"kind": kind})
    part = ItemBank.from_params("2pl", [ids[j] for j in keep], bank_id="d", a=a[keep], b=b[keep],
                                item_metadata={"kind": kind[keep]})
    scores = []
    for bank, excluded in ((full, [ids[j] for j in out]), (part, [])):
        s = CATSession(bank, stopping=MaxItems(7), rng=11)
        for item in excluded:
            s.exclude(item)
        while not s.finished:
            item = s.next_item()
            s.record(item, y[item])
        scores.append((s.history, s.predicted_score()))
    (h_full, with_exclusions), (h_part, without_items) = scores
    assert [r.item for r in h_full] == [r.item for r in h_part]
    assert with_exclusions.method == without_items.method == "doubly-robust"
    assert with_exclusions.n_items == without_items.n_items == J - len(out)
    for got, want in [(with_exclusions, without_items)] + [
            (with_exclusions.by_category[k], without_items.by_category[k]) for k in ("x", "y")]:
        assert got.n_items == want.n_items
        for f in ("accuracy", "sd", "low", "high"):
            assert getattr(got, f) == pytest.approx(getattr(want, f), rel=1e-9, abs=1e-12), f
    # the model's prediction covers the same items (its sums over the bank less the excluded items')
    models = [CATSession(bank, stopping=MaxItems(7), rng=11) for bank in (full, part)]
    for item in out:
        models[0].exclude(ids[item])
    for s in models:
        for r in h_full:
            s.record(r.item, r.correct)
    got, want = (s.predicted_score(method="model") for s in models)
    assert got.n_items == want.n_items == J - len(out)
    for f in ("accuracy", "sd", "low", "high"):
        assert getattr(got, f) == pytest.approx(getattr(want, f), rel=1e-8), f


def test_a_category_whose_items_are_all_excluded_has_no_design_score():
    bank = bank_2pl(12)  # categories x (even items) and y (odd)
    s = CATSession(bank, stopping=MaxItems(5), rng=3)
    for j in range(0, 12, 2):
        s.exclude(bank.item_ids[j])
    while not s.finished:
        s.record(s.next_item(), 1)
    score = s.predicted_score(by="kind")
    assert score.method == "doubly-robust" and score.n_items == 6 and set(score.by_category) == {"y"}
    assert score.by_category["y"].accuracy == pytest.approx(score.accuracy, rel=1e-12)


def test_an_item_excluded_mid_session_keeps_the_design_estimate_unbiased_for_the_rest():
    """An item excluded after some draws (its answer missing at random) is taken as excluded from
    the start: over 1500 sessions with a wrong model, the unprojected estimate's mean is within 3
    Monte-Carlo SEs of the accuracy over the other items."""
    from catengine.scoring.design import draw_weights
    from catengine.session.scoring import design_parts

    J = 30
    bank = bank_2pl(J, seed=2)
    rng = np.random.default_rng(8)
    y = (rng.random(J) < np.where(np.arange(J) < 15, 0.95, 0.2)).astype(int)  # far from the bank's 2PL
    dropped = 5  # excluded after the third draw, unless one of the three drew it
    raw = []
    for r in range(1500):
        s = CATSession(bank, selector=RandomisedSelection(), stopping=MaxItems(8), rng=[r, 1])
        while not s.finished:
            if len(s.history) == 3 and bank.item_ids[dropped] not in {x.item for x in s.history}:
                s.exclude(bank.item_ids[dropped])
            item = s.next_item()
            s.record(item, int(y[bank.index_of(item)]))
        if dropped in s._excluded:
            parts = design_parts(s, by=False)
            terms = parts["terms"][:, 0]
            raw.append(float(terms @ draw_weights(terms.size, J - 1)))
            assert parts["sizes"][0] == J - 1
    raw = np.array(raw)
    target = np.delete(y, dropped).mean()
    assert raw.size > 1000
    assert abs(raw.mean() - target) < 3 * raw.std(ddof=1) / math.sqrt(raw.size)


def test_serve_replies_carry_the_score_and_the_design_score():
    import io
    import json as _json

    from catengine.session import Engine, serve
    from catengine.session.serve import handle

    bank = bank_2pl(30)
    engine = Engine(bank, selector=RandomisedSelection(), rng=3)
    replies = []
    for _ in range(3):  # next, then record the proposed item
        item = handle(engine, {"op": "next", "subject": "m"})["item"]
        replies.append(handle(engine, {"op": "record", "subject": "m", "item": item, "correct": 1}))
    assert "design_score" not in replies[0] and "design_score" in replies[2]  # two draws needed
    session = engine.session("m")
    assert replies[2]["score"] == _json.loads(_json.dumps(session.predicted_score().to_dict()))
    est = handle(engine, {"op": "estimate", "subject": "m"})
    assert est["score"]["n_observed"] == 3 and est["design_score"]["method"] == "design"
    text = io.StringIO(_json.dumps({"op": "estimate", "subject": "m"}) + "\n")
    buf = io.StringIO()
    serve(engine, text, buf)
    assert _json.loads(buf.getvalue())["score"]["n_items"] == 30


def test_design_categories_and_cot_total_add_back_on_a_lart_bank():
    from pathlib import Path

    from catengine import open_item_bank

    bank = open_item_bank(Path(__file__).resolve().parents[1] / "item_banks" / "demo_math500_lart")

    def run(n):
        rng = np.random.default_rng(0)
        s = CATSession(bank, selector=RandomisedSelection(), stopping=MaxItems(n), rng=1)
        while not s.finished:
            s.record(s.next_item(), int(rng.random() < 0.6), float(rng.lognormal(6, 0.7)))
        return s, s.predicted_score(method="design")

    s, d = run(40)
    assert d.method == "design" and d.cot_total is not None and d.cot_total_low <= d.cot_total <= d.cot_total_high
    cats = d.by_category
    assert sum(c.n_items for c in cats.values()) == 500
    # the category D_t partition the bank's D_t, so the estimates add back exactly (no category's
    # estimate left its attainable range here, so none was projected)
    assert sum(c.accuracy * c.n_items for c in cats.values()) / 500 == pytest.approx(d.accuracy, abs=1e-12)
    assert sum(c.cot_total for c in cats.values()) == pytest.approx(d.cot_total, rel=1e-12)
    # after 10 draws (answers unrelated to the model: the power-tuned weight of its predictions is
    # near 0) some category's unbiased estimate leaves its attainable range: it is projected onto
    # it, every estimate stays inside its interval, and the sum no longer adds back
    s, d = run(10)
    labels, codes = s.items.groups(d.category_field)
    projected = 0
    for label, c in d.by_category.items():
        answered = [r for r in s.history if labels[codes[bank.index_of(r.item)]] == label]
        floor = sum(r.correct for r in answered) / c.n_items
        ceiling = floor + (c.n_items - len(answered)) / c.n_items
        assert floor - 1e-12 <= c.low <= c.accuracy <= c.high <= ceiling + 1e-12
        projected += int(len(answered) < c.n_items and min(abs(c.accuracy - floor), abs(c.accuracy - ceiling)) < 1e-12)
    assert projected >= 1
    assert abs(sum(c.accuracy * c.n_items for c in d.by_category.values()) / 500 - d.accuracy) > 0.01


def test_model_variance_floor_recomputes_the_logged_probabilities_and_matches_its_formula():
    """The floor recomputes the design's probabilities from the logged posteriors: at each draw the
    drawn item's recomputed pi equals the criterion the session logged; the floor equals its formula;
    under a true model it matches the Monte Carlo variance of the estimate (one LLM, many sessions)."""
    from catengine.scoring import model_variance_terms
    from catengine.session.scoring import _initial_estimate, design_probabilities

    rng = np.random.default_rng(11)
    J, n = 80, 20
    a, b = rng.lognormal(0.0, 0.3, J), rng.normal(0, 1, J)
    bank = bank_2pl(J, a=a, b=b)
    p_true = expit(a * 0.3 + b)
    s = CATSession(bank, selector=RandomisedSelection(), stopping=MaxItems(n), rng=1)
    y = (rng.random(J) < p_true).astype(int)
    while not s.finished:
        item = s.next_item()
        s.record(item, int(y[bank.index_of(item)]))
    h = s.history
    order = np.array([bank.index_of(r.item) for r in h])
    before = [_initial_estimate(s)] + list(h[:-1])
    steps = np.arange(n)
    from catengine.scoring import expected_probabilities

    f = np.array([expected_probabilities(bank.params, before[t].theta, before[t].theta_sd, 21) for t in steps])
    pi_all, remaining_all = design_probabilities(s, steps, before, order, f)
    v = model_variance_terms(f, pi_all, remaining_all)[:, 0]  # the accuracy's floor, as design_score builds it
    for t in steps:
        remaining = np.ones(J, bool)
        remaining[order[:t]] = False
        pi = s.selector.probabilities(bank.params, SelectionState(before[t], remaining, None, s.items))
        assert pi[order[t]] == pytest.approx(h[t].criterion, rel=1e-12)
        by_hand = np.sum(f[t][remaining] * (1 - f[t][remaining]) / pi[remaining]) / J**2
        assert v[t] == pytest.approx(by_hand, rel=1e-12)
    # under the model the floor is the estimator's variance: compare with repeated sessions
    estimates, floors = [], []
    for rep in range(300):
        yr = (rng.random(J) < p_true).astype(int)
        sr = CATSession(bank, selector=RandomisedSelection(), stopping=MaxItems(n), rng=rep)
        while not sr.finished:
            item = sr.next_item()
            sr.record(item, int(yr[bank.index_of(item)]))
        d = sr.predicted_score(method="design", by=False)
        estimates.append(d.accuracy - yr.mean())
        floors.append(d.sd**2)
    assert np.mean(floors) == pytest.approx(np.var(estimates), rel=0.25)
    with pytest.raises(ValueError, match="model_variances"):
        design_estimate(np.array([0.1, 0.2, 0.3]), n_items=10, model_variances=[0.1, -1.0, 0.0])
    assert model_variance_terms(np.full((1, 3), 0.5), np.full((1, 3), 1 / 3), np.ones((1, 3), bool))[0, 0] == pytest.approx(
        3 * 0.25 * 3 / 9)


def test_design_variance_rules_pool_or_floor_the_model_variance_with_their_quantiles():
    """moderated (default): max(se^2, (m V + (n - 1) se^2) / (m + n - 1)) with t on m + n - 1 df, m =
    MODEL_DRAWS (the model's variance counted as m draws); floor: max(se^2, V) with the normal
    quantile where V binds, else t on n - 1 df; the mean never moves."""
    from scipy.stats import norm, t as student_t

    from catengine.scoring.design import MODEL_DRAWS

    m = MODEL_DRAWS

    d = np.array([0.50, 0.52, 0.48, 0.51, 0.49])
    n = d.size
    se2 = np.sum((d - d.mean()) ** 2) / (n * (n - 1))
    plain = design_estimate(d, n_items=100)
    assert plain.se == pytest.approx(math.sqrt(se2)) and (plain.high - plain.mean) == pytest.approx(
        student_t.ppf(0.975, n - 1) * plain.se)
    for ratio in (0.5, 3.0):  # the model's V = ratio * se^2 (V = sum of the per-draw variances / n^2)
        model_variances = np.full(n, ratio * se2 * n)
        pooled = (m * ratio * se2 + (n - 1) * se2) / (m + n - 1)
        mod = design_estimate(d, n_items=100, model_variances=model_variances)
        assert mod.mean == plain.mean
        assert mod.se == pytest.approx(math.sqrt(max(se2, pooled)))
        assert (mod.high - mod.mean) == pytest.approx(student_t.ppf(0.975, m + n - 1) * mod.se)
        # model_draws=None counts the model as n draws
        as_many = design_estimate(d, n_items=100, model_variances=model_variances, model_draws=None)
        assert as_many.se == pytest.approx(math.sqrt(max(se2, (n * ratio * se2 + (n - 1) * se2) / (2 * n - 1))))
        fl = design_estimate(d, n_items=100, model_variances=model_variances, model_rule="floor")
        assert fl.se == pytest.approx(math.sqrt(max(se2, ratio * se2)))
        q = norm.ppf(0.975) if ratio > 1 else student_t.ppf(0.975, n - 1)
        assert (fl.high - fl.mean) == pytest.approx(q * fl.se)
    # below the empirical variance the model changes nothing but the degrees of freedom
    assert design_estimate(d, n_items=100, model_variances=np.full(n, 0.5 * se2 * n)).se == pytest.approx(plain.se)
    with pytest.raises(ValueError, match="model_rule"):
        design_estimate(d, n_items=100, model_rule="max")


def test_residual_variance_pools_the_llms_log_residual_variance_with_the_banks():
    """Var(exp(e)) for the design CoT total: the log-normal variance of the LLM's centred log-residual
    variance pooled with the bank's mean lam^2 (k residuals' worth), at most the bank's, or the LLM's
    own empirical variance of exp(e) where larger. The log-normal formula is checked against a
    Monte-Carlo variance; then the limits, and an LLM whose empty answers inflate its log-residual
    variance (its lengths bounded: the log-normal tail would be absurd, its own spread is used)."""
    from pathlib import Path

    from catengine import open_item_bank
    from catengine.scoring import RESIDUAL_PRIOR_ITEMS, residual_variance

    p = open_item_bank(Path(__file__).resolve().parents[1] / "item_banks" / "demo_math500_lart").params
    lognormal = lambda v: math.exp(v) * (math.exp(v) - 1)  # noqa: E731
    rng = np.random.default_rng(5)
    items, tau, offset = rng.choice(p.n_items, 12, replace=False), 0.3, 1.0
    base = p.omega[items] - p.phi[items] * tau
    e = rng.normal(0.2, 0.7, items.size)
    tokens = np.exp(base + e) - offset
    lam2 = float(np.mean(p.lam**2))
    spread = float(np.sum((e - e.mean()) ** 2))
    k = RESIDUAL_PRIOR_ITEMS
    s2 = (k * lam2 + spread) / (k + items.size - 1)
    assert s2 < lam2 and np.var(np.exp(e)) < lognormal(s2)  # a regular LLM: the pooled log-normal figure
    assert residual_variance(p, tau, items, tokens, offset) == pytest.approx(lognormal(s2), rel=1e-10)
    z = np.random.default_rng(6).normal(0.0, math.sqrt(s2), 2_000_000)
    assert np.var(np.exp(z)) == pytest.approx(lognormal(s2), rel=0.03)
    assert residual_variance(p, tau, items, tokens, offset, prior_items=1e9) == pytest.approx(lognormal(lam2), rel=1e-6)
    own = spread / (items.size - 1)
    assert residual_variance(p, tau, items, tokens, offset, prior_items=1e-9) == pytest.approx(
        max(lognormal(own), np.var(np.exp(e))), rel=1e-6)
    assert residual_variance(p, tau, items[:0], tokens[:0], offset) == pytest.approx(lognormal(lam2))
    # half the answers empty: log-residual variance far above the bank's; the cap and the own spread
    erratic = np.where(np.arange(items.size) % 2 == 0, 0.0, np.exp(base + rng.normal(2.0, 0.3, items.size)) - offset)
    r = np.log(erratic + offset) - base
    assert np.var(r, ddof=1) > 3 * lam2
    assert residual_variance(p, tau, items, erratic, offset) == pytest.approx(max(lognormal(lam2), np.var(np.exp(r))), rel=1e-10)
    assert residual_variance(p, tau, items, erratic, offset) == pytest.approx(np.var(np.exp(r)), rel=1e-10)
    with pytest.raises(ValueError, match="prior_items"):
        residual_variance(p, tau, items, tokens, offset, prior_items=0)


def test_design_cot_terms_are_power_tuned_and_their_variance_pooled():
    """The CoT total's terms and model variance: the predictions enter with a power-tuned weight
    (1 until three draws are known, then tuned on the earlier draws, recomputed here by hand); each
    unanswered item's tokens get exp(2 (omega - phi tau_t)) Var(exp(e)) (:func:`residual_variance`),
    weighted by 1 / pi as the accuracy's; the reported SD is
    the pooled rule max(se^2, (m V + (n_e - 1) se^2) / (m + n_e - 1)) on the total scale (both with the
    draws' weights), recomputed here from the design terms, for a wide and a narrow spread of lengths."""
    from pathlib import Path

    from catengine import open_item_bank
    from catengine.scoring import expected_cot_lengths, expected_probabilities, residual_variance
    from catengine.scoring.design import MODEL_DRAWS
    from catengine.session.scoring import _initial_estimate, design_cot_variances, design_probabilities

    bank = open_item_bank(Path(__file__).resolve().parents[1] / "item_banks" / "demo_math500_lart")
    p = bank.params
    J = p.n_items
    for seed, spread in ((2, 0.8), (3, 0.05)):
        rng = np.random.default_rng(seed)
        s = CATSession(bank, selector=RandomisedSelection(), stopping=MaxItems(12), rng=seed)
        while not s.finished:
            s.record(s.next_item(), int(rng.random() < 0.6), float(rng.lognormal(6, spread)))
        h = s.history
        n = len(h)
        order = np.array([bank.index_of(r.item) for r in h])
        tokens = np.array([r.cot_length for r in h])
        before = [_initial_estimate(s)] + list(h[:-1])
        steps = np.arange(n)
        f = np.array([expected_probabilities(p, before[t].theta, before[t].theta_sd, s.selector.n_nodes) for t in steps])
        pi, remaining = design_probabilities(s, steps, before, order, f)
        g = np.array([expected_cot_lengths(p, before[t].tau, 0.0, s.cot_offset) for t in steps])
        prob = np.array([r.criterion for r in h])
        without = design_terms(order, tokens, np.ones(n, bool), prob, np.zeros_like(g))[:, 0]
        with_model = design_terms(order, tokens, np.ones(n, bool), prob, g)[:, 0]
        # the predictions' weight: 1 for the first three draws, then tuned on the earlier draws
        lam = np.ones(n)
        for t in range(3, n):
            a, b = without[:t], with_model[:t] - without[:t]
            lam[t] = min(1.0, max(0.0, -np.mean((a - a.mean()) * (b - b.mean())) / np.var(b)))
        assert np.all(lam[:3] == 1.0) and np.any(lam[3:] < 1.0)
        model = design_cot_variances(s, before, steps, order, tokens, pi, remaining, g, np.ones((J, 1)), weight=lam)[:, 0]
        factor = residual_variance(p, s.estimate.tau, order, tokens, s.cot_offset)
        for t in (0, 5, 11):
            rem = remaining[t]
            var = np.exp(2 * (p.omega[rem] - p.phi[rem] * before[t].tau)) * factor
            off = (1 - lam[t]) * g[t][rem]  # the model's mean of the tokens less the weighted predictions
            assert model[t] == pytest.approx((np.sum((var + off**2) / pi[t][rem]) - off.sum() ** 2) / J**2, rel=1e-10)
        d_t = without + lam * (with_model - without)
        w = 1 / ((J - np.arange(n)) * (J - 1 - np.arange(n)))  # each draw weighted by its index (design.draw_weights)
        w /= w.sum()
        mean = d_t @ w
        n_e = 1 / np.sum(w * w)
        empirical = np.sum(w * w * (d_t - mean) ** 2) / (1 - np.sum(w * w))
        pooled = (MODEL_DRAWS * np.sum(w * w * model) + (n_e - 1) * empirical) / (MODEL_DRAWS + n_e - 1)
        d = s.predicted_score(method="design", by=False)
        assert d.cot_total_sd == pytest.approx(J * math.sqrt(max(empirical, pooled)), rel=1e-9)


def test_design_cot_total_interval_holds_on_real_math500_lengths():
    """The default session's CoT-total interval on real lengths: every MATH-500 run of the shared
    LaRT data (answers and CoT tokens of 158 runs, all 500 items) replayed three times through a
    default session on the shipped ``math500_lart`` bank; the truth is the run's total tokens. The
    runs are the bank's own calibration runs: this checks the variance rule on real lengths (the
    held-out figures are ``benchmarks/score_extrapolation.py``'s, docs/validation.md). Real
    lengths are heavier-tailed than a log-normal: intervals from the draws' own spread of lengths
    and the empirical smearing of their residuals held 0.863 of the totals after 10 items and 0.928
    after 25 (a short test rarely meets the long answers, and its spread is then small exactly when
    its total is low); with the log-normal variance of the pooled residual variance and the predicted
    lengths at a power-tuned weight, 0.954 and 0.945."""
    import calibration
    from catengine import open_item_bank
    from real_data import ROOT, lart_files

    bank = open_item_bank(ROOT / "item_banks" / "math500_lart")
    accuracy, cot = lart_files("math500")
    data = calibration.load_responses(accuracy, cot=cot)
    column = np.array([bank.index_of(f"math500/{i}") for i in data.item_ids])
    held = {10: [], 25: []}
    for i in range(data.n_subjects):
        y, tokens = np.full(bank.n_items, -1), np.full(bank.n_items, np.nan)
        y[column], tokens[column] = data.correct[i], data.cot_length[i]
        assert np.all(y >= 0) and np.all(np.isfinite(tokens))
        truth = float(tokens.sum())
        for r in range(3):
            s = CATSession(bank, stopping=MaxItems(25), rng=[i, r])
            while not s.finished:
                item = s.next_item()
                j = bank.index_of(item)
                s.record(item, int(y[j]), float(tokens[j]))
                if len(s.history) in held:
                    d = s.predicted_score(by=False)
                    held[len(s.history)].append(d.cot_total_low <= truth <= d.cot_total_high)
    for k, v in held.items():
        assert len(v) == 3 * data.n_subjects
        assert 0.93 <= np.mean(v) <= 0.99, (k, np.mean(v))


def test_design_cot_total_is_unbiased_when_the_lengths_do_not_follow_the_bank():
    """The power-tuned CoT terms keep their conditional mean the true total (each draw's weight is a
    function of the draws before it): an LLM whose lengths are unrelated to the bank's model (drawn
    at random, with a few very long ones), fixed; 2000 default sessions of 15 items. The mean of the
    unprojected estimates sum_t w_t D_t lies within 3 Monte-Carlo SEs of the true total, and the
    predictions' weights leave 1 (the model's predictions are no use here)."""
    from pathlib import Path

    from catengine import open_item_bank
    from catengine.scoring.design import draw_weights
    from catengine.selection import DoublyRobustSelection
    from catengine.session.scoring import design_parts

    bank = open_item_bank(Path(__file__).resolve().parents[1] / "item_banks" / "demo_math500_lart")
    J = bank.n_items
    rng = np.random.default_rng(21)
    y = (rng.random(J) < 0.55).astype(int)
    tokens = np.round(rng.lognormal(7.0, 1.0, J))
    truth = float(tokens.sum())
    estimates, weights = [], []
    for r in range(2000):
        s = CATSession(bank, selector=DoublyRobustSelection(), stopping=MaxItems(15), rng=[3, r])
        while not s.finished:
            item = s.next_item()
            j = bank.index_of(item)
            s.record(item, int(y[j]), float(tokens[j]))
        parts = design_parts(s, by=False)
        terms = parts["cot_terms"][:, 0] * J
        estimates.append(float(terms @ draw_weights(terms.size, J)))
        weights.append(parts["cot_lam"][3:].mean())
    estimates = np.array(estimates)
    se = estimates.std(ddof=1) / math.sqrt(estimates.size)
    assert abs(estimates.mean() - truth) < 3 * se, (estimates.mean(), truth, se)
    assert np.mean(weights) < 0.9
