"""Slow pure-Python twins of every kernel in catengine.models._kernels (loops, textbook formulas).

The lower normal tail uses a continued fraction for the Mills ratio instead of the kernels'
asymptotic series, so the two are independent computations. :func:`probability_by_name` is the
vectorised scipy form chosen by the response-model name (what the package computed before its
response-model objects), for the tests of draws and moments.
"""

from __future__ import annotations

import math

import numpy as np

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def sigmoid(x):
    x = float(x)
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    return math.exp(x) / (1.0 + math.exp(x))


def log_sigmoid(x):
    x = float(x)
    # log(1/(1 + e^-x)); log1p keeps the upper tail, plain form is exact enough in the lower tail
    if x > -30:
        return -math.log1p(math.exp(-x))
    return x - math.log1p(math.exp(x))


def log_phi_pdf(x):
    return -0.5 * x * x - LOG_SQRT_2PI


def phi_pdf(x):
    return math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _mills_cf(t, depth=400):
    """Mills ratio R(t) = Phi(-t)/phi(t) for t > 0: 1/(t + 1/(t + 2/(t + 3/(t + ...))))."""
    acc = t
    for k in range(depth, 0, -1):
        acc = t + k / acc
    return 1.0 / acc


def phi_cdf(x):
    return 0.5 * math.erfc(-x / math.sqrt(2))


def log_phi_cdf(x):
    x = float(x)
    if x > 0:
        return math.log1p(-0.5 * math.erfc(x / math.sqrt(2)))
    if x > -30:
        return math.log(0.5 * math.erfc(-x / math.sqrt(2)))
    return log_phi_pdf(x) + math.log(_mills_cf(-x))


def inv_mills(x):
    x = float(x)
    if x > -30:
        return phi_pdf(x) / phi_cdf(x)
    return 1.0 / _mills_cf(-x)


def probit_curvature(x):
    m = inv_mills(x)
    return m * (x + m)


def probit_info_h(z):
    return inv_mills(z) * inv_mills(-z)


# ----------------------------------------------------------------------------- array kernels


def _cells(theta, a, b, value):
    """(G, n) array of value(z, j) at z = a_j theta_g + b_j, one cell at a time."""
    out = np.zeros((len(theta), len(a)))
    for g, t in enumerate(theta):
        for j in range(len(a)):
            out[g, j] = value(a[j] * t + b[j], j)
    return out


def prob_2pl(theta, a, b):
    return _cells(theta, a, b, lambda z, j: sigmoid(z))


def prob_4pl(theta, a, b, c, d):
    return _cells(theta, a, b, lambda z, j: c[j] + (d[j] - c[j]) * sigmoid(z))


def prob_probit(theta, a, b):
    return _cells(theta, a, b, lambda z, j: phi_cdf(z))


def probability_by_name(params, theta):
    """P(correct) for thetas ``theta`` (K,) and every item of ``params``, (K, J), by scipy and the
    response-model name: Phi(z) (lart), expit(z) (2pl), c + (d - c) expit(z) (4pl), z = a theta + b."""
    from scipy import special

    z = theta[:, None] * params.a[None, :] + params.b[None, :]
    if params.response_model == "lart":
        return special.ndtr(z)
    prob = special.expit(z)
    if params.response_model == "4pl":
        prob = params.c + (params.d - params.c) * prob
    return prob


def _p_q_4pl(z, c, d):
    """P and 1 - P (1 - P written as (1 - d) + (d - c)(1 - s) so it does not round to 0)."""
    return c + (d - c) * sigmoid(z), (1 - d) + (d - c) * sigmoid(-z)


def info_2pl(theta, a, b):
    def info(z, j):
        p, q = _p_q_4pl(z, 0.0, 1.0)
        return a[j] ** 2 * p * q

    return _cells(theta, a, b, info)


def info_4pl(theta, a, b, c, d):
    """Textbook form a^2 (P - c)^2 (d - P)^2 / ((d - c)^2 P (1 - P))."""

    def info(z, j):
        p, q = _p_q_4pl(z, c[j], d[j])
        return a[j] ** 2 * (p - c[j]) ** 2 * (d[j] - p) ** 2 / ((d[j] - c[j]) ** 2 * p * q)

    return _cells(theta, a, b, info)


def info_probit(theta, a, b):
    return _cells(theta, a, b, lambda z, j: a[j] ** 2 * probit_info_h(z))


def derivs_2pl(theta, a, b, y):
    return derivs_4pl(theta, a, b, np.zeros(len(a)), np.ones(len(a)), y)


def derivs_4pl(theta, a, b, c, d, y):
    """Textbook: l = y log P + (1-y) log(1-P); dl = P'(y/P - (1-y)/(1-P));
    d2l = y (P''/P - P'^2/P^2) - (1-y)(P''/(1-P) + P'^2/(1-P)^2)."""
    out = np.zeros((len(theta), 3))
    for g, t in enumerate(theta):
        for j in range(len(a)):
            z = a[j] * t + b[j]
            s = sigmoid(z)
            p, q = _p_q_4pl(z, c[j], d[j])
            dp = a[j] * (d[j] - c[j]) * s * sigmoid(-z)
            d2p = a[j] * dp * (sigmoid(-z) - s)
            if y[j] == 1:
                # log P; at P = d sigmoid(z) use log d + log sigmoid(z) to stay finite
                out[g, 0] += math.log(d[j]) + log_sigmoid(z) if c[j] == 0 else math.log(p)
                out[g, 1] += dp / p
                out[g, 2] += d2p / p - (dp / p) ** 2
            else:
                out[g, 0] += math.log(d[j] - c[j]) + log_sigmoid(-z) if d[j] == 1 else math.log(q)
                out[g, 1] -= dp / q
                out[g, 2] -= d2p / q + (dp / q) ** 2
    return out


def derivs_lart(theta, tau, a, b, y, omega, phi, lam, log_t):
    out = np.zeros((len(theta), 5))
    for g in range(len(theta)):
        for j in range(len(a)):
            s = 2 * y[j] - 1
            x = s * (a[j] * theta[g] + b[j])
            out[g, 0] += log_phi_cdf(x)
            out[g, 1] += s * a[j] * inv_mills(x)
            out[g, 3] -= a[j] ** 2 * probit_curvature(x)
            if not math.isnan(log_t[j]):
                mu = omega[j] - phi[j] * tau[g]
                out[g, 0] += -LOG_SQRT_2PI - math.log(lam[j]) - (log_t[j] - mu) ** 2 / (2 * lam[j] ** 2)
                out[g, 2] += phi[j] * (mu - log_t[j]) / lam[j] ** 2
                out[g, 4] -= phi[j] ** 2 / lam[j] ** 2
    return out
