"""Slow pure-numpy twins of every kernel in calibration.methods.cbmm._kernels (dense textbook formulas).

They materialise what the kernels stream (the float mask, x = theta a' + b, the working
response) and use numpy's exp/log1p, scipy's NNLS and brentq, so they are independent of the
kernels' tiling, polynomial exp and algebraic rearrangements.
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy import optimize, special


def exp_neg(x):
    return np.exp(x)


def log1p01(e):
    return np.log1p(e)


def transpose(c):
    return np.ascontiguousarray(c.T)


def _mask(c, rows=None, cols=None):
    w = (c >= 0).astype(float)
    if rows is not None:
        keep = np.zeros(c.shape[0], bool)
        keep[rows] = True
        w[~keep] = 0.0
    if cols is not None:
        keep = np.zeros(c.shape[1], bool)
        keep[cols] = True
        w[:, ~keep] = 0.0
    return w


def count_pass(c, row_on, col_on):
    row_on = np.asarray(row_on, bool)
    col_on = np.asarray(col_on, bool)
    obs = c >= 0
    row_n = np.where(row_on, (obs & col_on[None, :]).sum(1), 0)
    row_k = np.where(row_on, ((c == 1) & col_on[None, :]).sum(1), 0)
    col_n = (obs & row_on[:, None]).sum(0)
    col_k = ((c == 1) & row_on[:, None]).sum(0)
    return row_n, row_k, col_n, col_k


def _x(theta, a, b):
    theta = np.atleast_2d(theta.T).T if theta.ndim == 1 else theta
    a = a[:, None] if a.ndim == 1 else a
    return theta @ a.T + b[None, :]


def col_pass(c, theta, a, b, rows):
    """Returns s0, s1, cnt, st, st2 (or gram for rank r), lossj."""
    w = _mask(c, rows)
    g = (c == 1).astype(float)
    x = _x(theta, a, b)
    r = w * 4.0 * (g - special.expit(x))
    y = 2 * g - 1
    loss = w * np.logaddexp(0.0, -y * x)
    if theta.ndim == 1:
        pq = w * special.expit(x) * special.expit(-x)
        return (r.sum(0), theta @ r, w.sum(0), theta @ w, (theta**2) @ w, loss.sum(0),
                pq.sum(0), theta @ pq, (theta**2) @ pq)
    gram = np.einsum("ij,iu,iv->juv", w, theta, theta)
    return r.sum(0), r.T @ theta, w.sum(0), w.T @ theta, gram, loss.sum(0)


def row_pass_r1(c, theta, a, b, an, ann, ana, anb, rows, ridge=0.0):
    w = _mask(c, rows)
    g = (c == 1).astype(float)
    r = 4.0 * (g - special.expit(_x(theta, a, b)))
    rsum = (w * r) @ an
    h = w @ ann + ridge
    out = theta.copy()
    ok = h > 0
    num = theta * (w @ ana) + w @ anb + rsum
    out[ok] = num[ok] / h[ok]
    keep = np.zeros(c.shape[0], bool)
    keep[rows] = True
    out[~keep] = theta[~keep]
    return out, rsum


def row_pass_rk(c, theta, a, b, an, anb, col_on, rows, ridge):
    w = _mask(c, rows, np.flatnonzero(col_on))
    g = (c == 1).astype(float)
    r = 4.0 * (g - special.expit(_x(theta, a, b)))
    out = theta.copy()
    rsum = np.zeros_like(theta)
    rk = theta.shape[1]
    for i in rows:
        wi = w[i]
        h = np.einsum("j,ju,jv->uv", wi, an, an)
        k = np.einsum("j,ju,jv->uv", wi, an, a)
        s = (wi * r[i]) @ an
        rsum[i] = s
        gvec = wi @ anb
        eps = ridge * (np.trace(h) / rk + 1e-300)
        if np.trace(h) <= 0:
            continue
        out[i] = np.linalg.solve(h + eps * np.eye(rk), k @ theta[i] + gvec + s + eps * theta[i])
    return out, rsum


def nnls_exact(gram_j, q_j):
    """min_{a >= 0} 1/2 a'G a - q'a by enumerating supports (exact for small r, G positive definite)."""
    rk = q_j.size
    best, best_val = np.zeros(rk), 0.0
    for size in range(1, rk + 1):
        for support in itertools.combinations(range(rk), size):
            s = list(support)
            try:
                sol = np.linalg.solve(gram_j[np.ix_(s, s)], q_j[s])
            except np.linalg.LinAlgError:
                continue
            if (sol < 0).any():
                continue
            a = np.zeros(rk)
            a[s] = sol
            val = 0.5 * a @ gram_j @ a - q_j @ a
            if val < best_val:
                best, best_val = a, val
    return best


def nnls_scipy(gram_j, q_j):
    """The same problem through scipy.optimize.nnls on the Cholesky factor."""
    l = np.linalg.cholesky(gram_j)
    return optimize.nnls(l.T, np.linalg.solve(l, q_j))[0]


def zv_rows(c, v, mu, col_on, rows):
    w = _mask(c, rows, np.flatnonzero(col_on))
    z = w * (np.where(c >= 0, c, 0) - mu[None, :])
    return z @ v


def ztu_cols(c, u, mu, rows):
    w = _mask(c, rows)
    z = w * (np.where(c >= 0, c, 0) - mu[None, :])
    return z.T @ u


def extreme_theta(c, rows, a, b, col_on, target, lo, hi):
    out = {}
    for ii, i in enumerate(rows):
        obs = (c[i] >= 0) & np.asarray(col_on, bool)

        def f(t):
            return special.expit(t * a[obs] + b[obs]).sum() - target[ii]

        if f(lo) >= 0:
            out[i] = lo
        elif f(hi) <= 0:
            out[i] = hi
        else:
            out[i] = optimize.brentq(f, lo, hi, xtol=1e-13)
    return out


def mm_sweep_dense(c, theta, a, b, sigma, rows, cols):
    """One cBMM sweep exactly as written in docs/math.md §2.2 (rank 1, raw tempered parameters).

    Y~ = X~ + 4 sigma Y o sigmoid(-Y o X~ / sigma); then
    a_j = max(0, sum_i theta_i (Y~_ij - b_j) / sum_i theta_i^2), b_j = mean_i (Y~_ij - theta_i a_j),
    theta_i = sum_j a_j (Y~_ij - b_j) / sum_j a_j^2, all over observed (active) cells.
    Returns (loss at the input, theta', a', b').
    """
    w = _mask(c, rows, cols)
    on = w > 0
    y = np.where(c == 1, 1.0, -1.0)
    x = np.outer(theta, a) + b
    loss = float((w * np.logaddexp(0.0, -y * x / sigma)).sum())
    ytil = x + 4 * sigma * y * special.expit(-y * x / sigma)
    a2, b2, t2 = a.copy(), b.copy(), theta.copy()
    for j in cols:
        o = on[:, j]
        den = (theta[o] ** 2).sum()
        if den > 0:
            a2[j] = max(0.0, (theta[o] * (ytil[o, j] - b[j])).sum() / den)
        if o.any():
            b2[j] = (ytil[o, j] - theta[o] * a2[j]).mean()
    for i in rows:
        o = on[i, :]
        den = (a2[o] ** 2).sum()
        if den > 0:
            t2[i] = (a2[o] * (ytil[i, o] - b2[o])).sum() / den
    return loss, t2, a2, b2


def joint_nll_dense(c, theta, a, b, sigma=1.0, rows=None, cols=None):
    """Loss and gradient of the cBMM objective (dense numpy; rank 1)."""
    w = _mask(c, rows, cols)
    y = np.where(c == 1, 1.0, -1.0)
    x = np.outer(theta, a) + b
    loss = float((w * np.logaddexp(0.0, -y * x / sigma)).sum())
    gx = -w * y * special.expit(-y * x / sigma) / sigma
    return loss, gx @ a, gx.T @ theta, gx.sum(0)
