"""cBMM kernels against their naive twins (calibration.methods.cbmm._kernels); tolerances are explained inline."""

from __future__ import annotations

import numpy as np
import pytest

import naive_cbmm as naive
from calibration.methods.cbmm import _kernels as K
from calibration.methods.cbmm.calibrator import _Problem, _transposed, joint_nll
from cbmm_cases import _random_problem

# ------------------------------------------------------------------------------ kernels vs twins
def test_exp_and_log1p_polynomials_match_libm():
    x = -np.concatenate([np.linspace(0, 40, 400_001), np.linspace(40, 700, 10_001)])
    # the kernels' exp is a Cody-Waite + degree-12 polynomial: a few ulp from libm
    np.testing.assert_allclose(K.exp_neg_array(x), naive.exp_neg(x), rtol=1e-15, atol=0)
    e = np.concatenate([np.linspace(0, 1, 200_001), np.logspace(-300, 0, 2001)])
    np.testing.assert_allclose(K.log1p01_array(e), naive.log1p01(e), rtol=1e-15, atol=0)


@pytest.mark.parametrize("n,j", [(37, 53), (300, 70), (5, 1)])
def test_rank1_kernels_match_naive(n, j):
    rng = np.random.default_rng(n * 1000 + j)
    c = _random_problem(n, j, rng)
    c[0, :] = 1 if j > 1 else c[0, :]
    theta, a, b = rng.normal(size=n), rng.uniform(0, 2, j), rng.normal(size=j) * 3
    a[: j // 4] = 0.0
    rows = np.sort(rng.choice(n, size=max(1, n - 3), replace=False)).astype(np.int64)
    ct = _transposed(c)
    np.testing.assert_array_equal(ct, naive.transpose(c))
    roww = np.zeros(n)
    roww[rows] = 1.0
    cols = np.arange(j, dtype=np.int64)
    out = [np.full(j, np.nan) for _ in range(6)]
    K.col_pass_r1(ct, theta, roww, a, b, cols, *out, True)
    want = naive.col_pass(c, theta, a, b, rows)
    for got, ref in zip(out, want):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-11)
    out2 = [np.full(j, np.nan) for _ in range(6)]
    some = cols[::2]
    K.col_pass_r1(ct, theta, roww, a, b, some, *out2, False)
    for got, ref in zip(out2[:5], want[:5]):
        np.testing.assert_allclose(got[some], ref[some], rtol=1e-12, atol=1e-11)
        assert np.isnan(got[1::2]).all()  # columns not listed are left untouched

    an = rng.uniform(0, 2, j)
    an[0] = 0.0
    anb = rng.normal(size=j)
    ana = an * a
    theta_out, rsum = theta + 100.0, np.zeros(n)
    K.row_pass_r1(c, theta, a, b, an, an * an, ana, anb, rows, theta_out, rsum)
    ref_t, ref_r = naive.row_pass_r1(c, theta, a, b, an, an * an, ana, anb, rows)
    np.testing.assert_allclose(theta_out[rows], ref_t[rows], rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(rsum[rows], ref_r[rows], rtol=1e-11, atol=1e-11)
    others = np.setdiff1d(np.arange(n), rows)
    np.testing.assert_array_equal(theta_out[others], theta[others] + 100.0)  # inactive rows untouched

    row_on = np.zeros(n, np.uint8)
    row_on[rows] = 1
    col_on = (rng.random(j) < 0.8).astype(np.uint8)
    got = [np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(j, np.int64), np.zeros(j, np.int64)]
    K.count_pass(c, ct, row_on, col_on, *got)
    for g, r in zip(got, naive.count_pass(c, row_on, col_on)):
        np.testing.assert_array_equal(g, r)


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_rank_r_kernels_match_naive(rank):
    rng = np.random.default_rng(rank)
    n, j = 41, 29
    c = _random_problem(n, j, rng)
    theta, a, b = rng.normal(size=(n, rank)), rng.uniform(0, 1.5, (j, rank)), rng.normal(size=j)
    rows = np.arange(1, n, dtype=np.int64)
    ct = _transposed(c)
    roww = np.ones(n)
    roww[0] = 0.0
    cols = np.arange(j, dtype=np.int64)
    s0, cnt, lossj = np.zeros(j), np.zeros(j), np.zeros(j)
    s1, st, gram = np.zeros((j, rank)), np.zeros((j, rank)), np.zeros((j, rank, rank))
    K.col_pass_rk(ct, theta, roww, a, b, cols, s0, s1, cnt, st, gram, lossj, True)
    for got, ref in zip((s0, s1, cnt, st, gram, lossj), naive.col_pass(c, theta, a, b, rows)):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-11)

    col_on = (rng.random(j) < 0.85).astype(np.uint8)
    an = np.where(col_on[:, None] == 1, rng.uniform(0, 1.5, (j, rank)), 0.0)
    an[:, -1] = 0.0  # a dimension without loadings: H is singular, the proximal ridge keeps theta finite
    anb = an * rng.normal(size=j)[:, None]
    out, rsum = theta.copy(), np.zeros_like(theta)
    K.row_pass_rk(c, theta, a, b, an, anb, col_on, rows, 1e-12, out, rsum)
    ref_t, ref_r = naive.row_pass_rk(c, theta, a, b, an, anb, col_on, rows, 1e-12)
    np.testing.assert_allclose(out, ref_t, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(rsum, ref_r, rtol=1e-11, atol=1e-11)

    q = rng.normal(size=(j, rank)) * 5
    a_out = np.zeros((j, rank))
    cols = np.arange(j, dtype=np.int64)
    K.nnls_columns(gram, q, np.zeros((j, rank)), cols, 500, 1e-15, a_out)
    for jj in range(j):
        np.testing.assert_allclose(a_out[jj], naive.nnls_exact(gram[jj], q[jj]), rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(a_out[jj], naive.nnls_scipy(gram[jj], q[jj]), rtol=1e-7, atol=1e-9)

    mu = rng.uniform(0.2, 0.8, j)
    u = rng.normal(size=(n, rank))
    v = rng.normal(size=(j, rank))
    got_u, got_v = np.zeros((n, rank)), np.zeros((j, rank))
    K.zv_rows(c, v, mu, col_on, rows, got_u)
    K.ztu_cols(ct, u, roww, mu, cols, got_v)
    np.testing.assert_allclose(got_u[rows], naive.zv_rows(c, v, mu, col_on, rows)[rows], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_v, naive.ztu_cols(c, u, mu, rows), rtol=1e-12, atol=1e-12)


def test_extreme_theta_kernel_matches_brentq():
    rng = np.random.default_rng(5)
    n, j = 12, 40
    c = _random_problem(n, j, rng, missing=0.2)
    a, b = rng.uniform(0, 2, j), rng.normal(size=j)
    col_on = (rng.random(j) < 0.9).astype(np.uint8)
    rows = np.arange(n, dtype=np.int64)
    nobs = ((c >= 0) & (col_on[None, :] == 1)).sum(1)
    target = np.where(np.arange(n) % 2 == 0, nobs - 0.5, 0.5).astype(float)
    target[3] = nobs[3] + 5.0  # unreachable: clamps at hi
    out = np.zeros(n)
    K.extreme_theta(c, rows, a, b, col_on, target, -30.0, 30.0, 80, out)
    ref = naive.extreme_theta(c, rows, a, b, col_on, target, -30.0, 30.0)
    np.testing.assert_allclose(out, [ref[i] for i in rows], atol=1e-9)


@pytest.mark.parametrize("sigma", [1.0, 0.5])
def test_sweep_is_the_paper_sweep(sigma):
    """The streamed sweep (two passes, algebraically rearranged) equals the dense MATH.md formulas."""
    rng = np.random.default_rng(11)
    n, j = 60, 45
    c = _random_problem(n, j, rng, missing=0.5)
    row_on = np.ones(n, bool)
    row_on[[3, 7]] = False
    col_on = np.ones(j, bool)
    col_on[[0, 5]] = False
    theta, a, b = rng.normal(size=n), rng.uniform(0, 1, j), rng.normal(size=j)
    a[~col_on] = 0.0
    prob = _Problem(c, row_on, col_on, 1)
    loss, t2, a2, b2 = prob.sweep(theta, a / sigma, b / sigma)
    ref = naive.mm_sweep_dense(c, theta, a, b, sigma, np.flatnonzero(row_on), np.flatnonzero(col_on))
    assert loss == pytest.approx(ref[0], rel=1e-13)
    np.testing.assert_allclose(t2, ref[1], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(a2 * sigma, ref[2], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(b2 * sigma, ref[3], rtol=1e-10, atol=1e-10)


def test_joint_nll_and_gradient_match_dense():
    rng = np.random.default_rng(2)
    n, j = 50, 30
    c = _random_problem(n, j, rng)
    theta, a, b = rng.normal(size=n), rng.uniform(0, 1, j), rng.normal(size=j)
    for sigma in (1.0, 1.7):
        got = joint_nll(c, theta, a, b, sigma, gradient=True)
        ref = naive.joint_nll_dense(c, theta, a, b, sigma)
        assert got[0] == pytest.approx(ref[0], rel=1e-13)
        for g, r in zip(got[1:], ref[1:]):
            np.testing.assert_allclose(g, r, rtol=1e-11, atol=1e-11)
    # gradient vs central finite differences of the loss (independent of both)
    h = 1e-6
    loss_b = lambda bb: joint_nll(c, theta, a, bb, 1.3)  # noqa: E731
    k = 4
    e = np.zeros(j)
    e[k] = h
    fd = (loss_b(b + e) - loss_b(b - e)) / (2 * h)
    assert fd == pytest.approx(joint_nll(c, theta, a, b, 1.3, gradient=True)[3][k], rel=1e-6)
