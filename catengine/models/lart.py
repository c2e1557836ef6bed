"""LaRT (Latency-Response Theory, docs/math.md §1): probit accuracy + log-normal CoT length.

    P(R_j = 1 | theta)      = Phi(z_j),  z_j = a_j theta + b_j
    log(T_j + offset) | tau ~ Normal(omega_j - phi_j tau, lam_j^2)        (lam_j an SD)
    (theta, tau)            ~ Normal_2(0, [[1, rho], [rho, 1]])

Scale of the CoT data: every function here takes LOG-SCALE CoT lengths ``log_cot`` =
log(T + cot_offset), one per entry of ``items``, NaN where the length is missing. Raw token counts
enter only through ``log_cot_length(tokens, cot_offset=1.0)``, which does that conversion (the bank's
``cot_offset`` attr says which offset it was calibrated with).

Shapes: ``theta`` (and ``tau``, broadcast against it) is a float or an array of shape S; per-item
outputs have shape S + (n,), summed outputs shape S (numpy floats for scalar input); gradients have
shape S + (2,) and Hessians S + (2, 2), ordered (theta, tau). ``items`` is an integer index array into
the bank (``None``: all items); ``responses`` holds one 0/1 answer per entry of ``items``.
"""

from __future__ import annotations

import numpy as np

from . import _kernels as K
from ._inputs import _as_items, _as_responses, _as_theta, _summed, _vec
from .logistic import _MODEL_FUNCTIONS, _check_model
from .params import ItemParams

__all__ = [
    "cot_tokens",
    "log_cot_length",
    *_MODEL_FUNCTIONS,
    "cot_statistics",
    "cot_informed_prior",
    "tau_conditional",
    "theta_precision_tau_known",
    "theta_precision_marginal",
]

_LART = ("lart",)


def _as_log_cot(log_cot, n_items: int) -> np.ndarray:
    if log_cot is None:
        return np.full(n_items, np.nan)
    lt = np.asarray(log_cot, dtype=np.float64)
    if lt.ndim == 0:
        lt = lt.reshape(1)
    if lt.ndim != 1 or lt.shape[0] != n_items:
        raise ValueError(
            f"log_cot must be a vector with one log CoT length (NaN = missing) per item ({n_items}), got shape {lt.shape}"
        )
    bad = np.flatnonzero(np.isinf(lt))
    if bad.size:
        raise ValueError(f"log_cot must be finite or NaN (missing); position {int(bad[0])} holds {lt[bad[0]]}")
    return np.ascontiguousarray(lt)


def log_cot_length(tokens, cot_offset: float = 1.0) -> np.ndarray:
    """Raw CoT token counts -> log(T + cot_offset), the scale the model lives on. NaN stays NaN.

    Counts must be >= 0 (zero-length chains are why the default offset is 1). The returned values
    feed every ``log_cot`` argument of this module. The Jacobian -log(T + offset) of the change of
    variables is not part of any log-likelihood here (it does not depend on the traits).
    """
    offset = float(cot_offset)
    if not np.isfinite(offset) or offset < 0.0:
        raise ValueError(f"cot_offset must be a finite number >= 0, got {cot_offset!r}")
    t = np.asarray(tokens, dtype=np.float64)
    obs = ~np.isnan(t)
    bad = obs & ~(np.isfinite(t) & (t >= 0.0) & (t + offset > 0.0))
    if np.any(bad):
        pos = np.unravel_index(int(np.flatnonzero(bad.reshape(-1))[0]), t.shape) if t.ndim else ()
        raise ValueError(
            f"CoT token counts must be finite, >= 0 and > -cot_offset ({-offset}); got {t[pos]} at position {pos}"
        )
    out = np.full(t.shape, np.nan)
    np.log(t + offset, out=out, where=obs)
    return out if out.ndim else out[()]


def cot_tokens(log_cot, cot_offset: float = 1.0, *, whole_tokens: bool = False) -> np.ndarray:
    """The inverse of :func:`log_cot_length` for simulated lengths: T = exp(log_cot) - cot_offset,
    clipped at 0 (a drawn log length below log(cot_offset) is a zero-length chain).

    ``whole_tokens=True`` rounds T to the nearest token count first (what a live LLM reports: the
    engine's simulated examinees use it); the calibration simulators keep T continuous. The one
    rule of every simulated CoT length.
    """
    t = np.exp(np.asarray(log_cot, dtype=np.float64)) - float(cot_offset)
    if whole_tokens:
        t = np.round(t)
    return np.maximum(t, 0.0)


def prob_correct(params: ItemParams, theta, items=None) -> np.ndarray:
    """P(correct) = Phi(a theta + b) of each selected item: shape S + (n,)."""
    _check_model(params, _LART, "lart.prob_correct")
    return params.model.compiled_probability(params, theta, items)


def trait_derivatives(params: ItemParams, theta, tau, responses, log_cot=None, items=None):
    """(log-likelihood, gradient, Hessian) of the answers and log CoT lengths wrt xi = (theta, tau).

    l = sum_j log Phi(s_j z_j) + sum_{j: CoT seen} [-log(2 pi)/2 - log lam_j - r_j^2 / (2 lam_j^2)],
    s_j = 2 R_j - 1, r_j = log_cot_j - omega_j + phi_j tau. No prior term.
    gradient = (sum_j s_j a_j m(s_j z_j), -sum_j phi_j r_j / lam_j^2)            shape S + (2,)
    Hessian  = diag(-sum_j a_j^2 m(x)(x + m(x)) at x = s_j z_j, -sum_{CoT seen} phi_j^2/lam_j^2)
                                                                                  shape S + (2, 2)
    Log-likelihood shape S. ``log_cot`` is log-scale (see ``log_cot_length``), NaN = missing,
    ``None`` = no CoT data.
    """
    _check_model(params, _LART, "lart.trait_derivatives")
    th, th_shape = _as_theta(theta)
    ta, ta_shape = _as_theta(tau, "tau")
    try:
        shape = np.broadcast_shapes(th_shape, ta_shape)
    except ValueError:
        raise ValueError(f"theta (shape {th_shape}) and tau (shape {ta_shape}) do not broadcast") from None
    th = np.ascontiguousarray(np.broadcast_to(th.reshape(th_shape), shape).reshape(-1))
    ta = np.ascontiguousarray(np.broadcast_to(ta.reshape(ta_shape), shape).reshape(-1))
    idx = _as_items(params, items)
    y = _as_responses(responses, idx.shape[0])
    lt = _as_log_cot(log_cot, idx.shape[0])
    out = K.derivs_lart(
        th, ta, _vec(params.a, idx), _vec(params.b, idx), y,
        _vec(params.omega, idx), _vec(params.phi, idx), _vec(params.lam, idx), lt,
    )
    grad = out[:, 1:3].reshape(shape + (2,))
    hess = np.zeros((out.shape[0], 2, 2))
    hess[:, 0, 0] = out[:, 3]
    hess[:, 1, 1] = out[:, 4]
    return _summed(out[:, 0], shape), grad, hess.reshape(shape + (2, 2))


def log_likelihood(params: ItemParams, theta, tau, responses, log_cot=None, items=None):
    """Joint log-likelihood of answers and log CoT lengths at (theta, tau); shape S (see trait_derivatives)."""
    return trait_derivatives(params, theta, tau, responses, log_cot, items)[0]


def trait_gradient(params: ItemParams, theta, tau, responses, log_cot=None, items=None) -> np.ndarray:
    """Gradient of the joint log-likelihood wrt (theta, tau); shape S + (2,)."""
    return trait_derivatives(params, theta, tau, responses, log_cot, items)[1]


def trait_hessian(params: ItemParams, theta, tau, responses, log_cot=None, items=None) -> np.ndarray:
    """Hessian of the joint log-likelihood wrt (theta, tau) (diagonal); shape S + (2, 2)."""
    return trait_derivatives(params, theta, tau, responses, log_cot, items)[2]


def item_information(params: ItemParams, theta, items=None) -> tuple[np.ndarray, np.ndarray]:
    """Fisher information of each item for xi = (theta, tau): I_j = diag(u_j, v_j).

    Returns (u, v): u_j = a_j^2 h(a_j theta + b_j), h(z) = phi(z)^2/(Phi(z) Phi(-z)), shape S + (n,)
    (>= 0 also for a_j <= 0); v_j = phi_j^2 / lam_j^2 (free of the traits), shape (n,).
    """
    _check_model(params, _LART, "lart.item_information")
    model = params.model
    return model.information(params, theta, items), model.cot_information(params, _as_items(params, items))


def cot_statistics(params: ItemParams, items, log_cot) -> tuple[float, float]:
    """(F_T, B) of docs/math.md §1.3 over the items whose CoT length is observed (log_cot not NaN).

    F_T = sum_j phi_j^2 / lam_j^2 (CoT information about tau), B = -sum_j phi_j (log_cot_j - omega_j) / lam_j^2.
    """
    _check_model(params, _LART, "lart.cot_statistics")
    idx = _as_items(params, items)
    lt = _as_log_cot(log_cot, idx.shape[0])
    seen = ~np.isnan(lt)
    idx, lt = idx[seen], lt[seen]
    w = params.phi[idx] / params.lam[idx] ** 2
    return float(np.sum(w * params.phi[idx])), float(-np.sum(w * (lt - params.omega[idx])))


def cot_informed_prior(params: ItemParams, items, log_cot) -> tuple[float, float]:
    """Lemma 1, step 1: theta | T ~ Normal(mean, var) after integrating tau against the CoT data.

    mean = rho B / (1 + F_T), var = 1 - rho^2 F_T / (1 + F_T) (the corrected variance of docs/math.md
    §1.3). No CoT seen: Normal(0, 1). ``log_cot`` is log-scale, NaN = missing.
    """
    f_t, b_sum = cot_statistics(params, items, log_cot)
    rho = params.rho
    return rho * b_sum / (1.0 + f_t), 1.0 - rho * rho * f_t / (1.0 + f_t)


def tau_conditional(params: ItemParams, theta, items, log_cot):
    """tau | theta, T ~ Normal(mean, var): var = s2 = 1/(1/(1 - rho^2) + F_T),
    mean = s2 (B + rho theta / (1 - rho^2)). Returns (mean of shape S, var float)."""
    th, shape = _as_theta(theta)
    f_t, b_sum = cot_statistics(params, items, log_cot)
    rho = params.rho
    one_m = 1.0 - rho * rho
    s2 = 1.0 / (1.0 / one_m + f_t)
    return _summed(s2 * (b_sum + rho * th / one_m), shape), s2


def _sum_u(params: ItemParams, theta, items):
    th, shape = _as_theta(theta)
    idx = _as_items(params, items)
    u = K.info_probit(th, _vec(params.a, idx), _vec(params.b, idx))
    return u.sum(axis=1), shape, idx


def theta_precision_tau_known(params: ItemParams, theta, items=None):
    """Paper's precision of theta (tau treated as known): 1/(1 - rho^2) + sum_j u_j(theta); shape S."""
    _check_model(params, _LART, "lart.theta_precision_tau_known")
    su, shape, _ = _sum_u(params, theta, items)
    return _summed(1.0 / (1.0 - params.rho**2) + su, shape)


def theta_precision_marginal(params: ItemParams, theta, items=None, cot_observed=None):
    """Exact marginal (Schur complement) precision of theta: sum_j u_j(theta) + (1 + F_T)/(1 + F_T (1 - rho^2)).

    F_T = sum of phi_j^2/lam_j^2 over the items whose CoT length is observed: ``cot_observed`` is a
    boolean mask aligned with ``items`` (default: all observed). F_T = 0 gives sum u + 1; F_T -> inf
    gives the tau-known form. Shape S.
    """
    _check_model(params, _LART, "lart.theta_precision_marginal")
    su, shape, idx = _sum_u(params, theta, items)
    if cot_observed is None:
        seen = np.ones(idx.shape[0], dtype=bool)
    else:
        seen = np.asarray(cot_observed)
        if seen.dtype != bool or seen.shape != idx.shape:
            raise ValueError(
                f"cot_observed must be a boolean mask with one entry per item ({idx.shape[0]}), "
                f"got dtype {seen.dtype}, shape {seen.shape}"
            )
    f_t = float(np.sum((params.phi[idx[seen]] / params.lam[idx[seen]]) ** 2))
    return _summed(su + (1.0 + f_t) / (1.0 + f_t * (1.0 - params.rho**2)), shape)
