"""EAP trait estimation by quadrature on a fixed theta grid, in log space."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import numpy as np

from catengine.estimation import _kernels as K
from catengine.estimation.base import TraitEstimate, TraitEstimator, TraitPrior
from catengine.estimation.state import ResponseState
from catengine.models.params import ItemParams
from catengine.validation import is_integer

_RULES = ("trapezoid", "sum")

#: posterior density at an end node, relative to its peak, above which the grid is widened
EDGE_TOLERANCE = 1e-9
#: the grid is never widened beyond |theta| <= MAX_ABS_THETA (a GridEdgeWarning says so)
MAX_ABS_THETA = 1000.0


class GridEdgeWarning(UserWarning):
    """The EAP posterior still has mass at the edge of the widest grid allowed (MAX_ABS_THETA)."""


class _GridCache:
    """Per-session running log-likelihood on the grid (lives in ``ResponseState.scratch``)."""

    __slots__ = ("n", "grid", "loglik")

    def __init__(self, grid: np.ndarray):
        self.n = 0
        self.grid = grid
        self.loglik = np.zeros(grid.size)



@lru_cache(maxsize=8)
def _grid(lo: float, hi: float, n: int) -> np.ndarray:
    """The quadrature nodes (cached and read-only: EAP needs them on every answer)."""
    grid = np.linspace(lo, hi, n)
    grid.flags.writeable = False
    return grid


@lru_cache(maxsize=8)
def _rule_weights(n: int, rule: str) -> np.ndarray:
    w = np.ones(n)
    if rule == "trapezoid":
        w[0] = w[-1] = 0.5
    w.flags.writeable = False
    return w

@dataclass(frozen=True)
class EAPEstimator(TraitEstimator):
    """Posterior mean and SD of theta by quadrature on ``n_points`` equally spaced nodes in ``bounds``.

    The log-likelihood on the grid is a running sum updated once per answer (O(grid) per step) and
    exponentiated only after subtracting its maximum, so long answer rows never underflow. For LaRT
    banks tau is integrated out exactly (its conditional given theta is Gaussian, see
    ``estimation.base``): E[tau] = alpha + beta E[theta], Var[tau] = 1/(Q22 + F_T) + beta^2 Var[theta].

    ``rule``: "trapezoid" (half weight at the two end nodes; catR's integrate.catR) or "sum".
    Accuracy: the trapezoid rule on a smooth posterior is exact to ~exp(-2 pi^2 sd^2 / h^2) for
    node spacing h, i.e. below 1e-8 while the posterior SD exceeds the spacing (default 0.04);
    the grid must also cover the posterior mass (default +-8): with ``widen=True`` (default) the
    grid is extended, at the same spacing, whenever the posterior density at an end node exceeds
    ``EDGE_TOLERANCE`` (1e-9) of its peak (e.g. thousands of correct answers), up to |theta| <=
    ``MAX_ABS_THETA`` (then a :class:`GridEdgeWarning`); ``widen=False`` truncates the posterior at
    ``bounds`` (catR's EAP). ``sd_scale``, ``item_uncertainty``, ``interval_calibration``: see :class:`TraitEstimator`.
    """

    name: ClassVar[str] = "eap"
    prior: TraitPrior | None = None
    use_cot: bool = True
    n_points: int = 401
    bounds: tuple[float, float] = (-8.0, 8.0)
    rule: str = "trapezoid"
    sd_scale: float = 1.0
    widen: bool = True
    item_uncertainty: bool = True
    interval_calibration: bool = True

    def __post_init__(self):
        self._check_settings()
        if not is_integer(self.n_points) or self.n_points < 3:
            raise ValueError(f"n_points must be an integer >= 3, got {self.n_points!r}")
        try:
            lo, hi = (float(v) for v in self.bounds)
        except (TypeError, ValueError):
            raise ValueError(f"bounds must be two numbers (lower, upper), got {self.bounds!r}") from None
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"bounds must be finite with lower < upper, got {self.bounds!r}")
        object.__setattr__(self, "bounds", (lo, hi))
        if self.rule not in _RULES:
            raise ValueError(f"rule must be one of {_RULES}, got {self.rule!r}")
        if not isinstance(self.widen, (bool, np.bool_)):
            raise ValueError(f"widen must be True or False, got {self.widen!r}")

    @property
    def grid(self) -> np.ndarray:
        return _grid(self.bounds[0], self.bounds[1], self.n_points)

    def _weights(self) -> np.ndarray:
        return _rule_weights(self.n_points, self.rule)

    def grid_loglik(self, state: ResponseState, bounds=None, n_points=None) -> np.ndarray:
        """Log-likelihood of the answers at every grid node, brought up to date incrementally
        (``bounds`` / ``n_points``: another grid than the estimator's, e.g. a widened one)."""
        bounds = self.bounds if bounds is None else bounds
        n_points = self.n_points if n_points is None else n_points
        key = ("eap-grid", n_points, bounds)
        cache = state.scratch.get(key)
        if cache is None:  # first use, or answers were undone (restore clears scratch): rebuild in order
            cache = _GridCache(_grid(bounds[0], bounds[1], n_points))
            state.scratch[key] = cache
        for k in range(cache.n, state.n):
            K.add_loglik_grid(state.model, cache.grid, state.a[k], state.b[k], state.c[k], state.d[k], state.y[k], cache.loglik)
        cache.n = state.n
        return cache.loglik

    def _widened_weights(self, state: ResponseState, gp):
        """Grid and posterior weights on a grid that holds the posterior mass: the estimator's grid,
        widened (same node spacing, cached per session) while the density at an end node exceeds
        EDGE_TOLERANCE of its peak, up to |theta| <= MAX_ABS_THETA (then a GridEdgeWarning)."""
        bounds_key = ("eap-widened", self.n_points, self.bounds)
        (lo, hi), n = state.scratch.get(bounds_key, (self.bounds, self.n_points))
        step = (self.bounds[1] - self.bounds[0]) / (self.n_points - 1)
        while True:
            grid = _grid(lo, hi, n)
            lp = self.grid_loglik(state, (lo, hi), n) - 0.5 * gp.q * (grid - gp.m) ** 2
            dens = np.exp(lp - lp.max())
            low_edge, high_edge = dens[0] > EDGE_TOLERANCE, dens[-1] > EDGE_TOLERANCE
            can_widen = (low_edge and lo > -MAX_ABS_THETA) or (high_edge and hi < MAX_ABS_THETA)
            if not self.widen:
                return grid, _rule_weights(n, self.rule) * dens
            if not (low_edge or high_edge) or not can_widen:
                break
            width = hi - lo
            if low_edge:
                lo = max(lo - width, -MAX_ABS_THETA)
            if high_edge:
                hi = min(hi + width, MAX_ABS_THETA)
            n = int(round((hi - lo) / step)) + 1
            hi = lo + (n - 1) * step
            state.scratch[bounds_key] = ((lo, hi), n)
        if low_edge or high_edge:
            warnings.warn(
                f"EAP: the posterior of theta still has mass at the edge of the widest grid [{lo:g}, {hi:g}]; "
                "the estimate is truncated there", GridEdgeWarning, stacklevel=4,
            )
        return grid, _rule_weights(n, self.rule) * dens

    def _posterior(self, params: ItemParams, state: ResponseState, start: TraitEstimate | None = None) -> TraitEstimate:
        gp = self.gaussian(params, state)
        grid, w = self._widened_weights(state, gp)
        total = w.sum()
        mean = float(np.dot(w, grid) / total)
        var = float(np.dot(w, (grid - mean) ** 2) / total)
        sd = math.sqrt(var)
        if not params.model.has_cot:
            return TraitEstimate(theta=mean, theta_sd=sd, n_items=state.n, method="eap")
        beta = gp.tau_beta
        return TraitEstimate(
            theta=mean, theta_sd=sd, n_items=state.n,
            tau=gp.tau_alpha + beta * mean,
            tau_sd=math.sqrt(1.0 / gp.tau_precision + beta * beta * var),
            theta_tau_cov=beta * var, method="eap",
        )
