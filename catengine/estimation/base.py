"""Trait estimates, the population prior, and the estimator role.

The log posterior of one subject's traits (docs/math.md §1.5) is

    logistic banks:  sum_j l_j(theta) - (theta - mu)^2 / (2 sd^2)
    LaRT banks:      sum_j log Phi(s_j z_j) - (1/2) (xi - mu)' Q (xi - mu) - F_T tau^2 / 2 + B tau,
                     xi = (theta, tau), Q = Sigma^-1, F_T and B the CoT statistics (``ResponseState``)

Because the LaRT CoT part is Gaussian in tau and the accuracy part does not involve tau, tau can be
profiled (or, identically up to a constant, integrated) out in closed form:

    tau*(theta) = alpha + beta theta,   alpha = (B + Q22 mu_tau + Q12 mu_theta) / (Q22 + F_T),
                                        beta  = -Q12 / (Q22 + F_T)
    profile:     sum_j log Phi(s_j z_j) - q (theta - m)^2 / 2,   q = Q11 - Q12^2 / (Q22 + F_T),
                 m = first entry of [[Q11, Q12], [Q12, Q22 + F_T]]^-1 (Q mu + (0, B))

With the standard prior (unit variances, correlation rho) (m, 1/q) is exactly Lemma 1's
CoT-informed prior of theta (docs/math.md §1.3). So the 2-D MAP of (theta, tau) is a 1-D Newton problem
in theta followed by tau = tau*(theta); the joint Hessian is
H = [[Q11 + c, Q12], [Q12, Q22 + F_T]] with c = -d2/dtheta2 of the accuracy log-likelihood.
``use_cot=False`` drops the CoT terms (IRT-only scoring of a LaRT bank).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, fields, replace
from typing import ClassVar

import numpy as np

from catengine.validation import is_number, positive_finite
from catengine.estimation import _kernels as K
from catengine.estimation.state import ResponseState
from catengine.models.params import ItemParams


def _finite(value, name: str) -> float:
    if not is_number(value):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return value


@dataclass(frozen=True)
class TraitPrior:
    """Gaussian population prior of (theta, tau); tau and rho are used by LaRT banks only.

    ``TraitPrior.population(params)`` is the bank's own population: standard normal traits with
    the bank's rho (calibrations fix the trait scale to unit variance).
    """

    theta_mean: float = 0.0
    theta_sd: float = 1.0
    tau_mean: float = 0.0
    tau_sd: float = 1.0
    rho: float = 0.0

    def __post_init__(self):
        for name in ("theta_mean", "theta_sd", "tau_mean", "tau_sd", "rho"):
            object.__setattr__(self, name, _finite(getattr(self, name), name))
        for name in ("theta_sd", "tau_sd"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not -1.0 < self.rho < 1.0:
            raise ValueError(f"rho must lie strictly between -1 and 1, got {self.rho}")

    @classmethod
    def population(cls, params: ItemParams) -> "TraitPrior":
        return cls(rho=params.rho if params.model.has_cot else 0.0)

    def precision(self) -> np.ndarray:
        """Q = Sigma^-1 of (theta, tau), in closed form (called on every estimate)."""
        st, su, r = self.theta_sd, self.tau_sd, self.rho
        k = 1.0 / (1.0 - r * r)
        off = -k * r / (st * su)
        return np.array([[k / (st * st), off], [off, k / (su * su)]])


@dataclass(frozen=True)
class TraitEstimate:
    """Posterior summary of one subject's traits after ``n_items`` answers.

    ``theta_sd`` / ``tau_sd`` are posterior SDs (MAP: from the observed Hessian at the mode, docs/math.md
    §1.5; EAP: posterior moments). ``tau``, ``tau_sd`` and ``theta_tau_cov`` are ``None`` for
    logistic banks. ``n_iter`` / ``converged`` describe the optimiser (EAP: 0 / True).

    How the reported SD was made (docs/math.md §7.3-7.5): ``theta_sd_fixed_items`` is the model's SD with
    the item parameters taken as known (``None`` when the bank carries no item uncertainty, then it
    equals the SD before ``interval_factor``); ``interval_factor`` the factor the SDs were multiplied
    by afterwards (the bank's cross-fitted c(L), or an explicit ``sd_scale``),
    ``interval_calibration`` a sentence saying which (empty: not calibrated) and ``interval_z95`` the
    bank's cross-fitted multiplier of the 95% interval (None: 1.96).
    """

    theta: float
    theta_sd: float
    n_items: int
    tau: float | None = None
    tau_sd: float | None = None
    theta_tau_cov: float | None = None
    method: str = "map"
    n_iter: int = 0
    converged: bool = True
    theta_sd_fixed_items: float | None = None
    interval_factor: float = 1.0
    interval_calibration: str = ""
    interval_z95: float | None = None

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        """Credible interval of theta: theta +- z SD, z the normal quantile of ``level``, except at
        level 0.95 when the bank's cross-fitted check measured its own multiplier
        (``interval_z95``, docs/math.md §7.5)."""
        if not 0.0 < level < 1.0:
            raise ValueError(f"level must lie in (0, 1), got {level}")
        from statistics import NormalDist

        zq = NormalDist().inv_cdf(0.5 + level / 2.0)
        if self.interval_z95 is not None and abs(level - 0.95) < 1e-12:
            zq = self.interval_z95
        return self.theta - zq * self.theta_sd, self.theta + zq * self.theta_sd

    def covariance(self) -> np.ndarray:
        """Posterior covariance: (1, 1) for logistic banks, (2, 2) of (theta, tau) for LaRT."""
        if self.tau is None:
            return np.array([[self.theta_sd**2]])
        c = self.theta_tau_cov
        return np.array([[self.theta_sd**2, c], [c, self.tau_sd**2]])

    def precision(self) -> np.ndarray:
        """Inverse of :meth:`covariance`, in closed form (the LaRT selectors call it on every step)."""
        if self.tau is None:
            return np.array([[1.0 / self.theta_sd**2]])
        vt, vu, c = self.theta_sd**2, self.tau_sd**2, self.theta_tau_cov
        det = vt * vu - c * c
        if not det > 0.0:
            raise np.linalg.LinAlgError(f"trait covariance [[{vt}, {c}], [{c}, {vu}]] is not positive definite")
        return np.array([[vu / det, -c / det], [-c / det, vt / det]])

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class GaussianPart:
    """The Gaussian part of the log posterior of theta (see module docstring)."""

    q: float  # precision
    m: float  # mean
    tau_alpha: float = math.nan
    tau_beta: float = math.nan
    tau_precision: float = math.nan  # Q22 + F_T: conditional precision of tau given theta
    q12: float = math.nan


def gaussian_part(params: ItemParams, state: ResponseState, prior: TraitPrior, use_cot: bool = True) -> GaussianPart:
    """Precision and mean of the (profiled) Gaussian term for theta, plus tau's conditional line."""
    if not params.model.has_cot:
        return GaussianPart(q=1.0 / prior.theta_sd**2, m=prior.theta_mean)
    Q = prior.precision()
    f_t = state.cot_info if use_cot else 0.0
    b_s = state.cot_score if use_cot else 0.0
    q11, q12, q22 = float(Q[0, 0]), float(Q[0, 1]), float(Q[1, 1])
    t_prec = q22 + f_t
    mu_t, mu_u = prior.theta_mean, prior.tau_mean
    rhs0 = q11 * mu_t + q12 * mu_u
    rhs1 = q12 * mu_t + q22 * mu_u + b_s
    det = q11 * t_prec - q12 * q12
    m = (t_prec * rhs0 - q12 * rhs1) / det
    return GaussianPart(
        q=q11 - q12 * q12 / t_prec,
        m=m,
        tau_alpha=(b_s + q22 * mu_u + q12 * mu_t) / t_prec,
        tau_beta=-q12 / t_prec,
        tau_precision=t_prec,
        q12=q12,
    )


class TraitEstimator(ABC):
    """Role: estimate a subject's traits from a :class:`ResponseState`.

    Implementations are frozen dataclasses (settings only); ``prior=None`` means the bank's
    population prior (``TraitPrior.population``). ``use_cot`` (LaRT banks only) includes the CoT
    lengths; ``False`` scores the accuracy answers alone (IRT-only). ``sd_scale`` multiplies the
    reported posterior SDs (the covariance by its square; the mode is unchanged), e.g. by the RMS
    ratio a replay audit measured on real LLMs (``calibration audit --kind replay``), so that
    intervals and SD-based stopping rules are honest; selectors that use the posterior (pwi, kl,
    the LaRT criteria) then see the widened one. Implementations provide :meth:`_posterior` and
    call :meth:`_check_settings` in ``__post_init__``.

    Two corrections are on by default and act only when the bank provides what they need:
    ``item_uncertainty`` adds the item-parameter term of docs/math.md §7.3 (Cheng & Yuan 2010) to the
    variance when the state carries the bank's item covariance; ``interval_calibration`` multiplies
    the SDs by the bank's cross-fitted factor c(L) at the current test length (docs/math.md §7.5). An
    explicit ``sd_scale`` != 1 overrides the stored calibration (it is used instead of c(L)).
    """

    name: ClassVar[str] = ""
    prior: TraitPrior | None
    use_cot: bool
    sd_scale: float
    item_uncertainty: bool
    interval_calibration: bool

    def estimate(self, params: ItemParams, state: ResponseState, start: TraitEstimate | None = None) -> TraitEstimate:
        """Posterior summary after the answers in ``state`` (``start``: previous estimate, a warm start)."""
        est = self._posterior(params, state, start)
        if self.item_uncertainty and state.covariance is not None and state.n:
            est = self._with_item_uncertainty(params, state, est)
        if self.sd_scale != 1.0:
            return replace(scale_sd(est, self.sd_scale), interval_factor=float(self.sd_scale),
                           interval_calibration=f"explicit sd_scale={self.sd_scale:g} (overrides any stored calibration)")
        curve = state.interval_curve
        if self.interval_calibration and curve is not None:
            factor = curve.factor(state.n)
            return replace(scale_sd(est, factor), interval_factor=factor, interval_calibration=curve.describe(state.n),
                           interval_z95=curve.multiplier(state.n))
        return est

    def _with_item_uncertainty(self, params: ItemParams, state: ResponseState, est: TraitEstimate) -> TraitEstimate:
        """Var(theta) ~ 1/H + (1/H^2) sum_j G_j' Cov(xi_j) G_j (docs/math.md §7.3), 1/H the posterior variance
        with the items fixed; for LaRT tau = alpha + beta theta carries the extra term along."""
        v = est.theta_sd * est.theta_sd
        acc = K.item_parameter_sensitivity(state.model, est.theta, state.a, state.b, state.c, state.d, state.y,
                                           state.va, state.vb, state.vab, state.n)
        extra = v * v * acc
        if est.tau is None:
            return replace(est, theta_sd=math.sqrt(v + extra), theta_sd_fixed_items=est.theta_sd)
        beta = self.gaussian(params, state).tau_beta
        return replace(est, theta_sd=math.sqrt(v + extra), theta_sd_fixed_items=est.theta_sd,
                       tau_sd=math.sqrt(est.tau_sd * est.tau_sd + beta * beta * extra),
                       theta_tau_cov=est.theta_tau_cov + beta * extra)

    @abstractmethod
    def _posterior(self, params: ItemParams, state: ResponseState, start: TraitEstimate | None) -> TraitEstimate:
        """The model's posterior summary (before ``sd_scale``)."""

    def _check_settings(self) -> None:
        """Validate the settings every estimator shares."""
        _check_prior(self.prior)
        _check_bool(self.use_cot, "use_cot")
        _check_bool(self.item_uncertainty, "item_uncertainty")
        _check_bool(self.interval_calibration, "interval_calibration")
        positive_finite(self.sd_scale, "sd_scale")

    # shared model helpers ------------------------------------------------------------------------
    def resolved_prior(self, params: ItemParams) -> TraitPrior:
        return self.prior if self.prior is not None else TraitPrior.population(params)

    def gaussian(self, params: ItemParams, state: ResponseState) -> GaussianPart:
        prior = self.prior
        if prior is None:  # the population prior, built once per session (scratch lives with the state)
            prior = state.scratch.get("population-prior")
            if prior is None:
                prior = state.scratch["population-prior"] = TraitPrior.population(params)
        return gaussian_part(params, state, prior, self.use_cot)

    def log_posterior(self, params: ItemParams, state: ResponseState, thetas) -> np.ndarray:
        """Unnormalised marginal log posterior of theta at ``thetas`` (tau integrated out for LaRT)."""
        th = np.ascontiguousarray(np.asarray(thetas, dtype=np.float64).reshape(-1))
        gp = self.gaussian(params, state)
        ll = K.loglik_points(state.model, th, state.a, state.b, state.c, state.d, state.y, state.n)
        return ll - 0.5 * gp.q * (th - gp.m) ** 2


def _check_prior(prior) -> None:
    if prior is not None and not isinstance(prior, TraitPrior):
        raise TypeError(f"prior must be a TraitPrior or None (the bank's population prior), got {type(prior).__name__}")


def scale_sd(estimate: TraitEstimate, factor: float) -> TraitEstimate:
    """``estimate`` with its posterior covariance scaled by factor^2 (SDs by ``factor``); mode unchanged."""
    if factor == 1.0:
        return estimate
    f = float(factor)
    return replace(
        estimate,
        theta_sd=estimate.theta_sd * f,
        tau_sd=None if estimate.tau_sd is None else estimate.tau_sd * f,
        theta_tau_cov=None if estimate.theta_tau_cov is None else estimate.theta_tau_cov * f * f,
    )


def _check_bool(value, name: str) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
