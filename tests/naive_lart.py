"""Slow pure-Python twins of the kernels in calibration/methods/lart/_kernels.py (loops, scipy, grids).

The probit terms come from tests/naive_models.py (continued-fraction Mills ratio in the lower
tail), so these twins share no code with the numba kernels.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special

try:  # tests/ may or may not be a package
    from . import naive_models as NM
except ImportError:
    import naive_models as NM


def probit_terms(x):
    """(log Phi(x), m(x), m(x)(x + m(x)))."""
    return NM.log_phi_cdf(x), NM.inv_mills(x), NM.probit_curvature(x)


def log_post_theta(theta, mu, v, a, b, r_row):
    """(l, l', l'') of -(theta - mu)^2/(2v) + sum_j log Phi(s_j (a_j theta + b_j)) over observed items."""
    l = -0.5 * (theta - mu) ** 2 / v
    g = -(theta - mu) / v
    h = -1.0 / v
    for j in range(len(a)):
        if r_row[j] < 0:
            continue
        s = 1.0 if r_row[j] > 0 else -1.0
        lp, m, c = probit_terms(s * (a[j] * theta + b[j]))
        l += lp
        g += s * a[j] * m
        h -= a[j] ** 2 * c
    return l, g, h


def item_objective(j, R, hist, aj, bj, ridge=0.0):
    """(f, ga, gb, haa, hab, hbb) of (1/K) sum_k sum_i log Phi(s_ij (a theta_ik + b)) - ridge b^2/2."""
    f = ga = gb = haa = hab = hbb = 0.0
    K = len(hist)
    for k in range(K):
        for i in range(R.shape[0]):
            if R[i, j] < 0:
                continue
            s = 1.0 if R[i, j] > 0 else -1.0
            t = hist[k][i]
            lp, m, c = probit_terms(s * (aj * t + bj))
            f += lp
            ga += s * m * t
            gb += s * m
            haa -= c * t * t
            hab -= c * t
            hbb -= c
    return (f / K - 0.5 * ridge * bj * bj, ga / K, gb / K - ridge * bj, haa / K, hab / K, hbb / K - ridge)


def _item_objective_vec(j, R, hist, aj, bj, ridge=0.0):
    """Vectorised (scipy.special.log_ndtr) value and gradient of the averaged objective of item j."""
    seen = R[:, j] >= 0
    s = np.where(R[seen, j] > 0, 1.0, -1.0)
    T = np.asarray(hist)[:, seen]
    x = s * (aj * T + bj)
    lp = special.log_ndtr(x)
    m = np.exp(-0.5 * x * x - lp) / math.sqrt(2 * math.pi)
    K = T.shape[0]
    f = lp.sum() / K - 0.5 * ridge * bj * bj
    return f, np.array([(s * m * T).sum() / K, (s * m).sum() / K - ridge * bj])


def item_argmax(j, R, hist, start, ridge=0.0):
    """Maximiser of the averaged objective of item j by scipy (BFGS, vectorised scipy objective)."""

    def fun(x):
        f, g = _item_objective_vec(j, R, hist, x[0], x[1], ridge)
        return -f, -g

    res = optimize.minimize(fun, np.asarray(start, dtype=float), jac=True, method="BFGS", options={"gtol": 1e-10})
    return res.x


def map_objective(th, ta, r_row, y_row, cens_row, a, b, omega, phi, lam, rho, use_cot=True):
    """Log posterior of (theta, tau) for one subject (up to a constant), by loops."""
    one_m = 1.0 - rho * rho
    f = -0.5 * (th * th - 2 * rho * th * ta + ta * ta) / one_m
    for j in range(len(a)):
        if r_row[j] >= 0:
            s = 1.0 if r_row[j] > 0 else -1.0
            f += NM.log_phi_cdf(s * (a[j] * th + b[j]))
        if use_cot and not math.isnan(y_row[j]):
            if cens_row[j]:
                f += NM.log_phi_cdf((omega[j] - phi[j] * ta - y_row[j]) / lam[j])
            else:
                f -= 0.5 * (y_row[j] - omega[j] + phi[j] * ta) ** 2 / lam[j] ** 2
    return f


def map_by_grid(r_row, y_row, cens_row, a, b, omega, phi, lam, rho, centre, half_width, n=401):
    """Argmax of the log posterior on a 2-D grid around ``centre`` (brute force, scipy log_ndtr)."""
    ths = np.linspace(centre[0] - half_width, centre[0] + half_width, n)
    tas = np.linspace(centre[1] - half_width, centre[1] + half_width, n)
    TH, TA = np.meshgrid(ths, tas, indexing="ij")
    f = -0.5 * (TH**2 - 2 * rho * TH * TA + TA**2) / (1 - rho * rho)
    for j in range(len(a)):
        if r_row[j] >= 0:
            s = 1.0 if r_row[j] > 0 else -1.0
            f += special.log_ndtr(s * (a[j] * TH + b[j]))
        if not math.isnan(y_row[j]):
            if cens_row[j]:
                f += special.log_ndtr((omega[j] - phi[j] * TA - y_row[j]) / lam[j])
            else:
                f -= 0.5 * (y_row[j] - omega[j] + phi[j] * TA) ** 2 / lam[j] ** 2
    k = np.unravel_index(np.argmax(f), f.shape)
    return np.array([TH[k], TA[k]]), ths[1] - ths[0]


def cot_mstep(hist_tau, Y):
    """argmax of the averaged CoT objective (1/K) sum_k sum_i N(y_ij; omega - phi tau_ik, lam^2), by lstsq."""
    K = len(hist_tau)
    N, J = Y.shape
    omega = np.empty(J)
    phi = np.empty(J)
    lam = np.empty(J)
    for j in range(J):
        rows = []
        ys = []
        for k in range(K):
            for i in range(N):
                if not math.isnan(Y[i, j]):
                    rows.append([1.0, -hist_tau[k][i]])
                    ys.append(Y[i, j])
        X = np.array(rows)
        y = np.array(ys)
        coef, *_ = np.linalg.lstsq(X, y, rcond=None)
        omega[j], phi[j] = coef
        lam[j] = math.sqrt(np.mean((y - X @ coef) ** 2))
    return omega, phi, lam


def grid_sampler(r_row, a, b, mu, v, size, rng, n_grid=200001):
    """Inverse-cdf draws on a very fine grid (a brute-force reference sampler)."""
    l_mode = optimize.minimize_scalar(lambda t: -log_post_theta(t, mu, v, a, b, r_row)[0])
    mode = l_mode.x
    sd = 1.0 / math.sqrt(-log_post_theta(mode, mu, v, a, b, r_row)[2])
    grid = np.linspace(mode - 12 * sd, mode + 12 * sd, n_grid)
    logp = np.array([log_post_theta(t, mu, v, a, b, r_row)[0] for t in grid[:: max(1, n_grid // 4001)]])
    coarse = grid[:: max(1, n_grid // 4001)]
    dens = np.exp(logp - logp.max())
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (dens[1:] + dens[:-1]) * np.diff(coarse))])
    cdf /= cdf[-1]
    return np.interp(rng.random(size), cdf, coarse)
