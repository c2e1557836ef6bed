"""The steps of one LaRT SAEM iteration (calibration/methods/lart/saem_steps.py), each against its
naive twin in tests/naive_lart.py or a brute-force reference."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special, stats

from calibration.methods.lart import saem_steps as S

try:  # tests/ may or may not be a package
    from . import naive_lart as NL
except ImportError:
    import naive_lart as NL


def _cot_case(rng, N=40, J=4, missing=0.2):
    Y = rng.normal(1.0, 0.8, size=(N, J))
    Y[rng.random((N, J)) < missing] = np.nan
    seen = ~np.isnan(Y)
    return Y, seen.astype(np.float64), np.where(seen, Y, 0.0)


def _averaged(draws, seen_f, Y0, n_burnin=0):
    """Run the SA-step over (theta, tau) draws as the loop does; returns the statistics."""
    st = {}
    for t, (theta, tau) in enumerate(draws, start=1):
        S.sa_update(st, S.sufficient_stats(theta, tau, seen_f, Y0), S.step_size(t, n_burnin))
    return st


# ----------------------------------------------------------------------------- SA-step, stop rule


def test_step_size_schedule_and_stopping_rule():
    assert [S.step_size(t, 0) for t in (1, 2, 4)] == [1.0, 0.5, 0.25]
    assert [S.step_size(t, 3) for t in (1, 4, 5, 7)] == [1.0, 1.0, 0.5, 0.25]
    assert not S.saem_converged(4, 3, 0.0, 1e-3)  # the last burn-in step never stops the fit
    assert S.saem_converged(5, 3, 5e-4, 1e-3) and not S.saem_converged(5, 3, 2e-3, 1e-3)
    a, b = np.array([1.0, 2.0]), np.array([0.0, 1.0])
    assert S.mean_abs_change(a + [0.1, -0.3], b + [0.2, 0.0], a, b) == pytest.approx(0.2 + 0.1)


def test_sa_update_forgets_the_burn_in_and_then_averages():
    rng = np.random.default_rng(1)
    Y, seen_f, Y0 = _cot_case(rng)
    draws = [(rng.normal(size=40), rng.normal(size=40)) for _ in range(6)]
    st = _averaged(draws, seen_f, Y0, n_burnin=2)
    kept = draws[2:]  # alpha = 1 up to t = n_burnin + 1 = 3: the plain average of draws 3..6
    assert st["m_t"] == pytest.approx(np.mean([th.mean() for th, _ in kept]), rel=1e-13)
    assert st["tu"] == pytest.approx(np.mean([(th * ta).mean() for th, ta in kept]), rel=1e-13)
    np.testing.assert_allclose(st["s_uy"], np.mean([ta @ Y0 for _, ta in kept], axis=0), rtol=1e-13)
    assert st["corr"] == pytest.approx(np.mean([np.corrcoef(th, ta)[0, 1] for th, ta in kept]), rel=1e-12)


def test_sa_averaged_cot_mstep_matches_naive_least_squares():
    """SA-step statistics over the draws + the closed-form CoT M-step = least squares over all
    stacked (draw, cell) pairs (tests/naive_lart.cot_mstep)."""
    rng = np.random.default_rng(2)
    Y, seen_f, Y0 = _cot_case(rng, N=30, J=5)
    taus = [rng.normal(size=30) for _ in range(4)]
    st = _averaged([(rng.normal(size=30), tau) for tau in taus], seen_f, Y0)
    got = S.cot_mstep(st, seen_f.sum(axis=0))
    for g, want in zip(got, NL.cot_mstep(taus, Y)):
        np.testing.assert_allclose(g, want, rtol=1e-10)


# ----------------------------------------------------------------------------- M-step


@pytest.mark.parametrize("carry_tol", [0.0, 0.005])
def test_accuracy_mstep_matches_naive_argmax_over_the_history(carry_tol):
    rng = np.random.default_rng(3)
    N, J, M = 60, 4, 5
    R = rng.integers(-1, 2, (N, J)).astype(np.int8)
    hist = np.zeros((M, N))
    a, b = np.full(J, 0.8), np.zeros(J)
    cache, n_passes, carried = np.zeros((J, 6)), np.zeros(J, dtype=np.int64), np.zeros(J)
    ridge = 1.0 / 25.0
    prior = np.array([0.0, 0.0, 0.0, ridge])
    for m in range(1, M + 1):
        hist[m - 1] = rng.normal(size=N)
        out = S.accuracy_mstep(R, hist, m, 1.0 / m, a, b, prior, cache, n_passes, carried,
                               newton_tol=1e-9, carry_tol=carry_tol, empirical_bayes=False)
        assert out is prior and np.all(n_passes >= 0)
        # the carried quadratic model moves the point by ~carry_tol^2 at most
        atol = 1e-6 if carry_tol == 0.0 else 5e-4
        for j in range(J):
            np.testing.assert_allclose([a[j], b[j]], NL.item_argmax(j, R, list(hist[:m]), (a[j], b[j]), ridge), atol=atol)


def test_empirical_bayes_update_matches_the_naive_information():
    rng = np.random.default_rng(4)
    N, J = 80, 6
    R = rng.integers(0, 2, (N, J)).astype(np.int8)
    hist = rng.normal(size=(2, N))
    a, b = np.full(J, 0.5), np.zeros(J)
    cache, n_passes, carried = np.zeros((J, 6)), np.zeros(J, dtype=np.int64), np.zeros(J)
    prior = np.array([0.3, 2.0, -0.1, 0.5])
    for m in (1, 2):  # the cache averages the history one draw at a time
        new = S.accuracy_mstep(R, hist, m, 1.0 / m, a, b, prior, cache, n_passes, carried,
                               newton_tol=1e-10, carry_tol=0.0, empirical_bayes=m == 2)
    # naive: V_j = (minus the averaged data Hessian + prior precision)^-1 at the new point
    va, vb = np.empty(J), np.empty(J)
    for j in range(J):
        _, _, _, haa, hab, hbb = NL.item_objective(j, R, list(hist), a[j], b[j])
        V = np.linalg.inv(np.array([[-haa + prior[1], -hab], [-hab, -hbb + prior[3]]]))
        va[j], vb[j] = V[0, 0], V[1, 1]
    want = [a.mean(), 1.0 / np.mean((a - a.mean()) ** 2 + va), b.mean(), 1.0 / np.mean((b - b.mean()) ** 2 + vb)]
    np.testing.assert_allclose(new, want, rtol=1e-7)


def test_rho_mstep_rules():
    st = {"tt": 1.3, "uu": 0.9, "tu": -0.45, "corr": -0.41}
    assert S.rho_mstep(st, px=True, rule="exact") == -0.45
    assert S.rho_mstep({**st, "tu": -1.2}, px=True, rule="exact") == -0.999
    assert S.rho_mstep(st, px=False, rule="exact") == S.rho_exact_update(1.3, 0.9, -0.45)
    assert S.rho_mstep(st, px=False, rule="average") == -0.41


# ----------------------------------------------------------------------------- PX step


def test_px_standardise_relabels_history_cache_and_cot_statistics():
    """After PX the cached objective is the naive averaged objective of the standardised draws at
    (s a, b + m a), and the CoT statistics give the naive least squares on standardised taus."""
    rng = np.random.default_rng(5)
    N, J, M = 50, 3, 3
    R = rng.integers(0, 2, (N, J)).astype(np.int8)
    Y, seen_f, Y0 = _cot_case(rng, N=N, J=J)
    draws = [(rng.normal(0.4, 1.3, N), rng.normal(-0.2, 0.7, N)) for _ in range(M)]
    st = _averaged(draws, seen_f, Y0)
    hist = np.array([th for th, _ in draws])
    a, b = np.full(J, 0.9), np.full(J, 0.1)
    cache, n_passes, carried = np.zeros((J, 6)), np.zeros(J, dtype=np.int64), np.zeros(J)
    for m in range(1, M + 1):  # the cache averages the history one draw at a time
        S.accuracy_mstep(R, hist, m, 1.0 / m, a, b, np.zeros(4), cache, n_passes, carried,
                         newton_tol=1e-10, carry_tol=0.0, empirical_bayes=False)
    m_t, s_t = st["m_t"], np.sqrt(st["tt"] - st["m_t"] ** 2)
    m_u, s_u = st["m_u"], np.sqrt(st["uu"] - st["m_u"] ** 2)
    hist0, a0, b0 = hist.copy(), a.copy(), b.copy()
    theta, tau = draws[-1]
    a2, b2, theta2, start2, tau2 = S.px_standardise(st, hist, M, cache, a, b, theta, theta.copy(), tau, seen_f.sum(0))
    np.testing.assert_allclose(hist, (hist0 - m_t) / s_t, rtol=1e-13)
    np.testing.assert_allclose(theta2, (theta - m_t) / s_t, rtol=1e-13)
    np.testing.assert_allclose(tau2, (tau - m_u) / s_u, rtol=1e-13)
    np.testing.assert_allclose(a2, a0 * s_t, rtol=1e-13)
    np.testing.assert_allclose(b2, b0 + a0 * m_t, rtol=1e-13)
    for j in range(J):
        np.testing.assert_allclose(cache[j], NL.item_objective(j, R, list(hist), a2[j], b2[j]), rtol=1e-8, atol=1e-10)
    assert (st["m_t"], st["tt"], st["m_u"], st["uu"]) == (0.0, 1.0, 0.0, 1.0)
    got = S.cot_mstep(st, seen_f.sum(axis=0))
    for g, want in zip(got, NL.cot_mstep([(ta - m_u) / s_u for _, ta in draws], Y)):
        np.testing.assert_allclose(g, want, rtol=1e-9)


# ----------------------------------------------------------------------------- S-step


def _posterior_grid(r_row, y_row, a, b, omega, phi, lam, rho, n=801, half=7.0):
    """Normalised joint posterior of (theta, tau) of one LLM on a grid (scipy log_ndtr, no kernels)."""
    g = np.linspace(-half, half, n)
    TH, TA = np.meshgrid(g, g, indexing="ij")
    f = -0.5 * (TH**2 - 2 * rho * TH * TA + TA**2) / (1 - rho * rho)
    for j in range(len(a)):
        if r_row[j] >= 0:
            f += special.log_ndtr((1.0 if r_row[j] > 0 else -1.0) * (a[j] * TH + b[j]))
        if not np.isnan(y_row[j]):
            f -= 0.5 * (y_row[j] - omega[j] + phi[j] * TA) ** 2 / lam[j] ** 2
    p = np.exp(f - f.max())
    return g, p / p.sum()


def _ks_against(draws, grid, marginal):
    cdf = np.cumsum(marginal)
    return stats.kstest(draws, lambda x: np.interp(x, grid, cdf)).pvalue


@pytest.mark.parametrize("sampler", ["ars", "sun"])
def test_draw_traits_follow_the_joint_posterior(sampler):
    """One LLM's row repeated: the S-step's (theta, tau) draws against the grid marginals."""
    rng = np.random.default_rng(6)
    J, n = 5, 4000 if sampler == "ars" else 600
    a, b = rng.uniform(0.5, 1.5, J), rng.normal(0, 0.5, J)
    omega, phi, lam, rho = rng.normal(6, 0.3, J), rng.uniform(0.2, 0.5, J), rng.uniform(0.3, 0.6, J), -0.6
    r_row = np.array([1, 0, 1, -1, 1], dtype=np.int8)
    y_row = np.array([6.2, np.nan, 5.7, 6.4, 6.0])
    R, Y = np.tile(r_row, (n, 1)), np.tile(y_row, (n, 1))
    theta, tau, modes = S.draw_traits(R, a, b, np.random.default_rng(7), sampler=sampler, theta_start=np.zeros(n),
                                      cot=(Y, omega, phi, lam, rho))
    assert (modes is None) == (sampler == "sun")
    grid, p = _posterior_grid(r_row, y_row, a, b, omega, phi, lam, rho)
    assert _ks_against(theta, grid, p.sum(axis=1)) > 1e-3
    assert _ks_against(tau, grid, p.sum(axis=0)) > 1e-3


def test_draw_traits_irt_only_matches_the_naive_grid_sampler():
    rng = np.random.default_rng(8)
    J, n = 6, 3000
    a, b = rng.uniform(0.5, 1.5, J), rng.normal(0, 0.5, J)
    r_row = np.array([1, 1, 0, -1, 0, 1], dtype=np.int8)
    theta, tau, modes = S.draw_traits(np.tile(r_row, (n, 1)), a, b, np.random.default_rng(9), theta_start=np.zeros(n))
    assert tau is None and modes.shape == (n,)
    ref = NL.grid_sampler(r_row, a, b, 0.0, 1.0, n, np.random.default_rng(10))
    assert stats.ks_2samp(theta, ref).pvalue > 1e-3


def test_impute_censored_draws_the_truncated_normal():
    rng = np.random.default_rng(11)
    N, J = 3000, 2
    omega, phi, lam, y_cap = np.array([5.0, 6.0]), np.array([0.4, 0.2]), np.array([0.5, 0.3]), 5.3
    tau = np.full(N, 0.5)
    Y = np.full((N, J), 4.0)
    C = np.zeros((N, J), bool)
    C[:, 0] = True
    S.impute_censored(Y, C, tau, omega, phi, lam, y_cap, rng)
    assert np.all(Y[:, 1] == 4.0) and np.all(Y[:, 0] >= y_cap)
    mean, sd = omega[0] - phi[0] * 0.5, lam[0]
    ref = stats.truncnorm((y_cap - mean) / sd, np.inf, loc=mean, scale=sd)
    assert stats.kstest(Y[:, 0], ref.cdf).pvalue > 1e-3
