"""The numba kernels of the score-factor fit (calibration.heldout._score_factor_kernels) against dense numpy
references of the objective and the Newton steps, and the fit through them against the fit
through the references."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit, log_expit

import calibration.heldout.score_factors as sf
from calibration.heldout import _score_factor_kernels as kernels

# ---------------------------------------------------------------------------------------------
# dense numpy references (N x J temporaries)


def reference_objective(Y, M, T, G, h, slope_variance, intercept_variance) -> float:
    z = T @ G.T + h[None, :]
    ll = np.sum(M * (Y * log_expit(z) + (1.0 - Y) * log_expit(-z)))
    return float(ll - 0.5 * np.sum(T * T) - 0.5 * np.sum(G * G) / slope_variance - 0.5 * np.sum(h * h) / intercept_variance)


def reference_item_sums(Y, M, T, G, h):
    P = expit(T @ G.T + h[None, :])
    W, R = M * P * (1.0 - P), M * (Y - P)
    X = np.hstack([T, np.ones((T.shape[0], 1))])
    return (X.T @ R).T, np.einsum("nk,nj,nl->jkl", X, W, X)


def reference_trait_sums(Y, M, T, G, h):
    P = expit(T @ G.T + h[None, :])
    W, R = M * P * (1.0 - P), M * (Y - P)
    return R @ G, np.einsum("jk,nj,jl->nkl", G, W, G)


def reference_item_step(Y, M, T, G, h, prior_item):
    d = G.shape[1]
    grad, hess = reference_item_sums(Y, M, T, G, h)
    psi = np.hstack([G, h[:, None]])
    grad = grad - psi @ prior_item
    hess = hess + prior_item
    step = np.linalg.solve(hess, grad[..., None])[..., 0]
    step /= np.maximum(1.0, np.abs(step).max(axis=1, keepdims=True))
    psi = psi + step
    return psi[:, :d].copy(), psi[:, d].copy()


def reference_trait_step(Y, M, T, G, h):
    grad_t, hess_t = reference_trait_sums(Y, M, T, G, h)
    grad_t = grad_t - T
    hess_t = hess_t + np.eye(G.shape[1])
    step_t = np.linalg.solve(hess_t, grad_t[..., None])[..., 0]
    step_t /= np.maximum(1.0, np.abs(step_t).max(axis=1, keepdims=True))
    return T + step_t


def reference_standardise(T, G, h):
    d = T.shape[1]
    m = T.mean(axis=0)
    L = np.linalg.cholesky(np.atleast_2d(np.cov(T, rowvar=False, bias=True)) + 1e-12 * np.eye(d))
    return np.linalg.solve(L, (T - m).T).T, G @ L, h + G @ m


def reference_sweeps(Y, M, T, G, h, slope_variance, intercept_variance, max_iter, tol):
    """The default scheme as plain numpy steps (what ``_kernels.standardised_sweeps`` compiles)."""
    d = G.shape[1]
    prior_item = np.diag([1.0 / slope_variance] * d + [1.0 / intercept_variance])
    f_old = reference_objective(Y, M, T, G, h, slope_variance, intercept_variance)
    converged, it, f = False, 0, f_old
    try:
        for it in range(1, max_iter + 1):
            G, h = reference_item_step(Y, M, T, G, h, prior_item)
            T = reference_trait_step(Y, M, T, G, h)
            T, G, h = reference_standardise(T, G, h)
            f = reference_objective(Y, M, T, G, h, slope_variance, intercept_variance)
            if not np.isfinite(f) or np.max(np.linalg.norm(G, axis=1)) > sf.RUNAWAY_LOADING_NORM:
                return None
            if abs(f - f_old) <= tol * max(1.0, abs(f)):
                converged = True
                break
            f_old = f
    except np.linalg.LinAlgError:
        return None
    return sf.ScoreFactorFit(G, h, T, converged, it, f)


# ---------------------------------------------------------------------------------------------
# problems


def _problem(N, J, d, seed, missing=0.15):
    """Float answers and weights with missing cells (one all-missing row and column), and parameters."""
    g = np.random.default_rng(seed)
    T = g.standard_normal((N, d))
    G = g.normal(0.0, 1.5, size=(J, d))
    h = g.normal(0.0, 1.0, size=J)
    y = (g.random((N, J)) < expit(T @ G.T + h)).astype(np.int8)
    y[g.random((N, J)) < missing] = -1
    y[1, :] = -1
    y[:, 2] = -1
    Y, M = sf._check_matrix(y)
    return Y, M, T, G, h


def _extreme_problem(N, J, d, seed):
    """Parameters whose logits reach |z| ~ 40 (and beyond in a few cells)."""
    Y, M, T, G, h = _problem(N, J, d, seed)
    h = h.copy()
    h[: J // 3] = 40.0
    h[J // 3: 2 * J // 3] = -40.0
    G = G.copy()
    G[: 2 * J // 3] *= 0.01
    return Y, M, T, G, h


def _assert_close(actual, expected, rtol=1e-10):
    scale = max(1.0, float(np.max(np.abs(expected))))
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale)


PROBLEMS = [(d, make) for d in (1, 2, 3) for make in (_problem, _extreme_problem)]


# ---------------------------------------------------------------------------------------------
# kernels against the references


@pytest.mark.parametrize("d,make", PROBLEMS)
def test_item_sums_match_the_dense_reference(d, make):
    Y, M, T, G, h = make(37, 300, d, seed=d)  # 300 items: two full blocks and a partial one
    grad, hess = kernels.item_newton_sums(Y, M, T, G, h)
    ref_grad, ref_hess = reference_item_sums(Y, M, T, G, h)
    assert grad.shape == (300, d + 1) and hess.shape == (300, d + 1, d + 1)
    _assert_close(grad, ref_grad)
    _assert_close(hess, ref_hess)
    assert np.all(grad[2] == 0.0) and np.all(hess[2] == 0.0)  # the all-missing item


@pytest.mark.parametrize("d,make", PROBLEMS)
def test_trait_sums_match_the_dense_reference(d, make):
    Y, M, T, G, h = make(37, 203, d, seed=10 + d)  # 203 items: a remainder after the partial sums
    grad, hess = kernels.trait_newton_sums(Y, M, T, G, h)
    ref_grad, ref_hess = reference_trait_sums(Y, M, T, G, h)
    assert grad.shape == (37, d) and hess.shape == (37, d, d)
    _assert_close(grad, ref_grad)
    _assert_close(hess, ref_hess)
    assert np.all(grad[1] == 0.0) and np.all(hess[1] == 0.0)  # the all-missing LLM


@pytest.mark.parametrize("d,make", PROBLEMS)
def test_objective_and_steps_match_the_dense_reference(d, make):
    Y, M, T, G, h = make(41, 157, d, seed=20 + d)
    prior_item = np.diag([1.0 / sf.SLOPE_VARIANCE] * d + [1.0 / sf.INTERCEPT_VARIANCE])
    priors = (sf.SLOPE_VARIANCE, sf.INTERCEPT_VARIANCE)
    assert sf._objective(Y, M, T, G, h, *priors) == pytest.approx(reference_objective(Y, M, T, G, h, *priors),
                                                                  rel=1e-12)
    for actual, expected in zip(sf._item_step(Y, M, T, G, h, prior_item),
                                reference_item_step(Y, M, T, G, h, prior_item)):
        _assert_close(actual, expected)
    _assert_close(sf._trait_step(Y, M, T, G, h), reference_trait_step(Y, M, T, G, h))


def test_log_likelihood_is_accurate_in_both_tails():
    z = np.array([-700.0, -60.0, -40.0, -36.9, -1e-3, 0.0, 1e-3, 0.4, 36.9, 40.0, 60.0, 700.0])
    for y in (0.0, 1.0):
        Y, M = np.full((1, z.size), y), np.ones((1, z.size))
        T, G = np.zeros((1, 1)), np.zeros((z.size, 1))
        cells = [kernels.log_likelihood(Y[:, [j]], M[:, [j]], T, G[[j]], z[[j]]) for j in range(z.size)]
        expected = y * log_expit(z) + (1.0 - y) * log_expit(-z)
        np.testing.assert_allclose(cells, expected, rtol=2e-15, atol=0.0)


def test_fractional_weights_enter_the_sums_as_in_the_dense_reference():
    Y, M, T, G, h = _problem(23, 60, 2, seed=5, missing=0.5)
    M = M * np.random.default_rng(0).random(M.shape)  # general weights, not only 0 / 1
    for actual, expected in zip(kernels.item_newton_sums(Y, M, T, G, h), reference_item_sums(Y, M, T, G, h)):
        _assert_close(actual, expected)
    assert kernels.log_likelihood(Y, M, T, G, h) == pytest.approx(
        reference_objective(Y, M, T, G, h, np.inf, np.inf) + 0.5 * np.sum(T * T), rel=1e-12)


def test_non_finite_parameters_give_nan_sums_and_objective():
    Y, M, T, G, h = _problem(10, 30, 2, seed=6)
    G = G.copy()
    G[4, 1] = np.nan
    assert np.isnan(kernels.log_likelihood(Y, M, T, G, h))
    assert np.all(np.isnan(kernels.item_newton_sums(Y, M, T, G, h)[1]))
    assert np.all(np.isnan(kernels.trait_newton_sums(Y, M, T, G, h)[0]))


def test_capped_newton_steps_solve_and_cap_like_numpy():
    g = np.random.default_rng(7)
    for D in (1, 2, 3, 4):
        A = g.standard_normal((50, D, D))
        hess = A @ A.transpose(0, 2, 1) + 0.1 * np.eye(D)
        grad = g.standard_normal((50, D)) * 3.0
        steps, ok = kernels.capped_newton_steps(hess, grad)
        expected = np.linalg.solve(hess, grad[..., None])[..., 0]
        expected /= np.maximum(1.0, np.abs(expected).max(axis=1, keepdims=True))
        assert ok
        np.testing.assert_allclose(steps, expected, rtol=1e-9, atol=1e-12)
    hess[3] = -np.eye(D)
    assert not kernels.capped_newton_steps(hess, grad)[1]
    with pytest.raises(np.linalg.LinAlgError):
        sf._capped_newton_steps(hess, grad)


# ---------------------------------------------------------------------------------------------
# the fit through the kernels against the fit through the references


def _simulated_two_factor(N=300, J=120, seed=3):
    g = np.random.default_rng(seed)
    eta = g.standard_normal((N, 2))
    load = np.c_[np.abs(g.normal(1.5, 0.5, J)), g.normal(0.0, 1.5, J)]
    y = (g.random((N, J)) < expit(eta @ load.T + g.normal(0, 1.2, J))).astype(np.int8)
    y[g.random(y.shape) < 0.05] = -1
    return y


def _fits(y, dims, monkeypatch, **kwargs):
    fit = sf.fit_score_factors(y, dims, **kwargs)
    with monkeypatch.context() as patch:
        patch.setattr(sf, "_standardised_sweeps", reference_sweeps)
        patch.setattr(sf, "_standardise", reference_standardise)
        patch.setattr(sf, "_objective", reference_objective)
        patch.setattr(sf, "_item_step", reference_item_step)
        patch.setattr(sf, "_trait_step", reference_trait_step)
        reference = sf.fit_score_factors(y, dims, **kwargs)
    return fit, reference


def _assert_same_fit(fit, reference):
    assert fit.n_iter == reference.n_iter and fit.converged == reference.converged
    assert fit.record == reference.record
    assert fit.log_posterior == pytest.approx(reference.log_posterior, rel=1e-8)
    for name in ("loadings", "intercepts", "traits"):
        actual, expected = getattr(fit, name), getattr(reference, name)
        np.testing.assert_allclose(actual, expected, rtol=1e-8, atol=1e-8 * np.max(np.abs(expected)), err_msg=name)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_standardise_keeps_the_logits_and_whitens_the_traits_as_numpy_does(d):
    g = np.random.default_rng(d)
    T = g.normal(0.3, 1.7, size=(57, d)) @ np.triu(g.normal(size=(d, d)) + 2.0 * np.eye(d))
    G, h = g.normal(size=(40, d)), g.normal(size=40)
    T2, G2, h2, ok = kernels.standardise(T, G, h)
    assert ok
    np.testing.assert_allclose(T2 @ G2.T + h2, T @ G.T + h, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(T2.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(np.atleast_2d(np.cov(T2, rowvar=False, bias=True)), np.eye(d), atol=1e-10)
    for actual, expected in zip((T2, G2, h2), reference_standardise(T, G, h)):
        np.testing.assert_allclose(actual, expected, rtol=1e-11, atol=1e-11)
    broken = T.copy()
    broken[3, 0] = np.nan
    assert not kernels.standardise(broken, G, h)[3]  # no covariance: the fit falls back (fit_score_factors)


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_fit_equals_the_fit_through_the_numpy_steps(dims, monkeypatch):
    fit, reference = _fits(_simulated_two_factor(), dims, monkeypatch)
    assert fit.converged
    _assert_same_fit(fit, reference)


def test_block_ascent_fallback_equals_the_one_through_the_numpy_steps(monkeypatch):
    g = np.random.default_rng(2)  # two runs per LLM of a strong two-factor model: the sweeps run away
    eta, load, inter = g.standard_normal((8, 2)), g.normal(0.0, 3.0, size=(500, 2)), g.normal(0.0, 2.0, size=500)
    y = (g.random((8, 500)) < expit(eta @ load.T + inter)).astype(np.int8)
    second = y.copy()
    flip = g.random(y.shape) < 0.02
    second[flip] = 1 - second[flip]
    fit, reference = _fits(np.vstack([y, second]), 2, monkeypatch)
    assert "fallback" in reference.record
    _assert_same_fit(fit, reference)
