"""The fast paths of issue 33 against references: cBMM's block-product loss, LaRT's vectorised probit
terms, and the carried (quadratic-model) M-step of LaRT SAEM. No timings are asserted."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special, stats

from calibration.methods.cbmm import _kernels as CK
from calibration.methods.cbmm.calibrator import _sumsq, _transposed
from calibration.methods.lart import _kernels as LK
from catengine.models.kernels import probit_curvature

try:
    from . import naive_cbmm as naive
    from . import naive_lart as NL
except ImportError:
    import naive_cbmm as naive
    import naive_lart as NL


# ------------------------------------------------------------------------------------------ cBMM
@pytest.mark.parametrize("n", [255, 256, 257, 1300])
def test_cbmm_loss_pass_over_several_product_blocks_matches_naive(n):
    """The loss pass sums log(1 + e) as logs of products over blocks of _LOSS_BLOCK cells."""
    rng = np.random.default_rng(n)
    j = 17
    c = (rng.random((n, j)) < 0.5).astype(np.int8)
    c[rng.random((n, j)) < 0.2] = -1
    theta, a, b = rng.normal(size=n) * 2, rng.uniform(0, 3, j), rng.normal(size=j) * 4
    rows = np.sort(rng.choice(n, size=n - 5, replace=False)).astype(np.int64)
    roww = np.zeros(n)
    roww[rows] = 1.0
    out = [np.full(j, np.nan) for _ in range(9)]
    CK.col_pass_r1(_transposed(c), theta, roww, a, b, np.arange(j, dtype=np.int64), *out, True)
    for got, ref in zip(out, naive.col_pass(c, theta, a, b, rows)):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-11)


def test_sumsq_is_the_sum_of_squares():
    x = np.random.default_rng(0).normal(size=(300, 2))
    assert _sumsq(x) == pytest.approx(float((x * x).sum()), rel=1e-14)
    assert _sumsq(x[:, 0].copy()) == pytest.approx(float((x[:, 0] ** 2).sum()), rel=1e-14)


# ------------------------------------------------------------------------------------------ LaRT
def test_vectorised_probit_terms_match_scipy():
    x = np.concatenate([np.linspace(-40, 37, 154_001), -np.logspace(-12, 1.5, 500), np.logspace(-12, 1.5, 500), [0.0]])
    got = LK.probit_vec_array(x)
    lp = special.log_ndtr(x)
    # log Phi: relative where |log Phi| is large, absolute (~1 ulp of 1) where Phi ~ 1
    np.testing.assert_allclose(got[:, 0], lp, rtol=2e-15, atol=3e-16)
    # Mills ratio phi / Phi: for x < 0 from erfcx (no exp, no cancellation); for x >= 0 phi / (1 - q)
    neg = x < 0
    with np.errstate(all="ignore"):
        m_ref = np.where(neg, np.sqrt(2 / np.pi) / special.erfcx(-x / np.sqrt(2)), stats.norm.pdf(x) / special.ndtr(x))
    np.testing.assert_allclose(got[neg, 1], m_ref[neg], rtol=5e-15)
    np.testing.assert_allclose(got[~neg, 1], m_ref[~neg], rtol=5e-14)
    # curvature m (x + m): above -20 against the same formula on the reference m; below, the
    # shared asymptotic series (x + m cancels: ~1e-13 relative there)
    hi = x >= -20
    c_ref = m_ref * (x + m_ref)
    np.testing.assert_allclose(got[hi, 2], c_ref[hi], rtol=1e-11, atol=1e-300)
    lo = ~hi
    c_series = np.array([probit_curvature(v) for v in x[lo]])
    np.testing.assert_allclose(got[lo, 2], c_series, rtol=5e-12)


def test_vectorised_probit_terms_agree_with_the_scalar_kernel_terms():
    x = np.linspace(-30, 30, 6001)
    got = LK.probit_vec_array(x)
    ref = np.array([NL.probit_terms(v) for v in x])
    np.testing.assert_allclose(got[:, 0], ref[:, 0], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(got[:, 1], ref[:, 1], rtol=1e-12)
    np.testing.assert_allclose(got[:, 2], ref[:, 2], rtol=1e-9)


def test_log_post_theta_matches_naive_twin_with_missing_cells():
    rng = np.random.default_rng(11)
    J = 301
    a, b = rng.uniform(0.2, 2.5, J), rng.normal(size=J) * 2
    r = rng.integers(-1, 2, J).astype(np.int8)
    for theta in (-6.0, -0.3, 0.0, 2.2, 9.0):
        got = LK.log_post_theta(theta, 0.4, 0.8, a, b, r)
        ref = NL.log_post_theta(theta, 0.4, 0.8, a, b, r)
        np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-12)


def test_carried_m_step_stays_within_its_quadratic_model_error():
    """Averaging phase with carry_tol > 0: an item skips the history pass while its moves since the
    last exact pass stay within carry_tol; the result stays within ~carry_tol^2 of the exact
    maximiser, and the cache refresh makes the stored information exact again."""
    rng = np.random.default_rng(4)
    N, J, M = 120, 6, 12
    R = rng.integers(-1, 2, (N, J)).astype(np.int8)
    R[:, 0] = np.where(R[:, 0] < 0, 1, R[:, 0])
    draws = rng.normal(size=(M, N)) * 0.05 + rng.normal(size=N)  # a slowly averaging history
    hist = np.zeros((M, N))
    prior = np.array([0.0, 0.0, 0.0, 1.0 / 25.0])
    runs = {}
    for carry_tol in (0.0, 0.005):
        a, b = np.full(J, 0.8), np.zeros(J)
        cache, n_passes, carried = np.zeros((J, 6)), np.zeros(J, dtype=np.int64), np.zeros(J)
        total = 0
        for m in range(1, M + 1):
            hist[m - 1] = draws[m - 1]
            LK.item_newton_cached(R, hist, m, 1.0 if m == 1 else 1.0 / m, a, b, prior, cache, 1e-9, 100, n_passes,
                                  carry_tol, carried)
            assert np.all(n_passes >= 0)
            total += int(n_passes.sum())
        runs[carry_tol] = (a.copy(), b.copy(), cache.copy(), total)
        if carry_tol > 0:
            assert carried.max() <= carry_tol + 1e-15
            LK.item_objective_cache(R, hist, M, a, b, cache)
            for j in range(J):
                np.testing.assert_allclose(cache[j], NL.item_objective(j, R, list(hist), a[j], b[j]), rtol=1e-9, atol=1e-10)
    (a0, b0, _, n0), (a1, b1, _, n1) = runs[0.0], runs[0.005]
    assert n1 < n0  # passes were saved
    np.testing.assert_allclose(a1, a0, atol=2e-4)
    np.testing.assert_allclose(b1, b0, atol=2e-4)
