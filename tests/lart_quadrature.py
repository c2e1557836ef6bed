"""Marginal maximum likelihood of LaRT by adaptive 2-D Gauss-Hermite quadrature (test reference).

An independent check of the SAEM calibrator (:mod:`calibration.methods.lart.calibrator`): the observed-data
log-likelihood

    l(Omega) = sum_i log int int prod_j p(R_ij | theta) p(log T_ij | tau) N_2((theta, tau); 0, Sigma) dtheta dtau

is evaluated by tensor-product Gauss-Hermite quadrature centred and scaled per subject at the
mode and Laplace covariance of its integrand (adaptive quadrature; any centring is an exact change
of variables, centring only improves accuracy), and maximised by L-BFGS-B with the analytic
gradient (the posterior-weighted complete-data score: Fisher's identity under the quadrature
rule). It does NOT use Lemma 1 or any sampler, and evaluates the probit terms with
``scipy.special.log_ndtr``. The centring is recomputed and the optimisation restarted until the
estimate no longer moves (``max_rounds``).

Cost O(N J G^2) per evaluation (G nodes per dimension): meant for small N and J, in tests only.
"""

from __future__ import annotations

import numpy as np
from scipy import optimize, special

__all__ = ["marginal_loglik", "fit_quadrature"]


def _unpack(x, J):
    a = x[:J]
    b = x[J:2 * J]
    omega = x[2 * J:3 * J]
    phi = x[3 * J:4 * J]
    lam = np.exp(x[4 * J:5 * J])
    rho = np.tanh(x[5 * J])
    return a, b, omega, phi, lam, rho


def _pack(a, b, omega, phi, lam, rho):
    return np.concatenate([a, b, omega, phi, np.log(lam), [np.arctanh(rho)]])


def _modes(R, Y, a, b, omega, phi, lam, rho, start=None, n_newton=50):
    """Mode and Laplace covariance Cholesky factor of each subject's integrand (numpy Newton)."""
    N, J = R.shape
    seenR = R >= 0
    s = np.where(R > 0, 1.0, -1.0)
    seenT = ~np.isnan(Y)
    y0 = np.where(seenT, Y, 0.0)
    one_m = 1.0 - rho * rho
    P = np.array([[1.0, -rho], [-rho, 1.0]]) / one_m
    F = seenT.astype(float) @ (phi**2 / lam**2)
    th = np.zeros(N) if start is None else start[0].copy()
    ta = np.zeros(N) if start is None else start[1].copy()

    def parts(th, ta):
        x = s * (th[:, None] * a + b)
        lp = special.log_ndtr(x)
        m = np.exp(-0.5 * x * x - lp) / np.sqrt(2 * np.pi)
        c = m * (x + m)
        res = y0 - omega + phi * ta[:, None]
        f = (np.where(seenR, lp, 0.0).sum(1) - 0.5 * np.where(seenT, res**2 / lam**2, 0.0).sum(1)
             - 0.5 * (P[0, 0] * th**2 + 2 * P[0, 1] * th * ta + P[1, 1] * ta**2))
        g1 = np.where(seenR, s * a * m, 0.0).sum(1) - (P[0, 0] * th + P[0, 1] * ta)
        g2 = -np.where(seenT, phi * res / lam**2, 0.0).sum(1) - (P[0, 1] * th + P[1, 1] * ta)
        h11 = -np.where(seenR, a * a * c, 0.0).sum(1) - P[0, 0]
        h22 = -F - P[1, 1]
        h12 = np.full(N, -P[0, 1])
        return f, g1, g2, h11, h12, h22

    f, g1, g2, h11, h12, h22 = parts(th, ta)
    for _ in range(n_newton):
        det = h11 * h22 - h12 * h12
        d1 = -(h22 * g1 - h12 * g2) / det
        d2 = -(-h12 * g1 + h11 * g2) / det
        if max(np.abs(d1).max(), np.abs(d2).max()) < 1e-10:
            break
        step = np.ones(N)
        for _bt in range(30):
            fn, *_ = parts(th + step * d1, ta + step * d2)
            bad = fn < f - 1e-12
            if not bad.any():
                break
            step = np.where(bad, 0.5 * step, step)
        th = th + step * d1
        ta = ta + step * d2
        f, g1, g2, h11, h12, h22 = parts(th, ta)
    # covariance = (-H)^-1; its Cholesky factor
    det = h11 * h22 - h12 * h12
    c11 = -h22 / det
    c22 = -h11 / det
    c12 = h12 / det
    l11 = np.sqrt(c11)
    l21 = c12 / l11
    l22 = np.sqrt(np.maximum(c22 - l21 * l21, 1e-300))
    return th, ta, l11, l21, l22


def _loglik_and_grad(x, R, Y, centre, nodes, weights, b_prior_sd):
    N, J = R.shape
    a, b, omega, phi, lam, rho = _unpack(x, J)
    th0, ta0, l11, l21, l22 = centre
    G = nodes.size
    z1 = np.repeat(nodes, G)  # (G^2,)
    z2 = np.tile(nodes, G)
    logw = np.log(np.repeat(weights, G)) + np.log(np.tile(weights, G)) + z1**2 + z2**2
    sq2 = np.sqrt(2.0)
    TH = th0[:, None] + sq2 * l11[:, None] * z1[None, :]  # (N, Q)
    TA = ta0[:, None] + sq2 * (l21[:, None] * z1[None, :] + l22[:, None] * z2[None, :])
    logjac = np.log(2.0 * l11 * l22)
    seenR = R >= 0
    s = np.where(R > 0, 1.0, -1.0)
    seenT = ~np.isnan(Y)
    y0 = np.where(seenT, Y, 0.0)
    one_m = 1.0 - rho * rho
    logdens = np.zeros(TH.shape)
    # accuracy terms
    X = s[:, None, :] * (TH[:, :, None] * a + b)  # (N, Q, J)
    LP = special.log_ndtr(X)
    logdens += np.where(seenR[:, None, :], LP, 0.0).sum(2)
    # CoT terms
    RES = y0[:, None, :] - omega + phi * TA[:, :, None]
    logdens += np.where(seenT[:, None, :], -np.log(lam) - 0.5 * np.log(2 * np.pi) - 0.5 * RES**2 / lam**2, 0.0).sum(2)
    # bivariate normal prior
    quad = (TH**2 - 2 * rho * TH * TA + TA**2) / one_m
    logdens += -np.log(2 * np.pi) - 0.5 * np.log(one_m) - 0.5 * quad
    lt = logdens + logw[None, :]
    mx = lt.max(axis=1, keepdims=True)
    W = np.exp(lt - mx)
    tot = W.sum(axis=1, keepdims=True)
    ll_i = np.log(tot[:, 0]) + mx[:, 0] + logjac
    P = W / tot  # posterior weights over nodes (N, Q)
    # scores
    M = np.exp(-0.5 * X * X - LP) / np.sqrt(2 * np.pi)
    SM = np.where(seenR[:, None, :], s[:, None, :] * M, 0.0)  # d/dz of log Phi(s z)
    ga = np.einsum("nq,nqj,nq->j", P, SM, TH)
    gb = np.einsum("nq,nqj->j", P, SM)
    RESm = np.where(seenT[:, None, :], RES, 0.0)
    gomega = np.einsum("nq,nqj->j", P, RESm) / lam**2
    gphi = -np.einsum("nq,nqj,nq->j", P, RESm, TA) / lam**2
    gloglam = -seenT.sum(0) + np.einsum("nq,nqj->j", P, RESm**2) / lam**2
    drho = rho / one_m + TH * TA / one_m - rho * quad / one_m
    grho = float(np.sum(P * drho))
    ll = float(ll_i.sum())
    if b_prior_sd is not None:
        ll -= 0.5 * float(np.sum(b**2)) / b_prior_sd**2
        gb = gb - b / b_prior_sd**2
    grad = np.concatenate([ga, gb, gomega, gphi, gloglam, [grho * one_m]])
    return ll, grad


def marginal_loglik(R, Y, a, b, omega, phi, lam, rho, *, n_nodes=20, centre=None):
    """Observed-data log-likelihood of LaRT by adaptive 2-D Gauss-Hermite quadrature.

    ``R`` (N, J) 1/0/-1, ``Y`` (N, J) log CoT lengths (NaN missing). Returns a float.
    """
    R = np.asarray(R)
    Y = np.asarray(Y, dtype=np.float64)
    J = R.shape[1]
    a, b, omega, phi, lam = (np.asarray(v, dtype=np.float64) for v in (a, b, omega, phi, lam))
    if centre is None:
        th, ta, *_ = _modes(R, Y, a, b, omega, phi, lam, rho)
        centre = _modes(R, Y, a, b, omega, phi, lam, rho, start=(th, ta))
    nodes, weights = np.polynomial.hermite.hermgauss(n_nodes)
    x = _pack(a, b, omega, phi, lam, rho)
    return _loglik_and_grad(x, R, Y, centre, nodes, weights, None)[0] if J else 0.0


def fit_quadrature(R, Y, *, init, n_nodes=15, b_prior_sd=None, max_rounds=4, tol=1e-5):
    """Marginal MLE (or MAP with a Normal(0, b_prior_sd^2) prior on each b_j) by adaptive GH quadrature.

    ``init``: dict with a, b, omega, phi, lam, rho (e.g. an SAEM fit). Each round recentres the
    quadrature at the current estimate and runs L-BFGS-B to convergence; stops when the estimate
    moves by less than ``tol`` (max abs change) or after ``max_rounds``. Returns a dict with the
    parameters, ``loglik`` and ``rounds``.
    """
    R = np.ascontiguousarray(np.asarray(R))
    Y = np.asarray(Y, dtype=np.float64)
    N, J = R.shape
    x = _pack(*(np.asarray(init[k], dtype=np.float64) for k in ("a", "b", "omega", "phi", "lam")), float(init["rho"]))
    nodes, weights = np.polynomial.hermite.hermgauss(n_nodes)
    start = None
    rounds = 0
    res = None
    for rounds in range(1, max_rounds + 1):
        a, b, omega, phi, lam, rho = _unpack(x, J)
        th, ta, *_ = _modes(R, Y, a, b, omega, phi, lam, rho, start=start)
        centre = _modes(R, Y, a, b, omega, phi, lam, rho, start=(th, ta))
        start = centre[:2]

        def fun(z):
            ll, g = _loglik_and_grad(z, R, Y, centre, nodes, weights, b_prior_sd)
            return -ll / N, -g / N

        res = optimize.minimize(fun, x, jac=True, method="L-BFGS-B", options={"maxiter": 5000, "gtol": 1e-9, "ftol": 1e-15})
        moved = float(np.max(np.abs(res.x - x)))
        x = res.x
        if moved < tol:
            break
    a, b, omega, phi, lam, rho = _unpack(x, J)
    return {"a": a, "b": b, "omega": omega, "phi": phi, "lam": lam, "rho": float(rho),
            "loglik": float(-res.fun * N), "rounds": rounds}
