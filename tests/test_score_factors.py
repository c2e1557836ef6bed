"""Score factors (docs/score_prediction.md §2): the factor posterior, the predicted accuracy under it,
the D-optimal selector, the joint MAP fit, and the bank / calibration plumbing.

Every estimator is checked against something independent: a brute-force grid, finite differences,
Monte Carlo draws, an explicit log-determinant, or recovery of a simulated model."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import expit

from catengine import CATSession, open_item_bank, write_item_bank
from catengine.errors import ItemBankSchemaError
from catengine.itembank.bank import ItemBank
from catengine.models.score_factors import ScoreFactors, factor_posterior, log_posterior, product_nodes
from catengine.scoring import predict_accuracy_factors
from catengine.selection import SELECTORS, ScoreFactorDOptimal, SelectionState, default_selector
from catengine.session.bank_log import bank_fingerprint, item_table


def _factors(J=40, d=2, seed=0):
    g = np.random.default_rng(seed)
    return ScoreFactors(g.normal(0.0, 1.2, size=(J, d)), g.normal(0.0, 1.0, size=J))


def _answers(factors, n, seed=1):
    g = np.random.default_rng(seed)
    items = g.choice(factors.n_items, n, replace=False)
    y = (g.random(n) < factors.probabilities(np.array([[0.7, -0.4][: factors.dims]]), items)[0]).astype(float)
    return items, y


def _bank(J=40, d=2, seed=0):
    f = _factors(J, d, seed)
    base = ItemBank.from_params("2pl", [f"i{k}" for k in range(J)], bank_id="sf", a=np.ones(J), b=np.linspace(-2, 2, J),
                                item_metadata={"topic": np.array(["alg", "geo", "num", "prob"])[np.arange(J) % 4]})
    return base.with_score_factors(f.loadings, f.intercepts, {"dims": d})


# ---------------------------------------------------------------------------------------------
# the factor posterior


def test_posterior_mode_matches_a_brute_force_grid_and_its_covariance_the_fd_hessian():
    f = _factors()
    items, y = _answers(f, 12)
    mode, cov = factor_posterior(f.loadings, f.intercepts, items, y)
    x = np.linspace(-4, 4, 801)
    grid = np.stack(np.meshgrid(x, x, indexing="ij"), axis=-1).reshape(-1, 2)
    lp = log_posterior(f.loadings, f.intercepts, items, y, grid)
    best = grid[np.argmax(lp)]
    assert np.all(np.abs(best - mode) <= 0.01 + 1e-12)  # the grid spacing
    eps = 1e-4
    hess = np.zeros((2, 2))
    for i in range(2):
        for j in range(2):
            e_i, e_j = np.eye(2)[i] * eps, np.eye(2)[j] * eps
            pts = np.array([mode + e_i + e_j, mode + e_i - e_j, mode - e_i + e_j, mode - e_i - e_j])
            v = log_posterior(f.loadings, f.intercepts, items, y, pts)
            hess[i, j] = (v[0] - v[1] - v[2] + v[3]) / (4 * eps * eps)
    np.testing.assert_allclose(cov, np.linalg.inv(-hess), rtol=1e-4)


def test_posterior_without_answers_is_the_prior_and_bad_answers_are_refused():
    f = _factors()
    mode, cov = f.posterior([], [])
    np.testing.assert_array_equal(mode, np.zeros(2))
    np.testing.assert_array_equal(cov, np.eye(2))
    with pytest.raises(ValueError, match="0 or 1"):
        f.posterior([0, 1], [1, 2])
    with pytest.raises(ValueError, match="2 observed items but 1 answers"):
        f.posterior([0, 1], [1])


def test_product_nodes_integrate_the_normal_moments():
    mode, cov = np.array([0.3, -1.0]), np.array([[0.5, 0.2], [0.2, 0.3]])
    nodes, w = product_nodes(mode, cov, 7)
    np.testing.assert_allclose(w.sum(), 1.0, rtol=1e-12)
    np.testing.assert_allclose(w @ nodes, mode, atol=1e-12)
    centred = nodes - mode
    np.testing.assert_allclose((w[:, None, None] * centred[:, :, None] * centred[:, None, :]).sum(0), cov, atol=1e-12)


def test_score_factors_refuse_bad_arrays():
    with pytest.raises(ValueError, match="1 <= d <= 3"):
        ScoreFactors(np.zeros((5, 4)), np.zeros(5))
    with pytest.raises(ValueError, match="intercepts must have shape"):
        ScoreFactors(np.zeros((5, 2)), np.zeros(4))
    bad = np.zeros((5, 2))
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="first at item index 3"):
        ScoreFactors(bad, np.zeros(5))


# ---------------------------------------------------------------------------------------------
# the predicted accuracy


def _laplace_grid(f, items, y):
    """The factor posterior's mode, a fine grid over two factors and the Laplace posterior's
    normalised density on it (the brute-force integrals' reference)."""
    mode, cov = f.posterior(items, y)
    x = np.linspace(-7, 7, 561)
    grid = np.stack(np.meshgrid(x, x, indexing="ij"), axis=-1).reshape(-1, 2)
    diff = grid - mode
    dens = np.exp(-0.5 * np.einsum("kd,de,ke->k", diff, np.linalg.inv(cov), diff))
    return mode, grid, dens / dens.sum()


def test_predicted_accuracy_equals_a_brute_force_integral_over_the_laplace_posterior():
    f = _factors()
    items, y = _answers(f, 8)
    J = f.n_items
    total = predict_accuracy_factors(f, items, y, centre="mean")[0]
    mode, grid, dens = _laplace_grid(f, items, y)
    unknown = np.ones(J, bool)
    unknown[items] = False
    p = f.probabilities(grid)[:, unknown]
    cond_mean = y.sum() + p.sum(1)
    cond_var = (p * (1 - p)).sum(1)
    mean = dens @ cond_mean
    var = dens @ cond_var + dens @ (cond_mean - mean) ** 2
    # the default 11 x 11 Gauss-Hermite rule is within 1e-5 of the integral; 41 x 41 within 1e-8
    np.testing.assert_allclose(total.mean, mean, rtol=1e-5)
    np.testing.assert_allclose(total.sd, math.sqrt(var), rtol=1e-4)
    fine = predict_accuracy_factors(f, items, y, n_nodes=41, centre="mean")[0]
    np.testing.assert_allclose(fine.mean, mean, rtol=1e-8)
    np.testing.assert_allclose(fine.sd, math.sqrt(var), rtol=1e-7)
    assert total.n_observed == 8 and total.n_items == J
    # the default centre: the plug-in total at the grid's own mode, its SD the RMS error about it
    k = np.argmax(dens)
    assert np.linalg.norm(grid[k] - mode) < 0.03
    point = y.sum() + f.probabilities(mode[None, :])[0, unknown].sum()
    plug = predict_accuracy_factors(f, items, y, n_nodes=41)[0]
    np.testing.assert_allclose(plug.mean, point, rtol=1e-12)
    np.testing.assert_allclose(plug.sd, math.sqrt(dens @ cond_var + dens @ (cond_mean - point) ** 2), rtol=1e-7)
    assert plug.sd > fine.sd and abs(plug.mean - mean) > 1e-3  # the two centres differ here


def test_excluded_items_leave_the_prediction_by_brute_force():
    """The prediction with items excluded is the brute-force integral over the posterior of the
    answered items' outcomes plus the other unanswered items' probabilities (the excluded ones in
    neither), over the items not excluded; per category too; an answered item cannot be excluded."""
    f = _factors()
    items, y = _answers(f, 8)
    J = f.n_items
    excluded = np.setdiff1d(np.arange(0, J, 7), items)
    codes = np.arange(J) % 3
    got = predict_accuracy_factors(f, items, y, centre="mean", n_nodes=41, codes=codes, n_groups=3, excluded=excluded)
    _, grid, dens = _laplace_grid(f, items, y)
    rest = np.ones(J, bool)
    rest[items] = False
    rest[excluded] = False
    p = f.probabilities(grid)
    for g, member in enumerate([np.ones(J, bool)] + [codes == k for k in range(3)]):
        cond_mean = y[member[items]].sum() + p[:, rest & member].sum(1)
        assert got[g].n_items == int(member.sum() - member[excluded].sum())
        assert got[g].n_observed == int(member[items].sum())
        np.testing.assert_allclose(got[g].mean, dens @ cond_mean, rtol=1e-8)
    plain = predict_accuracy_factors(f, items, y, centre="mean", n_nodes=41)[0]
    assert plain.n_items == J and plain.mean > got[0].mean
    with pytest.raises(ValueError, match="none of them answered"):
        predict_accuracy_factors(f, items, y, excluded=items[:1])


def test_predicted_accuracy_variance_and_interval_match_monte_carlo_draws():
    f = _factors(J=60)
    items, y = _answers(f, 10)
    total = predict_accuracy_factors(f, items, y, centre="mean")[0]
    plug = predict_accuracy_factors(f, items, y)[0]
    mode, cov = f.posterior(items, y)
    g = np.random.default_rng(5)
    n = 200_000
    eta = g.multivariate_normal(mode, cov, size=n)
    unknown = np.ones(60, bool)
    unknown[items] = False
    p = f.probabilities(eta)[:, unknown]
    draws = y.sum() + (g.random(p.shape) < p).sum(1)
    se = draws.std() / math.sqrt(n)
    assert abs(draws.mean() - total.mean) < 4 * se
    assert abs(draws.std() - total.sd) / total.sd < 0.01
    lo, hi = np.quantile(draws, [0.025, 0.975])
    assert abs(lo - total.low) <= 1.5 and abs(hi - total.high) <= 1.5  # the draws are integers
    # the plug-in centre's SD is the draws' root mean square error about it
    rmse = math.sqrt(np.mean((draws - plug.mean) ** 2))
    assert abs(rmse - plug.sd) / plug.sd < 0.01
    np.testing.assert_allclose([plug.low, plug.high], [plug.mean - 1.959964 * plug.sd, plug.mean + 1.959964 * plug.sd], rtol=1e-6)
    with pytest.raises(ValueError, match="centre"):
        predict_accuracy_factors(f, items, y, centre="median")


@pytest.mark.parametrize("d", [1, 2, 3])
def test_predictions_at_several_lengths_are_the_predictions_at_each(d):
    """The score check's one-call trajectory (``predict_accuracy_factors_at_lengths``) against
    ``predict_accuracy_factors`` run on each prefix of the answers, with and without a misfit term."""
    from catengine.scoring.model_based import predict_accuracy_factors_at_lengths

    factors = _factors(J=120, d=d, seed=d)
    g = np.random.default_rng(10 + d)
    observed = g.choice(factors.n_items, 60, replace=False)
    correct = (g.random(60) < factors.probabilities(np.array([[0.7, -0.4, 0.2][:d]]), observed)[0]).astype(float)
    lengths = [0, 1, 5, 20, 37, 60]
    residual = [0.0, 0.02, 0.0, 0.05, 0.01, 0.03]
    acc, sd = predict_accuracy_factors_at_lengths(factors, observed, correct, lengths, residual)
    for t, L in enumerate(lengths):
        ref = predict_accuracy_factors(factors, observed[:L], correct[:L], residual_sd=residual[t], intervals=False)[0]
        J = factors.n_items
        assert acc[t] == pytest.approx(ref.mean / J, rel=1e-11, abs=1e-13)
        assert sd[t] == pytest.approx(ref.sd / J, rel=1e-9, abs=1e-13)
    with pytest.raises(ValueError, match="lengths must increase"):
        predict_accuracy_factors_at_lengths(factors, observed, correct, [5, 5])
    with pytest.raises(ValueError, match="lengths must increase"):
        predict_accuracy_factors_at_lengths(factors, observed, correct, [61])


def test_categories_add_back_to_the_total_and_the_misfit_term_widens():
    f = _factors()
    items, y = _answers(f, 8)
    codes = np.arange(f.n_items) % 4
    groups = predict_accuracy_factors(f, items, y, codes=codes, n_groups=4)
    assert sum(gp.n_items for gp in groups[1:]) == groups[0].n_items
    np.testing.assert_allclose(sum(gp.mean for gp in groups[1:]), groups[0].mean, rtol=1e-12)
    wide = predict_accuracy_factors(f, items, y, residual_sd=0.05)[0]
    n_u = f.n_items - 8
    np.testing.assert_allclose(wide.sd ** 2, groups[0].sd ** 2 + (0.05 * n_u) ** 2, rtol=1e-10)


def test_session_reports_the_factor_prediction_and_categories():
    bank = _bank()
    s = CATSession(bank, rng=0)
    for answer in (1, 0, 1, 1, 0, 1):
        s.record(s.next_item(), answer)
    est = s.predicted_score(method="model", by="topic")  # the factors' prediction (the default score is design-based)
    order = [bank.index_of(h.item) for h in s.history]
    ref = predict_accuracy_factors(bank.score_factors, order, [h.correct for h in s.history])[0]
    np.testing.assert_allclose(est.accuracy, ref.mean / bank.n_items, rtol=1e-12)
    weights = {k: v.n_items / bank.n_items for k, v in est.by_category.items()}
    np.testing.assert_allclose(sum(weights[k] * v.accuracy for k, v in est.by_category.items()), est.accuracy, rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# the selector


def test_d_optimal_gain_is_the_log_det_increase_of_the_precision():
    f = _factors()
    items, y = _answers(f, 6)
    mode, cov = f.posterior(items, y)
    cand = np.arange(f.n_items)
    gain = f.d_optimal_gain(mode, cov, cand)
    prec = np.linalg.inv(cov)
    p = f.probabilities(mode)[0]
    brute = [np.linalg.slogdet(prec + p[j] * (1 - p[j]) * np.outer(f.loadings[j], f.loadings[j]))[1]
             - np.linalg.slogdet(prec)[1] for j in cand]
    np.testing.assert_allclose(gain, brute, rtol=1e-9, atol=1e-12)


def test_selector_proposes_the_best_eligible_items_in_order():
    bank = _bank()
    table = item_table(bank)
    s = CATSession(bank, rng=0)
    for answer in (1, 0, 1):
        s.record(s.next_item(), answer)
    order = np.array([bank.index_of(h.item) for h in s.history])
    y = np.array([h.correct for h in s.history], dtype=float)
    mode, cov = bank.score_factors.posterior(order, y)
    gain = bank.score_factors.d_optimal_gain(mode, cov, np.arange(bank.n_items))
    eligible = np.ones(bank.n_items, bool)
    eligible[order] = False
    eligible[int(np.argmax(np.where(eligible, gain, -np.inf)))] = False  # block the best one

    class Responses:
        n = order.size
        items = order
        correct = y

    state = SelectionState(s.estimate, eligible, Responses(), table)
    idx, val = ScoreFactorDOptimal().candidates(bank.params, state, np.random.default_rng(0), 3)
    want = np.flatnonzero(eligible)[np.argsort(-gain[eligible], kind="stable")[:3]]
    np.testing.assert_array_equal(idx, want)
    np.testing.assert_allclose(val, gain[want])


def test_banks_with_score_factors_select_by_them_by_default_and_others_cannot():
    bank = _bank()
    session = CATSession(bank)  # the default: doubly robust, with the score-factor rule on its adaptive steps
    assert session.selector.name == "doubly-robust"
    assert isinstance(session.selector.adaptive_for(session.items), ScoreFactorDOptimal)
    assert isinstance(default_selector("2pl", score_factors=True), ScoreFactorDOptimal)
    assert SELECTORS["score-factor-d"] is ScoreFactorDOptimal
    plain = ItemBank.from_params("2pl", ["a", "b", "c"], bank_id="p", a=np.ones(3), b=np.zeros(3))
    assert not isinstance(CATSession(plain).selector, ScoreFactorDOptimal)
    with pytest.raises(ValueError, match="needs a bank with score factors"):
        CATSession(plain, selector=ScoreFactorDOptimal())


def test_score_factors_enter_the_bank_fingerprint():
    bank = _bank()
    other = bank.with_score_factors(bank.score_factors.loadings * 1.01, bank.score_factors.intercepts, {})
    assert bank_fingerprint(item_table(bank)) != bank_fingerprint(item_table(other))


# ---------------------------------------------------------------------------------------------
# the bank file


def test_score_factors_round_trip_through_a_bank_file(tmp_path):
    bank = _bank()
    path = write_item_bank(bank, tmp_path / "sf")
    back = open_item_bank(path)
    np.testing.assert_array_equal(back.score_factors.loadings, bank.score_factors.loadings)
    np.testing.assert_array_equal(back.score_factors.intercepts, bank.score_factors.intercepts)
    assert back.attrs["score_factors"] == bank.attrs["score_factors"]


def test_damaged_score_factors_are_named_errors():
    bank = _bank()
    tree = bank.to_datatree()
    items = tree["items"].to_dataset()
    items["score_loading"][5, 1] = np.nan
    tree["items"] = type(tree)(items)
    with pytest.raises(ItemBankSchemaError, match="score_loading.*first 'i5'"):
        ItemBank(tree)
    items = bank.to_datatree()["items"].to_dataset().drop_vars("score_intercept")
    tree = bank.to_datatree()
    tree["items"] = type(tree)(items)
    with pytest.raises(ItemBankSchemaError, match="needs '/items/score_intercept'"):
        ItemBank(tree)


# ---------------------------------------------------------------------------------------------
# the fit


def _simulate(N, J, d, seed):
    g = np.random.default_rng(seed)
    eta = g.standard_normal((N, d))
    load = np.abs(g.normal(1.5, 0.5, size=(J, d))) * np.where(np.arange(d) == 0, 1.0, g.choice([-1.0, 1.0], size=(J, d)))
    inter = g.normal(0, 1.2, size=J)
    P = expit(eta @ load.T + inter)
    return (g.random(P.shape) < P).astype(np.int8), P


def test_fit_recovers_a_simulated_two_factor_model():
    from calibration.heldout import fit_score_factors

    y, P = _simulate(400, 120, 2, seed=3)
    fit = fit_score_factors(y, 2)
    assert fit.converged
    P_fit = expit(fit.traits @ fit.loadings.T + fit.intercepts)
    assert np.mean(np.abs(P_fit - P)) < 0.05  # the Bernoulli noise of one answer is ~0.4
    one = fit_score_factors(y, 1)
    P_one = expit(one.traits @ one.loadings.T + one.intercepts)
    assert np.mean(np.abs(P_fit - P)) < 0.8 * np.mean(np.abs(P_one - P))  # the second factor is real


def test_fit_traits_span_the_true_traits():
    from calibration.heldout import fit_score_factors

    g = np.random.default_rng(11)
    N, J = 400, 150
    eta = g.standard_normal((N, 2))
    load = np.c_[g.normal(1.5, 0.4, J), g.normal(0.0, 1.2, J)]
    inter = g.normal(0, 1.0, J)
    y = (g.random((N, J)) < expit(eta @ load.T + inter)).astype(np.int8)
    fit = fit_score_factors(y, 2)
    # regress each true trait on the fitted ones: R^2 above 0.9 for both (the traits are identified up to rotation)
    X = np.c_[np.ones(N), fit.traits]
    for k in range(2):
        coef, *_ = np.linalg.lstsq(X, eta[:, k], rcond=None)
        r2 = 1 - np.var(eta[:, k] - X @ coef) / np.var(eta[:, k])
        assert r2 > 0.9, (k, r2)


def test_cross_validation_picks_the_simulated_number_of_factors():
    from calibration.heldout import choose_factor_count

    y2, _ = _simulate(240, 100, 2, seed=4)
    assert choose_factor_count(y2, max_dims=3, rng=0)[0] >= 2
    y1, _ = _simulate(240, 100, 1, seed=5)
    assert choose_factor_count(y1, max_dims=3, rng=0)[0] == 1


def _near_duplicate_runs(n_llms=8, J=500, seed=2):
    """Two runs per LLM (the second with 2% of its answers flipped) of a strong two-factor model: a
    small, nearly separable sample like 32 runs of 16 MATH500 LLMs, on which the standardised
    sweeps run away."""
    g = np.random.default_rng(seed)
    eta = g.standard_normal((n_llms, 2))
    load, inter = g.normal(0.0, 3.0, size=(J, 2)), g.normal(0.0, 2.0, size=J)
    y = (g.random((n_llms, J)) < expit(eta @ load.T + inter)).astype(np.int8)
    second = y.copy()
    flip = g.random(y.shape) < 0.02
    second[flip] = 1 - second[flip]
    return np.vstack([y, second])


def test_a_fit_that_runs_away_falls_back_to_the_joint_map():
    from scipy.optimize import minimize
    from scipy.special import log_expit

    import calibration.heldout.score_factors as sf

    y = _near_duplicate_runs()
    Y, M = y.astype(float), np.ones(y.shape)
    start = sf._starting_values(Y, M, 2)
    # the default scheme really does run away on this sample (so the fallback is what is tested)
    assert sf._standardised_sweeps(Y, M, *start, sf.SLOPE_VARIANCE, sf.INTERCEPT_VARIANCE, 400, sf.DEFAULT_TOL) is None
    fit = sf.fit_score_factors(y, 2)
    assert "fallback" in fit.record and fit.converged
    assert np.all(np.isfinite(fit.loadings)) and np.max(np.linalg.norm(fit.loadings, axis=1)) < 20.0
    np.testing.assert_allclose(fit.traits.mean(axis=0), 0.0, atol=1e-10)
    np.testing.assert_allclose(np.cov(fit.traits, rowvar=False, bias=True), np.eye(2), atol=1e-8)
    # independent check: the joint MAP of the same log posterior by L-BFGS from the same start gives
    # the same fitted probabilities (they do not change under the final re-standardisation)
    N, J = Y.shape

    def negative_log_posterior(x):
        T, G, h = x[:2 * N].reshape(N, 2), x[2 * N:2 * N + 2 * J].reshape(J, 2), x[2 * N + 2 * J:]
        z = T @ G.T + h
        R = Y - expit(z)
        f = (np.sum(Y * log_expit(z) + (1 - Y) * log_expit(-z)) - 0.5 * np.sum(T * T)
             - 0.5 * np.sum(G * G) / sf.SLOPE_VARIANCE - 0.5 * np.sum(h * h) / sf.INTERCEPT_VARIANCE)
        grad = np.concatenate([(R @ G - T).ravel(), (R.T @ T - G / sf.SLOPE_VARIANCE).ravel(),
                               R.sum(axis=0) - h / sf.INTERCEPT_VARIANCE])
        return -f, -grad

    x0 = np.concatenate([start[0].ravel(), start[1].ravel(), start[2]])
    res = minimize(negative_log_posterior, x0, jac=True, method="L-BFGS-B",
                   options={"maxiter": 20000, "gtol": 1e-9, "ftol": 1e-15})
    T, G, h = res.x[:2 * N].reshape(N, 2), res.x[2 * N:2 * N + 2 * J].reshape(J, 2), res.x[2 * N + 2 * J:]
    P_map = expit(T @ G.T + h)
    P_fit = expit(fit.traits @ fit.loadings.T + fit.intercepts)
    assert np.max(np.abs(P_fit - P_map)) < 2e-3  # 8e-4 seen


def test_a_fit_that_converges_normally_takes_no_fallback():
    from calibration.heldout import fit_score_factors

    y, _ = _simulate(120, 60, 2, seed=9)
    fit = fit_score_factors(y, 2)
    assert fit.converged and "fallback" not in fit.record


def test_fit_handles_missing_answers_and_names_bad_values():
    from calibration.heldout import fit_score_factors

    y, _ = _simulate(80, 30, 1, seed=6)
    y = y.astype(np.int8)
    y[np.random.default_rng(0).random(y.shape) < 0.1] = -1
    fit = fit_score_factors(y, 1)
    assert np.all(np.isfinite(fit.loadings)) and np.all(np.isfinite(fit.intercepts))
    y[7, 3] = 2
    with pytest.raises(ValueError, match="row 7, item 3 holds 2"):
        fit_score_factors(y, 1)


def test_unsolved_items_keep_finite_intercepts():
    from calibration.heldout import fit_score_factors

    y, _ = _simulate(60, 20, 1, seed=8)
    y[:, 0] = 0
    y[:, 1] = 1
    fit = fit_score_factors(y, 1)
    assert -15 < fit.intercepts[0] < -2 and 2 < fit.intercepts[1] < 15


# ---------------------------------------------------------------------------------------------
# calibration plumbing


def test_calibrated_banks_carry_score_factors_checked_by_the_interval_check():
    import json

    from calibration import CBMMCalibrator, ResponseData
    from calibration.heldout import MIN_SCORE_FACTOR_LLMS

    y, _ = _simulate(MIN_SCORE_FACTOR_LLMS + 8, 60, 1, seed=9)
    data = ResponseData.from_arrays(y, subject_ids=[f"m{i}" for i in range(y.shape[0])])
    bank = CBMMCalibrator(rng=0, progress=False).fit(data).to_item_bank("sf_check")
    assert bank.score_factors is not None and bank.score_factors.dims == 1
    record = json.loads(bank.attrs["interval_calibration"])
    assert record["selection"] == "doubly-robust"  # the default selector, score-factor-d on its adaptive steps
    assert "doubly-robust" in record["curves"] and "doubly-robust" in record["score_curves"]
    session = CATSession(bank)
    assert isinstance(session.selector.adaptive_for(session.items), ScoreFactorDOptimal)
    few = ResponseData.from_arrays(y[: MIN_SCORE_FACTOR_LLMS - 1], subject_ids=[f"m{i}" for i in range(MIN_SCORE_FACTOR_LLMS - 1)])
    small = CBMMCalibrator(rng=0, progress=False).fit(few).to_item_bank("sf_small")
    assert small.score_factors is None
    assert CBMMCalibrator(rng=0, progress=False).fit(data).to_item_bank("sf_off", interval_check=False).score_factors is None


def test_a_session_on_a_factor_bank_resumes_to_the_same_items_and_score(tmp_path):
    bank = _bank()
    answers = np.random.default_rng(2).random(bank.n_items) < 0.6

    def drive(session, n):
        while session.n_items < n:
            item = session.next_item()
            session.record(item, int(answers[bank.index_of(item)]))
        return session

    ref = drive(CATSession(bank, rng=7), 12)
    log = tmp_path / "run.jsonl"
    drive(CATSession(bank, rng=7, log=log), 6).close()
    resumed = drive(CATSession.resume(log, bank), 12)
    assert [h.item for h in resumed.history] == [h.item for h in ref.history]
    assert resumed.predicted_score(by=False).accuracy == ref.predicted_score(by=False).accuracy
    resumed.close()


def test_pruned_top_k_equals_a_full_sort_with_ties_to_the_lower_index():
    g = np.random.default_rng(12)
    loadings = g.normal(0, 1.0, (400, 2))
    loadings[50] = loadings[7]  # an exact tie, the later index first in no order
    intercepts = g.normal(0, 1, 400)
    intercepts[50] = intercepts[7]
    f = ScoreFactors(loadings, intercepts)
    for n_answers in (0, 5, 30):
        items, y = _answers(f, n_answers, seed=n_answers) if n_answers else (np.empty(0, int), np.empty(0))
        mode, cov = f.posterior(items, y)
        eligible = g.random(400) < 0.7
        eligible[[7, 50]] = True
        gain = f.d_optimal_gain(mode, cov, np.arange(400))
        want = np.lexsort((np.arange(400), -np.where(eligible, gain, -np.inf)))[:9]
        idx, val = f.best_d_optimal(mode, cov, eligible, 9)
        np.testing.assert_array_equal(idx, want)
        np.testing.assert_allclose(val, gain[want], rtol=1e-12)
