"""Numba kernels of trait estimation (compute only; ``map.py`` / ``eap.py`` validate and convert).

Model codes (``state.model_code``): 0 = 2PL, 1 = 4PL, 2 = probit (LaRT accuracy). Every kernel
works on the first ``n`` entries of per-answer buffers ``a, b, c, d, y`` (c = 0, d = 1 outside the
4PL). The Gaussian part of the log posterior is passed as a precision ``q`` and a mean ``m``:
-q (theta - m)^2 / 2 (for LaRT this is the exact profile of the bivariate prior and the CoT terms,
see ``base.gaussian_part``). Slow twins: ``tests/naive_engine.py``.
"""

from __future__ import annotations

import math

import numpy as np
from catengine.numba_cache import njit

from catengine.models.kernels import log_p_4pl as _log_p_4pl
from catengine.models.kernels import weights_4pl as _weights_4pl
from catengine.models.kernels import (
    log_phi_cdf,
    log_sigmoid,
    logistic_terms,
    probit_terms,
    sigmoid,
)


@njit(cache=True)
def item_terms(model, z, a, c, d, y):
    """(log-likelihood, d/dtheta, d2/dtheta2) of one answer y at linear predictor z = a theta + b."""
    if model == 0:
        s, sc, log_s, log_sc = logistic_terms(z)  # one exp and one log1p for the three terms
        if y > 0.5:
            return log_s, a * sc, -a * a * s * sc
        return log_sc, -a * s, -a * a * s * sc
    if model == 1:
        s = sigmoid(z)
        sc = sigmoid(-z)
        w1, w0 = _weights_4pl(s, c, d)
        lp, lq = _log_p_4pl(z, c, d)
        one_m_2s = sc - s
        aa = a * a
        if y > 0.5:
            return lp, a * sc * w1, aa * sc * w1 * (one_m_2s - sc * w1)
        return lq, -a * s * w0, -aa * s * w0 * (one_m_2s + s * w0)
    sgn = 1.0 if y > 0.5 else -1.0
    log_cdf, mills, curvature = probit_terms(sgn * z)  # log Phi, m and m (x + m) from one erfc pass
    return log_cdf, sgn * a * mills, -a * a * curvature


@njit(cache=True)
def item_loglik(model, z, c, d, y):
    """Log-likelihood of one answer at linear predictor z (cheaper than ``item_terms``)."""
    if model == 0:
        return log_sigmoid(z) if y > 0.5 else log_sigmoid(-z)
    if model == 1:
        lp, lq = _log_p_4pl(z, c, d)
        return lp if y > 0.5 else lq
    return log_phi_cdf(z) if y > 0.5 else log_phi_cdf(-z)


@njit(cache=True)
def log_post_1d(model, theta, a, b, c, d, y, n, q, m):
    """(f, f', f'', l'') at theta: f = sum_j l_j(theta) - q (theta - m)^2 / 2, l'' the likelihood part."""
    ll = 0.0
    g = 0.0
    h = 0.0
    for j in range(n):
        lj, gj, hj = item_terms(model, a[j] * theta + b[j], a[j], c[j], d[j], y[j])
        ll += lj
        g += gj
        h += hj
    dev = theta - m
    return ll - 0.5 * q * dev * dev, g - q * dev, h - q, h


@njit(cache=True)
def map_newton_1d(model, a, b, c, d, y, n, q, m, theta0, max_iter, tol, grid_start):
    """Maximise f(theta) = sum_j l_j(theta) - q (theta - m)^2 / 2 by Newton with backtracking.

    Returns (theta, f, f', l'', n_iter, converged). For concave likelihoods (2PL, probit) -f'' >= q
    and this is plain damped Newton from ``theta0`` (the warm start). For the 4PL, whose likelihood
    need not be concave, the curvature used in the step is floored at q / 10 (so every step is an
    ascent direction) and, with ``grid_start``, a coarse grid over m +- 8 prior SDs picks the start
    when it beats ``theta0`` (guards against a distant local mode).
    """
    theta = theta0
    f, g, h, hl = log_post_1d(model, theta, a, b, c, d, y, n, q, m)
    if grid_start:
        sd = 1.0 / math.sqrt(q)
        for k in range(65):
            t = m + sd * (-8.0 + 0.25 * k)
            ft, gt, ht, hlt = log_post_1d(model, t, a, b, c, d, y, n, q, m)
            if ft > f:
                theta, f, g, h, hl = t, ft, gt, ht, hlt
    converged = False
    it = 0
    for it in range(1, max_iter + 1):
        curv = -h
        if curv < 0.1 * q:
            curv = 0.1 * q
        step = g / curv
        t = 1.0
        while True:
            cand = theta + t * step
            f2, g2, h2, hl2 = log_post_1d(model, cand, a, b, c, d, y, n, q, m)
            if f2 >= f - 1e-13 * (1.0 + abs(f)) or t < 1e-12:
                break
            t *= 0.5
        theta, f, g, h, hl = cand, f2, g2, h2, hl2
        if abs(t * step) <= tol * (1.0 + abs(theta)):
            converged = True
            break
    return theta, f, g, hl, it, converged


@njit(cache=True)
def add_loglik_grid(model, grid, a, b, c, d, y, out):
    """out[g] += log-likelihood of one answer (item parameters a, b, c, d, answer y) at grid[g]."""
    for g in range(grid.shape[0]):
        out[g] += item_loglik(model, a * grid[g] + b, c, d, y)


@njit(cache=True)
def loglik_points(model, thetas, a, b, c, d, y, n):
    """Log-likelihood of the first n answers at each theta in ``thetas``."""
    out = np.zeros(thetas.shape[0])
    for g in range(thetas.shape[0]):
        s = 0.0
        for j in range(n):
            s += item_loglik(model, a[j] * thetas[g] + b[j], c[j], d[j], y[j])
        out[g] = s
    return out


@njit(cache=True)
def item_parameter_sensitivity(model, theta, a, b, c, d, y, va, vb, vab, n):
    """sum_j G_j' Cov(a_j, b_j) G_j, G_j = (d s_j / d a_j, d s_j / d b_j), s_j = d l_j / d theta (docs/math.md §7.3).

    With g = dl/dz and g' = d2l/dz2 at z = a theta + b: s_j = a g, ds/da = g + a theta g', ds/db = a g'
    (2PL: (y - p) - a theta p (1 - p) and -a p (1 - p)).
    """
    acc = 0.0
    for j in range(n):
        aj = a[j]
        _, g, gp = item_terms(model, aj * theta + b[j], 1.0, c[j], d[j], y[j])
        ga = g + aj * theta * gp
        gb = aj * gp
        acc += ga * ga * va[j] + 2.0 * ga * gb * vab[j] + gb * gb * vb[j]
    return acc


@njit(cache=True)
def lz_terms(model, theta, a, b, c, d, y, n):
    """(l0, E[l0], Var[l0]) of the answers at theta (Drasgow, Levine & Williams 1985):
    l0 = sum y log P + (1 - y) log(1 - P), E = sum P log P + (1 - P) log(1 - P),
    Var = sum P (1 - P) log(P / (1 - P))^2."""
    l0 = 0.0
    e = 0.0
    v = 0.0
    for j in range(n):
        z = a[j] * theta + b[j]
        lp = item_loglik(model, z, c[j], d[j], 1.0)
        lq = item_loglik(model, z, c[j], d[j], 0.0)
        p = math.exp(lp)
        q = math.exp(lq)
        l0 += lp if y[j] > 0.5 else lq
        e += p * lp + q * lq
        r = lp - lq
        v += p * q * r * r
    return l0, e, v
