"""The steps of one SAEM iteration of :class:`~calibration.methods.lart.LaRTSAEMCalibrator`, each a
function that can be read and tested alone (docs/math.md §1.2-1.5; the module docstring of
:mod:`calibration.methods.lart.calibrator` describes the algorithm).

One iteration t, in the order the calibrator runs them:

1. :func:`draw_traits` (S-step): one exact draw of (theta_i, tau_i) per LLM; with right-censored
   lengths :func:`impute_censored` then redraws the censored log lengths given tau.
2. :func:`step_size`, :func:`sufficient_stats` and :func:`sa_update` (SA-step): the running
   averages of the CoT and rho statistics.
3. :func:`px_standardise` (PX, optional): re-express the history, the cached objective and the
   statistics in standardised trait coordinates.
4. :func:`accuracy_mstep`, :func:`cot_mstep` and :func:`rho_mstep` (M-step).
5. :func:`mean_abs_change` and :func:`saem_converged` (stopping rule).

After the loop: :func:`item_covariance` (the accuracy block's information). Every function here does what the loop did inline, operation for operation,
so a fit is the same bit for bit.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from calibration.methods.lart import _kernels as K
from calibration.methods.lart.sampling import _ars_draws, cot_informed_prior, sample_theta_sun

__all__ = [
    "step_size",
    "draw_traits",
    "impute_censored",
    "sufficient_stats",
    "sa_update",
    "px_standardise",
    "accuracy_mstep",
    "eb_prior_update",
    "cot_mstep",
    "rho_mstep",
    "rho_exact_update",
    "mean_abs_change",
    "saem_converged",
    "item_covariance",
]

_LAM_FLOOR = 1e-3
_EB_MIN_VAR = 1e-4


# ----------------------------------------------------------------------------- S-step


def draw_traits(R, a, b, rng, *, sampler="ars", theta_start=None, cot=None):
    """S-step: one exact draw of (theta_i, tau_i) | R_i, T_i per LLM (Lemma 1).

    ``cot`` is ``(Y, omega, phi, lam, rho)`` (working log lengths, NaN missing) or None for the
    IRT-only mode (theta from an N(0, 1) prior, no tau). theta is drawn by ARS warm-started at
    ``theta_start`` (``sampler="ars"``) or by the SUN construction (``"sun"``), then tau from its
    Gaussian conditional. Returns ``(theta, tau, modes)``: tau None without ``cot``, modes (the
    posterior modes, the next warm start) None with the SUN sampler.
    """
    N = R.shape[0]
    if cot is not None:
        Y, omega, phi, lam, rho = cot
        mu, v, s2, Bsum = cot_informed_prior(Y, omega, phi, lam, rho)
    else:
        mu = np.zeros(N)
        v = np.ones(N)
    modes = None
    if sampler == "ars":
        theta, modes = _ars_draws(R, a, b, mu, v, theta_start, rng)
    else:
        theta = sample_theta_sun(R, a, b, mu, v, rng=rng)
    tau = None
    if cot is not None:
        tau = s2 * (Bsum + rho * theta / (1.0 - rho * rho)) + np.sqrt(s2) * rng.standard_normal(N)
    return theta, tau, modes


def _trunc_normal_lower(mean, sd, lower, u):
    """Inverse-cdf draw of Normal(mean, sd^2) truncated to [lower, inf) at uniforms u (exact to rounding)."""
    alpha = (lower - mean) / sd
    # upper-tail form: X = mean - sd * ndtri((1 - u) * Phi(-alpha)) keeps precision for large alpha
    q = (1.0 - u) * special.ndtr(-alpha)
    q = np.maximum(q, np.finfo(float).tiny)
    x = mean - sd * special.ndtri(q)
    return np.maximum(x, lower)


def impute_censored(Y, C, tau, omega, phi, lam, y_cap, rng) -> None:
    """Data augmentation of right-censored cells (SAEM-MCMC): redraw ``Y[C]`` in place from
    Normal(omega_j - phi_j tau_i, lam_j^2) truncated to [``y_cap``, inf), one uniform per cell."""
    N, J = Y.shape
    mean = omega[None, :] - phi[None, :] * tau[:, None]
    u = rng.random(int(C.sum()))
    Y[C] = _trunc_normal_lower(mean[C], np.broadcast_to(lam, (N, J))[C], y_cap, u)


# ----------------------------------------------------------------------------- SA-step


def step_size(t: int, n_burnin: int) -> float:
    """alpha_t: 1 for t <= n_burnin + 1 (stochastic EM), then 1 / (t - n_burnin) (plain averaging)."""
    return 1.0 if t <= n_burnin + 1 else 1.0 / (t - n_burnin)


def sufficient_stats(theta, tau=None, seen=None, Y0=None) -> dict:
    """The complete-data statistics of one draw: means of theta and theta^2 and, with ``tau``, of
    tau, tau^2, theta tau, the per-item sums over observed CoT cells (``seen`` 0/1 float, ``Y0``
    log lengths with 0 where missing) of tau, tau^2, tau y, y, y^2, and the draw's correlation."""
    new = {"m_t": np.mean(theta), "tt": np.mean(theta * theta)}
    if tau is not None:
        new.update(
            m_u=np.mean(tau),
            uu=np.mean(tau * tau),
            tu=np.mean(theta * tau),
            s_u=tau @ seen,
            s_uu=(tau * tau) @ seen,
            s_uy=tau @ Y0,
            s_y=Y0.sum(axis=0),
            s_yy=(Y0 * Y0).sum(axis=0),
            corr=float(np.corrcoef(theta, tau)[0, 1]),
        )
    return new


def sa_update(st: dict, new: dict, alpha: float) -> None:
    """Stochastic approximation in place: st = (1 - alpha) st + alpha new (st = new at alpha = 1)."""
    for k, val in new.items():
        st[k] = val if alpha == 1.0 else (1.0 - alpha) * st[k] + alpha * val


# ----------------------------------------------------------------------------- PX step


def px_standardise(st, theta_hist, n_hist, cache, a, b, theta, theta_start, tau=None, n_t=None):
    """Parameter expansion: map the averaged population mean and SD of theta (and tau) back to
    0 and 1 by theta' = (theta - m) / s, (a', b') = (s a, b + m a), relabelling Q~ exactly.

    In place: the first ``n_hist`` rows of ``theta_hist``, the cached objective ``cache`` and the
    statistics ``st`` (CoT sums with ``n_t`` observed cells per item when ``tau`` is given).
    Returns the re-expressed ``(a, b, theta, theta_start, tau)`` (new arrays).
    """
    m_t = st["m_t"]
    s_t = float(np.sqrt(max(st["tt"] - m_t * m_t, 1e-12)))
    theta_hist[:n_hist] -= m_t
    theta_hist[:n_hist] /= s_t
    theta = (theta - m_t) / s_t
    theta_start = (theta_start - m_t) / s_t
    b = b + a * m_t  # warm start of the Newton M-step in the new coordinates
    a = a * s_t
    # the cached history objective, re-expressed: (a', b') = (s a, b + m a)
    g_a = (cache[:, 1] - m_t * cache[:, 2]) / s_t
    h_aa = (cache[:, 3] - 2.0 * m_t * cache[:, 4] + m_t * m_t * cache[:, 5]) / (s_t * s_t)
    h_ab = (cache[:, 4] - m_t * cache[:, 5]) / s_t
    cache[:, 1] = g_a
    cache[:, 3] = h_aa
    cache[:, 4] = h_ab
    st["m_t"], st["tt"] = 0.0, 1.0
    if tau is not None:
        m_u = st["m_u"]
        s_u = float(np.sqrt(max(st["uu"] - m_u * m_u, 1e-12)))
        cov = st["tu"] - m_t * m_u
        st["s_uu"] = (st["s_uu"] - 2.0 * m_u * st["s_u"] + n_t * m_u * m_u) / (s_u * s_u)
        st["s_uy"] = (st["s_uy"] - m_u * st["s_y"]) / s_u
        st["s_u"] = (st["s_u"] - n_t * m_u) / s_u
        st["m_u"], st["uu"] = 0.0, 1.0
        st["tu"] = cov / (s_t * s_u)
        tau = (tau - m_u) / s_u
    return a, b, theta, theta_start, tau


# ----------------------------------------------------------------------------- M-step


def accuracy_mstep(R, theta_hist, n_hist, alpha, a, b, prior, cache, n_passes, carried, *,
                   newton_tol, carry_tol, empirical_bayes):
    """M-step of the accuracy block: (a, b) in place to the maximiser of the averaged probit
    objective over the ``n_hist`` stored draws plus the Gaussian prior ``prior`` = (a_mean,
    a_precision, b_mean, b_precision) (cached Newton, ``_kernels.item_newton_cached``; ``cache``,
    ``n_passes`` and ``carried`` updated in place); with ``empirical_bayes`` the prior's EM update
    at the new point follows. Returns the prior for the next iteration."""
    K.item_newton_cached(R, theta_hist, n_hist, alpha, a, b, prior, cache, newton_tol, 100, n_passes,
                         carry_tol, carried)
    if empirical_bayes:
        prior = eb_prior_update(a, b, cache, prior)
    return prior


def item_covariance(cache, prior):
    """(var_a, cov_ab, var_b) per item: inverse of the averaged complete-data information of the
    accuracy block (minus the cached data Hessian) plus the prior precision."""
    i_aa = -cache[:, 3] + prior[1]
    i_ab = -cache[:, 4]
    i_bb = -cache[:, 5] + prior[3]
    det = i_aa * i_bb - i_ab * i_ab
    det = np.where(det > 1e-300, det, 1e-300)
    return i_bb / det, -i_ab / det, i_aa / det


def eb_prior_update(a, b, cache, prior):
    """One EM update of the accuracy prior's hyper-parameters (docs/math.md §7.1) at the M-step's point."""
    va, _, vb = item_covariance(cache, prior)
    ma, mb = float(a.mean()), float(b.mean())
    var_a = max(float(np.mean((a - ma) ** 2 + va)), _EB_MIN_VAR)
    var_b = max(float(np.mean((b - mb) ** 2 + vb)), _EB_MIN_VAR)
    return np.array([ma, 1.0 / var_a, mb, 1.0 / var_b])


def cot_mstep(st, n):
    """Closed-form argmax of the averaged CoT objective: regression of log T on (1, -tau) from
    the averaged sums ``st`` (s_u, s_uu, s_uy, s_y, s_yy) over ``n`` observed cells per item.
    Returns (omega, phi, lam), lam floored at 1e-3."""
    su, suu, suy, sy, syy = st["s_u"], st["s_uu"], st["s_uy"], st["s_y"], st["s_yy"]
    sxx = suu - su * su / n
    sxy = suy - su * sy / n
    slope = sxy / sxx  # d log T / d tau = -phi
    phi = -slope
    omega = (sy - slope * su) / n
    rss = syy + n * omega**2 + phi**2 * suu - 2.0 * omega * sy + 2.0 * phi * suy - 2.0 * omega * phi * su
    lam = np.sqrt(np.maximum(rss / n, _LAM_FLOOR**2))
    return omega, phi, lam


def rho_exact_update(m_tt: float, m_uu: float, m_tu: float) -> float:
    """Exact maximiser over rho of -(1/2) log(1 - rho^2) - (m_tt - 2 rho m_tu + m_uu) / (2 (1 - rho^2)).

    (The per-subject averaged bivariate-normal log-likelihood with unit variances; m_* are the
    averaged second moments.) The stationarity condition is the cubic
    rho^3 - m_tu rho^2 + (m_tt + m_uu - 1) rho - m_tu = 0; the real root in (-1, 1) with the
    largest objective is returned.
    """
    A = m_tt + m_uu
    C = m_tu
    roots = np.roots([1.0, -C, A - 1.0, -C])
    cand = [float(r.real) for r in roots if abs(r.imag) < 1e-9 and -1.0 < r.real < 1.0]
    if not cand:  # degenerate second moments (|C| ~ A/2): fall back to the sample correlation
        return float(np.clip(2.0 * C / max(A, 1e-12), -0.999, 0.999))

    def obj(r):
        return -0.5 * np.log1p(-r * r) - (A - 2.0 * r * C) / (2.0 * (1.0 - r * r))

    return max(cand, key=obj)


def rho_mstep(st: dict, *, px: bool, rule: str) -> float:
    """M-step of rho: with PX the correlation of the averaged second moments; else the root of the
    cubic (``rule="exact"``, :func:`rho_exact_update`) or the averaged sample correlation."""
    if px:
        return float(np.clip(st["tu"], -0.999, 0.999))
    if rule == "exact":
        return rho_exact_update(st["tt"], st["uu"], st["tu"])
    return float(np.clip(st["corr"], -0.999, 0.999))


# ----------------------------------------------------------------------------- stopping rule


def mean_abs_change(a, b, a_old, b_old) -> float:
    """mean|Delta a| + mean|Delta b|, the quantity the stopping rule watches."""
    return float(np.mean(np.abs(a - a_old)) + np.mean(np.abs(b - b_old)))


def saem_converged(t: int, n_burnin: int, delta: float, tol: float) -> bool:
    """Stop in the averaging phase (t > n_burnin + 1) once ``delta`` < ``tol``."""
    return t > n_burnin + 1 and delta < tol
