"""The scoped last-layer Laplace posterior of PSN-IRT (calibration.methods.psn.laplace)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import naive_psn as naive
from calibration.methods.psn import fit_ability_posterior, fit_item_posterior, p_ahead, tune_prior_precision
from calibration.methods.psn.laplace import ReadoutPosterior, cell_curvature
from psn_cases import _cells

# ============================================================================ Laplace


def _readout_problem(seed=0, asymptotes=True):
    """Tiny ability / item readout problem with all cells observed."""
    rng = np.random.default_rng(seed)
    N, J, E = 5, 9, 3
    U = rng.normal(0, 1, (N, E))
    V = rng.normal(0, 1, (J, E))
    wt = rng.normal(0, 0.7, E + 1)
    wb = rng.normal(0, 0.7, E + 1)
    wa = rng.normal(1.0, 0.3, E + 1) * 0.5
    Phi = np.hstack([U, np.ones((N, 1))])
    Psi = np.hstack([V, np.ones((J, 1))])
    theta = Phi @ wt
    beta = Psi @ wb
    a = Psi @ wa
    if asymptotes:
        c, d = rng.uniform(0.05, 0.3, J), rng.uniform(0.7, 0.95, J)
    else:
        c, d = np.zeros(J), np.ones(J)
    s, i = (x.ravel() for x in np.meshgrid(np.arange(N), np.arange(J), indexing="ij"))
    P = c[i] + (d[i] - c[i]) / (1 + np.exp(-a[i] * (theta[s] - beta[i])))
    y = (rng.random(s.size) < P).astype(float)
    return dict(U=U, V=V, wt=wt, wb=wb, wa=wa, theta=theta, beta=beta, a=a, c=c, d=d, cells=(s, i, y))


def _nlp(loglik_fn, w, delta):
    return -loglik_fn(w) + 0.5 * delta * w @ w


def _fd_hessian(f, w, h=1e-4):
    P = w.size
    H = np.zeros((P, P))
    for p in range(P):
        for q in range(P):
            e_p, e_q = np.eye(P)[p] * h, np.eye(P)[q] * h
            H[p, q] = (f(w + e_p + e_q) - f(w + e_p - e_q) - f(w - e_p + e_q) + f(w - e_p - e_q)) / (4 * h * h)
    return H


def _loglik(theta, beta, a, c, d, cells):
    s, i, y = cells
    return cell_curvature(theta, beta, a, c, d, s, i, y, "fisher")[1].sum()


@pytest.mark.parametrize("branch", ["ability", "b"])
@pytest.mark.parametrize("case", ["exact-4pl", "fisher-2pl"])
def test_laplace_hessian_equals_fd_hessian(branch, case):
    """H = GGN + delta I equals the finite-difference Hessian of the negative log posterior of the readout.

    eta = a (theta - beta) is linear in either readout, so with the observed ("exact") curvature
    the GGN *is* the Hessian (4PL with asymptotes); with the default Fisher curvature the two
    coincide where the link is canonical (c = 0, d = 1), which is where they should agree.
    """
    curvature, asym = ("exact", True) if case == "exact-4pl" else ("fisher", False)
    pb = _readout_problem(seed=1, asymptotes=asym)
    delta = 0.7
    c, d, cells = pb["c"], pb["d"], pb["cells"]
    if branch == "ability":
        post = fit_ability_posterior(pb["U"], pb["wt"], (pb["beta"], pb["a"], c, d), cells, prior_precision=delta, curvature=curvature)
        Phi = np.hstack([pb["U"], np.ones((pb["U"].shape[0], 1))])
        f = lambda w: _nlp(lambda w_: _loglik(Phi @ w_, pb["beta"], pb["a"], c, d, cells), w, delta)
        w0 = pb["wt"]
    else:
        post = fit_item_posterior(pb["V"], pb["wb"], pb["theta"], (pb["beta"], pb["a"], c, d), cells, prior_precision=delta, curvature=curvature)
        Psi = np.hstack([pb["V"], np.ones((pb["V"].shape[0], 1))])
        f = lambda w: _nlp(lambda w_: _loglik(pb["theta"], Psi @ w_, pb["a"], c, d, cells), w, delta)
        w0 = pb["wb"]
    H_fd = _fd_hessian(f, w0)
    # second differences with h = 1e-4 on an O(10) function: error ~1e-6 relative
    np.testing.assert_allclose(post.precision, H_fd, rtol=1e-5, atol=1e-5 * np.abs(H_fd).max())
    # the log-likelihood stored for the evidence is the one at the mean
    assert -f(w0) + 0.5 * delta * w0 @ w0 == pytest.approx(post.log_likelihood, rel=1e-12)


def test_fisher_ggn_is_not_exact_hessian_with_asymptotes():
    """Documented choice: with c > 0 or d < 1 the Fisher GGN differs from the exact Hessian (and stays PSD)."""
    pb = _readout_problem(seed=2, asymptotes=True)
    args = (pb["U"], pb["wt"], (pb["beta"], pb["a"], pb["c"], pb["d"]), pb["cells"])
    fisher = fit_ability_posterior(*args, curvature="fisher")
    exact = fit_ability_posterior(*args, curvature="exact")
    assert not np.allclose(fisher.ggn, exact.ggn, rtol=1e-3)
    assert np.linalg.eigvalsh(fisher.ggn).min() > -1e-10


@pytest.mark.parametrize("mode", ["fisher", "logistic", "exact"])
def test_curvature_kernel_matches_naive(mode):
    rng = np.random.default_rng(3)
    N, J, n = 4, 6, 50
    theta, beta, a = rng.normal(0, 1, N), rng.normal(0, 1, J), rng.normal(1, 0.5, J)
    c, d = rng.uniform(0, 0.3, J), rng.uniform(0.7, 1.0, J)
    s, i, y = _cells(N, J, n, seed=4)
    lam, ll = cell_curvature(theta, beta, a, c, d, s, i, y, mode)
    ref = [naive.cell_curvature(theta[s[k]], beta[i[k]], a[i[k]], c[i[k]], d[i[k]], y[k], mode) for k in range(n)]
    # "exact" is checked against second differences (h = 1e-4): error ~1e-7
    np.testing.assert_allclose(lam, ref, rtol=1e-6 if mode == "exact" else 1e-12, atol=1e-7)
    p = c[i] + (d[i] - c[i]) / (1 + np.exp(-a[i] * (theta[s] - beta[i])))
    np.testing.assert_allclose(ll, np.where(y == 1, np.log(p), np.log1p(-p)), rtol=1e-12)


def test_joint_ab_ggn_equals_per_cell_sum():
    """Joint (b, a) GGN built from per-item weights == sum over cells of Lambda J J' (J = d eta / d[w_b; w_a])."""
    pb = _readout_problem(seed=3, asymptotes=True)
    post = fit_item_posterior(
        pb["V"], pb["wb"], pb["theta"], (pb["beta"], pb["a"], pb["c"], pb["d"]), pb["cells"], a_readout=pb["wa"], prior_precision=1.0
    )
    s, i, y = pb["cells"]
    Psi = np.hstack([pb["V"], np.ones((pb["V"].shape[0], 1))])
    G = np.zeros((2 * Psi.shape[1],) * 2)
    for k in range(s.size):
        j = i[k]
        lam = naive.cell_curvature(pb["theta"][s[k]], pb["beta"][j], pb["a"][j], pb["c"][j], pb["d"][j], y[k], "fisher")
        Jn = np.concatenate([-pb["a"][j] * Psi[j], (pb["theta"][s[k]] - pb["beta"][j]) * Psi[j]])
        G += lam * np.outer(Jn, Jn)
    np.testing.assert_allclose(post.ggn, G, rtol=1e-10, atol=1e-12)
    draws = post.sample(3, rng=0)
    assert draws.shape == (3, Psi.shape[0], 2)


def test_gaussian_marginals_match_joint_draws():
    """Closed-form marginal variances and covariances == empirical moments of many joint draws."""
    pb = _readout_problem(seed=4)
    post = fit_item_posterior(pb["V"], pb["wb"], pb["theta"], (pb["beta"], pb["a"], pb["c"], pb["d"]), pb["cells"], prior_precision=0.5)
    n = 40_000
    draws = post.sample(n, rng=11)
    emp_cov = np.cov(draws, rowvar=False)
    cov = post.covariance()
    np.testing.assert_allclose(np.diag(cov), post.marginal_variance(), rtol=1e-10)
    # sample variances: relative SE sqrt(2/n) = 0.7%; 5 SE
    np.testing.assert_allclose(np.diag(emp_cov), post.marginal_variance(), rtol=0.035)
    sd = np.sqrt(np.diag(cov))
    # correlations: SE <= 1/sqrt(n) = 0.005
    np.testing.assert_allclose(emp_cov / np.outer(sd, sd), cov / np.outer(sd, sd), atol=0.03)
    np.testing.assert_allclose(draws.mean(axis=0), post.predictive_mean(), atol=5 * sd.max() / math.sqrt(n))
    # subsets give the same marginals
    np.testing.assert_allclose(post.marginal_variance([2, 5]), post.marginal_variance()[[2, 5]], rtol=1e-12)


def test_tune_prior_precision_maximises_evidence():
    pb = _readout_problem(seed=5)
    post = fit_ability_posterior(pb["U"], pb["wt"], (pb["beta"], pb["a"], pb["c"], pb["d"]), pb["cells"])
    tuned = tune_prior_precision(post)
    assert tuned.tuned and tuned.prior_precision > 0
    best = tuned.log_marginal_likelihood()
    for delta in np.geomspace(1e-3, 1e3, 25):
        assert best >= post.log_marginal_likelihood(delta) - 1e-8
    # the evidence formula equals its definition through log det(GGN + delta I)
    delta = 2.5
    sign, logdet = np.linalg.slogdet(post.ggn + delta * np.eye(post.n_weights))
    manual = post.log_likelihood - 0.5 * delta * post.mean @ post.mean + 0.5 * post.n_weights * np.log(delta) - 0.5 * logdet
    assert post.log_marginal_likelihood(delta) == pytest.approx(manual, rel=1e-12)


def test_temperature_tempers_the_likelihood():
    pb = _readout_problem(seed=8)
    post = fit_ability_posterior(pb["U"], pb["wt"], (pb["beta"], pb["a"], pb["c"], pb["d"]), pb["cells"], prior_precision=0.3)
    hot = post.with_temperature(50.0)
    np.testing.assert_allclose(hot.precision, post.ggn / 50.0 + 0.3 * np.eye(post.n_weights), rtol=1e-14)
    assert np.all(hot.marginal_variance() > post.marginal_variance())
    sign, logdet = np.linalg.slogdet(post.ggn / 50.0 + 0.3 * np.eye(post.n_weights))
    manual = post.log_likelihood / 50.0 - 0.15 * post.mean @ post.mean + 0.5 * post.n_weights * np.log(0.3) - 0.5 * logdet
    assert hot.log_marginal_likelihood() == pytest.approx(manual, rel=1e-12)
    with pytest.raises(ValueError):
        post.with_temperature(0.0)


def test_mean_loss_posterior_does_not_narrow_with_more_cells():
    # Seed 002 reports that its a-and-b miscalibration was "unaffected by a 10x increase in fitting
    # data": true of the Laplace of the *mean* loss (T = number of cells), not of the summed one.
    pb = _readout_problem(seed=9)
    s, j, y = pb["cells"]
    tenfold = (np.tile(s, 10), np.tile(j, 10), np.tile(y, 10))
    item_params = (pb["beta"], pb["a"], pb["c"], pb["d"])
    one = fit_ability_posterior(pb["U"], pb["wt"], item_params, pb["cells"], temperature=float(s.size))
    ten = fit_ability_posterior(pb["U"], pb["wt"], item_params, tenfold, temperature=float(10 * s.size))
    np.testing.assert_allclose(ten.covariance(), one.covariance(), rtol=1e-10)
    plain_one = fit_ability_posterior(pb["U"], pb["wt"], item_params, pb["cells"])
    plain_ten = fit_ability_posterior(pb["U"], pb["wt"], item_params, tenfold)
    assert np.all(plain_ten.marginal_variance() < 0.5 * plain_one.marginal_variance())  # 0.1x less the prior


def test_p_ahead_against_draws():
    rng = np.random.default_rng(6)
    A = rng.normal(0, 1, (4, 4))
    cov = A @ A.T + 0.1 * np.eye(4)
    mean = rng.normal(0, 1, 4)
    pa = p_ahead(mean, cov)
    np.testing.assert_allclose(pa + pa.T, 1.0, atol=1e-12)
    draws = rng.multivariate_normal(mean, cov, 100_000)
    emp = (draws[:, :, None] > draws[:, None, :]).mean(axis=0)
    np.fill_diagonal(emp, 0.5)
    np.testing.assert_allclose(pa, emp, atol=0.01)  # binomial SE <= 0.0016


def test_n_separated_pairs_by_hand():
    from calibration.methods.psn import n_separated_pairs

    pa = np.array([[0.5, 0.97, 0.60], [0.03, 0.5, 0.04], [0.40, 0.96, 0.5]])
    assert n_separated_pairs(pa) == 2  # (0, 1) at 0.97 and (1, 2) at 0.04; (0, 2) at 0.60 is open
    assert n_separated_pairs(pa, level=0.55) == 3


def test_non_pd_precision_raises_clear_error():
    pb = _readout_problem(seed=7)
    post = fit_ability_posterior(pb["U"], pb["wt"], (pb["beta"], pb["a"], pb["c"], pb["d"]), pb["cells"])
    bad = ReadoutPosterior(post.mean, -10 * np.eye(post.n_weights), post.features, 1.0, "exact", 0.0, 1)
    with pytest.raises(np.linalg.LinAlgError, match="not positive definite"):
        bad.marginal_variance()
