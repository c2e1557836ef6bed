"""Numba kernels of cBMM (docs/math.md §2), streaming the int8 response matrix.

Conventions shared by every kernel (the public wrapper in ``calibrator.py`` validates and converts):

* ``c`` is the C-contiguous (N, J) int8 matrix: 1 correct, 0 incorrect, -1 missing. A cell takes
  part when ``c >= 0`` and its row is listed in ``rows`` (the active subjects) and, where a kernel
  says so, its column is active. No float mask or float copy of ``c`` is ever built.
* The kernels work at temperature 1: the caller passes (theta, a / sigma, b / sigma), which gives
  exactly the tempered algorithm (the MM sweep is equivariant under that scaling).
* With x = theta_i a_j + b_j, p = sigmoid(x) and r_ij = 4 (gamma_ij - p_ij) = Y~_ij - x_ij, one
  MM sweep needs column sums of r (for a, b) and row sums of a'_j r_ij (for theta), both at the
  old point. ``sweep_r1`` (rank 1, >= 128 active items) makes a whole sweep in one pass over
  ``ct``, one sigmoid per cell: a column's sums give its a'_j, b'_j at once, so its working
  response (kept for that one column, n floats) goes straight into per-chunk row sums. The
  two-pass form, ``col_pass`` (loss, column sums) then ``row_pass`` (new theta), each computing r
  on the fly, serves rank r, small fits, a sweep whose empirical-Bayes update replaced the prior
  after the column sums, and the gradient.
* Column reductions read ``ct``, an int8 transposed copy (J, N) made once per fit by
  ``transpose_int8`` (1 byte per cell), so they run over contiguous memory into scalars
  and vectorise. (Reducing row-major data into J-vectors does not vectorise: LLVM cannot prove
  the output vectors do not alias; transposing tiles on every pass took ~1.6x the CPU time.)
  In ``ct`` kernels subjects are masked by a float 0/1 weight per subject (``roww``).
* Dense columns (observed for every active subject) and rows (on every active item), flagged by
  the caller (``full``), skip the per-cell missing-answer test; their counts and theta sums (or,
  for rows, the sums of a'a, a'^2, a'(b - b')) are the same for all of them and computed once.
* p comes from ``_sigmoid_pair`` (``catengine.models.kernels.sigmoid_pair``): Cody-Waite
  reduction and the [6/6] Pade form of exp, q = sigmoid(|x|) and e q = sigmoid(-|x|) from one
  division, within 3 ulp of scipy's expit; plain arithmetic and bit moves, so the loops vectorise
  (LLVM cannot vectorise libm's ``exp``). ``_exp_neg`` (``_fast_math.exp_neg``: degree-12 Taylor
  polynomial, shared with the LaRT kernels) and ``_log1p01`` (``log1p_unit``) remain for their tests. The loss
  needs no log per cell: log(1 + e) = -log q, and the logs of ``_LOSS_BLOCK`` cells are summed as
  one libm log of their product (q >= 1/2, so no underflow).
* 2^k comes from the bits of x / ln2 + 1.5 * 2^52 (+ the exponent bias), not from a float -> int
  conversion, which cost ~40% of both passes on AVX2 machines.

Every kernel has a slow pure-numpy twin in ``tests/naive_cbmm.py`` (``sweep_r1``'s is composed from
them in ``tests/test_kernel_fast_paths.py``).
"""

from __future__ import annotations

import functools
import math
import types

import numba
import numpy as np
from numba import prange

from catengine.models.kernels import exp_neg as _exp_neg
from catengine.models.kernels import sigmoid_pair as _sigmoid_pair
from catengine.models.kernels import log1p_unit as _log1p01
from catengine.models import kernels as _shared_kernels
from catengine.numba_helpers import lane_sums as _lane_sums
from catengine.numba_helpers import lanes_total as _lanes_total
from catengine.numba_cache import njit

# Each array kernel is compiled twice from its source (``_serial_and_parallel``): a serial version
# (``prange`` is ``range`` there) runs whenever numba has one thread (fits below 2.1 M cells and
# audit workers set one), the ``parallel=True`` version otherwise. Both are cached on disk
# (``catengine.numba_cache``, which also keeps the parallel kernels' outlined loop bodies, so a
# process that loads a parallel kernel runs the machine code the compiling process ran). The serial
# kernel computes the bits of the parallel one on one thread (rows and columns are independent: no
# reduction spans threads), so a fit is bit-for-bit reproducible across runs, processes, thread
# counts and audit workers.
_OPTS = dict(cache=False, fastmath=True, nogil=True, error_model="numpy")
_SERIAL_OPTS = dict(_OPTS, cache=True)
_PARALLEL_OPTS = dict(_SERIAL_OPTS, parallel=True)
# the polynomial helpers must not be reassociated (that would undo the Cody-Waite split); they are
# compiled with these flags and inlined by LLVM, keeping their own flags inside fastmath loops
_EXACT_OPTS = dict(cache=True, nogil=True, error_model="numpy", fastmath={"nnan", "ninf", "nsz", "contract"})


def _renamed(fn, qualname: str):
    """A copy of the Python function ``fn`` under another ``__qualname__``: numba names its cache
    entries and symbols after it, so two compilations of one source with different flags never
    share either."""
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__qualname__ = qualname
    copy.__doc__ = fn.__doc__
    return copy


# numba compiles a callee that sets no fastmath / error_model with the flags of the caller that
# first needs it, and caches that: the shared Cholesky helpers set none, so cBMM calls its own
# copies, with its flags stated
cholesky_in_place = njit(**_SERIAL_OPTS)(_renamed(_shared_kernels.cholesky_in_place.py_func, "cholesky_in_place_cbmm"))
cholesky_solve_in_place = njit(**_SERIAL_OPTS)(
    _renamed(_shared_kernels.cholesky_solve_in_place.py_func, "cholesky_solve_in_place_cbmm"))


def _serial_and_parallel(fn):
    """The kernel ``fn`` as a serial and a parallel numba function, both cached; calling it runs
    the serial one when numba has one thread (``numba.get_num_threads()``), else the parallel one.
    Both are reachable, as ``.serial`` and ``.parallel``."""
    serial = njit(**_SERIAL_OPTS)(fn)
    parallel = njit(**_PARALLEL_OPTS)(_renamed(fn, f"{fn.__qualname__}.parallel"))

    @functools.wraps(fn)
    def kernel(*args):
        if numba.get_num_threads() == 1:
            return serial(*args)
        return parallel(*args)

    kernel.serial, kernel.parallel = serial, parallel
    return kernel


@njit(inline="always", **_SERIAL_OPTS)
def _elementwise(f, x):
    """f(x[k]) for every k, as a new array (``f`` a compiled function of one float)."""
    out = np.empty_like(x)
    for k in range(x.size):
        out[k] = f(x[k])
    return out


@njit(**_SERIAL_OPTS)
def exp_neg_array(x):
    """``_exp_neg`` over an array (for tests)."""
    return _elementwise(_exp_neg, x)


@njit(**_SERIAL_OPTS)
def sigmoid_pair_array(x, w):
    """``_sigmoid_pair`` over an array (for tests): (q, e q) per entry."""
    q = np.empty_like(x)
    eq = np.empty_like(x)
    for k in range(x.size):
        q[k], eq[k] = _sigmoid_pair(x[k], w)
    return q, eq


@njit(**_SERIAL_OPTS)
def log1p01_array(e):
    """``_log1p01`` over an array (for tests)."""
    return _elementwise(_log1p01, e)


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
@njit(inline="always", **_SERIAL_OPTS)
def _count_line(x, i, on):
    """(observed, correct) answers in row i of the int8 matrix ``x`` over the columns k with on[k] != 0."""
    nn = 0
    kk = 0
    for k in range(np.uint64(0), np.uint64(x.shape[1])):
        v = x[i, k]
        o = (v >= 0) & (on[k] != 0)
        nn += o
        kk += o & (v == 1)
    return nn, kk


@_serial_and_parallel
def count_pass(c, ct, row_on, col_on, row_n, row_k, col_n, col_k):
    """Observed and correct counts: row_n/row_k (N,) over active columns (uint8 ``col_on``) of
    active rows (0 for inactive rows); col_n/col_k (J,) over active rows, for every column."""
    n, m = c.shape
    for i in prange(n):
        row_n[i], row_k[i] = _count_line(c, i, col_on) if row_on[i] else (0, 0)
    for j in prange(m):
        col_n[j], col_k[j] = _count_line(ct, j, row_on)


# ---------------------------------------------------------------------------------- rank 1
_LOSS_BLOCK = 256  # cells whose log(1 + e) terms are summed as one log of a product


# One cell (i, j) at the old point, in the column loops below: x = theta_i a_j + b_j, (q, e q) from
# ``_sigmoid_pair`` and d = w (g - p) = w r / 4 (w the cell's weight, g its answer); the loops add
# it to their sums with ``_add_grad`` (the residual sums), ``_add_count`` (the count and theta sums
# of a column with missing answers) and ``_add_loss`` (the loss and information sums). Scalars only:
# inlined, they compile to the code written out in place. (``col_pass_r1`` and ``sweep_r1`` keep
# their own column loops: one inlined column helper for both made the serial passes 1-4% slower.)
@njit(inline="always", **_SERIAL_OPTS)
def _cell(t, w, g, aj, bj, wq):
    """(x, q, e q, d) of one cell: x = t aj + bj, (q, e q) = ``_sigmoid_pair(x, wq)`` and
    d = w (g - p), p = q for x >= 0 else e q (``wq``: 1, or w to zero e, and so p q, off the fit)."""
    x = t * aj + bj
    q, eq = _sigmoid_pair(x, wq)
    return x, q, eq, w * (g - (q if x >= 0.0 else eq))


@njit(inline="always", **_SERIAL_OPTS)
def _add_grad(z0, z1, t, d):
    """The sums of d and t d (the working residuals, over 4, for b and a) with one more cell."""
    return z0 + d, z1 + t * d


@njit(inline="always", **_SERIAL_OPTS)
def _add_count(z2, z3, z4, w, t):
    """The sums of w, w t and w t^2 with one more cell."""
    return z2 + w, z3 + w * t, z4 + w * t * t


@njit(inline="always", **_SERIAL_OPTS)
def _add_loss(z5, prod, z6, z7, z8, t, w, g, x, q, eq):
    """The loss and information sums with one more cell: w (max(x, 0) - g x) into ``z5`` (the -log q
    part of its log(1 + e) into the product ``prod``), p q = e q times 1, t, t^2 into z6, z7, z8."""
    z5 += w * (max(x, 0.0) - g * x)
    prod *= q
    pq = eq * q
    return z5, prod, z6 + pq, z7 + pq * t, z8 + pq * t * t


@njit(**_SERIAL_OPTS)
def weighted_moments(theta, roww, out):
    """out = (sum w, sum w theta, sum w theta^2) over the subjects' weights ``roww`` (0 or 1): the
    count and theta sums of every dense column (one with no missing answer of an active subject)."""
    z0 = 0.0
    z1 = 0.0
    z2 = 0.0
    for i in range(theta.size):
        z0, z1, z2 = _add_count(z0, z1, z2, roww[i], theta[i])
    out[0] = z0
    out[1] = z1
    out[2] = z2


@_serial_and_parallel
def col_pass_r1(ct, theta, roww, a, b, cols, full, s0, s1, cnt, st, st2, lossj, h0, h1, h2, want_loss):
    """Column sums of one MM sweep at (theta, a, b), rank 1, temperature 1, for j in ``cols``.

    Over the observed cells of subjects with weight ``roww`` = 1: s0_j = sum r_ij,
    s1_j = sum theta_i r_ij, cnt_j = count, st_j = sum theta_i, st2_j = sum theta_i^2 and (if
    ``want_loss``) lossj_j = sum log(1 + exp(-y_ij x_ij)), with r_ij = 4 (gamma_ij - sigmoid(x_ij)),
    and the item's 2 x 2 information in (a, b) at theta fixed, h0_j = sum p q, h1_j = sum p q theta_i,
    h2_j = sum p q theta_i^2 (q = 1 - p; the information costs three sums in the loss pass only).
    ``full`` (uint8, per column) marks dense columns, observed for every subject with roww = 1: their
    cells skip the missing-answer test, and their count and theta sums are the column-independent
    ``weighted_moments`` (an unmarked dense column takes the general path: same sums). Columns not
    in ``cols`` are left untouched.
    """
    n = ct.shape[1]
    mom = np.empty(3)
    weighted_moments(theta, roww, mom)
    for jj in prange(cols.size):
        j = cols[jj]
        aj = a[j]
        bj = b[j]
        dense = full[j] != 0
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
                if dense:
                    for i in range(np.uint64(i0), np.uint64(i1)):
                        t = theta[i]
                        w = roww[i]
                        g = float(ct[j, i])  # 0 or 1 where w = 1 (-1 only where w = 0)
                        x, q, eq, d = _cell(t, w, g, aj, bj, w)
                        z0, z1 = _add_grad(z0, z1, t, d)
                        z5, prod, z6, z7, z8 = _add_loss(z5, prod, z6, z7, z8, t, w, g, x, q, eq)
                else:
                    for i in range(np.uint64(i0), np.uint64(i1)):
                        v = ct[j, i]
                        t = theta[i]
                        w = roww[i] if v >= 0 else 0.0
                        g = 1.0 if v == 1 else 0.0
                        # e is zeroed off the fit (w is 0 or 1): then q = 1 and p (1 - p) = 0 there
                        x, q, eq, d = _cell(t, w, g, aj, bj, w)
                        z0, z1 = _add_grad(z0, z1, t, d)
                        z2, z3, z4 = _add_count(z2, z3, z4, w, t)
                        z5, prod, z6, z7, z8 = _add_loss(z5, prod, z6, z7, z8, t, w, g, x, q, eq)
                z5 -= math.log(prod)
        elif dense:
            for i in range(np.uint64(0), np.uint64(n)):
                t = theta[i]
                x, q, eq, d = _cell(t, roww[i], float(ct[j, i]), aj, bj, 1.0)
                z0, z1 = _add_grad(z0, z1, t, d)
        else:
            for i in range(np.uint64(0), np.uint64(n)):
                v = ct[j, i]
                t = theta[i]
                w = roww[i] if v >= 0 else 0.0
                x, q, eq, d = _cell(t, w, 1.0 if v == 1 else 0.0, aj, bj, 1.0)
                z0, z1 = _add_grad(z0, z1, t, d)
                z2, z3, z4 = _add_count(z2, z3, z4, w, t)
        if dense:
            z2 = mom[0]
            z3 = mom[1]
            z4 = mom[2]
        s0[j] = 4.0 * z0
        s1[j] = 4.0 * z1
        cnt[j] = z2
        st[j] = z3
        st2[j] = z4
        lossj[j] = z5
        if want_loss:
            h0[j] = z6
            h1[j] = z7
            h2[j] = z8


@_serial_and_parallel
def row_pass_r1(c, theta, a, b, an, ann, ana, anb, ridge, rows, full, theta_out, rsum):
    """The theta block of one MM sweep, rank 1, temperature 1.

    The working response is taken at the old point (theta, a, b); ``an`` = a' (new a, zero on
    inactive columns), ``ann`` = a'^2, ``ana`` = a' a, ``anb`` = a' (b - b'). For each active row:
    theta'_i = (theta_i sum a'a + sum a'(b - b') + sum a' r) / (sum a'^2 + ridge) over observed
    columns (theta_i is kept when the denominator is 0); ``ridge`` = 4 x the precision of a
    N(0, 1 / precision) prior on theta (0 without one: the paper's step). ``full`` (uint8, per row)
    marks rows observed on every column with a' != 0: their sums of a'a, a'^2, a'(b - b') are the
    row-independent totals (``ann``, ``ana``, ``anb`` are 0 where ``an`` is) and their cells skip the
    missing-answer test. Inactive rows are left
    untouched in theta_out. rsum_i receives sum_j a'_j r_ij (minus 4 times the theta-gradient when
    a' = a, b' = b).
    """
    m = c.shape[1]
    h_all = 0.0
    k_all = 0.0
    g_all = 0.0
    for j in range(m):
        h_all += ann[j]
        k_all += ana[j]
        g_all += anb[j]
    for ii in prange(rows.size):
        i = rows[ii]
        t = theta[i]
        sr = 0.0
        h = 0.0
        k = 0.0
        g0 = 0.0
        if full[i] != 0:
            for j in range(np.uint64(0), np.uint64(m)):
                x = t * a[j] + b[j]
                q, eq = _sigmoid_pair(x, 1.0)
                # c = -1 only where a' = 0
                sr += an[j] * (float(c[i, j]) - (q if x >= 0.0 else eq))
            h = h_all
            k = k_all
            g0 = g_all
        else:
            for j in range(np.uint64(0), np.uint64(m)):
                v = c[i, j]
                w = 1.0 if v >= 0 else 0.0
                g = 1.0 if v == 1 else 0.0
                x = t * a[j] + b[j]
                q, eq = _sigmoid_pair(x, 1.0)
                p = q if x >= 0.0 else eq
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


_L = 0.25  # the majoriser's curvature at temperature 1 (calibrator._L)


def sweep_chunks(n_cols: int) -> int:
    """How many column chunks ``sweep_r1`` splits the active columns into: a function of the problem
    only (never of the thread count), so a fit computes the same bits on any number of threads; 0
    (two passes per sweep) below 128 active columns. A chunk holds >= 64 columns, so its buffers
    (4 floats per subject) stay below 1/2 byte per cell."""
    k = min(32, n_cols // 64)
    return k if k >= 2 else 0


@njit(**_SERIAL_OPTS)
def _ab_step(aj, bj, r0, r1, z2, z3, z4, has_prior, pa, ma, pb, mb):
    """The a and b blocks of column j from its sums (r0 = sum r, r1 = sum theta r, z2 = count,
    z3 = sum theta, z4 = sum theta^2): the ridge steps of the prior, or the plain MM steps."""
    if has_prior:
        an = max(0.0, (_L * (aj * z4 + r1) + pa * ma) / (_L * z4 + pa))
        bn = (_L * (z2 * bj + r0 + (aj - an) * z3) + pb * mb) / (_L * z2 + pb)
    else:
        an = max(0.0, aj + r1 / z4) if z4 > 0.0 else aj
        bn = bj + (r0 + (aj - an) * z3) / z2 if z2 > 0.0 else bj
    return an, bn


@_serial_and_parallel
def sweep_r1(ct, theta, roww, a, b, cols, full, bounds, has_prior, pa, ma, pb, mb, ridge, want_loss,
             s0, s1, cnt, st, st2, lossj, h0, h1, h2, a_new, b_new, theta_out, u, num, den, dsum):
    """One whole rank-1 MM sweep from (theta, a, b) in one pass over ``ct``: one exp per cell.

    Column j's sums (written as ``col_pass_r1`` writes them; ``full`` as there) give its new
    (a'_j, b'_j) at once (the ridge steps of the prior N(ma, 1/pa), N(mb, 1/pb) when ``has_prior``,
    else the plain MM steps), so the theta block's row sums over column j are taken right away,
    from the working response u_i = x_ij + 4 (g_ij - p_ij) kept for that column (``u[chunk, 0]``,
    n floats; two consecutive dense columns are streamed together, the second's in ``u[chunk, 1]``).
    The row sums accumulate per chunk of columns (``bounds``: chunk k holds
    cols[bounds[k]:bounds[k + 1]]): ``num[k]`` = sum_j a'_j (w_ij u_ij - w_ij b'_j) and ``den[k]`` =
    sum_j w_ij a'_j^2 over its sparse columns, ``dsum[k]`` = (sum a'_j^2, sum a'_j b'_j) over its
    dense ones (the same for every active row), then add up in chunk order; theta'_i =
    num_i / (den_i + ridge) for rows with roww = 1 (theta_i kept when that is 0): the
    ``row_pass_r1`` step with a' = the new a. The chunks, not the threads, fix every sum's order.
    Columns not in ``cols`` and rows with roww = 0 are left untouched in a_new, b_new and theta_out.
    """
    n = ct.shape[1]
    nch = bounds.size - 1
    mom = np.empty(3)
    weighted_moments(theta, roww, mom)
    for ch in prange(nch):
        uu = u[ch, 0]
        uv = u[ch, 1]
        nm = num[ch]
        dn = den[ch]
        for i in range(n):
            nm[i] = 0.0
            dn[i] = 0.0
        dh = 0.0
        dbb = 0.0
        jj = bounds[ch]
        end = bounds[ch + 1]
        while jj < end:
            j = cols[jj]
            aj = a[j]
            bj = b[j]
            if jj + 1 < end and full[j] != 0 and full[cols[jj + 1]] != 0:
                # two dense columns j, k in one stream: theta and roww are read once for both
                k = cols[jj + 1]
                ak = a[k]
                bk = b[k]
                z0 = 0.0
                z1 = 0.0
                y0 = 0.0
                y1 = 0.0
                if want_loss:
                    z5 = 0.0
                    z6 = 0.0
                    z7 = 0.0
                    z8 = 0.0
                    y5 = 0.0
                    y6 = 0.0
                    y7 = 0.0
                    y8 = 0.0
                    for i0 in range(0, n, _LOSS_BLOCK):
                        i1 = min(n, i0 + _LOSS_BLOCK)
                        prodj = 1.0
                        prodk = 1.0
                        for i in range(np.uint64(i0), np.uint64(i1)):
                            t = theta[i]
                            w = roww[i]
                            gj = float(ct[j, i])
                            gk = float(ct[k, i])
                            xj, qj, ej, dj = _cell(t, w, gj, aj, bj, w)
                            xk, qk, ek, dk = _cell(t, w, gk, ak, bk, w)
                            uu[i] = xj + 4.0 * dj
                            uv[i] = xk + 4.0 * dk
                            z0, z1 = _add_grad(z0, z1, t, dj)
                            y0, y1 = _add_grad(y0, y1, t, dk)
                            z5, prodj, z6, z7, z8 = _add_loss(z5, prodj, z6, z7, z8, t, w, gj, xj, qj, ej)
                            y5, prodk, y6, y7, y8 = _add_loss(y5, prodk, y6, y7, y8, t, w, gk, xk, qk, ek)
                        z5 -= math.log(prodj)
                        y5 -= math.log(prodk)
                    lossj[j] = z5
                    h0[j] = z6
                    h1[j] = z7
                    h2[j] = z8
                    lossj[k] = y5
                    h0[k] = y6
                    h1[k] = y7
                    h2[k] = y8
                else:
                    for i in range(np.uint64(0), np.uint64(n)):
                        t = theta[i]
                        w = roww[i]
                        xj, qj, ej, dj = _cell(t, w, float(ct[j, i]), aj, bj, 1.0)
                        xk, qk, ek, dk = _cell(t, w, float(ct[k, i]), ak, bk, 1.0)
                        uu[i] = xj + 4.0 * dj
                        uv[i] = xk + 4.0 * dk
                        z0, z1 = _add_grad(z0, z1, t, dj)
                        y0, y1 = _add_grad(y0, y1, t, dk)
                z0 *= 4.0
                z1 *= 4.0
                y0 *= 4.0
                y1 *= 4.0
                s0[j] = z0
                s1[j] = z1
                s0[k] = y0
                s1[k] = y1
                cnt[j] = cnt[k] = mom[0]
                st[j] = st[k] = mom[1]
                st2[j] = st2[k] = mom[2]
                anj, bnj = _ab_step(aj, bj, z0, z1, mom[0], mom[1], mom[2], has_prior, pa, ma, pb, mb)
                ank, bnk = _ab_step(ak, bk, y0, y1, mom[0], mom[1], mom[2], has_prior, pa, ma, pb, mb)
                a_new[j] = anj
                b_new[j] = bnj
                a_new[k] = ank
                b_new[k] = bnk
                # u is wrong (but finite) on rows with roww = 0: their theta is not updated
                for i in range(np.uint64(0), np.uint64(n)):
                    nm[i] += anj * uu[i] + ank * uv[i]
                dh += anj * anj + ank * ank
                dbb += anj * bnj + ank * bnk
                jj += 2
                continue
            dense = full[j] != 0
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
                for i0 in range(0, n, _LOSS_BLOCK):
                    i1 = min(n, i0 + _LOSS_BLOCK)
                    prod = 1.0
                    if dense:
                        for i in range(np.uint64(i0), np.uint64(i1)):
                            t = theta[i]
                            w = roww[i]
                            g = float(ct[j, i])
                            x, q, eq, d = _cell(t, w, g, aj, bj, w)
                            uu[i] = x + 4.0 * d
                            z0, z1 = _add_grad(z0, z1, t, d)
                            z5, prod, z6, z7, z8 = _add_loss(z5, prod, z6, z7, z8, t, w, g, x, q, eq)
                    else:
                        for i in range(np.uint64(i0), np.uint64(i1)):
                            v = ct[j, i]
                            t = theta[i]
                            w = roww[i] if v >= 0 else 0.0
                            g = 1.0 if v == 1 else 0.0
                            x, q, eq, d = _cell(t, w, g, aj, bj, w)
                            uu[i] = w * x + 4.0 * d
                            z0, z1 = _add_grad(z0, z1, t, d)
                            z2, z3, z4 = _add_count(z2, z3, z4, w, t)
                            z5, prod, z6, z7, z8 = _add_loss(z5, prod, z6, z7, z8, t, w, g, x, q, eq)
                    z5 -= math.log(prod)
                lossj[j] = z5
                h0[j] = z6
                h1[j] = z7
                h2[j] = z8
            elif dense:
                for i in range(np.uint64(0), np.uint64(n)):
                    t = theta[i]
                    x, q, eq, d = _cell(t, roww[i], float(ct[j, i]), aj, bj, 1.0)
                    uu[i] = x + 4.0 * d
                    z0, z1 = _add_grad(z0, z1, t, d)
            else:
                for i in range(np.uint64(0), np.uint64(n)):
                    v = ct[j, i]
                    t = theta[i]
                    w = roww[i] if v >= 0 else 0.0
                    x, q, eq, d = _cell(t, w, 1.0 if v == 1 else 0.0, aj, bj, 1.0)
                    uu[i] = w * x + 4.0 * d
                    z0, z1 = _add_grad(z0, z1, t, d)
                    z2, z3, z4 = _add_count(z2, z3, z4, w, t)
            if dense:
                z2 = mom[0]
                z3 = mom[1]
                z4 = mom[2]
            z0 *= 4.0
            z1 *= 4.0
            s0[j] = z0
            s1[j] = z1
            cnt[j] = z2
            st[j] = z3
            st2[j] = z4
            an, bn = _ab_step(aj, bj, z0, z1, z2, z3, z4, has_prior, pa, ma, pb, mb)
            a_new[j] = an
            b_new[j] = bn
            if dense:
                for i in range(np.uint64(0), np.uint64(n)):
                    nm[i] += an * uu[i]
                dh += an * an
                dbb += an * bn
            else:
                ann = an * an
                anb = an * bn
                for i in range(np.uint64(0), np.uint64(n)):
                    w = roww[i] if ct[j, i] >= 0 else 0.0
                    nm[i] += an * uu[i] - w * anb
                    dn[i] += w * ann
            jj += 1
        dsum[ch, 0] = dh
        dsum[ch, 1] = dbb
    for i in prange(theta_out.size):
        if roww[i] != 0.0:
            sn = 0.0
            sd = ridge
            for ch in range(nch):
                sn += num[ch, i] - dsum[ch, 1]
                sd += den[ch, i] + dsum[ch, 0]
            theta_out[i] = sn / sd if sd > 0.0 else theta[i]


# ---------------------------------------------------------------------------------- rank r
@njit(inline="always", **_SERIAL_OPTS)
def _logit(theta, i, a, j, bj):
    """x = bj + theta_i . a_j."""
    x = bj
    for u in range(theta.shape[1]):
        x += theta[i, u] * a[j, u]
    return x


@njit(inline="always", **_SERIAL_OPTS)
def _residual(x, v):
    """(g, q, r) of an observed cell with answer v (0 or 1) at logit x: g = v as a float,
    q = sigmoid(|x|) and the working residual r = 4 (g - sigmoid(x))."""
    g = 1.0 if v == 1 else 0.0
    q, eq = _sigmoid_pair(x, 1.0)
    return g, q, 4.0 * (g - (q if x >= 0.0 else eq))


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
            x = _logit(theta, i, a, j, b[j])
            g, q, r = _residual(x, v)
            z0 += r
            z2 += 1.0
            for u in range(rk):
                tu = theta[i, u]
                acc1[u] += tu * r
                acct[u] += tu
                for v2 in range(rk):
                    accg[u, v2] += tu * theta[i, v2]
            if want_loss:
                z5 += max(x, 0.0) - g * x - math.log(q)
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
            x = _logit(theta, i, a, j, b[j])
            _, _, r = _residual(x, v)
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
            for j in range(np.uint64(0), np.uint64(m)):
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
            for i in range(np.uint64(0), np.uint64(n)):
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
                q, eq = _sigmoid_pair(x, 1.0)
                p = q if x >= 0.0 else eq
                f += w * p
            if f < target[ii]:
                tl = t
            else:
                th = t
        theta_out[i] = 0.5 * (tl + th)


# ---------------------------------------------------------------------------------- empirical Bayes
# Compiled without fastmath (no reassociation, no fused multiply-add): every operation rounds as
# the numpy expression it replaces does, and the means sum pairwise as numpy's do, so the EM below
# gives the bits of its numpy form (``tests/test_cbmm_priors.py`` compares them).
_NUMPY_EXACT_OPTS = dict(cache=True, nogil=True, error_model="numpy")


@njit(**_NUMPY_EXACT_OPTS)
def _numpy_block_sum(x, start, n):
    """numpy's sum of a block of at most 128 contiguous float64: plain below 8, else eight partial sums
    started at the first eight values (``_lane_sums``), added pairwise, then the last n % 8 values."""
    if n < 8:
        s = 0.0
        for i in range(start, start + n):
            s += x[i]
        return s
    first = (x[start], x[start + 1], x[start + 2], x[start + 3], x[start + 4], x[start + 5], x[start + 6], x[start + 7])
    s = _lanes_total(_lane_sums(x, start + 8, start + n - n % 8, first))
    for i in range(start + n - n % 8, start + n):
        s += x[i]
    return s


@njit(**_NUMPY_EXACT_OPTS)
def numpy_sum(x, start, n):
    """sum(x[start:start + n]) in numpy's order: its pairwise summation of a contiguous float64
    array (blocks of at most 128, ``_numpy_block_sum``; longer runs split in halves at a multiple of
    8, left sum + right sum). The recursion runs on an explicit stack (numba's cache cannot load
    recursive functions)."""
    if n <= 128:
        return _numpy_block_sum(x, start, n)
    frame_start = np.empty(64, dtype=np.int64)
    frame_n = np.empty(64, dtype=np.int64)
    stage = np.zeros(64, dtype=np.int64)  # 0: not split yet, 1: left half pending, 2: right half pending
    left = np.empty(64)
    frame_start[0], frame_n[0], top = start, n, 1
    while True:
        i = top - 1
        if frame_n[i] > 128 and stage[i] == 0:  # split: the left half first
            half = frame_n[i] // 2
            half -= half % 8
            stage[i] = 1
            frame_start[top], frame_n[top], stage[top] = frame_start[i], half, 0
            top += 1
            continue
        value = _numpy_block_sum(x, frame_start[i], frame_n[i])
        top -= 1
        while top > 0:  # hand the finished sum to the frames above
            p = top - 1
            if stage[p] == 1:  # its left half: keep it, start the right half
                left[p] = value
                stage[p] = 2
                half = frame_n[p] // 2
                half -= half % 8
                frame_start[top], frame_n[top], stage[top] = frame_start[p] + half, frame_n[p] - half, 0
                top += 1
                break
            value = left[p] + value  # its right half: the frame is done
            top -= 1
        if top == 0:
            return value


@njit(**_NUMPY_EXACT_OPTS)
def eb_prior_em(h0, h1, h2, g_a, g_b, mu_a, mu_b, var_a, var_b, min_var, max_iter, tol):
    """The EM of cBMM's empirical-Bayes update to its fixed point (``CBMMCalibrator._eb_update``,
    step 3): items j with quadratic log-likelihoods of information [[h2, h1], [h1, h0]]_j and
    H_j x_j^ML = (g_a, g_b)_j under x_j ~ N((mu_a, mu_b), diag(var_a, var_b)); per iteration
    V_j = (H_j + S^-1)^-1, m_j = V_j (H_j x_j^ML + S^-1 mu), mu = mean m_j, var = max(mean((m_j -
    mu)^2 + diag V_j), min_var); stops after an iteration whose largest move (variances as ratios)
    is below ``tol``, or after ``max_iter``. Returns (mu_a, mu_b, var_a, var_b)."""
    J = h0.size
    ma = np.empty(J)
    mb = np.empty(J)
    dev_a = np.empty(J)
    dev_b = np.empty(J)
    for _ in range(max_iter):
        pa = 1.0 / var_a
        pb = 1.0 / var_b
        qa = mu_a / var_a
        qb = mu_b / var_b
        for j in range(J):
            ia = h2[j] + pa
            ib = h0[j] + pb
            det = ia * ib - h1[j] * h1[j]
            va = ib / det
            vb = ia / det
            vab = -h1[j] / det
            ra = g_a[j] + qa
            rb = g_b[j] + qb
            ma[j] = va * ra + vab * rb
            mb[j] = vab * ra + vb * rb
            dev_a[j] = va  # the diagonal of V_j, until the means are known
            dev_b[j] = vb
        new_mu_a = numpy_sum(ma, 0, J) / J
        new_mu_b = numpy_sum(mb, 0, J) / J
        for j in range(J):
            da = ma[j] - new_mu_a
            db = mb[j] - new_mu_b
            dev_a[j] = da * da + dev_a[j]
            dev_b[j] = db * db + dev_b[j]
        new_var_a = max(numpy_sum(dev_a, 0, J) / J, min_var)
        new_var_b = max(numpy_sum(dev_b, 0, J) / J, min_var)
        step = max(abs(new_var_a / var_a - 1), abs(new_var_b / var_b - 1), abs(new_mu_a - mu_a), abs(new_mu_b - mu_b))
        mu_a, mu_b, var_a, var_b = new_mu_a, new_mu_b, new_var_a, new_var_b
        if step < tol:
            break
    return mu_a, mu_b, var_a, var_b
