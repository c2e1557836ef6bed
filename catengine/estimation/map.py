"""MAP trait estimation by Newton (1-D for logistic banks, exact 2-D for LaRT; docs/math.md §1.5)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from catengine.estimation import _kernels as K
from catengine.estimation.base import TraitEstimate, TraitEstimator, TraitPrior
from catengine.estimation.state import MODEL_4PL, ResponseState
from catengine.models.params import ItemParams
from catengine.validation import is_integer


@dataclass(frozen=True)
class MAPEstimator(TraitEstimator):
    """Posterior mode by damped Newton, warm-started from the previous step's estimate.

    Logistic banks: 1-D Newton on theta. LaRT banks: the 2-D mode of (theta, tau) via the exact
    profile of tau (see ``estimation.base``): 1-D Newton on theta, then tau = alpha + beta theta.
    Posterior SDs come from the inverse of the negative Hessian of the log posterior at the mode
    (for LaRT the 2 x 2 H = Sigma^-1 + diag(sum_j a_j^2 m(x)(x + m(x)), F_T) of docs/math.md §1.5).
    The prior keeps all-correct and all-wrong answer patterns finite.

    ``tol`` bounds the last Newton step (relative to 1 + |theta|); ``max_iter`` the iterations.
    4PL banks (non-concave likelihood) also scan a coarse grid for the start (``grid_start``).
    ``sd_scale``, ``item_uncertainty``, ``interval_calibration``: see :class:`TraitEstimator`.
    """

    name: ClassVar[str] = "map"
    prior: TraitPrior | None = None
    use_cot: bool = True
    tol: float = 1e-10
    max_iter: int = 100
    sd_scale: float = 1.0
    item_uncertainty: bool = True
    interval_calibration: bool = True

    def __post_init__(self):
        self._check_settings()
        if not (isinstance(self.tol, (int, float)) and 0 < self.tol < 1e-2):
            raise ValueError(f"tol must be a number in (0, 0.01), got {self.tol!r}")
        if not is_integer(self.max_iter) or self.max_iter < 1:
            raise ValueError(f"max_iter must be a positive integer, got {self.max_iter!r}")

    def _posterior(self, params: ItemParams, state: ResponseState, start: TraitEstimate | None = None) -> TraitEstimate:
        gp = self.gaussian(params, state)
        theta0 = gp.m if start is None else float(start.theta)
        theta, _, _, hl, n_iter, converged = K.map_newton_1d(
            state.model, state.a, state.b, state.c, state.d, state.y, state.n, gp.q, gp.m, theta0,
            self.max_iter, float(self.tol), state.model == MODEL_4PL,
        )
        curv = -hl  # observed information of the accuracy answers at the mode
        if not params.model.has_cot:
            total = gp.q + curv
            if not total > 0:  # 4PL far outside concavity: fall back to the prior precision
                total = gp.q
            return TraitEstimate(theta=theta, theta_sd=1.0 / math.sqrt(total), n_items=state.n,
                                 method="map", n_iter=n_iter, converged=converged)
        # joint Hessian H = [[Q11 + c, Q12], [Q12, Q22 + F]]; cov = H^-1
        h11 = gp.q + gp.q12 * gp.q12 / gp.tau_precision + curv  # = Q11 + c
        h12, h22 = gp.q12, gp.tau_precision
        det = h11 * h22 - h12 * h12
        tau = gp.tau_alpha + gp.tau_beta * theta
        return TraitEstimate(
            theta=theta, theta_sd=math.sqrt(h22 / det), n_items=state.n,
            tau=tau, tau_sd=math.sqrt(h11 / det), theta_tau_cov=-h12 / det,
            method="map", n_iter=n_iter, converged=converged,
        )
