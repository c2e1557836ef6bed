"""Numba kernels of the LaRT SAEM calibrator (compute only; ``calibrator.py`` validates and converts).

Layout conventions: ``R`` is the (N, J) int8 correctness matrix (1 / 0 / -1 missing), item
parameters are (J,) float64, per-subject quantities (N,) float64. Every kernel has a slow twin in
``tests/naive_lart.py``.

Scalar primitives come from the shared ``catengine.models._kernels`` (``log_phi_cdf``,
``inv_mills``, ``probit_curvature``). ``_probit_terms`` below is a fused variant used in the hot
loops: one ``erfc`` gives log Phi(x), m(x) = phi(x)/Phi(x) and the curvature m(x)(x + m(x)); for
x < -20 it defers to the shared primitives (asymptotic series). It is tested against them.

Kernels
-------
``log_post_theta``      l(theta), l'(theta), l''(theta) of the 1-D target of MATH.md 1.3 step 2
``sample_theta_ars``    exact draws of theta_i | R_i, T_i for every subject (adaptive rejection
                        sampling, Gilks & Wild 1992, tangent hull + chord squeeze), prange over i
``item_newton_cached``  exact M-step of the accuracy block: for every item, Newton with backtracking
                        on the averaged objective (1/m) sum_k sum_i log Phi(s_ij (a theta_ik + b))
                        (- ridge b^2/2), with the previous iteration's value/gradient/Hessian
                        cached so an iteration costs about one pass over the history; prange
                        over items
``map_traits``          MAP (theta, tau) per subject by damped 2-D Newton, with the observed
                        precision matrix (and the optional Tobit term for censored CoT cells)
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from catengine.models._kernels import inv_mills, log_phi_cdf, probit_curvature

_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SERIES_BELOW = -20.0  # same switch point as the shared primitives

#: maximum number of abscissae of the ARS hull
ARS_MAX_POINTS = 24


# ----------------------------------------------------------------------------- scalar helpers


@njit(cache=True, inline="always")
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


# ----------------------------------------------------------------------------- 1-D posterior of theta


@njit(cache=True)
def log_post_theta(theta, mu, v, a, b, r_row):
    """(l, l', l'') of l(theta) = -(theta - mu)^2 / (2 v) + sum_{j: r_j >= 0} log Phi(s_j (a_j theta + b_j)).

    ``r_row`` is one row of R (int8, -1 = missing); s_j = 2 r_j - 1. The constant of the normal
    density is left out. l'' <= -1/v < 0: the target is strongly log-concave.
    """
    d = theta - mu
    l = -0.5 * d * d / v
    g = -d / v
    h = -1.0 / v
    for j in range(a.shape[0]):
        r = r_row[j]
        if r < 0:
            continue
        s = 1.0 if r > 0 else -1.0
        aj = a[j]
        x = s * (aj * theta + b[j])
        lp, m, c = _probit_terms(x)
        l += lp
        g += s * aj * m
        h -= aj * aj * c
    return l, g, h


@njit(cache=True)
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


@njit(cache=True)
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


@njit(cache=True)
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


@njit(cache=True)
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


@njit(cache=True, parallel=True)
def sample_theta_ars(R, a, b, mu, v, theta_start, unif, out, mode_out, status):
    """Exact draws theta_i ~ p(theta | R_i, T_i) ∝ N(theta; mu_i, v_i) prod_j Phi(s_ij (a_j theta + b_j)).

    ``theta_start`` warm-starts the mode search (e.g. the previous modes); ``unif`` is (N, 2K)
    uniforms on (0, 1). Writes the draws to ``out``, the modes to ``mode_out`` and, in
    ``status``, the number of uniform pairs used (-1 = ran out; redraw those subjects).
    """
    N = R.shape[0]
    for i in prange(N):
        r_row = R[i]
        mode, lm, gm, hm = _find_mode(theta_start[i], mu[i], v[i], a, b, r_row, 1e-3)
        sd = 1.0 / math.sqrt(-hm)
        x, used = _ars_one(mode, sd, mu[i], v[i], a, b, r_row, unif[i], lm, gm)
        out[i] = x
        mode_out[i] = mode
        status[i] = used


# ----------------------------------------------------------------------------- M-step, accuracy block


@njit(cache=True)
def _item_pass(j, R, theta_hist, n_hist, aj, bj, ridge):
    """Averaged objective of item j over the stored draws, with gradient and Hessian.

    f = (1/n_hist) sum_k sum_{i: R_ij >= 0} log Phi(s_ij (a theta_ik + b)) - ridge b^2 / 2 (a prior
    on the intercept only: it is invariant to the scale of theta, so it does not distort the scale).
    Returns (f, ga, gb, haa, hab, hbb).
    """
    N = R.shape[0]
    f = 0.0
    ga = 0.0
    gb = 0.0
    haa = 0.0
    hab = 0.0
    hbb = 0.0
    for k in range(n_hist):
        th = theta_hist[k]
        for i in range(N):
            r = R[i, j]
            if r < 0:
                continue
            s = 1.0 if r > 0 else -1.0
            t = th[i]
            x = s * (aj * t + bj)
            lp, m, c = _probit_terms(x)
            f += lp
            sm = s * m
            ga += sm * t
            gb += sm
            haa += c * t * t
            hab += c * t
            hbb += c
    w = 1.0 / n_hist
    f = f * w - 0.5 * ridge * bj * bj
    return (f, ga * w, gb * w - ridge * bj, -haa * w, -hab * w, -hbb * w - ridge)


@njit(cache=True)
def _item_new_term(j, R, th, aj, bj):
    """Data part of one draw's probit objective for item j: (f, ga, gb, haa, hab, hbb), no ridge."""
    N = R.shape[0]
    f = 0.0
    ga = 0.0
    gb = 0.0
    haa = 0.0
    hab = 0.0
    hbb = 0.0
    for i in range(N):
        r = R[i, j]
        if r < 0:
            continue
        s = 1.0 if r > 0 else -1.0
        t = th[i]
        lp, m, c = _probit_terms(s * (aj * t + bj))
        f += lp
        sm = s * m
        ga += sm * t
        gb += sm
        haa += c * t * t
        hab += c * t
        hbb += c
    return f, ga, gb, -haa, -hab, -hbb


@njit(cache=True, parallel=True)
def item_newton_cached(R, theta_hist, n_hist, alpha, a, b, prior, cache, tol, max_newton, n_passes):
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
            if abs(da) < tol and abs(db) < tol:
                # Final Newton step without another pass: the maximiser is within O(tol^2) of
                # (aj + da, bj + db); the cache is moved there by its second-order expansion.
                f += ga * da + gb * db + 0.5 * (haa * da * da + 2.0 * hab * da * db + hbb * db * db)
                ga += haa * da + hab * db
                gb += hab * da + hbb * db
                aj += da
                bj += db
                done = True
                break
            cap = max(abs(da), abs(db))
            if cap > 2.0:
                da *= 2.0 / cap
                db *= 2.0 / cap
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
        a[j] = aj
        b[j] = bj
        cache[j, 0] = f
        cache[j, 1] = ga
        cache[j, 2] = gb
        cache[j, 3] = haa
        cache[j, 4] = hab
        cache[j, 5] = hbb
        n_passes[j] = passes if done else -1


# ----------------------------------------------------------------------------- MAP traits


@njit(cache=True)
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


@njit(cache=True, parallel=True)
def map_traits(R, Y, C, a, b, omega, phi, lam, rho, use_cot, theta0, tau0, out, tol, max_iter):
    """MAP (theta, tau) of every subject by damped Newton; out[i] = (theta, tau, sd_theta, sd_tau, n_iter).

    The log posterior is concave (probit and Tobit terms are log-concave, the rest Gaussian), so
    Newton with backtracking converges; stops when both Newton steps are below ``tol``. Posterior
    SDs are sqrt(diag(H^-1)) for H the negative Hessian at the MAP (MATH.md 1.5). ``use_cot``
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
            cap = max(abs(d1), abs(d2))
            if cap > 3.0:
                d1 *= 3.0 / cap
                d2 *= 3.0 / cap
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
