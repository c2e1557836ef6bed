"""Numba kernels of the response models (compute only; the public wrappers validate and convert).

Scalar primitives (``@njit`` functions of one float64, callable from Python and from other
``@njit`` code, e.g. ``from catengine.models.kernels import log_phi_cdf, inv_mills``, their public names). All are
finite and warning-free on the whole real line (tested on |x| <= 40 and beyond):

==========================  ==================================================================
``sigmoid(x)``              1 / (1 + e^-x), evaluated without overflow
``log_sigmoid(x)``          log sigmoid(x) = -log(1 + e^-x)
``log_phi_pdf(x)``          log phi(x) = -x^2/2 - log(2 pi)/2
``phi_pdf(x)``              phi(x), the standard normal density
``phi_cdf(x)``              Phi(x) = erfc(-x/sqrt 2)/2 (no cancellation in either tail)
``log_phi_cdf(x)``          log Phi(x); asymptotic series for x < -20, log1p for x > 0
``inv_mills(x)``            m(x) = phi(x)/Phi(x) = d/dx log Phi(x); asymptotic series for x < -20
``probit_curvature(x)``     -d^2/dx^2 log Phi(x) = m(x) (x + m(x)), in (0, 1); no cancellation
``probit_info_h(z)``        h(z) = phi(z)^2 / (Phi(z) Phi(-z)) = m(z) m(-z); probit information
                            of an item is a^2 h(a theta + b)
``logistic_terms(x)``       (sigmoid(x), sigmoid(-x), log sigmoid(x), log sigmoid(-x)), one exp
``probit_terms(x)``         (log Phi(x), m(x), probit_curvature(x)), one erfc pass
==========================  ==================================================================

Array kernels (private; inputs are C-contiguous float64 arrays, ``theta`` of shape (G,), item
parameters of shape (n,)): ``prob_2pl``, ``prob_4pl``, ``prob_probit`` -> (G, n);
``info_2pl``, ``info_4pl``, ``info_probit`` -> (G, n); ``derivs_2pl``, ``derivs_4pl`` -> (G, 3)
holding (log-likelihood, d/dtheta, d^2/dtheta^2) summed over the items; ``derivs_lart`` -> (G, 5)
holding (log-likelihood, d/dtheta, d/dtau, d^2/dtheta^2, d^2/dtau^2) (the cross derivative is 0).
Their slow twins live in tests/naive_models.py.
"""

from __future__ import annotations

import math

import numpy as np
from catengine.numba_cache import njit

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)
# Below this the normal lower tail uses the asymptotic series 1 - 1/x^2 + 3/x^4 - ...; at
# x = -20 its 13th term is ~1e-20, so 12 terms give full double precision.
_ASYMPTOTIC_BELOW = -20.0
_N_SERIES = 12


# ----------------------------------------------------------------------------- scalar primitives


@njit(cache=True)
def sigmoid(x):
    """Logistic function 1/(1 + exp(-x)) without overflow."""
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@njit(cache=True)
def log_sigmoid(x):
    """log(sigmoid(x)) = -log(1 + exp(-x)), accurate in both tails."""
    if x >= 0.0:
        return -math.log1p(math.exp(-x))
    return x - math.log1p(math.exp(x))


@njit(cache=True)
def log_phi_pdf(x):
    """log of the standard normal density."""
    return -0.5 * x * x - _LOG_SQRT_2PI


@njit(cache=True)
def phi_pdf(x):
    """Standard normal density."""
    return _INV_SQRT_2PI * math.exp(-0.5 * x * x)


@njit(cache=True)
def phi_cdf(x):
    """Standard normal cdf via erfc (relative accuracy in the lower tail)."""
    return 0.5 * math.erfc(-x * _INV_SQRT2)


@njit(cache=True)
def logistic_terms(x):
    """(sigmoid(x), sigmoid(-x), log sigmoid(x), log sigmoid(-x)) from one exp and one log1p: bit
    for bit what ``sigmoid`` and ``log_sigmoid`` give at x and -x (a 2PL answer's likelihood terms)."""
    e = math.exp(-abs(x))
    l1p = math.log1p(e)
    if x >= 0.0:
        return 1.0 / (1.0 + e), e / (1.0 + e), -l1p, -x - l1p
    return e / (1.0 + e), 1.0 / (1.0 + e), x - l1p, -l1p


@njit(cache=True)
def probit_terms(x):
    """(log Phi(x), m(x), m(x) (x + m(x))): bit for bit what ``log_phi_cdf``, ``inv_mills`` and
    ``probit_curvature`` give, sharing their erfc, exp and tail series (a probit answer's terms)."""
    if x >= _ASYMPTOTIC_BELOW:
        cdf = 0.5 * math.erfc(-x * _INV_SQRT2)
        m = (_INV_SQRT_2PI * math.exp(-0.5 * x * x)) / cdf
        log_cdf = math.log1p(-0.5 * math.erfc(x * _INV_SQRT2)) if x > 0.0 else math.log(cdf)
        return log_cdf, m, m * (x + m)
    sm1 = _tail_series_minus_one(x)
    s = 1.0 + sm1
    m = -x / s
    return -0.5 * x * x - _LOG_SQRT_2PI - math.log(-x) + math.log1p(sm1), m, m * (x * sm1 / s)


@njit(cache=True)
def _tail_series_minus_one(x):
    """S(x) - 1 where S(x) = 1 - 1/x^2 + 3/x^4 - 15/x^6 + ... (Phi(x) ~ phi(x) S(x) / (-x))."""
    inv2 = 1.0 / (x * x)
    term = 1.0
    total = 0.0
    for k in range(1, _N_SERIES + 1):
        term *= -(2.0 * k - 1.0) * inv2
        total += term
    return total


@njit(cache=True)
def log_phi_cdf(x):
    """log Phi(x), finite for every finite x (log1p for x > 0, asymptotic series for x < -20)."""
    if x > 0.0:
        return math.log1p(-0.5 * math.erfc(x * _INV_SQRT2))
    if x >= _ASYMPTOTIC_BELOW:
        return math.log(0.5 * math.erfc(-x * _INV_SQRT2))
    return -0.5 * x * x - _LOG_SQRT_2PI - math.log(-x) + math.log1p(_tail_series_minus_one(x))


@njit(cache=True)
def inv_mills(x):
    """Inverse Mills ratio m(x) = phi(x)/Phi(x) = d/dx log Phi(x) (-> -x as x -> -inf, -> 0 as x -> inf)."""
    if x >= _ASYMPTOTIC_BELOW:
        return phi_pdf(x) / phi_cdf(x)
    return -x / (1.0 + _tail_series_minus_one(x))


@njit(cache=True)
def probit_curvature(x):
    """-d^2/dx^2 log Phi(x) = m(x) (x + m(x)), in (0, 1); x + m(x) from the series in the lower tail."""
    if x >= _ASYMPTOTIC_BELOW:
        m = phi_pdf(x) / phi_cdf(x)
        return m * (x + m)
    sm1 = _tail_series_minus_one(x)
    s = 1.0 + sm1
    m = -x / s
    return m * (x * sm1 / s)


@njit(cache=True)
def probit_info_h(z):
    """h(z) = phi(z)^2 / (Phi(z) Phi(-z)) = m(z) m(-z); symmetric, h(0) = 2/pi, ~|z| phi(z) in the tails."""
    t = abs(z)
    # m(t) = phi(t)/Phi(t) with Phi(t) in [1/2, 1]; fold it into one exp so no intermediate underflows.
    return math.exp(log_phi_pdf(t) - log_phi_cdf(t)) * inv_mills(-t)


# ----------------------------------------------------------------------------- 4PL scalar helpers


@njit(cache=True)
def _weights_4pl(s, c, d):
    """w1 = (P - c)/P and w0 = (d - P)/(1 - P) for P = c + (d - c) s, both in [0, 1], no 0/0."""
    dc = d - c
    if c > 0.0:
        w1 = dc * s / (c + dc * s)
    else:
        w1 = 1.0
    if d < 1.0:
        q = dc * (1.0 - s)
        w0 = q / ((1.0 - d) + q)
    else:
        w0 = 1.0
    return w1, w0


@njit(cache=True)
def _log_p_4pl(z, c, d):
    """log P and log(1 - P) for P = c + (d - c) sigmoid(z)."""
    dc = d - c
    if c > 0.0:
        lp = math.log(c + dc * sigmoid(z))
    else:
        lp = math.log(dc) + log_sigmoid(z)
    if d < 1.0:
        lq = math.log((1.0 - d) + dc * sigmoid(-z))
    else:
        lq = math.log(dc) + log_sigmoid(-z)
    return lp, lq


# ----------------------------------------------------------------------------- probabilities and information

# the quantities of ``_item_grid``
_P_2PL, _P_4PL, _P_PROBIT, _I_2PL, _I_4PL, _I_PROBIT = range(6)


@njit(cache=True, inline="always")
def _item_grid(kind, theta, a, b, c, d):
    """(G, n) array of one quantity of item j at theta_g, z = a_j theta_g + b_j: the probability
    (``_P_*``) or the Fisher information (``_I_*``) of a model. ``kind`` is a constant of each kernel
    below, which compiles its own branch; c and d are None for the 2-parameter models."""
    G, n = theta.shape[0], a.shape[0]
    out = np.empty((G, n))
    for g in range(G):
        for j in range(n):
            z = a[j] * theta[g] + b[j]
            if kind == _P_2PL:
                v = sigmoid(z)
            elif kind == _P_4PL:
                v = c[j] + (d[j] - c[j]) * sigmoid(z)
            elif kind == _P_PROBIT:
                v = phi_cdf(z)
            elif kind == _I_2PL:
                v = a[j] * a[j] * sigmoid(z) * sigmoid(-z)
            elif kind == _I_4PL:
                s = sigmoid(z)
                w1, w0 = _weights_4pl(s, c[j], d[j])
                v = a[j] * a[j] * s * sigmoid(-z) * w1 * w0
            else:
                v = a[j] * a[j] * probit_info_h(z)
            out[g, j] = v
    return out


@njit(cache=True)
def prob_2pl(theta, a, b):
    """(G, n) array of sigmoid(a_j theta_g + b_j)."""
    return _item_grid(_P_2PL, theta, a, b, None, None)


@njit(cache=True)
def prob_4pl(theta, a, b, c, d):
    """(G, n) array of c_j + (d_j - c_j) sigmoid(a_j theta_g + b_j)."""
    return _item_grid(_P_4PL, theta, a, b, c, d)


@njit(cache=True)
def prob_probit(theta, a, b):
    """(G, n) array of Phi(a_j theta_g + b_j)."""
    return _item_grid(_P_PROBIT, theta, a, b, None, None)


@njit(cache=True)
def info_2pl(theta, a, b):
    """(G, n) array of a^2 P (1 - P), P = sigmoid(z), as a^2 sigmoid(z) sigmoid(-z)."""
    return _item_grid(_I_2PL, theta, a, b, None, None)


@njit(cache=True)
def info_4pl(theta, a, b, c, d):
    """(G, n) array of a^2 (P-c)^2 (d-P)^2 / ((d-c)^2 P (1-P)) = a^2 s (1-s) w1 w0 (s = sigmoid(z))."""
    return _item_grid(_I_4PL, theta, a, b, c, d)


@njit(cache=True)
def info_probit(theta, a, b):
    """(G, n) array of a^2 h(a theta + b) (probit / LaRT accuracy information u_j)."""
    return _item_grid(_I_PROBIT, theta, a, b, None, None)


# ----------------------------------------------------------------------------- log-likelihood derivatives


@njit(cache=True, inline="always")
def _logistic_derivs(theta, a, b, c, d, y):
    """``derivs_4pl``, or ``derivs_2pl`` when c and d are None (each kernel compiles its own branch)."""
    G, n = theta.shape[0], a.shape[0]
    out = np.zeros((G, 3))
    for g in range(G):
        ll = 0.0
        gr = 0.0
        he = 0.0
        for j in range(n):
            z = a[j] * theta[g] + b[j]
            s = sigmoid(z)
            sc = sigmoid(-z)
            if c is None:
                if y[j] > 0.5:
                    ll += log_sigmoid(z)
                    gr += a[j] * sc
                else:
                    ll += log_sigmoid(-z)
                    gr -= a[j] * s
                he -= a[j] * a[j] * s * sc
            else:
                w1, w0 = _weights_4pl(s, c[j], d[j])
                lp, lq = _log_p_4pl(z, c[j], d[j])
                one_m_2s = sc - s
                aa = a[j] * a[j]
                if y[j] > 0.5:
                    ll += lp
                    gr += a[j] * sc * w1
                    he += aa * sc * w1 * (one_m_2s - sc * w1)
                else:
                    ll += lq
                    gr -= a[j] * s * w0
                    he -= aa * s * w0 * (one_m_2s + s * w0)
        out[g, 0] = ll
        out[g, 1] = gr
        out[g, 2] = he
    return out


@njit(cache=True)
def derivs_2pl(theta, a, b, y):
    """(G, 3): sum_j [y log s + (1-y) log(1-s)], sum_j a (y - s), -sum_j a^2 s (1-s)."""
    return _logistic_derivs(theta, a, b, None, None, y)


@njit(cache=True)
def derivs_4pl(theta, a, b, c, d, y):
    """(G, 3) log-likelihood, gradient and Hessian wrt theta of the 4PL, summed over items.

    With s = sigmoid(z), w1 = (P-c)/P, w0 = (d-P)/(1-P):
    y = 1: dl = a (1-s) w1,   d2l = a^2 (1-s) w1 [(1-2s) - (1-s) w1]
    y = 0: dl = -a s w0,      d2l = -a^2 s w0 [(1-2s) + s w0]
    """
    return _logistic_derivs(theta, a, b, c, d, y)


@njit(cache=True)
def derivs_lart(theta, tau, a, b, y, omega, phi, lam, log_t):
    """(G, 5) LaRT log-likelihood and its derivatives wrt (theta, tau), summed over items.

    Columns: l, dl/dtheta, dl/dtau, d2l/dtheta2, d2l/dtau2 (d2l/dtheta dtau = 0), where
    l = sum_j log Phi(s_j z_j) + sum_{j: log_t_j observed} log Normal(log_t_j; omega_j - phi_j tau, lam_j^2),
    s_j = 2 y_j - 1, z_j = a_j theta + b_j; NaN in log_t marks a missing CoT length.
    """
    G, n = theta.shape[0], a.shape[0]
    out = np.zeros((G, 5))
    # CoT constants (do not depend on the traits)
    cot_const = 0.0
    cot_info = 0.0
    for j in range(n):
        if not math.isnan(log_t[j]):
            cot_const -= _LOG_SQRT_2PI + math.log(lam[j])
            cot_info += phi[j] * phi[j] / (lam[j] * lam[j])
    for g in range(G):
        ll = cot_const
        g_t = 0.0
        g_u = 0.0
        h_t = 0.0
        for j in range(n):
            sgn = 1.0 if y[j] > 0.5 else -1.0
            x = sgn * (a[j] * theta[g] + b[j])
            ll += log_phi_cdf(x)
            g_t += sgn * a[j] * inv_mills(x)
            h_t -= a[j] * a[j] * probit_curvature(x)
            if not math.isnan(log_t[j]):
                inv_var = 1.0 / (lam[j] * lam[j])
                r = log_t[j] - omega[j] + phi[j] * tau[g]
                ll -= 0.5 * r * r * inv_var
                g_u -= phi[j] * r * inv_var
        out[g, 0] = ll
        out[g, 1] = g_t
        out[g, 2] = g_u
        out[g, 3] = h_t
        out[g, 4] = -cot_info
    return out


@njit(cache=True, nogil=True)
def cholesky_in_place(a):
    """Overwrite the lower triangle of the small symmetric matrix ``a`` (loops: meant for a few rows)
    with its Cholesky factor L, A = L L', reading only the lower triangle; the strict upper
    triangle is left as it was. Returns False, with ``a`` partly overwritten, when A is not
    positive definite (a pivot <= 0)."""
    d = a.shape[0]
    for j in range(d):
        s = a[j, j]
        for k in range(j):
            s -= a[j, k] * a[j, k]
        if not s > 0.0:
            return False
        s = math.sqrt(s)
        a[j, j] = s
        for i in range(j + 1, d):
            t = a[i, j]
            for k in range(j):
                t -= a[i, k] * a[j, k]
            a[i, j] = t / s
    return True


@njit(cache=True, nogil=True)
def cholesky_solve_in_place(chol, b):
    """Overwrite ``b`` with the solution x of (L L') x = b, L the lower triangle of ``chol``
    (from :func:`cholesky_in_place`)."""
    d = b.shape[0]
    for i in range(d):
        s = b[i]
        for k in range(i):
            s -= chol[i, k] * b[k]
        b[i] = s / chol[i, i]
    for i in range(d - 1, -1, -1):
        s = b[i]
        for k in range(i + 1, d):
            s -= chol[k, i] * b[k]
        b[i] = s / chol[i, i]
