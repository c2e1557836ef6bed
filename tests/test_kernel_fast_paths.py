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
    CK.col_pass_r1(_transposed(c), theta, roww, a, b, np.arange(j, dtype=np.int64), np.zeros(j, np.uint8), *out, True)
    for got, ref in zip(out, naive.col_pass(c, theta, a, b, rows)):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-11)


def _naive_sweep_r1(c, theta, a, b, rows, cols, prior, ridge):
    """The fused sweep from the dense twins: column sums (naive.col_pass), the a and b blocks as
    written in calibrator._Problem._blocks, then the theta block (naive.row_pass_r1) with a' = new a."""
    sums = naive.col_pass(c, theta, a, b, rows)
    s0, s1, cnt, st, st2 = sums[:5]
    a2, b2 = a.copy(), b.copy()
    L = 0.25
    for j in cols:
        if prior is not None:
            pa, ma, pb, mb = prior
            a2[j] = max(0.0, (L * (a[j] * st2[j] + s1[j]) + pa * ma) / (L * st2[j] + pa))
            b2[j] = (L * (cnt[j] * b[j] + s0[j] + (a[j] - a2[j]) * st[j]) + pb * mb) / (L * cnt[j] + pb)
        else:
            a2[j] = max(0.0, a[j] + s1[j] / st2[j]) if st2[j] > 0 else a[j]
            b2[j] = b[j] + (s0[j] + (a[j] - a2[j]) * st[j]) / cnt[j] if cnt[j] > 0 else b[j]
    an = np.zeros_like(a)
    an[cols] = a2[cols]
    t2, _ = naive.row_pass_r1(c, theta, a, b, an, an * an, an * a, an * (b - b2), rows, ridge=ridge)
    return sums, t2, a2, b2


@pytest.mark.parametrize("flags", ["none", "dense"])
@pytest.mark.parametrize("n_chunks", [1, 3, 7])
@pytest.mark.parametrize("with_prior", [False, True])
@pytest.mark.parametrize("want_loss", [True, False])
def test_fused_sweep_matches_naive_column_sums_and_blocks(n_chunks, with_prior, want_loss, flags):
    """sweep_r1 (one pass over the transposed matrix: column sums, a and b blocks, row sums of the
    theta block in column chunks) against the dense twins, with missing cells, inactive subjects
    and items, n not a multiple of the loss block, and (flags "dense") the columns observed for
    every active subject flagged for the dense path; its serial compile writes the parallel one's bits."""
    rng = np.random.default_rng(n_chunks * 10 + with_prior * 2 + want_loss)
    n, j = 300, 41
    c = (rng.random((n, j)) < 0.5).astype(np.int8)
    c[rng.random((n, j)) < 0.3] = -1
    c[:, 4] = -1
    c[:7, 4] = 1  # an item with only 7 observed answers
    theta, a, b = rng.normal(size=n) * 1.5, rng.uniform(0, 2, j), rng.normal(size=j) * 2
    a[:3] = 0.0
    rows = np.sort(rng.choice(n, size=n - 9, replace=False)).astype(np.int64)
    roww = np.zeros(n)
    roww[rows] = 1.0
    cols = np.sort(rng.choice(j, size=j - 5, replace=False)).astype(np.int64)
    dcols = np.r_[5:20, 22, 27:30, 33]  # dense among the active subjects (not among the others): runs and singles
    c[np.ix_(rows, dcols)] = np.abs(c[np.ix_(rows, dcols)])
    full = ((c[rows] >= 0).all(axis=0) if flags == "dense" else np.zeros(j, bool)).astype(np.uint8)
    assert flags == "none" or 0 < full[cols].sum() < cols.size
    bounds = (np.arange(n_chunks + 1, dtype=np.int64) * cols.size) // n_chunks
    prior = (4.0, 0.9, 0.5, -0.2) if with_prior else None
    ridge = 4.0 if with_prior else 0.0

    def run(kernel):
        out = [np.full(j, np.nan) for _ in range(9)]
        a2, b2, t2 = a + 10.0, b + 10.0, theta + 10.0
        bufs = [np.full((n_chunks, 2, n), np.nan)] + [np.full((n_chunks, n), np.nan) for _ in range(2)] + [np.full((n_chunks, 2), np.nan)]
        kernel(_transposed(c), theta, roww, a, b, cols, full, bounds, with_prior, *(prior or (0.0,) * 4), ridge,
               want_loss, *out, a2, b2, t2, *bufs)
        return out, t2, a2, b2

    out, t2, a2, b2 = run(CK.sweep_r1)
    sums, ref_t, ref_a, ref_b = _naive_sweep_r1(c, theta, a, b, rows, cols, prior, ridge)
    for k, (got, ref) in enumerate(zip(out, sums)):
        if want_loss or k < 5:
            np.testing.assert_allclose(got[cols], ref[cols], rtol=1e-12, atol=1e-11)
        else:
            assert np.isnan(got).all()  # the loss and information are left alone without want_loss
    np.testing.assert_allclose(a2[cols], ref_a[cols], rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(b2[cols], ref_b[cols], rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(t2[rows], ref_t[rows], rtol=1e-10, atol=1e-10)
    off_c, off_r = np.setdiff1d(np.arange(j), cols), np.setdiff1d(np.arange(n), rows)
    np.testing.assert_array_equal(a2[off_c], a[off_c] + 10.0)  # untouched
    np.testing.assert_array_equal(b2[off_c], b[off_c] + 10.0)
    np.testing.assert_array_equal(t2[off_r], theta[off_r] + 10.0)
    assert np.isnan(out[0][off_c]).all()
    par, ser = run(CK.sweep_r1.parallel), run(CK.sweep_r1.serial)
    for p, q in zip([*par[0], *par[1:]], [*ser[0], *ser[1:]]):
        assert p.tobytes() == q.tobytes()


@pytest.mark.parametrize("with_prior", [False, True])
def test_problem_sweep_fused_and_two_pass_agree(with_prior):
    """_Problem.sweep over >= 128 active items takes the fused pass; the two-pass sweep (forced by
    n_chunks = 0) gives the same step, and both lower the (penalised) loss."""
    from calibration.methods.cbmm.calibrator import CBMMPrior, _Problem

    rng = np.random.default_rng(3 + with_prior)
    n, j = 90, 200
    c = (rng.random((n, j)) < 0.5).astype(np.int8)
    c[rng.random((n, j)) < 0.3] = -1
    c[:, 100:] = np.abs(c[:, 100:])  # dense items
    c[2, 150:] = -1  # missing answers of an inactive subject keep them dense
    c[40:60] = np.abs(c[40:60])  # dense subjects
    row_on, col_on = np.ones(n, bool), np.ones(j, bool)
    row_on[[2, 5]] = False
    col_on[[0, 9, 17]] = False
    fused, split = _Problem(c, row_on, col_on, 1), _Problem(c, row_on, col_on, 1)
    assert fused.n_chunks > 0 and 90 < fused.full_col.sum() < 110 and fused.full_row.sum() == 20
    split.n_chunks = 0
    for p in (fused, split):
        p.prior = CBMMPrior(0.9, 4.0, -0.2, 0.5, 1.0) if with_prior else None
    a0 = np.where(col_on, rng.uniform(0, 2, j), 0.0)
    w = (rng.normal(size=n), a0, rng.normal(size=j))
    for want_loss in (True, False):
        got, ref = fused.sweep(*w, want_loss), split.sweep(*w, want_loss)
        if want_loss:
            assert got[0] == pytest.approx(ref[0], rel=1e-13)
            assert fused.loss(*got[1:]) <= got[0]
        for g, r in zip(got[1:], ref[1:]):
            np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-11)
    # a prior replaced by on_loss (the empirical-Bayes update) is the one the blocks use
    new_prior = CBMMPrior(0.5, 1.0, 0.3, 2.0, 1.0)
    seen = []

    def swap(prob):
        def on_loss(loss, *_):
            seen.append(loss)
            prob.prior = new_prior
        return on_loss

    got = fused.sweep(*w, True, swap(fused))
    ref = split.sweep(*w, True, swap(split))
    assert seen[0] == pytest.approx(seen[1], rel=1e-13)
    for g, r in zip(got[1:], ref[1:]):
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-11)
    unchanged = _Problem(c, row_on, col_on, 1)
    unchanged.prior = new_prior
    for g, r in zip(got[1:], unchanged.sweep(*w)[1:]):
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-11)


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
