"""Numba kernels of the LaRT SAEM calibrator (compute only; ``calibrator.py`` validates and converts).

Layout conventions: ``R`` is the (N, J) int8 correctness matrix (1 / 0 / -1 missing), item
parameters are (J,) float64, per-subject quantities (N,) float64. Every kernel has a slow twin in
``tests/naive_lart.py``.

Scalar primitives come from the shared ``catengine.models.kernels`` (``log_phi_cdf``,
``inv_mills``, ``probit_curvature``). ``_probit_terms`` below is a fused variant used in the hot
loops: one ``erfc`` gives log Phi(x), m(x) = phi(x)/Phi(x) and the curvature m(x)(x + m(x)); for
x < -20 it defers to the shared primitives (asymptotic series). It is tested against them.

Kernels
-------
``log_post_theta``      l(theta), l'(theta), l''(theta) of the 1-D target of docs/math.md §1.3 step 2
``sample_theta_ars``    exact draws of theta_i | R_i, T_i for every subject (adaptive rejection
                        sampling, Gilks & Wild 1992, tangent hull + chord squeeze), prange over i
``item_newton_cached``  exact M-step of the accuracy block: for every item, Newton with backtracking
                        on the averaged objective (1/m) sum_k sum_i log Phi(s_ij (a theta_ik + b))
                        (- ridge b^2/2), with the previous iteration's value/gradient/Hessian
                        cached so an iteration costs about one pass over the history; prange
                        over items
``map_traits``          MAP (theta, tau) per subject by damped 2-D Newton, with the observed
                        precision matrix (and the optional Tobit term for censored CoT cells)

The two hot loops (``log_post_theta`` of the S-step, ``_item_sums`` of the M-step) evaluate the
probit terms with ``_probit_vec`` (erfcx by Weideman's expansion, polynomial exp and log; no
branch, no libm call), so LLVM vectorises them; they fill per-cell buffers and sum them in order.
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from catengine.numba_cache import njit

from catengine.models.kernels import bits_to_f64 as _bits_to_f64
from catengine.models.kernels import exp_neg as _exp_neg
from catengine.models.kernels import f64_to_bits as _f64_to_bits
from catengine.models.kernels import two_atanh_small as _two_atanh_small
from catengine.numba_helpers import horner as _horner

from catengine.models.kernels import inv_mills, log_phi_cdf, probit_curvature

_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SERIES_BELOW = -20.0  # same switch point as the shared primitives

#: maximum number of abscissae of the ARS hull
ARS_MAX_POINTS = 24
#: the ARS mode search stops when its Newton step is below this many curvature SDs (the draws are
#: exact whatever the hull's abscissae; a closer mode only saves the occasional rejection)
_ARS_MODE_TOL_SD = 0.05


# ----------------------------------------------------------------------------- scalar helpers


@njit(cache=True, nogil=True, inline="always")
def _probit_terms(x):
    """(log Phi(x), m(x), m(x)(x + m(x))) with a single erfc for x >= -20.

    For x > 0, Phi = erfc(-x/sqrt2)/2 is within 1 ulp of 1, so log Phi is accurate to ~1e-16 in
    absolute terms (all the objective needs); m and the curvature are exact to rounding.
    """
    if x >= _SERIES_BELOW:
        cdf = 0.5 * math.erfc(-x * _INV_SQRT2)
        pdf = _INV_SQRT_2PI * math.exp(-0.5 * x * x)
        m = pdf / cdf
        return math.log(cdf), m, m * (x + m)
    return log_phi_cdf(x), inv_mills(x), probit_curvature(x)


# ----------------------------------------------------------------------------- vectorisable probit terms
# ``_probit_terms`` calls libm's erfc, exp and log (~40 ns per cell, one cell at a time). The hot loops
# below use ``_probit_vec`` instead: erfcx by Weideman's rational expansion (SIAM J. Numer. Anal. 31,
# 1994: N = 40 terms, L = sqrt(N / sqrt 2); within 7e-16 relative of scipy.special.erfcx on
# [0, 1000]), exp and log by polynomials, no branches and no libm call, so LLVM vectorises the loops
# that call it (fastmath off: no reassociation, results are bit-reproducible across compiles).
# Each loop fills per-cell buffers and the sums are then taken in order by a plain loop.
_W_L = 5.3182958969449885
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)
_LN2 = 0.6931471805599453
_TWO52 = 4503599627370496.0  # 2^52
_SQRT2 = 1.4142135623730951


@njit(cache=True, nogil=True, inline="always", error_model="numpy", fastmath={"contract"})
def _log_pos(y):
    """log(y) for a positive normal float64: y = 2^e u, u in [sqrt(1/2), sqrt 2), log u = 2 atanh(s)."""
    bits = _f64_to_bits(y)
    # the biased exponent as a float without an int -> float conversion: 2^52 + e_biased - 2^52
    e = _bits_to_f64((bits >> 52) | 0x4330000000000000) - _TWO52 - 1023.0
    u = _bits_to_f64((bits & 0x000FFFFFFFFFFFFF) | 0x3FF0000000000000)  # in [1, 2)
    big = u > _SQRT2
    u = 0.5 * u if big else u
    e = e + 1.0 if big else e
    s = (u - 1.0) / (u + 1.0)  # |s| <= 0.1716
    return e * _LN2 + _two_atanh_small(s)


#: Weideman's 40 coefficients of erfcx in Z, dealt into four Horner chains in Z^4 (highest degree
#: first): chain k holds those of Z^(4m + k), recombined by ``_erfcx_pos``
_ERFCX_C0 = (-5.2447678207180494e-15, 1.2032983242835385e-13, 3.4727420938907015e-11, 3.0177804477560245e-09,
             1.4198642352136748e-08, -1.8007447144728686e-05, 0.002705405633073729, 0.15504263802479498,
             1.2563815675765133, 2.899624509389705)
_ERFCX_C1 = (1.1519170220749485e-14, 4.5340796336714066e-13, 1.771418567386718e-11, 2.1085995172143158e-10,
             -6.351773483848077e-08, -1.066013898426855e-06, 0.0004398070159870029, 0.07182361779074328,
             0.8472174576593815, 2.6160541527618597)
_ERFCX_C2 = (1.2082006378733853e-15, 1.3765172593249721e-14, -2.7277735625830245e-12, -3.563234152181849e-10,
             -1.83156168231946e-08, 1.4835661132962113e-06, -3.93936314548511e-05, 0.029202916471241895,
             0.5266528988277086, 2.201513794878312)
_ERFCX_C3 = (-1.7356980998791865e-15, -7.071088022159408e-14, -2.90771851041427e-12, -9.055138860958323e-11,
             3.249746582945079e-09, 5.912136953029057e-07, -5.5913092642348794e-05, 0.010048186242783535,
             0.2998943799615006, 1.7253830848179779)


@njit(cache=True, nogil=True, inline="always", error_model="numpy", fastmath={"contract"})
def _erfcx_pos(z):
    """erfcx(z) = exp(z^2) erfc(z) for z >= 0 (Weideman's expansion, 40 terms). The degree-39
    polynomial in Z is evaluated as four interleaved Horner chains in Z^4: one chain of 39 steps
    left the loops bound by its latency (4 x slower)."""
    d = 1.0 / (_W_L + z)
    zz = (_W_L - z) * d
    z2 = zz * zz
    z4 = z2 * z2
    p0 = _horner(z4, _ERFCX_C0)
    p1 = _horner(z4, _ERFCX_C1)
    p2 = _horner(z4, _ERFCX_C2)
    p3 = _horner(z4, _ERFCX_C3)
    p = (p0 + zz * p1) + z2 * (p2 + zz * p3)
    return (2.0 * p * d + _INV_SQRT_PI) * d


@njit(cache=True, nogil=True, inline="always", error_model="numpy", fastmath={"contract"})
def _probit_vec(x):
    """(log Phi(x), m(x) = phi(x) / Phi(x), m(x)(x + m(x))) for any finite x, branch-free.

    x < 0: Phi = erfcx(z) exp(-x^2 / 2) / 2 with z = |x| / sqrt 2, so log Phi = -x^2/2 + log(erfcx / 2)
    and m = sqrt(2 / pi) / erfcx: no exp, exact in the far tail. x >= 0: Phi = 1 - q with
    q = exp(-x^2/2) erfcx(z) / 2 <= 1/2. Matches ``_probit_terms`` to ~1e-15 relative (the
    curvature to ~1e-13 below x = -20, where x + m cancels).
    """
    z = abs(x) * _INV_SQRT2
    ex = _erfcx_pos(z)
    neg = x < 0.0
    half_x2 = 0.5 * x * x
    e2 = _exp_neg(-half_x2)
    q = 0.5 * e2 * ex
    lg = _log_pos(ex if neg else 1.0 - q)
    lp = (lg - _LN2 - half_x2) if neg else lg
    m = (_SQRT_2_OVER_PI if neg else _INV_SQRT_2PI * e2) / (ex if neg else 1.0 - q)
    return lp, m, m * (x + m)


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})  # no division checks: vectorises
def probit_vec_array(x):
    """``_probit_vec`` over an array (for tests): (N, 3)."""
    out = np.empty((x.size, 3))
    for k in range(x.size):
        lp, m, c = _probit_vec(x[k])
        out[k, 0] = lp
        out[k, 1] = m
        out[k, 2] = c
    return out


# ----------------------------------------------------------------------------- 1-D posterior of theta


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})  # no division checks: vectorises
def log_post_theta(theta, mu, v, a, b, r_row):
    """(l, l', l'') of l(theta) = -(theta - mu)^2 / (2 v) + sum_{j: r_j >= 0} log Phi(s_j (a_j theta + b_j)).

    ``r_row`` is one row of R (int8, -1 = missing); s_j = 2 r_j - 1. The constant of the normal
    density is left out. l'' <= -1/v < 0: the target is strongly log-concave. The probit terms
    are evaluated by the vectorised ``_probit_vec`` into buffers, then summed in item order.
    """
    J = a.shape[0]
    lpb = np.empty(J)
    mb = np.empty(J)
    cb = np.empty(J)
    for j in range(J):  # vectorised: no branch, no libm call
        r = r_row[j]
        s = 1.0 if r > 0 else -1.0
        lp, m, c = _probit_vec(s * (a[j] * theta + b[j]))
        lpb[j] = lp
        mb[j] = m
        cb[j] = c
    d = theta - mu
    l = -0.5 * d * d / v
    g = -d / v
    h = -1.0 / v
    for j in range(J):
        r = r_row[j]
        if r < 0:
            continue
        s = 1.0 if r > 0 else -1.0
        aj = a[j]
        l += lpb[j]
        g += s * aj * mb[j]
        h -= aj * aj * cb[j]
    return l, g, h


@njit(cache=True, nogil=True)
def _find_mode(theta0, mu, v, a, b, r_row, tol_sd):
    """Safeguarded Newton for the mode of the concave l; returns (mode, l, l', l'') at the last point.

    Steps are capped at 3 curvature SDs of the current point and bisected against a bracket
    [lo, hi] with l'(lo) > 0 > l'(hi) once one is known. Stops when |step| < tol_sd * sd.
    """
    x = theta0
    lo = -np.inf
    hi = np.inf
    l, g, h = log_post_theta(x, mu, v, a, b, r_row)
    for _ in range(100):
        if g > 0.0:
            lo = x
        else:
            hi = x
        sd = 1.0 / math.sqrt(-h)
        step = -g / h
        if abs(step) < tol_sd * sd:
            break
        cap = 3.0 * sd
        if step > cap:
            step = cap
        elif step < -cap:
            step = -cap
        xn = x + step
        if not (lo < xn < hi):
            xn = 0.5 * (lo + hi)
        x = xn
        l, g, h = log_post_theta(x, mu, v, a, b, r_row)
    return x, l, g, h


@njit(cache=True, nogil=True)
def _seg_log_mass(uL, uR, g, w):
    """log of int exp(u) over a segment of the hull: u linear with slope g, u(L) = uL, u(R) = uR.

    w = R - L may be inf (then exactly one of L, R is infinite and the slope points inward).
    """
    if math.isinf(w):
        if g > 0.0:  # (-inf, R]
            return uR - math.log(g)
        return uL - math.log(-g)  # [L, inf)
    gw = g * w
    if abs(gw) < 1e-10:
        return uL + math.log(w)
    if gw > 0.0:
        # int = exp(uR) (1 - exp(-gw)) / g
        return uR + math.log(-math.expm1(-gw)) - math.log(g)
    return uL + math.log(-math.expm1(gw)) - math.log(-g)


@njit(cache=True, nogil=True)
def _seg_draw(L, R, g, u):
    """Inverse cdf of the density ∝ exp(g x) on [L, R] at the uniform u (L or R may be infinite)."""
    if math.isinf(L):
        return R + math.log(u) / g
    if math.isinf(R):
        return L + math.log1p(-u) / g
    w = R - L
    gw = g * w
    if abs(gw) < 1e-10:
        return L + u * w
    if gw > 0.0:
        return R + math.log(u + (1.0 - u) * math.exp(-gw)) / g
    return L + math.log1p(u * math.expm1(gw)) / g


@njit(cache=True, nogil=True)
def _ars_one(mode, sd, mu, v, a, b, r_row, unif, lmode, gmode):
    """One exact draw from exp(l) by adaptive rejection sampling.

    Hull abscissae start at mode - sd, mode, mode + sd (moved outward until the outer slopes point
    inward); rejected points are added (up to ARS_MAX_POINTS). ``unif`` supplies uniforms in pairs
    (one to choose the point, one to accept). Returns (draw, n_uniform_pairs_used); the count is
    -1 when the uniforms ran out (the caller then retries with fresh ones).
    """
    K = ARS_MAX_POINTS
    xs = np.empty(K)
    hs = np.empty(K)
    gs = np.empty(K)
    # left point
    xl = mode - sd
    ll, gl, _ = log_post_theta(xl, mu, v, a, b, r_row)
    step = sd
    while gl <= 0.0:
        step *= 2.0
        xl = mode - step
        ll, gl, _ = log_post_theta(xl, mu, v, a, b, r_row)
    xr = mode + sd
    lr, gr, _ = log_post_theta(xr, mu, v, a, b, r_row)
    step = sd
    while gr >= 0.0:
        step *= 2.0
        xr = mode + step
        lr, gr, _ = log_post_theta(xr, mu, v, a, b, r_row)
    xs[0] = xl
    hs[0] = ll
    gs[0] = gl
    n = 1
    if xl < mode < xr:
        xs[1] = mode
        hs[1] = lmode
        gs[1] = gmode
        n = 2
    xs[n] = xr
    hs[n] = lr
    gs[n] = gr
    n += 1

    z = np.empty(K + 1)
    logm = np.empty(K)
    n_pairs = unif.shape[0] // 2
    for it in range(n_pairs):
        # --- hull: breakpoints z[0] = -inf < z[1] < ... < z[n] = inf
        z[0] = -np.inf
        z[n] = np.inf
        for k in range(n - 1):
            dg = gs[k] - gs[k + 1]
            if dg > 1e-12 * (abs(gs[k]) + abs(gs[k + 1]) + 1e-300):
                zk = (hs[k + 1] - hs[k] - xs[k + 1] * gs[k + 1] + xs[k] * gs[k]) / dg
                if zk < xs[k]:
                    zk = xs[k]
                elif zk > xs[k + 1]:
                    zk = xs[k + 1]
            else:
                zk = 0.5 * (xs[k] + xs[k + 1])
            z[k + 1] = zk
        top = -np.inf
        for k in range(n):
            if hs[k] > top:
                top = hs[k]
        tot = -np.inf
        for k in range(n):
            L = z[k]
            R = z[k + 1]
            uL = hs[k] + gs[k] * (L - xs[k]) - top if not math.isinf(L) else -np.inf
            uR = hs[k] + gs[k] * (R - xs[k]) - top if not math.isinf(R) else -np.inf
            lm = _seg_log_mass(uL, uR, gs[k], R - L)
            logm[k] = lm
            if lm > tot:
                tot = lm
        ssum = 0.0
        for k in range(n):
            logm[k] = math.exp(logm[k] - tot)  # now relative masses
            ssum += logm[k]
        # --- choose a segment, then a point in it by the inverse cdf of the segment
        target = unif[2 * it] * ssum
        acc = 0.0
        seg = n - 1
        frac = 1.0
        for k in range(n):
            if logm[k] <= 0.0:
                continue
            if target <= acc + logm[k] or k == n - 1:
                seg = k
                frac = (target - acc) / logm[k]
                break
            acc += logm[k]
        if frac <= 0.0:
            frac = 1e-300
        elif frac >= 1.0:
            frac = 1.0 - 1e-16
        x = _seg_draw(z[seg], z[seg + 1], gs[seg], frac)
        upper = hs[seg] + gs[seg] * (x - xs[seg])
        lu = math.log(unif[2 * it + 1])
        # --- squeeze (chord of the two neighbouring abscissae)
        if xs[0] <= x <= xs[n - 1]:
            k = 0
            while k < n - 2 and x > xs[k + 1]:
                k += 1
            wgt = (x - xs[k]) / (xs[k + 1] - xs[k])
            lower = (1.0 - wgt) * hs[k] + wgt * hs[k + 1]
            if lu <= lower - upper:
                return x, it + 1
        lx, gx, _ = log_post_theta(x, mu, v, a, b, r_row)
        if lu <= lx - upper:
            return x, it + 1
        # rejected: add x to the hull
        if n < K:
            pos = n
            while pos > 0 and xs[pos - 1] > x:
                xs[pos] = xs[pos - 1]
                hs[pos] = hs[pos - 1]
                gs[pos] = gs[pos - 1]
                pos -= 1
            xs[pos] = x
            hs[pos] = lx
            gs[pos] = gx
            n += 1
    return np.nan, -1


@njit(cache=True, nogil=True, parallel=True)
def sample_theta_ars(R, a, b, mu, v, theta_start, unif, out, mode_out, status):
    """Exact draws theta_i ~ p(theta | R_i, T_i) ∝ N(theta; mu_i, v_i) prod_j Phi(s_ij (a_j theta + b_j)).

    ``theta_start`` warm-starts the mode search (e.g. the previous modes); ``unif`` is (N, 2K)
    uniforms on (0, 1). The mode only places the hull's first abscissae (the draw is exact from any
    hull), so the Newton search stops within ``_ARS_MODE_TOL_SD`` curvature SDs of it, one or two
    O(J) passes from a warm start. Writes the draws to ``out``, those modes to ``mode_out`` and, in
    ``status``, the number of uniform pairs used (-1 = ran out; redraw those subjects).
    """
    N = R.shape[0]
    for i in prange(N):
        r_row = R[i]
        mode, lm, gm, hm = _find_mode(theta_start[i], mu[i], v[i], a, b, r_row, _ARS_MODE_TOL_SD)
        sd = 1.0 / math.sqrt(-hm)
        x, used = _ars_one(mode, sd, mu[i], v[i], a, b, r_row, unif[i], lm, gm)
        out[i] = x
        mode_out[i] = mode
        status[i] = used


# ----------------------------------------------------------------------------- M-step, accuracy block


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})  # no division checks: vectorises
def _item_sums(sg, th, aj, bj, lpb, mb, cb):
    """Data part (f, ga, gb, haa, hab, hbb) of one draw's probit objective for one item (Hessian
    entries not negated). ``sg`` (N,) holds s_ij = +1 / -1 for observed cells and 0 for missing
    ones (``_item_signs``); ``lpb``, ``mb``, ``cb`` are (N,) scratch buffers. The probit terms are
    evaluated by the vectorised ``_probit_vec`` over contiguous memory, then summed in subject
    order over the observed cells."""
    N = sg.shape[0]
    for i in range(N):  # vectorised: no branch, no libm call
        s = sg[i]
        lp, m, c = _probit_vec(s * (aj * th[i] + bj))
        lpb[i] = lp
        mb[i] = m
        cb[i] = c
    f = 0.0
    ga = 0.0
    gb = 0.0
    haa = 0.0
    hab = 0.0
    hbb = 0.0
    for i in range(N):
        s = sg[i]
        if s == 0.0:
            continue
        t = th[i]
        f += lpb[i]
        sm = s * mb[i]
        ga += sm * t
        gb += sm
        c = cb[i]
        haa += c * t * t
        hab += c * t
        hbb += c
    return f, ga, gb, haa, hab, hbb


@njit(cache=True, nogil=True)
def _item_signs(j, R, sg):
    """sg[i] = +1 (correct), -1 (incorrect), 0 (missing) for column j of R (contiguous for ``_item_sums``)."""
    for i in range(R.shape[0]):
        r = R[i, j]
        sg[i] = 1.0 if r > 0 else (-1.0 if r == 0 else 0.0)


@njit(cache=True, nogil=True, inline="always")
def _add_terms(s, t):
    """The sum of two 6-tuples (f, ga, gb, haa, hab, hbb) of an item's objective terms, entry by entry."""
    return s[0] + t[0], s[1] + t[1], s[2] + t[2], s[3] + t[3], s[4] + t[4], s[5] + t[5]


@njit(cache=True, nogil=True)
def _item_pass(j, R, theta_hist, n_hist, aj, bj, ridge):
    """Averaged objective of item j over the stored draws, with gradient and Hessian.

    f = (1/n_hist) sum_k sum_{i: R_ij >= 0} log Phi(s_ij (a theta_ik + b)) - ridge b^2 / 2 (a prior
    on the intercept only: it is invariant to the scale of theta, so it does not distort the scale).
    Returns (f, ga, gb, haa, hab, hbb).
    """
    N = R.shape[0]
    sg = np.empty(N)
    _item_signs(j, R, sg)
    lpb = np.empty(N)
    mb = np.empty(N)
    cb = np.empty(N)
    total = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    for k in range(n_hist):
        total = _add_terms(total, _item_sums(sg, theta_hist[k], aj, bj, lpb, mb, cb))
    f, ga, gb, haa, hab, hbb = total
    w = 1.0 / n_hist
    f = f * w - 0.5 * ridge * bj * bj
    return (f, ga * w, gb * w - ridge * bj, -haa * w, -hab * w, -hbb * w - ridge)


@njit(cache=True, nogil=True)
def _item_new_term(j, R, th, aj, bj):
    """Data part of one draw's probit objective for item j: (f, ga, gb, haa, hab, hbb), no ridge."""
    N = R.shape[0]
    sg = np.empty(N)
    _item_signs(j, R, sg)
    f, ga, gb, haa, hab, hbb = _item_sums(sg, th, aj, bj, np.empty(N), np.empty(N), np.empty(N))
    return f, ga, gb, -haa, -hab, -hbb


@njit(cache=True, nogil=True)
def _store_terms(cache, j, terms):
    """cache[j] = the 6-tuple ``terms`` (f, ga, gb, haa, hab, hbb)."""
    for k in range(6):
        cache[j, k] = terms[k]


@njit(cache=True, nogil=True, inline="always")
def _capped_step(d1, d2, limit):
    """The Newton step (d1, d2) scaled down, if needed, so that neither coordinate moves by more than ``limit``."""
    cap = max(abs(d1), abs(d2))
    if cap > limit:
        d1 *= limit / cap
        d2 *= limit / cap
    return d1, d2


@njit(cache=True, nogil=True, parallel=True)
def item_newton_cached(R, theta_hist, n_hist, alpha, a, b, prior, cache, tol, max_newton, n_passes,
                       carry_tol=0.0, carried=None):
    """Exact M-step of the accuracy block with a cached history (in place on a, b, cache).

    The averaged objective is Q~_t = (1 - alpha) Q~_{t-1} + alpha Q_t, Q_t the probit objective of
    the newest draw ``theta_hist[n_hist - 1]`` and Q~_{t-1} the average over the earlier draws.
    ``cache[j]`` holds (f, ga, gb, haa, hab, hbb) of the data part of Q~_{t-1} at the current
    (a_j, b_j) (the previous iteration's maximiser, re-expressed in the current coordinates by the
    caller). The objective, gradient and Hessian at the start therefore cost one pass over the
    newest draw only; every later Newton point is evaluated exactly by a full pass over the
    n_hist stored draws. Stops when the Newton step is below ``tol`` in both coordinates; that
    last step is still taken (it puts the point within O(tol^2) of the exact maximiser, ~1e-10 for
    tol = 1e-5) and the cache is carried to it by its exact-at-second-order Taylor expansion. On
    exit ``cache[j]`` holds the data part of Q~_t at the returned point (the next iteration's start).
    With alpha = 1 (burn-in) the cache is ignored. ``n_passes[j]``: full passes used (-1: no
    convergence within ``max_newton`` steps). ``prior`` = (a_mean, a_precision, b_mean,
    b_precision): the Gaussian prior whose log density is added to the objective (zeros: ML).

    ``carry_tol`` > 0 with ``carried`` (J,) (averaging phase, alpha < 1, only): a Newton step is also
    taken without a pass -- the cache carried by the same second-order expansion -- while the
    item's total move since its last exact pass, ``carried[j]``, stays within ``carry_tol`` (max
    norm). The M-step then maximises the quadratic model of the averaged objective built at that
    last exact point; its gradient is off by O(D3 carry_tol^2 / 2), D3 the third derivative of
    the objective (of the order of its Hessian here), so the returned point moves by about
    carry_tol^2, far below the Monte-Carlo error of SAEM. An exact pass resets ``carried[j]`` to 0.
    The default (0, None) is the exact M-step.
    """
    ma = prior[0]
    pa = prior[1]
    mb = prior[2]
    pb = prior[3]
    J = a.shape[0]
    for j in prange(J):
        aj = a[j]
        bj = b[j]
        fn_, ga_, gb_, haa_, hab_, hbb_ = _item_new_term(j, R, theta_hist[n_hist - 1], aj, bj)
        if alpha < 1.0:
            c0 = 1.0 - alpha
            f = c0 * cache[j, 0] + alpha * fn_
            ga = c0 * cache[j, 1] + alpha * ga_
            gb = c0 * cache[j, 2] + alpha * gb_
            haa = c0 * cache[j, 3] + alpha * haa_
            hab = c0 * cache[j, 4] + alpha * hab_
            hbb = c0 * cache[j, 5] + alpha * hbb_
        else:
            f, ga, gb, haa, hab, hbb = fn_, ga_, gb_, haa_, hab_, hbb_
        passes = 0
        done = False
        for _ in range(max_newton):
            # objective with the Gaussian prior on (a, b)
            F = f - 0.5 * pa * (aj - ma) ** 2 - 0.5 * pb * (bj - mb) ** 2
            GA = ga - pa * (aj - ma)
            GB = gb - pb * (bj - mb)
            HAA = haa - pa
            HAB = hab
            HBB = hbb - pb
            det = HAA * HBB - HAB * HAB
            if det > 0.0 and HAA < 0.0:
                da = -(HBB * GA - HAB * GB) / det
                db = -(-HAB * GA + HAA * GB) / det
            else:  # flat direction (no data): gradient step
                da = GA
                db = GB
            move = max(abs(da), abs(db))
            carry = abs(da) < tol and abs(db) < tol
            if carried is not None:
                if not carry and carry_tol > 0.0 and alpha < 1.0 and carried[j] + move <= carry_tol:
                    carry = True
                if carry:
                    carried[j] += move
            if carry:
                # Final Newton step without another pass: the maximiser is within O(tol^2) of
                # (aj + da, bj + db) (or that of the quadratic model, see carry_tol); the cache is
                # moved there by its second-order expansion.
                f += ga * da + gb * db + 0.5 * (haa * da * da + 2.0 * hab * da * db + hbb * db * db)
                ga += haa * da + hab * db
                gb += hab * da + hbb * db
                aj += da
                bj += db
                done = True
                break
            da, db = _capped_step(da, db, 2.0)
            step = 1.0
            accepted = False
            for _bt in range(40):
                an = aj + step * da
                bn = bj + step * db
                fn, gan, gbn, haan, habn, hbbn = _item_pass(j, R, theta_hist, n_hist, an, bn, 0.0)
                passes += 1
                if fn - 0.5 * pa * (an - ma) ** 2 - 0.5 * pb * (bn - mb) ** 2 >= F - 1e-12 * abs(F):
                    accepted = True
                    break
                step *= 0.5
            if not accepted:
                done = True  # no ascent possible at rounding level: at the maximum
                break
            aj, bj = an, bn
            f, ga, gb, haa, hab, hbb = fn, gan, gbn, haan, habn, hbbn
            if carried is not None:
                carried[j] = 0.0  # the cache is exact here
        a[j] = aj
        b[j] = bj
        _store_terms(cache, j, (f, ga, gb, haa, hab, hbb))
        n_passes[j] = passes if done else -1


@njit(cache=True, nogil=True, parallel=True)
def item_objective_cache(R, theta_hist, n_hist, a, b, cache):
    """cache[j] = data part (f, ga, gb, haa, hab, hbb) of the averaged objective at (a_j, b_j), exactly."""
    for j in prange(a.shape[0]):
        _store_terms(cache, j, _item_pass(j, R, theta_hist, n_hist, a[j], b[j], 0.0))


# ----------------------------------------------------------------------------- MAP traits


@njit(cache=True, nogil=True)
def _map_objective(th, ta, r_row, y_row, cens_row, a, b, omega, phi, lam, p11, p12, p22, use_cot):
    """Log posterior of (theta, tau) for one subject, with gradient and Hessian (up to a constant).

    Prior precision [[p11, p12], [p12, p22]] = Sigma^-1. CoT cells: y_row finite; censored cells
    (cens_row true) contribute the Tobit term log Phi((omega - phi tau - y)/lam) with y the log cap.
    """
    f = -0.5 * (p11 * th * th + 2.0 * p12 * th * ta + p22 * ta * ta)
    g1 = -(p11 * th + p12 * ta)
    g2 = -(p12 * th + p22 * ta)
    h11 = -p11
    h12 = -p12
    h22 = -p22
    for j in range(a.shape[0]):
        r = r_row[j]
        if r >= 0:
            s = 1.0 if r > 0 else -1.0
            x = s * (a[j] * th + b[j])
            lp, m, c = _probit_terms(x)
            f += lp
            g1 += s * a[j] * m
            h11 -= a[j] * a[j] * c
        if use_cot:
            y = y_row[j]
            if math.isnan(y):
                continue
            if cens_row[j]:
                s2 = -phi[j] / lam[j]
                x = (omega[j] - phi[j] * ta - y) / lam[j]
                lp, m, c = _probit_terms(x)
                f += lp
                g2 += s2 * m
                h22 -= s2 * s2 * c
            else:
                iv = 1.0 / (lam[j] * lam[j])
                res = y - omega[j] + phi[j] * ta
                f -= 0.5 * res * res * iv
                g2 -= phi[j] * res * iv
                h22 -= phi[j] * phi[j] * iv
    return f, g1, g2, h11, h12, h22


@njit(cache=True, nogil=True, parallel=True)
def map_traits(R, Y, C, a, b, omega, phi, lam, rho, use_cot, theta0, tau0, out, tol, max_iter):
    """MAP (theta, tau) of every subject by damped Newton; out[i] = (theta, tau, sd_theta, sd_tau, n_iter).

    The log posterior is concave (probit and Tobit terms are log-concave, the rest Gaussian), so
    Newton with backtracking converges; stops when both Newton steps are below ``tol``. Posterior
    SDs are sqrt(diag(H^-1)) for H the negative Hessian at the MAP (docs/math.md §1.5). ``use_cot``
    False: IRT-only (rho must be 0; tau is then its prior, 0 with SD 1).
    """
    N = R.shape[0]
    one_m = 1.0 - rho * rho
    p11 = 1.0 / one_m
    p22 = 1.0 / one_m
    p12 = -rho / one_m
    for i in prange(N):
        th = theta0[i]
        ta = tau0[i]
        f, g1, g2, h11, h12, h22 = _map_objective(th, ta, R[i], Y[i], C[i], a, b, omega, phi, lam,
                                                  p11, p12, p22, use_cot)
        it = 0
        while it < max_iter:
            it += 1
            det = h11 * h22 - h12 * h12
            d1 = -(h22 * g1 - h12 * g2) / det
            d2 = -(-h12 * g1 + h11 * g2) / det
            if abs(d1) < tol and abs(d2) < tol:
                break
            d1, d2 = _capped_step(d1, d2, 3.0)
            step = 1.0
            moved = False
            for _bt in range(50):
                tn = th + step * d1
                un = ta + step * d2
                fn, g1n, g2n, h11n, h12n, h22n = _map_objective(tn, un, R[i], Y[i], C[i], a, b, omega,
                                                                phi, lam, p11, p12, p22, use_cot)
                if fn >= f - 1e-12 * abs(f):
                    moved = True
                    break
                step *= 0.5
            if not moved:
                break
            th, ta = tn, un
            f, g1, g2, h11, h12, h22 = fn, g1n, g2n, h11n, h12n, h22n
        det = h11 * h22 - h12 * h12
        out[i, 0] = th
        out[i, 1] = ta
        out[i, 2] = math.sqrt(-h22 / det) if det > 0 else np.nan
        out[i, 3] = math.sqrt(-h11 / det) if det > 0 else np.nan
        out[i, 4] = it
