"""Slow, textbook twins of the PSN-IRT kernels and passes (loops, dense one-hot layers, plain Adam).

Used by tests/test_psn_network.py, tests/test_psn_laplace.py and tests/test_expected_information.py to check the fast code against
independent constructions.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import integrate


def sigmoid(x):
    x = float(x)
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def asymptotes(p2, p3, ordered):
    c = sigmoid(p2)
    d = c + (1 - c) * sigmoid(p3) if ordered else sigmoid(p3)
    return c, d


def cell_prob(theta, beta, a, p2, p3, ordered):
    c, d = asymptotes(p2, p3, ordered)
    return c + (d - c) * sigmoid(a * (theta - beta))


def cell_loss(theta, beta, a, p2, p3, y, ordered):
    p = cell_prob(theta, beta, a, p2, p3, ordered)
    return -math.log(p) if y == 1 else -math.log(1 - p)


def cell_loss_grad(theta, out, y, ordered, weight):
    """Loss sum and gradients by central differences of ``cell_loss`` (a different construction)."""
    B = theta.shape[0]
    total = 0.0
    g_t = np.zeros(B)
    g_o = np.zeros((B, 4))
    h = 1e-6
    for n in range(B):
        args = [theta[n], *out[n]]
        total += weight * cell_loss(*args, y[n], ordered)
        for k in range(5):
            up = list(args)
            dn = list(args)
            up[k] += h
            dn[k] -= h
            g = weight * (cell_loss(*up, y[n], ordered) - cell_loss(*dn, y[n], ordered)) / (2 * h)
            if k == 0:
                g_t[n] = g
            else:
                g_o[n, k - 1] = g
    return total, g_t, g_o


def forward_onehot(net, subj, item):
    """P(correct) of cells by the reference construction: dense one-hot vectors times Linear layers."""
    N, J = net.n_subjects, net.n_items
    S = np.asarray(net.S, dtype=np.float64)
    I = np.asarray(net.I, dtype=np.float64)
    out = np.empty(len(subj))
    for k, (i, j) in enumerate(zip(subj, item)):
        x = np.zeros(N)
        x[i] = 1.0
        h = np.maximum(x @ S + net.s_b1, 0.0)
        u = h @ net.s_W2 + net.s_b2
        theta = u @ net.t_w + net.t_b[0]
        xi = np.zeros(J)
        xi[j] = 1.0
        g = np.maximum(xi @ I + net.i_b1, 0.0)
        v = g @ net.i_W2 + net.i_b2
        beta, a, p2, p3 = v @ net.i_W + net.i_b
        out[k] = cell_prob(theta, beta, a, p2, p3, net.ordered_asymptotes)
    return out


def adam_dense_steps(w, grads, *, lr, wd, b1=0.9, b2=0.999, eps=1e-8):
    """Plain torch.optim.Adam (coupled weight decay) on a dense array for a list of gradients."""
    w = np.array(w, dtype=np.float64, copy=True)
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        g = g + wd * w
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        mhat_step = lr / (1 - b1**t)
        denom = np.sqrt(v) / math.sqrt(1 - b2**t) + eps
        w = w - mhat_step * m / denom
    return w


def cell_curvature(theta, beta, a, c, d, y, mode):
    """Curvature of -log p(y | eta) wrt eta by second differences ("exact"), or textbook formulas."""
    def nll(eta):
        p = c + (d - c) * sigmoid(eta)
        return -math.log(p) if y == 1 else -math.log(1 - p)

    eta = a * (theta - beta)
    s = sigmoid(eta)
    p = c + (d - c) * s
    if mode == "fisher":
        dp = (d - c) * s * (1 - s)
        return dp * dp / (p * (1 - p))
    if mode == "logistic":
        return s * (1 - s)
    h = 1e-4
    return (nll(eta + h) - 2 * nll(eta) + nll(eta - h)) / h**2


def info_4pl_z(z, a, c, d):
    s = sigmoid(z)
    p = c + (d - c) * s
    return a * a * (p - c) ** 2 * (d - p) ** 2 / ((d - c) ** 2 * p * (1 - p))


def expected_information_quad(theta, a, b, c, d, sd):
    """E over b ~ N(b, sd^2) of the 4PL information at theta, by adaptive quadrature."""
    if sd == 0:
        return info_4pl_z(a * theta + b, a, c, d)
    f = lambda x: info_4pl_z(a * theta + b + sd * x, a, c, d) * math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    # split at the information peak so quad sees the narrow bump when sd is large
    peak = -(a * theta + b) / sd
    val = 0.0
    for lo, hi in ((-np.inf, min(peak, 0.0)), (min(peak, 0.0), max(peak, 0.0)), (max(peak, 0.0), np.inf)):
        if lo < hi:
            val += integrate.quad(f, lo, hi, limit=200, epsabs=1e-14, epsrel=1e-11)[0]
    return val
