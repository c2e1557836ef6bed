"""Exact posterior sampling of LaRT traits (calibration.methods.lart.sampling, docs/math.md §1.3, Lemma 1).

Distribution tests use many draws and a KS test at level 1e-3 (fixed seeds, so they are
deterministic; the level only says how surprising a failure would be).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from calibration.methods.lart import _kernels as K
from calibration.methods.lart import sampling as S

try:  # tests/ may or may not be a package
    from . import naive_lart as NL
    from . import naive_models as NM
except ImportError:
    import naive_lart as NL
    import naive_models as NM

from catengine.models import lart as shared_lart
from catengine.models.params import ItemParams

# a worked example of Lemma 1 (docs/math.md §1.3): J = 4, rho = -0.8, R = (1, 0, 1, 1)
EX = dict(
    a=np.array([1.136962, 0.769787, 0.540974, 0.516528]),
    b=np.array([-0.267835, 0.180798, 0.652000, 0.473540]),
    omega=np.array([-0.703735, -1.265421, -0.623274, 0.041326]),
    phi=np.array([1.357404, 0.533586, 1.229655, 0.675656]),
    lam=np.array([1.794768, 1.312192, 0.949568, 1.134031]),
    logt=np.array([-1.884608, 0.154131, -2.115681, -0.033010]),
    R=np.array([1, 0, 1, 1], dtype=np.int8),
    rho=-0.8,
)
KS_LEVEL = 1e-3


def _grid_cdf(r_row, a, b, mu, v):
    g, d = S.posterior_grid(r_row, a, b, mu, v)
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (d[1:] + d[:-1]) * np.diff(g))])
    cdf /= cdf[-1]
    return lambda q: np.interp(q, g, cdf)


def _joint_grid_moments(ex, n=801, half=6.0):
    """Brute-force 2-D grid of p(theta, tau | R, T): no Lemma 1, no sampler."""
    th = np.linspace(-half, half, n)
    ta = np.linspace(-half, half, n)
    TH, TA = np.meshgrid(th, ta, indexing="ij")
    s = 2.0 * ex["R"] - 1.0
    logp = np.zeros_like(TH)
    for j in range(4):
        logp += special.log_ndtr(s[j] * (ex["a"][j] * TH + ex["b"][j]))
        logp += -0.5 * (ex["logt"][j] - ex["omega"][j] + ex["phi"][j] * TA) ** 2 / ex["lam"][j] ** 2
    rho = ex["rho"]
    logp += -0.5 * (TH**2 - 2 * rho * TH * TA + TA**2) / (1 - rho**2)
    w = np.exp(logp - logp.max())
    w /= w.sum()
    m_th = float((w * TH).sum())
    m_ta = float((w * TA).sum())
    return {
        "E_theta": m_th,
        "Var_theta": float((w * (TH - m_th) ** 2).sum()),
        "E_tau": m_ta,
        "Var_tau": float((w * (TA - m_ta) ** 2).sum()),
        "Cov": float((w * (TH - m_th) * (TA - m_ta)).sum()),
    }


# ----------------------------------------------------------------------------- Lemma 1, worked example


def test_worked_example_prior_variance_and_posterior_moments():
    mu, v, s2, B = S.cot_informed_prior(EX["logt"][None], EX["omega"], EX["phi"], EX["lam"], EX["rho"])
    # the corrected CoT-informed prior variance of docs/math.md §1.3
    assert v[0] == pytest.approx(0.529794, abs=1e-6)
    # Lemma 1 (1-D marginal via the corrected prior) equals the brute-force 2-D grid
    grid = _joint_grid_moments(EX)
    assert grid["E_theta"] == pytest.approx(0.0276, abs=5e-5)
    assert grid["Var_theta"] == pytest.approx(0.2929, abs=5e-5)
    g, d = S.posterior_grid(EX["R"], EX["a"], EX["b"], mu[0], v[0])
    m = np.trapezoid(g * d, g)
    assert m == pytest.approx(grid["E_theta"], abs=1e-4)
    assert np.trapezoid((g - m) ** 2 * d, g) == pytest.approx(grid["Var_theta"], abs=1e-4)
    # the public code's variance 1/(1/(1-rho^2) - s2 rho^2/(1-rho^2)) would give ~0.249 instead
    rho = EX["rho"]
    v_public = 1.0 / (1.0 / (1 - rho**2) - s2[0] * rho**2 / (1 - rho**2))
    g2, d2 = S.posterior_grid(EX["R"], EX["a"], EX["b"], mu[0], v_public)
    m2 = np.trapezoid(g2 * d2, g2)
    assert np.trapezoid((g2 - m2) ** 2 * d2, g2) == pytest.approx(0.249, abs=2e-3)


def test_cot_informed_prior_matches_shared_model_and_limits():
    params = ItemParams("lart", a=EX["a"], b=EX["b"], omega=EX["omega"], phi=EX["phi"], lam=EX["lam"], rho=EX["rho"])
    lt = EX["logt"].copy()
    lt[1] = np.nan  # a missing CoT length
    mu, v, s2, B = S.cot_informed_prior(lt[None], EX["omega"], EX["phi"], EX["lam"], EX["rho"])
    mu_ref, v_ref = shared_lart.cot_informed_prior(params, None, lt)
    assert mu[0] == pytest.approx(mu_ref, rel=1e-12)
    assert v[0] == pytest.approx(v_ref, rel=1e-12)
    tmean, tvar = shared_lart.tau_conditional(params, 0.3, None, lt)
    assert s2[0] == pytest.approx(tvar, rel=1e-12)
    assert s2[0] * (B[0] + EX["rho"] * 0.3 / (1 - EX["rho"] ** 2)) == pytest.approx(tmean, rel=1e-12)
    # no CoT seen: N(0, 1); huge CoT information: N(rho tau_hat, 1 - rho^2)
    mu0, v0, *_ = S.cot_informed_prior(np.full((1, 4), np.nan), EX["omega"], EX["phi"], EX["lam"], EX["rho"])
    assert mu0[0] == 0.0 and v0[0] == 1.0
    big = S.cot_informed_prior(np.zeros((1, 4)), EX["omega"], EX["phi"] * 1e4, EX["lam"], EX["rho"])[1]
    assert big[0] == pytest.approx(1 - EX["rho"] ** 2, rel=1e-6)


# ----------------------------------------------------------------------------- kernels vs naive twins


def test_probit_terms_match_shared_primitives():
    for x in np.concatenate([np.linspace(-40, 12, 521), [-20.0, -19.999, -20.001, 0.0, 1e-12]]):
        lp, m, c = K._probit_terms(x)
        nlp, nm, nc = NL.probit_terms(x)
        assert lp == pytest.approx(nlp, rel=1e-12, abs=1e-15)
        assert m == pytest.approx(nm, rel=1e-10, abs=1e-300)
        assert c == pytest.approx(nc, rel=1e-8, abs=1e-300)


def test_log_post_theta_matches_naive_and_finite_differences():
    rng = np.random.default_rng(3)
    J = 12
    a = rng.normal(0.8, 0.6, J)
    b = rng.normal(0, 1, J)
    r = rng.integers(-1, 2, J).astype(np.int8)
    for theta in (-3.0, -0.2, 0.0, 1.7, 6.0):
        got = K.log_post_theta(theta, 0.3, 0.6, a, b, r)
        ref = NL.log_post_theta(theta, 0.3, 0.6, a, b, r)
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)
        h = 1e-5
        lp = K.log_post_theta(theta + h, 0.3, 0.6, a, b, r)
        lm = K.log_post_theta(theta - h, 0.3, 0.6, a, b, r)
        assert got[1] == pytest.approx((lp[0] - lm[0]) / (2 * h), rel=1e-6, abs=1e-7)
        assert got[2] == pytest.approx((lp[1] - lm[1]) / (2 * h), rel=1e-6, abs=1e-7)


# ----------------------------------------------------------------------------- exact samplers


def test_ars_matches_grid_on_worked_example():
    mu, v, *_ = S.cot_informed_prior(EX["logt"][None], EX["omega"], EX["phi"], EX["lam"], EX["rho"])
    n = 100_000
    x = S.sample_theta(np.repeat(EX["R"][None], n, 0), EX["a"], EX["b"], mu[0], v[0], rng=1)
    assert stats.kstest(x, _grid_cdf(EX["R"], EX["a"], EX["b"], mu[0], v[0])).pvalue > KS_LEVEL
    # MC moments: sd of the variance estimate ~ 0.2929 * sqrt(2/n) ~ 0.0013
    assert x.var() == pytest.approx(0.2929, abs=0.005)
    assert x.mean() == pytest.approx(0.0276, abs=0.006)


@pytest.mark.parametrize("case", ["random_small", "random_large", "all_correct_easy", "all_missing", "sharp"])
def test_ars_matches_grid_in_varied_cases(case):
    rng = np.random.default_rng(11)
    if case == "random_small":
        J = 3
        a, b = rng.uniform(0.3, 2, J), rng.normal(0, 1, J)
        r, mu, v = rng.integers(0, 2, J).astype(np.int8), 0.4, 0.5
    elif case == "random_large":
        J = 300
        a, b = rng.uniform(-0.5, 2.5, J), rng.normal(0, 1.5, J)
        r, mu, v = rng.integers(-1, 2, J).astype(np.int8), -0.3, 0.7
    elif case == "all_correct_easy":  # mass pushed into a one-sided, skewed shape
        J = 20
        a, b = np.full(J, 3.0), np.full(J, 4.0)
        r, mu, v = np.ones(J, np.int8), 0.0, 1.0
    elif case == "all_missing":  # posterior = prior
        J = 5
        a, b = rng.uniform(0.3, 2, J), rng.normal(0, 1, J)
        r, mu, v = -np.ones(J, np.int8), 0.7, 0.3
    else:  # nearly separable: a very sharp posterior
        J = 200
        a, b = np.full(J, 6.0), rng.normal(0, 3, J)
        r, mu, v = (b > 0).astype(np.int8), 0.0, 1.0
    n = 40_000
    x = S.sample_theta(np.repeat(r[None], n, 0), a, b, mu, v, rng=rng)
    assert np.all(np.isfinite(x))
    assert stats.kstest(x, _grid_cdf(r, a, b, mu, v)).pvalue > KS_LEVEL
    if case == "all_missing":
        assert stats.kstest(x, stats.norm(mu, math.sqrt(v)).cdf).pvalue > KS_LEVEL


def test_ars_matches_naive_inverse_cdf_sampler():
    rng = np.random.default_rng(5)
    J = 6
    a, b = rng.uniform(0.3, 2, J), rng.normal(0, 1, J)
    r = np.array([1, 0, 1, -1, 0, 1], dtype=np.int8)
    x = S.sample_theta(np.repeat(r[None], 30_000, 0), a, b, -0.2, 0.8, rng=rng)
    y = NL.grid_sampler(r, a, b, -0.2, 0.8, 30_000, rng)
    assert stats.ks_2samp(x, y).pvalue > KS_LEVEL


def test_sun_construction_matches_ars_and_grid():
    mu, v, *_ = S.cot_informed_prior(EX["logt"][None], EX["omega"], EX["phi"], EX["lam"], EX["rho"])
    cdf = _grid_cdf(EX["R"], EX["a"], EX["b"], mu[0], v[0])
    sun = S.sample_theta_sun(EX["R"], EX["a"], EX["b"], mu[0], v[0], rng=2, size=20_000)[0]
    sun_rej = S.sample_theta_sun(EX["R"], EX["a"], EX["b"], mu[0], v[0], rng=3, size=20_000, tmvn="rejection")[0]
    ars = S.sample_theta(np.repeat(EX["R"][None], 20_000, 0), EX["a"], EX["b"], mu[0], v[0], rng=4)
    assert stats.kstest(sun, cdf).pvalue > KS_LEVEL
    assert stats.kstest(sun_rej, cdf).pvalue > KS_LEVEL
    assert stats.ks_2samp(sun, ars).pvalue > KS_LEVEL
    assert stats.ks_2samp(sun_rej, ars).pvalue > KS_LEVEL


def test_sun_with_larger_j_matches_ars():
    # J = 15: the minimax-tilting TMVN sampler (rejection from the untruncated normal would
    # accept ~never here); compared with the fast sampler by a two-sample KS test
    rng = np.random.default_rng(8)
    J = 15
    a, b = rng.uniform(0.4, 1.5, J), rng.normal(0, 0.7, J)
    r = rng.integers(0, 2, J).astype(np.int8)
    sun = S.sample_theta_sun(r, a, b, 0.2, 0.6, rng=rng, size=4000)[0]
    ars = S.sample_theta(np.repeat(r[None], 20_000, 0), a, b, 0.2, 0.6, rng=rng)
    assert stats.ks_2samp(sun, ars).pvalue > KS_LEVEL
    assert stats.kstest(sun, _grid_cdf(r, a, b, 0.2, 0.6)).pvalue > KS_LEVEL


def test_tmvn_minimax_matches_rejection():
    rng = np.random.default_rng(9)
    A = rng.normal(size=(3, 3))
    cov = A @ A.T + 0.5 * np.eye(3)
    lower = np.array([-0.5, 0.2, -1.0])
    x = S.sample_tmvn(cov, lower, 20_000, method="minimax", rng=rng)
    y = S.sample_tmvn(cov, lower, 20_000, method="rejection", rng=rng)
    assert x.shape == (20_000, 3)
    assert np.all(x > lower)
    for k in range(3):
        assert stats.ks_2samp(x[:, k], y[:, k]).pvalue > KS_LEVEL
    # a linear combination too (joint, not only marginal, agreement)
    w = np.array([0.3, -1.0, 0.7])
    assert stats.ks_2samp(x @ w, y @ w).pvalue > KS_LEVEL


def test_joint_draw_matches_2d_grid_moments():
    grid = _joint_grid_moments(EX)
    n = 200_000
    th, ta = S.sample_traits(
        np.repeat(EX["R"][None], n, 0), np.repeat(EX["logt"][None], n, 0), EX["a"], EX["b"], EX["omega"],
        EX["phi"], EX["lam"], EX["rho"], rng=6,
    )
    # MC standard errors with n = 2e5 are ~0.0015 for means and ~0.002 for (co)variances
    assert th.mean() == pytest.approx(grid["E_theta"], abs=0.006)
    assert ta.mean() == pytest.approx(grid["E_tau"], abs=0.006)
    assert th.var() == pytest.approx(grid["Var_theta"], abs=0.006)
    assert ta.var() == pytest.approx(grid["Var_tau"], abs=0.006)
    assert np.cov(th, ta)[0, 1] == pytest.approx(grid["Cov"], abs=0.006)


def test_ars_retries_when_uniforms_run_out():
    # a kernel call with a single uniform pair must sometimes report -1 (ran out) and never fail
    rng = np.random.default_rng(0)
    n = 2000
    R = np.repeat(EX["R"][None], n, 0)
    out, modes, st = np.empty(n), np.empty(n), np.empty(n, dtype=np.int64)
    K.sample_theta_ars(R, EX["a"], EX["b"], np.zeros(n), np.ones(n), np.zeros(n), rng.random((n, 2)), out, modes, st)
    assert (st == -1).any() and (st == 1).any()
    assert np.all(np.isnan(out[st == -1])) and np.all(np.isfinite(out[st == 1]))


def test_sampler_input_validation_and_reproducibility():
    with pytest.raises(ValueError, match="R must hold"):
        S.sample_theta(np.array([[2, 0]]), [1, 1], [0, 0], 0, 1)
    with pytest.raises(ValueError, match="a has"):
        S.sample_theta(np.array([[1, 0]]), [1], [0, 0], 0, 1)
    with pytest.raises(ValueError, match="v must be > 0"):
        S.sample_theta(np.array([[1, 0]]), [1, 1], [0, 0], 0, 0.0)
    with pytest.raises(ValueError, match="rho"):
        S.cot_informed_prior(np.zeros((1, 2)), [0, 0], [1, 1], [1, 1], 1.0)
    with pytest.raises(ValueError, match="method"):
        S.sample_tmvn(np.eye(2), [0, 0], 3, method="gibbs")
    x1 = S.sample_theta(np.repeat(EX["R"][None], 50, 0), EX["a"], EX["b"], 0.0, 1.0, rng=7)
    x2 = S.sample_theta(np.repeat(EX["R"][None], 50, 0), EX["a"], EX["b"], 0.0, 1.0, rng=7)
    np.testing.assert_array_equal(x1, x2)
    assert S.sample_theta(EX["R"], EX["a"], EX["b"], 0.0, 1.0, rng=1).shape == (1,)


def test_naive_twin_of_probit_terms_is_independent():
    # guards the twin itself: its lower tail uses a continued fraction (naive_models)
    assert NM.log_phi_cdf(-30.0) == pytest.approx(float(special.log_ndtr(-30.0)), rel=1e-12)
