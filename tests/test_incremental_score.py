"""The model-based score from the bank's summed curves (catengine.scoring.model_based.SummedCurves)
against the from-scratch numerics (predict_accuracy, predict_cot_total: a pass over every item at
every node), after every step of random sessions: logistic and LaRT banks, categories, CoT totals,
adaptive sessions and sessions with design draws; the unanswered items' sums from the panels and
summed directly."""

import math

import numpy as np
import pytest

from catengine import CATSession, ItemBank
from catengine.scoring import predict_accuracy, predict_cot_total
from catengine.scoring.model_based import (
    SummedCurves,
    accuracy_curves,
    cot_curves,
    predict_accuracy_from_curves,
    predict_cot_total_from_curves,
)
from catengine.selection import DoublyRobustSelection, RandomisedSelection
from catengine.session import scoring as session_scoring
from catengine.stopping import MaxItems
import score_checks

J = 240
RTOL = 1e-12


@pytest.fixture(autouse=True, params=["panels", "direct"])
def sum_path(request, monkeypatch):
    """Every test runs twice: with the sums over the unanswered items from the interpolation panels
    (the path of large banks) and summed directly (the path of banks of at most DIRECT_SUM_CELLS
    items times nodes, this one's)."""
    from catengine.scoring import model_based

    monkeypatch.setattr(model_based, "DIRECT_SUM_CELLS", 0 if request.param == "panels" else 10**9)
    return request.param
AREAS = np.array(["algebra", "geometry", "counting", "proofs"])


def make_bank(model, uncertainty, seed):
    rng = np.random.default_rng(seed)
    kw = {"a": rng.lognormal(0.2, 0.35, J), "b": rng.normal(0.0, 1.3, J)}
    if model == "4pl":
        kw.update(c=rng.uniform(0.0, 0.2, J), d=rng.uniform(0.85, 1.0, J))
    if model == "lart":
        kw.update(omega=rng.normal(6.0, 0.4, J), phi=rng.uniform(0.8, 2.2, J), lam=rng.uniform(0.4, 1.2, J), rho=-0.5)
    if "b" in uncertainty:
        kw["b_sd"] = rng.uniform(0.05, 0.5, J)
    if "a" in uncertainty:
        kw["a_sd"] = rng.uniform(0.02, 0.3, J)
    if uncertainty == "ab":
        kw["ab_cov"] = rng.uniform(-0.5, 0.5, J) * kw["a_sd"] * kw["b_sd"]
    area = AREAS[rng.integers(0, AREAS.size, J)]  # unbalanced categories
    meta = {"area": area, "source": np.array(["bench"] * J)}
    return ItemBank.from_params(model, [f"q{j:03d}" for j in range(J)], bank_id=f"inc_{model}_{uncertainty}",
                                item_metadata=meta, **kw)


def _from_scratch_accuracy(curves, theta, theta_sd, observed, correct, *, params, uncertainty, **kw):
    return predict_accuracy(params, theta, theta_sd, observed, correct, codes=curves.codes if curves.n_groups else None,
                            n_groups=curves.n_groups, **uncertainty, **kw)


def _from_scratch_cot(curves, params, tau, tau_sd, observed, tokens, **kw):
    return predict_cot_total(params, tau, tau_sd, observed, tokens, codes=curves.codes if curves.n_groups else None,
                             n_groups=curves.n_groups, **kw)


def _close(a, b, scale=0.0):
    return score_checks.close(a, b, RTOL, scale)


def assert_same_score(got, want, where):
    score_checks.assert_same_score(got, want, where, rtol=RTOL)


def from_scratch(session, monkeypatch, **kw):
    """predicted_score with the model-based part computed by the from-scratch numerics."""
    uncertainty = session_scoring.item_uncertainty(session.bank, session.items)
    with monkeypatch.context() as m:
        m.setattr(session_scoring, "predict_accuracy_from_curves",
                  lambda curves, *a, **k: _from_scratch_accuracy(curves, *a, params=session.params,
                                                                 uncertainty=uncertainty, **k))
        m.setattr(session_scoring, "predict_cot_total_from_curves", _from_scratch_cot)
        return session.predicted_score(**kw)


SELECTORS = {
    "adaptive": lambda: None,
    "doubly-robust": DoublyRobustSelection,
    "randomised": RandomisedSelection,
}


@pytest.mark.parametrize("model, uncertainty", [("2pl", "b"), ("4pl", "ab"), ("lart", "ab"), ("lart", "none")])
@pytest.mark.parametrize("selector", sorted(SELECTORS))
def test_every_step_matches_the_from_scratch_score(model, uncertainty, selector, monkeypatch):
    bank = make_bank(model, uncertainty, seed=len(model) + len(uncertainty))
    rng = np.random.default_rng(11)
    theta = float(rng.normal(0.5, 1.0))
    s = CATSession(bank, selector=SELECTORS[selector](), stopping=MaxItems(24), rng=3)
    p = bank.params
    while not s.finished:
        item = s.next_item()
        j = bank.index_of(item)
        z = p.a[j] * theta + p.b[j]
        correct = int(rng.random() < 1.0 / (1.0 + math.exp(-z)))
        cot = None
        if model == "lart" and rng.random() < 0.9:  # some lengths unknown
            cot = float(np.round(math.exp(p.omega[j] - p.phi[j] * 0.3 + p.lam[j] * rng.standard_normal())))
        s.record(item, correct, cot)
        for by in (None, False):
            assert_same_score(s.predicted_score(by=by), from_scratch(s, monkeypatch, by=by), (s.n_items, by))
        assert_same_score(s.predicted_score(method="model", by="area"),
                          from_scratch(s, monkeypatch, method="model", by="area"), (s.n_items, "model"))


@pytest.mark.parametrize("model", ["2pl", "lart"])
def test_score_trajectory_matches_from_scratch(model, monkeypatch):
    bank = make_bank(model, "b", seed=5)
    s = CATSession(bank, stopping=MaxItems(12), rng=1)
    rng = np.random.default_rng(2)
    while not s.finished:
        s.record(s.next_item(), int(rng.random() < 0.6), 300.0 if model == "lart" else None)
    got = session_scoring.score_trajectory(s)
    uncertainty = session_scoring.item_uncertainty(s.bank, s.items)
    with monkeypatch.context() as m:
        m.setattr(session_scoring, "predict_accuracy_from_curves",
                  lambda curves, *a, **k: _from_scratch_accuracy(curves, *a, params=s.params, uncertainty=uncertainty, **k))
        want = session_scoring.score_trajectory(s)
    for key in ("accuracy", "low", "high"):
        np.testing.assert_allclose(got[key], want[key], rtol=RTOL, atol=0)


@pytest.mark.parametrize("uncertainty", ["none", "a", "ab"])
def test_curves_against_from_scratch_anywhere(uncertainty):
    """Nodes on panel points (theta = 0, SD = 0), wide and narrow posteriors, far traits, more than
    half of the bank answered (summed directly), and a bank whose a_sd without b_sd puts a kink in
    every averaged curve at theta = 0 (panels there need not converge: exact sums)."""
    bank = make_bank("2pl", uncertainty, seed=9)
    p = bank.params
    items = bank.items
    kw = {n: (np.asarray(items[n].values) if n in items else None) for n in ("a_sd", "b_sd", "ab_cov")}
    codes = np.arange(J) % 3
    curves = accuracy_curves(p, codes=codes, n_groups=3, **kw)
    rng = np.random.default_rng(4)
    for n_obs in (0, 7, J // 2 + 1, J):
        observed = rng.choice(J, n_obs, replace=False)
        correct = rng.integers(0, 2, n_obs)
        for theta, sd in ((0.0, 0.0), (0.0, 1.0), (1.3, 0.2), (-7.5, 0.6), (12.0, 2.0)):
            for residual_sd in (0.0, 0.02):
                want = predict_accuracy(p, theta, sd, observed, correct, codes=codes, n_groups=3, residual_sd=residual_sd, **kw)
                got = predict_accuracy_from_curves(curves, theta, sd, observed, correct, residual_sd=residual_sd)
                for g, w in zip(got, want):
                    for f in ("mean", "sd", "low", "high"):
                        assert _close(getattr(g, f), getattr(w, f), w.mean), (n_obs, theta, sd, f, getattr(g, f), getattr(w, f))
                    assert (g.n_observed, g.n_items) == (w.n_observed, w.n_items)


@pytest.mark.parametrize("residuals", ["smearing", "lognormal"])
def test_cot_curves_against_from_scratch(residuals):
    bank = make_bank("lart", "none", seed=2)
    p = bank.params
    codes = np.arange(J) % 4
    curves = cot_curves(p, codes=codes, n_groups=4)
    rng = np.random.default_rng(8)
    for n_obs in (0, 3, 30, J - 2):
        observed = rng.choice(J, n_obs, replace=False)
        tokens = rng.uniform(20.0, 3000.0, n_obs)
        for tau, sd in ((0.0, 0.0), (0.4, 0.9), (-2.0, 0.15)):
            for extra in (0.0, 0.2):
                kw = dict(cot_offset=1.0, residuals=residuals, log_extra_sd=extra)
                want = predict_cot_total(p, tau, sd, observed, tokens, codes=codes, n_groups=4, **kw)
                got = predict_cot_total_from_curves(curves, p, tau, sd, observed, tokens, **kw)
                for g, w in zip(got, want):
                    for f in ("mean", "sd", "low", "high"):
                        assert _close(getattr(g, f), getattr(w, f), w.mean), (n_obs, tau, sd, f, getattr(g, f), getattr(w, f))


def test_cot_totals_at_several_lengths_are_the_predictions_at_each(sum_path):
    """The score check's one-call CoT trajectory (``predict_cot_total_at_lengths``) against
    ``predict_cot_total_from_curves`` on each prefix of the answers (log-normal moments below
    MIN_SMEARING_ITEMS recorded lengths, smeared residuals from there; with and without an extra
    log-SD); None where the bank is summed from its panels."""
    from catengine.scoring.model_based import MIN_SMEARING_ITEMS, predict_cot_total_at_lengths

    bank = make_bank("lart", "none", seed=5)
    p = bank.params
    rng = np.random.default_rng(9)
    observed = rng.choice(J, 40, replace=False)
    tokens = rng.uniform(20.0, 3000.0, 40)
    lengths = [0, 3, MIN_SMEARING_ITEMS - 1, MIN_SMEARING_ITEMS, 12, 40]
    taus, sds = [0.0, 0.3, -0.5, 0.2, 1.1, -1.4], [1.0, 0.8, 0.6, 0.5, 0.3, 0.0]
    extra = [0.0, 0.1, 0.0, 0.3, 0.05, 0.0]
    got = predict_cot_total_at_lengths(p, taus, sds, observed, tokens, lengths, cot_offset=1.0, log_extra_sds=extra,
                                       n_nodes=11)
    if sum_path == "panels":  # a bank summed from its panels: the caller predicts length by length
        assert got is None
        return
    curves = cot_curves(p)
    for t, L in enumerate(lengths):
        want = predict_cot_total_from_curves(curves, p, taus[t], sds[t], observed[:L], tokens[:L], cot_offset=1.0,
                                             log_extra_sd=extra[t], n_nodes=11, intervals=False)[0]
        assert got[0][t] == pytest.approx(want.mean, rel=1e-11)
        assert got[1][t] == pytest.approx(want.sd, rel=1e-9)
    with pytest.raises(ValueError, match="lengths must increase"):
        predict_cot_total_at_lengths(p, taus[:2], sds[:2], observed, tokens, [4, 2], cot_offset=1.0)


def test_curves_refuse_bad_input():
    bank = make_bank("2pl", "none", seed=1)
    curves = accuracy_curves(bank.params)
    with pytest.raises(ValueError, match="distinct item indices"):
        predict_accuracy_from_curves(curves, 0.0, 1.0, [3, 3], [1, 0])
    with pytest.raises(ValueError, match="finite mean"):
        predict_accuracy_from_curves(curves, math.nan, 1.0, [], [])
    with pytest.raises(ValueError, match="panel width"):
        SummedCurves(lambda t, i: None, J, None, 0, 1, 0.0, unit=(1.0,))


@pytest.mark.parametrize("model", ["2pl", "4pl", "lart"])
@pytest.mark.parametrize("uncertainty", ["none", "b", "a", "ab"])
def test_compiled_sums_equal_the_item_values_summed(model, uncertainty):
    """The compiled passes (catengine.scoring._kernels) behind every sum of the curves give the sums
    of the per-item values (item_averaged_response / the CoT moments) to rounding, per category,
    at ordinary and extreme traits and over a subset of the items (relative to each value, and
    for the accuracy sums to the panels' scale, a per-item bound times the items: p (1 - p) near
    p = 1 keeps only the absolute precision of p)."""
    bank = make_bank(model, uncertainty, seed=3)
    p = bank.params
    items = bank.items
    kw = {n: (np.asarray(items[n].values) if n in items else None) for n in ("a_sd", "b_sd", "ab_cov")}
    codes = np.arange(J) % 4
    points = np.array([-800.0, -40.0, -3.0, -0.4, 0.0, 0.7, 2.5, 40.0, 800.0])
    subset = np.array([3, 17, 100, 239])
    built = [accuracy_curves(p, codes=codes, n_groups=4, **kw)]
    if model == "lart":
        built.append(cot_curves(p, codes=codes, n_groups=4))
        points = points[2:-2]  # exp(-phi tau) overflows beyond
    for curves in built:
        for chosen in (np.arange(J), subset):
            got = curves.subset_sums(points, chosen)
            values = curves._item_values(points, chosen)
            member = curves._member(chosen)
            want = (values.reshape(-1, chosen.size) @ member).reshape(got.shape)
            scale = 1e-15 * chosen.size if curves.n_functions == 2 else 1e-300
            np.testing.assert_allclose(got, want, rtol=1e-13, atol=scale)


def test_excluded_items_leave_the_curves_prediction_as_they_leave_the_direct_one():
    """Items excluded from a session leave both predictions, the accuracy and the CoT total: the
    curves' (the bank's sums less the answered and the excluded items') equal the direct ones (a
    pass over the other items), per category, and count the excluded items in neither."""
    bank = make_bank("lart", "ab", seed=4)
    params, unc = bank.params, session_scoring.item_uncertainty(bank, CATSession(bank).items)
    rng = np.random.default_rng(6)
    observed = rng.choice(J, 30, replace=False)
    excluded = rng.choice(np.setdiff1d(np.arange(J), observed), 25, replace=False)
    correct = (rng.random(30) < 0.6).astype(float)
    tokens = np.exp(rng.normal(6.0, 0.5, 30))
    labels, codes = np.unique(bank.item_metadata("area").astype(str), return_inverse=True)
    acc_curves = accuracy_curves(params, codes=codes, n_groups=labels.size, **unc)
    got = predict_accuracy_from_curves(acc_curves, 0.4, 0.3, observed, correct, excluded=excluded)
    want = predict_accuracy(params, 0.4, 0.3, observed, correct, codes=codes, n_groups=labels.size, excluded=excluded,
                            **unc)
    cot_got = predict_cot_total_from_curves(cot_curves(params, codes=codes, n_groups=labels.size), params, 0.1, 0.2,
                                            observed, tokens, cot_offset=1.0, excluded=excluded)
    cot_want = predict_cot_total(params, 0.1, 0.2, observed, tokens, cot_offset=1.0, codes=codes, n_groups=labels.size,
                                 excluded=excluded)
    for g in range(1 + labels.size):
        in_group = np.ones(J, bool) if g == 0 else codes == g - 1
        n_items = int(in_group.sum() - in_group[excluded].sum())
        for a, b in ((got[g], want[g]), (cot_got[g], cot_want[g])):
            assert a.n_items == b.n_items == n_items and a.n_observed == b.n_observed == int(in_group[observed].sum())
            assert a.mean == pytest.approx(b.mean, rel=1e-9) and a.sd == pytest.approx(b.sd, rel=1e-8)
    whole = predict_accuracy(params, 0.4, 0.3, observed, correct, **unc)[0]
    assert whole.n_items == J and whole.mean > got[0].mean
