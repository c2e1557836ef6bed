"""Slow, obviously-correct twins of the online engine's kernels (estimation and selection).

Plain Python loops and scipy/math functions only; every numba kernel in
``catengine/estimation/_kernels.py`` and ``catengine/selection/_kernels.py`` is compared with
its twin here.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import integrate
from scipy.special import log_ndtr, ndtr

# model codes: 0 = 2PL, 1 = 4PL, 2 = probit


def prob(model, z, c=0.0, d=1.0):
    if model == 2:
        return float(ndtr(z))
    s = 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0
    return c + (d - c) * s if model == 1 else s


def item_loglik(model, z, c, d, y):
    if model == 2:
        return float(log_ndtr(z if y else -z))
    if model == 0:
        # log sigmoid(+-z) with mpmath-free care: log1p(exp(-|x|)) form
        x = z if y else -z
        return -math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x))
    p = prob(1, z, c, d)
    return math.log(p) if y else math.log(1.0 - p)


def loglik(model, theta, a, b, c, d, y):
    return sum(item_loglik(model, a[j] * theta + b[j], c[j], d[j], y[j]) for j in range(len(a)))


def log_post_1d(model, theta, a, b, c, d, y, q, m):
    """sum_j l_j(theta) - q (theta - m)^2 / 2 and its first two derivatives by central differences."""
    f = lambda t: loglik(model, t, a, b, c, d, y) - 0.5 * q * (t - m) ** 2  # noqa: E731
    h = 1e-4
    return f(theta), (f(theta + h) - f(theta - h)) / (2 * h), (f(theta + h) - 2 * f(theta) + f(theta - h)) / (h * h)


def info(model, z, a, c=0.0, d=1.0):
    """Fisher information about theta from the textbook formulas (0 for a <= 0)."""
    if a <= 0:
        return 0.0
    if model == 2:
        p = float(ndtr(z))
        q = float(ndtr(-z))
        dens = math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
        return a * a * dens * dens / (p * q)
    p = prob(model, z, c, d)
    s = 1.0 / (1.0 + math.exp(-z))
    dp = (d - c) * s * (1 - s) * a  # dP/dtheta
    return dp * dp / (p * (1 - p))


def expected_info(model, theta, a, b, b_sd, c, d, n_quad=200):
    """E over b ~ Normal(b, b_sd^2) of the information, by adaptive quadrature (scipy.integrate.quad)."""
    if b_sd == 0:
        return info(model, a * theta + b, a, c, d)
    f = lambda x: info(model, a * theta + b + b_sd * x, a, c, d) * math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)  # noqa: E731
    return integrate.quad(f, -12, 12, limit=n_quad, epsabs=1e-13)[0]


def kl_index(model, theta_hat, nodes, weights, a, b, c, d):
    if a <= 0:
        return 0.0
    p0 = prob(model, a * theta_hat + b, c, d)
    total = 0.0
    for t, w in zip(nodes, weights):
        p = prob(model, a * t + b, c, d)
        total += w * (p0 * math.log(p0 / p) + (1 - p0) * math.log((1 - p0) / (1 - p)))
    return total


def lart_score(criterion, u, v, P):
    M = np.array(P, dtype=float) + np.diag([u, v])
    inv = np.linalg.inv(M)
    if criterion == 0:
        return -inv[0, 0]
    if criterion == 1:
        return float(np.linalg.det(M))
    return -float(np.trace(inv))


def topk(scores, eligible, k):
    """Indices of the k best eligible scores, best first, ties by lower index."""
    idx = [j for j in range(len(scores)) if eligible[j]]
    idx.sort(key=lambda j: (-scores[j], j))
    return idx[:k]


def grid_argmax(f, lo, hi, n):
    grid = np.linspace(lo, hi, n)
    vals = np.array([f(t) for t in grid])
    return grid[int(np.argmax(vals))], float(vals.max()), grid[1] - grid[0]


def eap_by_quad(model, a, b, c, d, y, q, m, lo=-12.0, hi=12.0):
    """Posterior mean and SD of theta for sum_j l_j - q (theta - m)^2 / 2 by adaptive quadrature
    (the log posterior is shifted by its maximum, so no underflow)."""
    lp = lambda t: loglik(model, t, a, b, c, d, y) - 0.5 * q * (t - m) ** 2  # noqa: E731
    grid = np.linspace(lo, hi, 2001)
    vals = np.array([lp(t) for t in grid])
    mode = grid[int(np.argmax(vals))]
    top = vals.max()
    dens = lambda t: math.exp(lp(t) - top)  # noqa: E731
    pts = [mode]
    opts = dict(points=pts, limit=400, epsabs=0, epsrel=1e-12)
    z0 = integrate.quad(dens, lo, hi, **opts)[0]
    z1 = integrate.quad(lambda t: t * dens(t), lo, hi, **opts)[0]
    mean = z1 / z0
    z2 = integrate.quad(lambda t: (t - mean) ** 2 * dens(t), lo, hi, **opts)[0]
    return mean, math.sqrt(z2 / z0)


def eap_by_quad_2pl_vectorised(a, b, y, lo, hi):
    """``eap_by_quad`` for a long 2PL answer row with a standard normal prior (numpy over items)."""
    from scipy.special import log_expit

    a, b, y = (np.asarray(v, dtype=float) for v in (a, b, y))

    def lp(t):
        z = a * t + b
        return float(np.sum(np.where(y == 1, log_expit(z), log_expit(-z)))) - 0.5 * t * t

    grid = np.linspace(lo, hi, 701)
    vals = np.array([lp(t) for t in grid])
    mode, top = grid[int(np.argmax(vals))], vals.max()
    dens = lambda t: math.exp(lp(t) - top)  # noqa: E731
    opts = dict(points=[mode], limit=200, epsabs=0, epsrel=1e-11)
    z0 = integrate.quad(dens, lo, hi, **opts)[0]
    mean = integrate.quad(lambda t: t * dens(t), lo, hi, **opts)[0] / z0
    var = integrate.quad(lambda t: (t - mean) ** 2 * dens(t), lo, hi, **opts)[0] / z0
    return mean, math.sqrt(var)


# ----------------------------------------------------------------------------- fixtures shared by the engine tests


def make_bank(model="2pl", n_items=60, seed=0, *, b_sd=False, metadata=True, subjects=None, bank_id="testbank",
              negative_a=0):
    """A small simulated ItemBank (2pl | 4pl | lart); ``negative_a`` items get a <= 0."""
    from catengine import ItemBank

    rng = np.random.default_rng(seed)
    n = n_items
    a = rng.uniform(0.6, 2.0, n)
    if negative_a:
        a[:negative_a] = -rng.uniform(0.0, 0.5, negative_a)
    kw = dict(a=a, b=rng.normal(0.0, 1.0, n))
    extra = {}
    if model == "lart":
        kw.update(omega=rng.normal(6.0, 0.3, n), phi=rng.uniform(1.0, 2.0, n), lam=rng.uniform(0.8, 1.3, n))
        extra = dict(rho=-0.6, cot_offset=1.0)
    elif model == "4pl":
        kw.update(c=rng.uniform(0.0, 0.2, n), d=rng.uniform(0.85, 1.0, n))
    if b_sd:
        kw["b_sd"] = rng.uniform(0.05, 0.6, n)
    meta = {"benchmark": rng.choice(["alpha", "beta", "gamma"], n)} if metadata else None
    return ItemBank.from_params(model, [f"q{k:04d}" for k in range(n)], bank_id=bank_id, item_metadata=meta,
                                subjects=subjects, **extra, **kw)


def make_oracle(params, seed, theta=None, tau=None, cot_offset=1.0):
    """Deterministic answers (and CoT token counts for LaRT) of one simulated subject to every item:
    dict item index -> (correct, tokens | None), plus the true traits."""
    rng = np.random.default_rng(seed)
    if theta is None:
        theta = float(rng.standard_normal())
    if tau is None:
        tau = float(params.rho * theta + math.sqrt(1 - params.rho**2) * rng.standard_normal())
    out = {}
    for j in range(params.n_items):
        z = params.a[j] * theta + params.b[j]
        if params.response_model == "lart":
            p = prob(2, z)
        elif params.response_model == "4pl":
            p = prob(1, z, params.c[j], params.d[j])
        else:
            p = prob(0, z)
        correct = int(rng.random() < p)
        tokens = None
        if params.response_model == "lart":
            lt = params.omega[j] - params.phi[j] * tau + params.lam[j] * rng.standard_normal()
            tokens = float(max(round(math.exp(lt) - cot_offset), 0.0))
        out[j] = (correct, tokens)
    return out, (theta, tau)
