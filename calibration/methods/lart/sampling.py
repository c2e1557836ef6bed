"""Exact posterior draws of one LLM's LaRT traits (docs/math.md §1.3, Lemma 1).

Step 1 (all Gaussian): integrating tau against the CoT data gives the CoT-informed prior
``theta | T_i ~ Normal(mu_i, v_i)`` with the CORRECTED variance ``v_i = 1 - rho^2 F_i / (1 + F_i)``
(:func:`cot_informed_prior`), and ``tau | theta, T_i`` Gaussian (:func:`draw_tau`).

Step 2: ``p(theta | R_i, T_i) ∝ N(theta; mu_i, v_i) prod_j Phi(s_ij (a_j theta + b_j))`` is a
unified skew-normal. Two exact samplers of it are provided:

* :func:`sample_theta` (``method="ars"``, the default everywhere): adaptive rejection sampling
  (Gilks & Wild 1992) on the log-concave one-dimensional target, with a tangent-line hull and a
  chord squeeze. Rejection sampling is exact: every accepted point is a draw from the target
  (up to floating-point rounding of the log density, ~1e-13). Cost: a mode search warm-started
  from ``theta_start`` (2-5 evaluations of the O(J) log density) plus 2 hull points plus about
  1.1-1.3 evaluations per draw.
* :func:`sample_theta_sun` (``method="sun"``): the SUN construction of Durante (2019) /
  docs/math.md §1.3, ``theta = mu + sigma V0 + v (d∘w)' V1 / (1 + v ||d||^2)``, with ``V1`` a
  J-variate truncated normal drawn by :func:`sample_tmvn` -- either Botev's (2017) minimax-tilting
  rejection sampler (exact; O(J^3) set-up per subject, which is why this is only a cross-check),
  or plain rejection from the untruncated normal (exact, only practical for tiny J: its
  acceptance rate is the posterior normalising constant).

:func:`sample_traits` draws (theta, tau) jointly: theta exactly, then tau from its Gaussian
conditional, so the pair is an exact draw from p(theta, tau | R_i, T_i).

:func:`posterior_grid` evaluates the normalised 1-D posterior density on a fine grid (brute-force
reference for tests and for the worked example).
"""

from __future__ import annotations

import numpy as np
from scipy import optimize, special

from calibration.methods.lart import _kernels as K

__all__ = [
    "cot_informed_prior",
    "draw_tau",
    "sample_theta",
    "sample_theta_sun",
    "sample_tmvn",
    "sample_traits",
    "posterior_grid",
]

_UNIF_PAIRS = 24  # uniform pairs handed to the ARS kernel per subject and attempt


# ----------------------------------------------------------------------------- input handling


def _as_R(R) -> np.ndarray:
    arr = np.asarray(R)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(f"R must be a (N, J) or (J,) matrix of 1/0/-1 (missing), got shape {arr.shape}")
    if arr.dtype.kind == "f":
        arr = np.where(np.isnan(arr), -1, arr)
    if arr.size and not np.isin(arr, (-1, 0, 1)).all():
        raise ValueError("R must hold 1 (correct), 0 (incorrect) or -1 (missing)")
    return np.ascontiguousarray(arr, dtype=np.int8)


def _as_vec(name, x, n) -> np.ndarray:
    arr = np.ascontiguousarray(np.asarray(x, dtype=np.float64).reshape(-1))
    if arr.shape[0] != n:
        raise ValueError(f"{name} has {arr.shape[0]} entries, expected {n}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    return arr


def _per_subject(name, x, n) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    return _as_vec(name, arr, n)


# ----------------------------------------------------------------------------- Lemma 1, step 1


def cot_informed_prior(log_t, omega, phi, lam, rho):
    """Lemma 1 step 1 for every subject (rows of ``log_t``; NaN = CoT missing).

    Returns ``(mu, v, s2, B)`` (each (N,)): theta | T_i ~ Normal(mu_i, v_i) with
    ``F_i = sum_{j seen} phi_j^2/lam_j^2``, ``B_i = -sum_{j seen} phi_j (log T_ij - omega_j)/lam_j^2``,
    ``mu_i = rho B_i / (1 + F_i)``, ``v_i = 1 - rho^2 F_i / (1 + F_i)`` (corrected variance), and
    tau | theta, T_i ~ Normal(s2_i (B_i + rho theta / (1 - rho^2)), s2_i),
    ``s2_i = 1 / (1/(1 - rho^2) + F_i)``.
    """
    y = np.asarray(log_t, dtype=np.float64)
    if y.ndim == 1:
        y = y[None, :]
    J = y.shape[1]
    omega = _as_vec("omega", omega, J)
    phi = _as_vec("phi", phi, J)
    lam = _as_vec("lam", lam, J)
    rho = float(rho)
    if not -1.0 < rho < 1.0:
        raise ValueError(f"rho must lie strictly between -1 and 1, got {rho}")
    seen = ~np.isnan(y)
    w = phi / lam**2
    F = seen.astype(np.float64) @ (w * phi)
    B = -np.where(seen, (y - omega) * w, 0.0).sum(axis=1)
    one_m = 1.0 - rho * rho
    mu = rho * B / (1.0 + F)
    v = 1.0 - rho * rho * F / (1.0 + F)
    s2 = 1.0 / (1.0 / one_m + F)
    return mu, v, s2, B


def draw_tau(theta, s2, B, rho, rng=None):
    """tau_i ~ Normal(s2_i (B_i + rho theta_i / (1 - rho^2)), s2_i) (Lemma 1): exact given theta."""
    rng = np.random.default_rng(rng)
    theta = np.asarray(theta, dtype=np.float64)
    mean = s2 * (B + rho * theta / (1.0 - rho * rho))
    return mean + np.sqrt(s2) * rng.standard_normal(np.shape(mean))


# ----------------------------------------------------------------------------- fast exact sampler (ARS)


def _ars_draws(R, a, b, mu, v, theta_start, rng):
    """Kernel driver: one ARS draw per subject; returns (draws, modes)."""
    N = R.shape[0]
    out = np.empty(N)
    modes = np.empty(N)
    status = np.empty(N, dtype=np.int64)
    todo = np.arange(N)
    start = theta_start.copy()
    for _attempt in range(50):
        unif = rng.random((todo.size, 2 * _UNIF_PAIRS))
        unif[unif == 0.0] = 0.5  # (0, 1) open interval; probability ~2^-53 per entry
        o = np.empty(todo.size)
        m = np.empty(todo.size)
        st = np.empty(todo.size, dtype=np.int64)
        K.sample_theta_ars(
            np.ascontiguousarray(R[todo]), a, b, np.ascontiguousarray(mu[todo]), np.ascontiguousarray(v[todo]),
            np.ascontiguousarray(start[todo]), unif, o, m, st,
        )
        out[todo] = o
        modes[todo] = m
        status[todo] = st
        failed = st < 0
        if not failed.any():
            return out, modes
        # uniforms ran out (very rare): redraw those subjects from scratch with fresh uniforms
        start[todo[failed]] = m[failed]
        todo = todo[failed]
    raise RuntimeError("adaptive rejection sampling failed to accept a draw after 50 x 24 proposals")


def _theta_problem(R, a, b, mu, v):
    """Validated (R, a, b, mu, v) of a theta-sampling problem: R (N, J); a, b (J,); mu, v (N,), v > 0."""
    R = _as_R(R)
    N, J = R.shape
    v = _per_subject("v", v, N)
    if np.any(v <= 0):
        raise ValueError("prior variances v must be > 0")
    return R, _as_vec("a", a, J), _as_vec("b", b, J), _per_subject("mu", mu, N), v


def sample_theta(R, a, b, mu, v, *, rng=None, theta_start=None, return_modes=False):
    """Exact draws theta_i ~ p(theta | R_i, T_i) ∝ N(theta; mu_i, v_i) prod_{j: R_ij >= 0} Phi(s_ij (a_j theta + b_j)).

    Adaptive rejection sampling (exact; see the module docstring). ``R`` is (N, J) or (J,) with
    1/0/-1 (missing); ``mu``, ``v`` scalars or (N,) (the CoT-informed prior of
    :func:`cot_informed_prior`, or 0 and 1 for plain IRT); ``theta_start`` warm-starts the mode
    search (default ``mu``). Returns (N,) draws (and the posterior modes with ``return_modes``).
    """
    rng = np.random.default_rng(rng)
    R, a, b, mu, v = _theta_problem(R, a, b, mu, v)
    N = R.shape[0]
    start = mu.copy() if theta_start is None else _per_subject("theta_start", theta_start, N)
    draws, modes = _ars_draws(R, a, b, mu, v, start, rng)
    return (draws, modes) if return_modes else draws


# ----------------------------------------------------------------------------- SUN construction


def _lnNpr(lo, hi):
    """log(Phi(hi) - Phi(lo)) elementwise, without cancellation (lo < hi; either may be infinite)."""
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    out = np.empty(np.broadcast(lo, hi).shape)
    lo, hi = np.broadcast_arrays(lo, hi)
    a = lo > 0
    if a.any():  # both in the upper tail: use Phi(-lo) - Phi(-hi)
        pa = special.log_ndtr(-lo[a])
        pb = special.log_ndtr(-hi[a])
        out[a] = pa + np.log1p(-np.exp(pb - pa))
    c = hi < 0
    if c.any():
        pa = special.log_ndtr(lo[c])
        pb = special.log_ndtr(hi[c])
        out[c] = pb + np.log1p(-np.exp(pa - pb))
    m = ~(a | c)
    if m.any():
        out[m] = np.log1p(-special.ndtr(lo[m]) - special.ndtr(-hi[m]))
    return out


def _trandn(lo, hi, rng):
    """Standard normal truncated to [lo, hi] (vectors), by the inverse cdf in the safer tail (exact to rounding)."""
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    u = rng.random(lo.shape)
    out = np.empty(lo.shape)
    up = lo > 0  # work with the upper tail: X = -ndtri(Q), Q between Phi(-hi) and Phi(-lo)
    if up.any():
        qlo = special.ndtr(-hi[up])
        qhi = special.ndtr(-lo[up])
        out[up] = -special.ndtri(qhi - u[up] * (qhi - qlo))
    lw = ~up
    if lw.any():
        plo = special.ndtr(lo[lw])
        phi_ = special.ndtr(hi[lw])
        out[lw] = special.ndtri(plo + u[lw] * (phi_ - plo))
    return np.clip(out, lo, hi)


def _cholperm(Sig, l, u):
    """Botev's (2017) Cholesky with greedy variable reordering (most constrained first).

    Returns (L, perm) with L lower triangular and Sig[perm][:, perm] = L L'.
    """
    Sig = Sig.copy()
    l = l.copy()
    u = u.copy()
    d = l.shape[0]
    perm = np.arange(d)
    L = np.zeros((d, d))
    z = np.zeros(d)
    eps = 1e-10
    for j in range(d):
        pr = np.full(d, np.inf)
        idx = np.arange(j, d)
        s = np.diag(Sig)[idx] - np.sum(L[idx, :j] ** 2, axis=1)
        s = np.sqrt(np.maximum(s, eps))
        cols = L[idx, :j] @ z[:j]
        pr[idx] = _lnNpr((l[idx] - cols) / s, (u[idx] - cols) / s)
        k = int(np.argmin(pr))
        jk = [j, k]
        kj = [k, j]
        Sig[jk, :] = Sig[kj, :]
        Sig[:, jk] = Sig[:, kj]
        L[jk, :] = L[kj, :]
        l[jk] = l[kj]
        u[jk] = u[kj]
        perm[jk] = perm[kj]
        s = Sig[j, j] - np.sum(L[j, :j] ** 2)
        if s < -0.01:
            raise ValueError("covariance matrix is not positive definite")
        L[j, j] = np.sqrt(max(s, eps))
        L[j + 1:, j] = (Sig[j + 1:, j] - L[j + 1:, :j] @ L[j, :j]) / L[j, j]
        tl = (l[j] - L[j, :j] @ z[:j]) / L[j, j]
        tu = (u[j] - L[j, :j] @ z[:j]) / L[j, j]
        w = _lnNpr(np.array([tl]), np.array([tu]))[0]
        z[j] = (np.exp(-0.5 * tl**2 - w) - (0.0 if np.isinf(tu) else np.exp(-0.5 * tu**2 - w))) / np.sqrt(2 * np.pi)
    return L, perm


def _psi_grad(y, L, l, u):
    """Gradient and Jacobian of Botev's psi(x; mu) in y = (x_1..x_{d-1}, mu_1..mu_{d-1}).

    ``L`` is the row-scaled Cholesky factor with its unit diagonal removed; l, u scaled likewise.
    """
    d = u.shape[0]
    x = np.zeros(d)
    mu = np.zeros(d)
    x[: d - 1] = y[: d - 1]
    mu[: d - 1] = y[d - 1:]
    c = L @ x
    lt = l - mu - c
    ut = u - mu - c
    w = _lnNpr(lt, ut)
    pl = np.exp(-0.5 * lt**2 - w) / np.sqrt(2 * np.pi)
    pu = np.where(np.isinf(ut), 0.0, np.exp(-0.5 * np.where(np.isinf(ut), 0.0, ut) ** 2 - w) / np.sqrt(2 * np.pi))
    pl = np.where(np.isinf(lt), 0.0, pl)
    P = pl - pu
    dfdx = -mu[: d - 1] + (P @ L[:, : d - 1])
    dfdm = mu - x + P
    grad = np.concatenate([dfdx, dfdm[: d - 1]])
    lt0 = np.where(np.isinf(lt), 0.0, lt)
    ut0 = np.where(np.isinf(ut), 0.0, ut)
    dP = -(P**2) + lt0 * pl - ut0 * pu
    DL = dP[:, None] * L
    mx = -np.eye(d) + DL
    xx = L.T @ DL
    mx = mx[: d - 1, : d - 1]
    xx = xx[: d - 1, : d - 1]
    jac = np.block([[xx, mx.T], [mx, np.diag(1.0 + dP[: d - 1])]])
    return grad, jac


def _psi(x, L, l, u, mu):
    x = np.append(x, 0.0)
    mu = np.append(mu, 0.0)
    c = L @ x
    return float(np.sum(_lnNpr(l - mu - c, u - mu - c) + 0.5 * mu**2 - x * mu))


def _tilted_proposals(n, L, l, u, mu, rng):
    d = l.shape[0]
    mu = np.append(mu, 0.0)
    Z = np.zeros((d, n))
    logp = np.zeros(n)
    for k in range(d):
        col = L[k, :k] @ Z[:k, :]
        tl = l[k] - mu[k] - col
        tu = u[k] - mu[k] - col
        Z[k] = mu[k] + _trandn(tl, tu, rng)
        logp += _lnNpr(tl, tu) + 0.5 * mu[k] ** 2 - mu[k] * Z[k]
    return Z, logp


def sample_tmvn(cov, lower, size, *, method="minimax", rng=None, max_proposals=10_000_000):
    """Exact draws of X ~ Normal_d(0, cov) truncated to X > lower (componentwise); shape (size, d).

    ``method="minimax"``: Botev's (2017) minimax exponential tilting -- proposals from a tilted
    sequential truncated-normal density, accepted when log U <= psi(Z; mu*) - psi*, where
    (x*, mu*) solves the saddle-point system and psi* = max_x psi(x; mu*) (concave in x). Exact
    (a rejection sampler); psi* is inflated by 1e-8 to absorb the root solver's tolerance, which
    keeps the bound valid and changes the acceptance rate by ~1e-8.
    ``method="rejection"``: draw from the untruncated normal and keep the draws inside the region.
    Exact; acceptance = P(X > lower), so only for tiny d or mild truncation.
    """
    rng = np.random.default_rng(rng)
    cov = np.asarray(cov, dtype=np.float64)
    l = np.asarray(lower, dtype=np.float64).reshape(-1)
    d = l.shape[0]
    if cov.shape != (d, d):
        raise ValueError(f"cov must be ({d}, {d}) for {d} bounds, got {cov.shape}")
    size = int(size)
    if method == "rejection":
        C = np.linalg.cholesky(cov)
        out = []
        n_have = 0
        n_tried = 0
        batch = max(1024, 4 * size)
        while n_have < size:
            X = rng.standard_normal((batch, d)) @ C.T
            keep = X[np.all(X > l, axis=1)]
            out.append(keep)
            n_have += keep.shape[0]
            n_tried += batch
            if n_tried > max_proposals:
                raise RuntimeError(f"rejection TMVN sampler: acceptance too low ({n_have}/{n_tried})")
        return np.concatenate(out)[:size]
    if method != "minimax":
        raise ValueError(f"method must be 'minimax' or 'rejection', got {method!r}")
    u = np.full(d, np.inf)
    if d == 1:
        s = np.sqrt(cov[0, 0])
        return (s * _trandn(np.full(size, l[0] / s), np.full(size, np.inf), rng))[:, None]
    Lfull, perm = _cholperm(cov, l, u)
    D = np.diag(Lfull).copy()
    lp = l[perm] / D
    up = u[perm] / D
    L = Lfull / D[:, None] - np.eye(d)
    sol = optimize.root(lambda y: _psi_grad(y, L, lp, up), np.zeros(2 * (d - 1)), jac=True, method="hybr")
    g, _ = _psi_grad(sol.x, L, lp, up)
    if not np.all(np.isfinite(sol.x)) or np.max(np.abs(g)) > 1e-6:
        raise RuntimeError("minimax tilting: the saddle-point system did not solve")
    x = sol.x[: d - 1]
    mu = sol.x[d - 1:]
    psistar = _psi(x, L, lp, up, mu) + 1e-8
    out = []
    n_have = 0
    n_tried = 0
    while n_have < size:
        m = max(size - n_have, 16)
        Z, logp = _tilted_proposals(m, L, lp, up, mu, rng)
        acc = np.log(rng.random(m)) <= logp - psistar
        if acc.any():
            out.append(Z[:, acc])
            n_have += int(acc.sum())
        n_tried += m
        if n_tried > max_proposals:
            raise RuntimeError(f"minimax TMVN sampler: acceptance too low ({n_have}/{n_tried})")
    Z = np.concatenate(out, axis=1)[:, :size]
    X = Lfull @ Z
    res = np.empty_like(X)
    res[perm] = X
    return res.T


def sample_theta_sun(R, a, b, mu, v, *, rng=None, size=1, tmvn="minimax"):
    """Exact draws of theta_i via the SUN construction (Durante 2019; docs/math.md §1.3).

    theta = mu + sigma V0 + v (d∘w)' V1 / (1 + v ||d||^2), V0 ~ N(0, 1/(1 + v ||d||^2)),
    V1 ~ N_J(0, Gamma) truncated to V1 > -gamma, with d_j = s_j a_j, c_j = s_j b_j,
    w_j = sqrt(v d_j^2 + 1), gamma = (c + d mu)/w, Gamma = W^-1 (v d d' + I) W^-1 (observed items
    only). ``tmvn`` picks the truncated-normal sampler (see :func:`sample_tmvn`).
    Returns (N,) draws for size=1, else (N, size).
    """
    rng = np.random.default_rng(rng)
    R, a, b, mu, v = _theta_problem(R, a, b, mu, v)
    N, J = R.shape
    out = np.empty((N, size))
    for i in range(N):
        seen = R[i] >= 0
        s = np.where(R[i, seen] > 0, 1.0, -1.0)
        d = s * a[seen]
        c = s * b[seen]
        vi = v[i]
        dd = float(d @ d)
        V0 = rng.standard_normal(size) / np.sqrt(1.0 + vi * dd)
        theta = mu[i] + np.sqrt(vi) * V0
        if d.size:
            w = np.sqrt(vi * d * d + 1.0)
            gamma = (c + d * mu[i]) / w
            Gamma = (vi * np.outer(d, d) + np.eye(d.size)) / np.outer(w, w)
            V1 = sample_tmvn(Gamma, -gamma, size, method=tmvn, rng=rng)
            theta = theta + vi * (V1 @ (d * w)) / (1.0 + vi * dd)
        out[i] = theta
    return out[:, 0] if size == 1 else out


# ----------------------------------------------------------------------------- joint draw, grid reference


def sample_traits(R, log_t, a, b, omega, phi, lam, rho, *, rng=None, method="ars", theta_start=None):
    """Exact joint draws (theta_i, tau_i) ~ p(theta, tau | R_i, T_i) for every subject (Lemma 1).

    theta from its skew-normal marginal posterior (``method`` "ars" or "sun"), then tau from its
    Gaussian conditional. ``log_t`` is (N, J) log(T + offset) with NaN = missing, or None (no CoT:
    then rho must be 0 and tau is drawn from its N(0, 1) prior). Returns (theta, tau).
    """
    rng = np.random.default_rng(rng)
    R = _as_R(R)
    N, J = R.shape
    if log_t is None:
        log_t = np.full((N, J), np.nan)
    log_t = np.asarray(log_t, dtype=np.float64).reshape(N, J)
    mu, v, s2, B = cot_informed_prior(log_t, omega, phi, lam, rho)
    if method == "ars":
        theta = sample_theta(R, a, b, mu, v, rng=rng, theta_start=theta_start)
    elif method == "sun":
        theta = sample_theta_sun(R, a, b, mu, v, rng=rng)
    else:
        raise ValueError(f"method must be 'ars' or 'sun', got {method!r}")
    tau = draw_tau(theta, s2, B, rho, rng)
    return theta, tau


def posterior_grid(r_row, a, b, mu, v, *, n_grid=20001, width_sd=12.0):
    """Normalised density of p(theta | R, T) ∝ N(theta; mu, v) prod_j Phi(s_j(a_j theta + b_j)) on a grid.

    The grid spans the mode +- ``width_sd`` curvature SDs (the tails beyond carry < 1e-30 of the
    mass, as l'' <= -1/v). Returns (grid, density) with the density integrating to 1 (trapezoid).
    """
    R = _as_R(r_row)[0]
    J = R.shape[0]
    a = _as_vec("a", a, J)
    b = _as_vec("b", b, J)
    mode, _l, _g, h = K._find_mode(float(mu), float(mu), float(v), a, b, R, 1e-10)
    sd = 1.0 / np.sqrt(-h)
    grid = np.linspace(mode - width_sd * sd, mode + width_sd * sd, int(n_grid))
    seen = R >= 0
    s = np.where(R[seen] > 0, 1.0, -1.0)
    x = s[None, :] * (np.outer(grid, a[seen]) + b[seen][None, :])
    logp = -0.5 * (grid - mu) ** 2 / v + special.log_ndtr(x).sum(axis=1)
    dens = np.exp(logp - logp.max())
    dens /= np.trapezoid(dens, grid)
    return grid, dens
