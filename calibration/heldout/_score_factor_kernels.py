"""Numba kernels of the score-factor fit (``calibration.heldout.score_factors``: compute only, the callers
validate and convert).

Layout: ``Y`` and ``M`` are (N, J) C-contiguous float64 (answers and observation weights, 0 where
an answer is missing), ``T`` (N, d) the traits, ``G`` (J, d) the loadings, ``h`` (J,) the
intercepts, all C-contiguous float64. The logit of cell (i, j) is z = h_j + T_i . G_j.

Kernels (one pass over the cells each; ``p = sigmoid(z)``, ``w = m p (1 - p)``, ``r = m (y - p)``)
------------------------------------------------------------------------------------------------
``item_newton_sums``   per item, sum_i r X_i (J, d+1) and sum_i w X_i X_i' (J, d+1, d+1), X_i = [T_i, 1]
``trait_newton_sums``  per LLM, sum_j r G_j (N, d) and sum_j w G_j G_j' (N, d, d)
``log_likelihood``     sum of m (y log sigmoid(z) + (1 - y) log sigmoid(-z))
``capped_newton_steps`` per row of a batch, the solution of H s = g (Cholesky) scaled so that max |s| <= 1
``standardised_sweeps`` the whole default fit (item steps, trait steps, re-standardisation, stopping
                       rule) in one call, so that a fit on a worker thread holds the GIL once

The cells are processed a row (or a block of a row) at a time: each stage is a plain loop over
per-cell buffers, and the sigmoid and log terms come from the arithmetic helpers of
``catengine.models.kernels`` (no libm call), so LLVM vectorises the loops. ``fastmath`` is off
(no reassociation: the sums are reproducible); ``error_model="numpy"`` drops the division-by-zero
branch that would stop the vectorisation. Sums over the items of a row go through 8 partial sums.
When a parameter is not finite the sums and the log-likelihood are NaN (the fit's runaway check
reads that).
"""

from __future__ import annotations

import numpy as np
from catengine.numba_cache import njit

from catengine.models.kernels import exp_neg, log1p_unit, sigmoid_pair

KERNEL_OPTS = dict(cache=True, nogil=True, fastmath=False, error_model="numpy")
HELPER_OPTS = dict(cache=True, inline="always", error_model="numpy")

ITEM_BLOCK = 128  # items per block of the item sums: the block's accumulators (<= 14 x 128 doubles) stay in L1
LANES = 8  # partial sums of a reduction over a row's items


@njit(**HELPER_OPTS)
def _all_finite(T, G, h):
    for x in T.ravel():
        if not np.isfinite(x):
            return False
    for x in G.ravel():
        if not np.isfinite(x):
            return False
    for x in h:
        if not np.isfinite(x):
            return False
    return True


@njit(**HELPER_OPTS)
def _newton_sums_buffers(rows, D, T, G, h):
    """(grad (rows, D), hess (rows, D, D), finite): the outputs of a Newton-sums kernel over ``rows``
    items or LLMs, both NaN (and ``finite`` False) when a parameter is not finite."""
    grad = np.empty((rows, D))
    hess = np.empty((rows, D, D))
    finite = _all_finite(T, G, h)
    if not finite:
        grad[:] = np.nan
        hess[:] = np.nan
    return grad, hess, finite


@njit(**HELPER_OPTS)
def _row_logits(T, Gt, h, i, j0, n, z):
    """z[b] = h_j + T_i . G_j for the n items j = j0 + b (``Gt``: the loadings as (d, J))."""
    hb = h[j0:j0 + n]  # views: unit-stride loops from 0, which LLVM vectorises
    for b in range(n):
        z[b] = hb[b]
    for k in range(Gt.shape[0]):
        t = T[i, k]
        g = Gt[k, j0:j0 + n]
        for b in range(n):
            z[b] += t * g[b]


@njit(**HELPER_OPTS)
def _row_weights(Y, M, i, j0, n, z, w, r):
    """w[b] = m p (1 - p) and r[b] = m (y - p), p = sigmoid(z[b]), for the cells (i, j0 + b)."""
    y = Y[i, j0:j0 + n]
    m = M[i, j0:j0 + n]
    for b in range(n):
        zb = z[b]
        upper, lower = sigmoid_pair(zb, 1.0)  # sigmoid(|z|), sigmoid(-|z|)
        p = upper if zb >= 0.0 else lower
        w[b] = m[b] * p * (1.0 - p)
        r[b] = m[b] * (y[b] - p)


@njit(**HELPER_OPTS)
def _lane_dot(a, b, n, lanes):
    """sum_j a[j] b[j] over j < n, by LANES partial sums (``lanes``: scratch of LANES)."""
    for l in range(LANES):
        lanes[l] = 0.0
    whole = n - n % LANES
    for j0 in range(0, whole, LANES):
        for l in range(LANES):
            lanes[l] += a[j0 + l] * b[j0 + l]
    s = 0.0
    for l in range(LANES):
        s += lanes[l]
    for j in range(whole, n):
        s += a[j] * b[j]
    return s




@njit(**KERNEL_OPTS)
def item_newton_sums(Y, M, T, G, h):
    """(grad (J, d+1), hess (J, d+1, d+1)): per item j, sum_i r_ij X_i and sum_i w_ij X_i X_i'."""
    N, J = Y.shape
    d = G.shape[1]
    D = d + 1
    grad, hess, finite = _newton_sums_buffers(J, D, T, G, h)
    if not finite:
        return grad, hess
    Gt = np.ascontiguousarray(G.T)
    z = np.empty(ITEM_BLOCK)
    w = np.empty(ITEM_BLOCK)
    r = np.empty(ITEM_BLOCK)
    grad_acc = np.empty((D, ITEM_BLOCK))  # structure of arrays: the updates run along the items
    hess_acc = np.empty((D * (D + 1) // 2, ITEM_BLOCK))  # upper triangle, row by row
    x = np.empty(D)
    for j0 in range(0, J, ITEM_BLOCK):
        n = min(J - j0, ITEM_BLOCK)
        grad_acc[:] = 0.0
        hess_acc[:] = 0.0
        for i in range(N):
            _row_logits(T, Gt, h, i, j0, n, z)
            _row_weights(Y, M, i, j0, n, z, w, r)
            for k in range(d):
                x[k] = T[i, k]
            x[d] = 1.0
            q = 0
            for k in range(D):
                xk = x[k]
                ga = grad_acc[k]
                for b in range(n):
                    ga[b] += r[b] * xk
                for l in range(k, D):
                    c = xk * x[l]
                    ha = hess_acc[q]
                    for b in range(n):
                        ha[b] += w[b] * c
                    q += 1
        for b in range(n):
            q = 0
            for k in range(D):
                grad[j0 + b, k] = grad_acc[k, b]
                for l in range(k, D):
                    hess[j0 + b, k, l] = hess_acc[q, b]
                    hess[j0 + b, l, k] = hess_acc[q, b]
                    q += 1
    return grad, hess


@njit(**KERNEL_OPTS)
def trait_newton_sums(Y, M, T, G, h):
    """(grad (N, d), hess (N, d, d)): per LLM i, sum_j r_ij G_j and sum_j w_ij G_j G_j'."""
    N, J = Y.shape
    d = G.shape[1]
    grad, hess, finite = _newton_sums_buffers(N, d, T, G, h)
    if not finite:
        return grad, hess
    Gt = np.ascontiguousarray(G.T)
    GG = np.empty((d * (d + 1) // 2, J))  # G_jk G_jl, upper triangle row by row
    q = 0
    for k in range(d):
        for l in range(k, d):
            for j in range(J):
                GG[q, j] = Gt[k, j] * Gt[l, j]
            q += 1
    z = np.empty(J)
    w = np.empty(J)
    r = np.empty(J)
    lanes = np.empty(LANES)
    for i in range(N):
        _row_logits(T, Gt, h, i, 0, J, z)
        _row_weights(Y, M, i, 0, J, z, w, r)
        q = 0
        for k in range(d):
            grad[i, k] = _lane_dot(r, Gt[k], J, lanes)
            for l in range(k, d):
                s = _lane_dot(w, GG[q], J, lanes)
                hess[i, k, l] = s
                hess[i, l, k] = s
                q += 1
    return grad, hess


@njit(**KERNEL_OPTS)
def log_likelihood(Y, M, T, G, h):
    """sum_ij m (y log sigmoid(z) + (1 - y) log sigmoid(-z)), with
    log sigmoid(z) = -log1p(exp(-z)) for z > 0 and z - log1p(exp(z)) otherwise."""
    N, J = Y.shape
    if not _all_finite(T, G, h):
        return np.nan
    Gt = np.ascontiguousarray(G.T)
    z = np.empty(J)
    column_sums = np.zeros(J)  # summed down the rows (elementwise), then once across
    for i in range(N):
        _row_logits(T, Gt, h, i, 0, J, z)
        y = Y[i]
        m = M[i]
        for j in range(J):
            zj = z[j]
            a = log1p_unit(exp_neg(-abs(zj)))  # log1p(exp(-|z|))
            log_p = -a if zj > 0.0 else zj - a
            log_q = -zj - a if zj > 0.0 else -a
            column_sums[j] += m[j] * (y[j] * log_p + (1.0 - y[j]) * log_q)
    total = 0.0
    for j in range(J):
        total += column_sums[j]
    return total


@njit(**KERNEL_OPTS)
def capped_newton_steps(hess, grad):
    """(steps (n, D), ok): per row, s = hess^-1 grad by Cholesky, divided by max(1, max |s|).
    ``ok`` is False when a pivot is not positive (a NaN pivot gives NaN steps and ok True)."""
    n, D = grad.shape
    steps = np.empty((n, D))
    L = np.empty((D, D))
    v = np.empty(D)
    for row in range(n):
        H = hess[row]
        for k in range(D):
            s = H[k, k]
            for l in range(k):
                s -= L[k, l] * L[k, l]
            if s <= 0.0:
                return steps, False
            L[k, k] = np.sqrt(s)
            for m in range(k + 1, D):
                t = H[m, k]
                for l in range(k):
                    t -= L[m, l] * L[k, l]
                L[m, k] = t / L[k, k]
        for k in range(D):  # L v = g
            t = grad[row, k]
            for l in range(k):
                t -= L[k, l] * v[l]
            v[k] = t / L[k, k]
        biggest = 1.0
        for k in range(D - 1, -1, -1):  # L' s = v
            t = v[k]
            for l in range(k + 1, D):
                t -= L[l, k] * steps[row, l]
            steps[row, k] = t / L[k, k]
            biggest = max(biggest, abs(steps[row, k]))
        for k in range(D):
            steps[row, k] /= biggest
    return steps, True


#: ``standardised_sweeps`` status codes
CONVERGED, MAX_ITER, RUNAWAY, NOT_POSITIVE_DEFINITE = 0, 1, 2, 3


@njit(**KERNEL_OPTS)
def log_posterior(Y, M, T, G, h, slope_variance, intercept_variance):
    """The fit's objective: the log-likelihood plus the Normal log priors of T (I), G and h (up to a constant)."""
    f = log_likelihood(Y, M, T, G, h)
    s_t = 0.0
    for x in T.ravel():
        s_t += x * x
    s_g = 0.0
    for x in G.ravel():
        s_g += x * x
    s_h = 0.0
    for x in h:
        s_h += x * x
    return f - 0.5 * s_t - 0.5 * s_g / slope_variance - 0.5 * s_h / intercept_variance


@njit(**KERNEL_OPTS)
def standardise(T, G, h):
    """(T', G', h'): T' = L^-1 (T - m) row-wise with m the mean and L L' the (biased) covariance of the
    rows of T plus 1e-12 I; G' = G L, h' = h + G m. The fitted logits do not change. ok False when
    that covariance is not positive definite."""
    N, d = T.shape
    m = np.zeros(d)
    for i in range(N):
        for k in range(d):
            m[k] += T[i, k]
    for k in range(d):
        m[k] /= N
    C = np.zeros((d, d))
    for i in range(N):
        for k in range(d):
            ck = T[i, k] - m[k]
            for l in range(d):
                C[k, l] += ck * (T[i, l] - m[l])
    L = np.zeros((d, d))
    for k in range(d):
        s = C[k, k] / N + 1e-12
        for l in range(k):
            s -= L[k, l] * L[k, l]
        if not s > 0.0:
            return T, G, h, False
        L[k, k] = np.sqrt(s)
        for r in range(k + 1, d):
            t = C[r, k] / N
            for l in range(k):
                t -= L[r, l] * L[k, l]
            L[r, k] = t / L[k, k]
    T_new = np.empty((N, d))
    for i in range(N):  # forward substitution: L t = T_i - m
        for k in range(d):
            t = T[i, k] - m[k]
            for l in range(k):
                t -= L[k, l] * T_new[i, l]
            T_new[i, k] = t / L[k, k]
    J = G.shape[0]
    G_new = np.zeros((J, d))
    h_new = np.empty(J)
    for j in range(J):
        s = h[j]
        for k in range(d):
            s += G[j, k] * m[k]
            for l in range(k, d):  # (G L)_jk = sum_l G_jl L_lk, L lower triangular
                G_new[j, k] += G[j, l] * L[l, k]
        h_new[j] = s
    return T_new, G_new, h_new, True


@njit(**KERNEL_OPTS)
def standardised_sweeps(Y, M, T, G, h, slope_variance, intercept_variance, max_iter, tol, runaway_norm):
    """The score-factor fit's default scheme, every sweep in one call: a capped Newton step for every
    item's (g_j, h_j) under its Normal prior, one for every LLM's eta_i under Normal(0, I), then
    :func:`standardise`; stops when the log posterior changes by at most ``tol`` x max(1, |f|).
    Returns (T, G, h, status, sweeps, f): status ``CONVERGED``, ``MAX_ITER``, ``RUNAWAY`` (the
    objective is not finite or a loading's norm passed ``runaway_norm``) or
    ``NOT_POSITIVE_DEFINITE`` (a Newton step's or the traits' covariance)."""
    N, J = Y.shape
    d = G.shape[1]
    D = d + 1
    f_old = log_posterior(Y, M, T, G, h, slope_variance, intercept_variance)
    f = f_old
    it = 0
    for it in range(1, max_iter + 1):
        grad, hess = item_newton_sums(Y, M, T, G, h)
        for j in range(J):
            for k in range(D):
                prior = 1.0 / slope_variance if k < d else 1.0 / intercept_variance
                grad[j, k] -= prior * (G[j, k] if k < d else h[j])
                hess[j, k, k] += prior
        steps, ok = capped_newton_steps(hess, grad)
        if not ok:
            return T, G, h, NOT_POSITIVE_DEFINITE, it, f
        G = G.copy()
        h = h.copy()
        for j in range(J):
            for k in range(d):
                G[j, k] += steps[j, k]
            h[j] += steps[j, d]
        grad_t, hess_t = trait_newton_sums(Y, M, T, G, h)
        for i in range(N):
            for k in range(d):
                grad_t[i, k] -= T[i, k]
                hess_t[i, k, k] += 1.0
        steps_t, ok = capped_newton_steps(hess_t, grad_t)
        if not ok:
            return T, G, h, NOT_POSITIVE_DEFINITE, it, f
        T = T + steps_t
        T, G, h, ok = standardise(T, G, h)
        if not ok:
            return T, G, h, NOT_POSITIVE_DEFINITE, it, f
        f = log_posterior(Y, M, T, G, h, slope_variance, intercept_variance)
        largest = 0.0
        for j in range(J):
            s = 0.0
            for k in range(d):
                s += G[j, k] * G[j, k]
            largest = max(largest, s)
        if not np.isfinite(f) or not (np.sqrt(largest) <= runaway_norm):
            return T, G, h, RUNAWAY, it, f
        if abs(f - f_old) <= tol * max(1.0, abs(f)):
            return T, G, h, CONVERGED, it, f
        f_old = f
    return T, G, h, MAX_ITER, it, f
