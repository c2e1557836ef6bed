"""Numba kernels of cBMM (docs/math.md §2), streaming the int8 response matrix.

Conventions shared by every kernel (the public wrapper in ``calibrator.py`` validates and converts):

* ``c`` is the C-contiguous (N, J) int8 matrix: 1 correct, 0 incorrect, -1 missing. A cell takes
  part when ``c >= 0`` and its row is listed in ``rows`` (the active subjects) and, where a kernel
  says so, its column is active. No float mask or float copy of ``c`` is ever built.
* The kernels work at temperature 1: the caller passes (theta, a / sigma, b / sigma), which gives
  exactly the tempered algorithm (the MM sweep is equivariant under that scaling).
* The working response is never stored. With x = theta_i a_j + b_j, p = sigmoid(x) and
  r_ij = 4 (gamma_ij - p_ij) = Y~_ij - x_ij, one MM sweep needs only column sums of r (for a, b)
  and row sums of a'_j r_ij (for theta), so a sweep is two streaming passes:
  ``col_pass`` (loss, column sums) and ``row_pass`` (new theta), each computing r on the fly.
* Column reductions read ``ct``, an int8 transposed copy (J, N) made once per fit by
  ``transpose_int8`` (1 byte per cell), so both passes reduce over contiguous memory into scalars
  and vectorise. (Reducing row-major data into J-vectors does not vectorise: LLVM cannot prove
  the output vectors do not alias; transposing tiles on every pass took ~1.6x the CPU time.)
  In ``ct`` kernels subjects are masked by a float 0/1 weight per subject (``roww``).
* ``exp`` is evaluated by ``_exp_neg`` (``calibration.methods._fast_math.exp_neg``, shared with
  the LaRT kernels: Cody-Waite reduction + degree-12 Taylor polynomial, within 4e-16 relative of
  ``math.exp`` on [-700, 0]) because LLVM cannot vectorise libm's ``exp``; the polynomial vectorises (8 doubles per AVX-512 instruction) and is ~6x faster here.
  ``_log1p01`` likewise evaluates log(1 + e) for e in [0, 1] with an atanh series (< 1e-16 rel);
  the rank-1 loss pass needs neither it nor its division: log(1 + e) = -log q with q = 1 / (1 + e)
  already at hand, and the logs of ``_LOSS_BLOCK`` cells are summed as one libm log of their
  product (q >= 1/2, so no underflow).
* 2^k in ``_exp_neg`` comes from the bits of x / ln2 + 1.5 * 2^52, not from a float -> int
  conversion, which cost ~40% of both passes on AVX2 machines.

Every kernel has a slow pure-numpy twin in ``tests/naive_cbmm.py``.
"""

from __future__ import annotations

import functools
import math

import numba
import numpy as np
from numba import njit, prange

from calibration.methods._fast_math import exp_neg as _exp_neg
from calibration.methods._fast_math import two_atanh_small
from catengine.models import kernels as _shared_kernels

# Each array kernel is compiled twice from its source (``_serial_and_parallel``): a serial
# version (``prange`` is ``range`` there), cached on disk, runs whenever numba has one thread (fits
# below 2.1 M cells and audit workers set one); the ``parallel=True`` version runs otherwise and is
# compiled in every process that needs it, never cached. Numba's cached machine code of a
# parallel fastmath kernel is not the code a fresh compile runs: the process that compiles it
# executes the outlined loop body compiled once, the cache holds the kernel's own copy of that body,
# re-optimised after linking, whose reductions LLVM reassociates differently (seen here: numba
# 0.68) - a few ulps that SQUAREM amplifies along flat directions of the loss. A serial kernel is
# compiled once, so its cached code is the fresh code, and it computes the bits of the parallel
# kernel on one thread (rows and columns are independent: no reduction spans threads). So a fit
# stays bit-for-bit reproducible across runs, processes and audit workers, and compiles once.
_OPTS = dict(cache=False, fastmath=True, nogil=True, error_model="numpy")
_SERIAL_OPTS = dict(_OPTS, cache=True)
# the polynomial helpers must not be reassociated (that would undo the Cody-Waite split); they are
# compiled with these flags and inlined by LLVM, keeping their own flags inside fastmath loops
_EXACT_OPTS = dict(cache=True, nogil=True, error_model="numpy", fastmath={"nnan", "ninf", "nsz", "contract"})
# numba compiles a callee that sets no fastmath / error_model with the flags of the caller that
# first needs it, and caches that: the shared Cholesky helpers set none, so cBMM calls its own
# copies, with its flags stated
cholesky_in_place = njit(**_OPTS)(_shared_kernels.cholesky_in_place.py_func)
cholesky_solve_in_place = njit(**_OPTS)(_shared_kernels.cholesky_solve_in_place.py_func)


def _serial_and_parallel(fn):
    """The kernel ``fn`` as a serial (cached) and a parallel (uncached) numba function; calling it
    runs the serial one when numba has one thread (``numba.get_num_threads()``), else the parallel one.
    Both are reachable, as ``.serial`` and ``.parallel``."""
    serial = njit(**_SERIAL_OPTS)(fn)
    parallel = njit(parallel=True, **_OPTS)(fn)

    @functools.wraps(fn)
    def kernel(*args):
        if numba.get_num_threads() == 1:
            return serial(*args)
        return parallel(*args)

    kernel.serial, kernel.parallel = serial, parallel
    return kernel


_LN2 = 0.6931471805599453
_SQRT2M1 = 0.41421356237309503


@njit(**_EXACT_OPTS)
def _log1p01(e):
    """log(1 + e) for 0 <= e <= 1, via log(u) = 2 atanh((u - v) / (u + v)) + log(v), v in {1, 2}."""
    big = e > _SQRT2M1
    s = (e - 1.0) / (e + 3.0) if big else e / (2.0 + e)  # |s| <= 0.1716
    off = _LN2 if big else 0.0
    return off + two_atanh_small(s)


@njit(**_SERIAL_OPTS)
def exp_neg_array(x):
    """``_exp_neg`` over an array (for tests)."""
    out = np.empty_like(x)
    for k in range(x.size):
        out[k] = _exp_neg(x[k])
    return out


@njit(**_SERIAL_OPTS)
def log1p01_array(e):
    """``_log1p01`` over an array (for tests)."""
    out = np.empty_like(e)
    for k in range(e.size):
        out[k] = _log1p01(e[k])
    return out


# ---------------------------------------------------------------------------------- layout
@_serial_and_parallel
def transpose_int8(c, out):
    """out[j, i] = c[i, j] for the (N, J) int8 matrix, in 64 x 64 blocks (parallel over column blocks)."""
    n, m = c.shape
    nb = (m + 63) // 64
    for jb in prange(nb):
        j0 = jb * 64
        j1 = min(m, j0 + 64)
        for i0 in range(0, n, 64):
            i1 = min(n, i0 + 64)
            for j in range(j0, j1):
                for i in range(i0, i1):
                    out[j, i] = c[i, j]


# ---------------------------------------------------------------------------------- counting
@_serial_and_parallel
def count_pass(c, ct, row_on, col_on, row_n, row_k, col_n, col_k):
    """Observed and correct counts: row_n/row_k (N,) over active columns (uint8 ``col_on``) of
    active rows (0 for inactive rows); col_n/col_k (J,) over active rows, for every column."""
    n, m = c.shape
    for i in prange(n):
        nn = 0
        kk = 0
        if row_on[i]:
            for j in range(m):
                v = c[i, j]
                o = (v >= 0) & (col_on[j] != 0)
                nn += o
                kk += o & (v == 1)
        row_n[i] = nn
        row_k[i] = kk
    for j in prange(m):
        nn = 0
        kk = 0
        for i in range(n):
            v = ct[j, i]
            o = (v >= 0) & (row_on[i] != 0)
            nn += o
            kk += o & (v == 1)
        col_n[j] = nn
        col_k[j] = kk


# ---------------------------------------------------------------------------------- rank 1
_LOSS_BLOCK = 256  # cells whose log(1 + e) terms are summed as one log of a product


@_serial_and_parallel
def col_pass_r1(ct, theta, roww, a, b, cols, s0, s1, cnt, st, st2, lossj, h0, h1, h2, want_loss):
    """Column sums of one MM sweep at (theta, a, b), rank 1, temperature 1, for j in ``cols``.

    Over the observed cells of subjects with weight ``roww`` = 1: s0_j = sum r_ij,
    s1_j = sum theta_i r_ij, cnt_j = count, st_j = sum theta_i, st2_j = sum theta_i^2 and (if
    ``want_loss``) lossj_j = sum log(1 + exp(-y_ij x_ij)), with r_ij = 4 (gamma_ij - sigmoid(x_ij)),
    and the item's 2 x 2 information in (a, b) at theta fixed, h0_j = sum p q, h1_j = sum p q theta_i,
    h2_j = sum p q theta_i^2 (q = 1 - p; the information costs three sums in the loss pass only).
    Columns not in ``cols`` are left untouched.
    """
    n = ct.shape[1]
    for jj in prange(cols.size):
        j = cols[jj]
        aj = a[j]
        bj = b[j]
        z0 = 0.0
        z1 = 0.0
        z2 = 0.0
        z3 = 0.0
        z4 = 0.0
        z5 = 0.0
        z6 = 0.0
        z7 = 0.0
        z8 = 0.0
        if want_loss:
            # log(1 + e) = -log q: the logs of a block's q (in [1/2, 1]) are summed as the log of
            # their product (>= 2^-_LOSS_BLOCK, no underflow), one libm log per block, no division
            for i0 in range(0, n, _LOSS_BLOCK):
                i1 = min(n, i0 + _LOSS_BLOCK)
                prod = 1.0
                # unsigned bounds: numba then emits no negative-index wraparound, which would stop
                # LLVM vectorising the loop
                for i in range(np.uint64(i0), np.uint64(i1)):
                    v = ct[j, i]
                    t = theta[i]
                    w = roww[i] if v >= 0 else 0.0
                    g = 1.0 if v == 1 else 0.0
                    x = t * aj + bj
                    # e is zeroed off the fit (w is 0 or 1): then q = 1 and p (1 - p) = 0 there
                    e = w * _exp_neg(-abs(x))
                    q = 1.0 / (1.0 + e)
                    p = q if x >= 0.0 else e * q
                    r = w * 4.0 * (g - p)
                    z0 += r
                    z1 += t * r
                    z2 += w
                    z3 += w * t
                    z4 += w * t * t
                    z5 += w * (max(x, 0.0) - g * x)
                    prod *= q
                    pq = e * q * q  # p (1 - p)
                    z6 += pq
                    z7 += pq * t
                    z8 += pq * t * t
                z5 -= math.log(prod)
        else:
            for i in range(n):
                v = ct[j, i]
                t = theta[i]
                w = roww[i] if v >= 0 else 0.0
                g = 1.0 if v == 1 else 0.0
                x = t * aj + bj
                e = _exp_neg(-abs(x))
                q = 1.0 / (1.0 + e)
                p = q if x >= 0.0 else e * q
                r = w * 4.0 * (g - p)
                z0 += r
                z1 += t * r
                z2 += w
                z3 += w * t
                z4 += w * t * t
        s0[j] = z0
        s1[j] = z1
        cnt[j] = z2
        st[j] = z3
        st2[j] = z4
        lossj[j] = z5
        if want_loss:
            h0[j] = z6
            h1[j] = z7
            h2[j] = z8


@_serial_and_parallel
def row_pass_r1(c, theta, a, b, an, ann, ana, anb, ridge, rows, theta_out, rsum):
    """The theta block of one MM sweep, rank 1, temperature 1.

    The working response is taken at the old point (theta, a, b); ``an`` = a' (new a, zero on
    inactive columns), ``ann`` = a'^2, ``ana`` = a' a, ``anb`` = a' (b - b'). For each active row:
    theta'_i = (theta_i sum a'a + sum a'(b - b') + sum a' r) / (sum a'^2 + ridge) over observed
    columns (theta_i is kept when the denominator is 0); ``ridge`` = 4 x the precision of a
    N(0, 1 / precision) prior on theta (0 without one: the paper's step). Inactive rows are left untouched in theta_out.
    rsum_i receives sum_j a'_j r_ij (minus 4 times the theta-gradient when a' = a, b' = b).
    """
    m = c.shape[1]
    for ii in prange(rows.size):
        i = rows[ii]
        t = theta[i]
        sr = 0.0
        h = 0.0
        k = 0.0
        g0 = 0.0
        for j in range(m):
            v = c[i, j]
            w = 1.0 if v >= 0 else 0.0
            g = 1.0 if v == 1 else 0.0
            x = t * a[j] + b[j]
            e = _exp_neg(-abs(x))
            q = 1.0 / (1.0 + e)
            p = q if x >= 0.0 else e * q
            sr += w * an[j] * (g - p)
            h += w * ann[j]
            k += w * ana[j]
            g0 += w * anb[j]
        rsum[i] = 4.0 * sr
        h += ridge
        if h > 0.0:
            theta_out[i] = (t * k + g0 + 4.0 * sr) / h
        else:
            theta_out[i] = t


# ---------------------------------------------------------------------------------- rank r
@_serial_and_parallel
def col_pass_rk(ct, theta, roww, a, b, cols, s0, s1, cnt, st, gram, lossj, want_loss):
    """Rank-r column sums for j in ``cols``: theta (N, r), a (J, r); s1 (J, r) = sum theta_i r_ij,
    st (J, r), gram (J, r, r) = sum theta_i theta_i^T; s0, cnt, lossj (J,) as in ``col_pass_r1``."""
    n = ct.shape[1]
    rk = theta.shape[1]
    for jj in prange(cols.size):
        j = cols[jj]
        acc1 = np.zeros(rk)
        acct = np.zeros(rk)
        accg = np.zeros((rk, rk))
        z0 = 0.0
        z2 = 0.0
        z5 = 0.0
        for i in range(n):
            v = ct[j, i]
            if v < 0 or roww[i] == 0.0:
                continue
            g = 1.0 if v == 1 else 0.0
            x = b[j]
            for u in range(rk):
                x += theta[i, u] * a[j, u]
            e = _exp_neg(-abs(x))
            q = 1.0 / (1.0 + e)
            p = q if x >= 0.0 else e * q
            r = 4.0 * (g - p)
            z0 += r
            z2 += 1.0
            for u in range(rk):
                tu = theta[i, u]
                acc1[u] += tu * r
                acct[u] += tu
                for v2 in range(rk):
                    accg[u, v2] += tu * theta[i, v2]
            if want_loss:
                z5 += max(x, 0.0) - g * x + _log1p01(e)
        s0[j] = z0
        cnt[j] = z2
        lossj[j] = z5
        for u in range(rk):
            s1[j, u] = acc1[u]
            st[j, u] = acct[u]
            for v2 in range(rk):
                gram[j, u, v2] = accg[u, v2]


@_serial_and_parallel
def row_pass_rk(c, theta, a, b, an, anb, col_on, rows, ridge, theta_out, rsum):
    """Rank-r theta block. ``an`` (J, r) = a' (zero on inactive columns), ``anb`` (J, r) =
    a'_j (b_j - b'_j). Per active row solves (H + eps I) theta' = K theta + g + s + eps theta with
    H = sum a' a'^T, K = sum a' a^T, g = sum a'(b - b'), s = sum a' r over observed active columns;
    eps = ridge * (trace(H) / r + 1e-300) is a proximal term towards the old theta (it keeps the
    step a descent step of the surrogate when H is singular, e.g. a dimension with all a' = 0).
    rsum (N, r) receives sum_j a'_j r_ij."""
    m = c.shape[1]
    rk = theta.shape[1]
    for ii in prange(rows.size):
        i = rows[ii]
        hm = np.zeros((rk, rk))
        km = np.zeros((rk, rk))
        rhs = np.zeros(rk)
        for u in range(rk):
            rsum[i, u] = 0.0
        for j in range(m):
            v = c[i, j]
            if v < 0 or col_on[j] == 0:
                continue
            g = 1.0 if v == 1 else 0.0
            x = b[j]
            for u in range(rk):
                x += theta[i, u] * a[j, u]
            e = _exp_neg(-abs(x))
            q = 1.0 / (1.0 + e)
            p = q if x >= 0.0 else e * q
            r = 4.0 * (g - p)
            for u in range(rk):
                au = an[j, u]
                rsum[i, u] += au * r
                rhs[u] += au * r + anb[j, u]
                for v2 in range(rk):
                    hm[u, v2] += au * an[j, v2]
                    km[u, v2] += au * a[j, v2]
        tr = 0.0
        for u in range(rk):
            tr += hm[u, u]
        eps = ridge * (tr / rk + 1e-300)
        for u in range(rk):
            acc = rhs[u] + eps * theta[i, u]
            for v2 in range(rk):
                acc += km[u, v2] * theta[i, v2]
            rhs[u] = acc
            hm[u, u] += eps
        if tr <= 0.0:
            for u in range(rk):
                theta_out[i, u] = theta[i, u]
            continue
        # Cholesky solve of the small SPD system (not positive definite: keep the trait)
        if not cholesky_in_place(hm):
            for u in range(rk):
                theta_out[i, u] = theta[i, u]
            continue
        cholesky_solve_in_place(hm, rhs)
        for u in range(rk):
            theta_out[i, u] = rhs[u]


@_serial_and_parallel
def nnls_columns(gram, q, a0, cols, max_sweeps, tol, a_out):
    """Per column j in ``cols``: min_{a >= 0} 1/2 a^T G_j a - q_j^T a by cyclic exact coordinate
    minimisation started at a0_j (every coordinate step lowers the objective, so the MM step
    stays a descent step). Stops when no coordinate moves by more than tol * (1 + max|a|)."""
    rk = q.shape[1]
    for jj in prange(cols.size):
        j = cols[jj]
        for u in range(rk):
            a_out[j, u] = a0[j, u]
        for _sweep in range(max_sweeps):
            delta = 0.0
            amax = 0.0
            for u in range(rk):
                guu = gram[j, u, u]
                if guu <= 0.0:
                    continue
                grad = -q[j, u]
                for v2 in range(rk):
                    grad += gram[j, u, v2] * a_out[j, v2]
                new = max(0.0, a_out[j, u] - grad / guu)
                delta = max(delta, abs(new - a_out[j, u]))
                a_out[j, u] = new
                amax = max(amax, new)
            if delta <= tol * (1.0 + amax):
                break


# ---------------------------------------------------------------------------------- SVD init
@_serial_and_parallel
def zv_rows(c, v, mu, col_on, rows, out):
    """out_i = sum_j w_ij (gamma_ij - mu_j) v_j over observed active cells (v (J, r), out (N, r))."""
    m = c.shape[1]
    rk = v.shape[1]
    for ii in prange(rows.size):
        i = rows[ii]
        for u in range(rk):
            acc = 0.0
            for j in range(m):
                x = c[i, j]
                w = 1.0 if (x >= 0) & (col_on[j] != 0) else 0.0
                acc += w * (x - mu[j]) * v[j, u]
            out[i, u] = acc


@_serial_and_parallel
def ztu_cols(ct, u, roww, mu, cols, out):
    """out_j = sum_i w_ij (gamma_ij - mu_j) u_i over observed cells of subjects with roww = 1, for
    j in ``cols`` (u (N, r), out (J, r))."""
    n = ct.shape[1]
    rk = u.shape[1]
    for jj in prange(cols.size):
        j = cols[jj]
        mj = mu[j]
        for k in range(rk):
            acc = 0.0
            for i in range(n):
                x = ct[j, i]
                w = roww[i] if x >= 0 else 0.0
                acc += w * (x - mj) * u[i, k]
            out[j, k] = acc


# ---------------------------------------------------------------------------------- extremes
@_serial_and_parallel
def extreme_theta(c, rows, a, b, col_on, target, lo, hi, n_bisect, theta_out):
    """Finite abilities for subjects left out of the fit (all answers identical).

    For each row in ``rows``, bisection on [lo, hi] for t with
    sum_j w_ij sigmoid(t a_j + b_j) = target_i over its observed active columns (a_j >= 0, so the
    left side increases in t); a target outside the attainable range gives lo or hi.
    """
    m = c.shape[1]
    for ii in prange(rows.size):
        i = rows[ii]
        tl = lo
        th = hi
        for _it in range(n_bisect):
            t = 0.5 * (tl + th)
            f = 0.0
            for j in range(m):
                v = c[i, j]
                w = 1.0 if (v >= 0) & (col_on[j] != 0) else 0.0
                x = t * a[j] + b[j]
                e = _exp_neg(-abs(x))
                q = 1.0 / (1.0 + e)
                p = q if x >= 0.0 else e * q
                f += w * p
            if f < target[ii]:
                tl = t
            else:
                th = t
        theta_out[i] = 0.5 * (tl + th)
