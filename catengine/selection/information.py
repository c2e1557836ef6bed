"""Information-based selectors (docs/math.md §3 and §5) and the random baseline."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import numpy as np

from catengine.validation import is_integer, positive_finite
from catengine.errors import BankExhaustedError
from catengine.models.expected_information import DEFAULT_NODES, gauss_hermite_normal
from catengine.selection import _kernels as K
from catengine.selection.base import ItemSelector, ItemTable, SelectionState, check_k, run_topk

_ONE = np.ones(1)


def _positive_int(value, name: str, low: int = 1, high: int = 64) -> None:
    if not is_integer(value) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")



@lru_cache(maxsize=16)
def _legendre_rule(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on [-1, 1] (cached: the KL index asks on every step)."""
    x, w = np.polynomial.legendre.leggauss(n)
    x.flags.writeable = False
    w.flags.writeable = False
    return x, w

@dataclass(frozen=True)
class MaxFisherInformation(ItemSelector):
    """Maximum point Fisher information about theta at the current estimate.

    2PL a^2 P(1-P), 4PL a^2 (P-c)^2 (d-P)^2 / ((d-c)^2 P(1-P)), LaRT the probit part a^2 h(a theta + b)
    (CoT information is not in this criterion: see the LaRT precision selectors for that).
    """

    name: ClassVar[str] = "mfi"

    def candidates(self, params, state: SelectionState, rng, k: int = 1):
        k = check_k(k)
        t = state.items
        return run_topk(K.topk_info, k, t.model, np.array([state.estimate.theta]), _ONE,
                        params.a, params.b, t.c, t.d, state.eligible, t.info_order, t.info_bound)


@dataclass(frozen=True)
class PosteriorExpectedInformation(ItemSelector):
    """Fisher information averaged over the bank's Gaussian posterior of each item's (a, b) (docs/math.md §5.1, §7.4).

    Ibar_j(theta) = E_{(a_j, b_j)} I_j(theta) at the current theta estimate. With z = a theta + b
    Gaussian and E[a^2 | z] linear-quadratic in z, this is one ``n_nodes``-point Gauss-Hermite sum
    over z per item (``selection._kernels.expected_info_ab``; 5 nodes where sd(z) < 0.5), for 2PL, 4PL (c, d fixed) and the
    probit part of LaRT banks alike, fused with the eligibility mask and top-k pruning. Needs a bank
    with item-parameter uncertainty: ``b_sd`` (PSN-IRT + Laplace: slopes at their MAP) or per-item
    (a, b) covariances / draws; items whose covariance is 0 reduce to point information. The default
    selector of logistic banks that carry such uncertainty (``default_selector``).
    """

    name: ClassVar[str] = "pei"
    n_nodes: int = DEFAULT_NODES

    def __post_init__(self):
        _positive_int(self.n_nodes, "n_nodes")

    def check_bank(self, items: ItemTable) -> None:
        super().check_bank(items)
        if items.covariance is None:
            raise ValueError(
                "PosteriorExpectedInformation needs a bank with item-parameter uncertainty (/items b_sd, or "
                "a_sd/b_sd/ab_cov, or /posterior a_draws/b_draws); this bank has none: use MaxFisherInformation instead"
            )

    def candidates(self, params, state: SelectionState, rng, k: int = 1):
        k = check_k(k)
        t = state.items
        cv = t.covariance
        if cv is None:
            self.check_bank(t)
        x, w = gauss_hermite_normal(self.n_nodes)
        xs, ws = gauss_hermite_normal(min(self.n_nodes, K.NARROW_NODES))
        return run_topk(K.topk_expected_info_ab, k, t.model, float(state.estimate.theta), params.a, params.b,
                        cv.a_var, cv.b_var, cv.ab_cov, t.c, t.d, x, w, xs, ws, state.eligible, t.expected_info_order,
                        t.expected_info_bound)


def _posterior_nodes(state: SelectionState, n_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Quadrature of the trait posterior: Gauss-Hermite on its Laplace approximation, importance-
    corrected by the exact (unnormalised) posterior at the nodes (weights sum to 1)."""
    est = state.estimate
    x, w = gauss_hermite_normal(n_nodes)
    sd = float(est.theta_sd)
    nodes = est.theta + sd * x
    if state.log_posterior is None:
        return nodes, w
    log_ratio = state.log_posterior(nodes) + 0.5 * x * x  # exact / Laplace, up to a constant
    log_ratio -= log_ratio.max()
    ww = w * np.exp(log_ratio)
    return np.ascontiguousarray(nodes), np.ascontiguousarray(ww / ww.sum())


@dataclass(frozen=True)
class PosteriorWeightedInformation(ItemSelector):
    """Fisher information averaged over the current trait posterior (van der Linden 1998).

    The posterior expectation uses ``n_nodes`` Gauss-Hermite nodes placed by the Laplace
    approximation (estimate +- its SD), reweighted by the exact posterior at the nodes.
    """

    name: ClassVar[str] = "pwi"
    n_nodes: int = 7

    def __post_init__(self):
        _positive_int(self.n_nodes, "n_nodes")

    def candidates(self, params, state: SelectionState, rng, k: int = 1):
        k = check_k(k)
        t = state.items
        nodes, w = _posterior_nodes(state, self.n_nodes)
        return run_topk(K.topk_info, k, t.model, nodes, w, params.a, params.b, t.c, t.d, state.eligible,
                        t.info_order, t.info_bound)


@dataclass(frozen=True)
class KullbackLeiblerIndex(ItemSelector):
    """Chang & Ying's (1996) global information: KL_j = int_{theta^-delta}^{theta^+delta} KL(P_j(theta^) || P_j(t)) dt.

    delta = ``delta_scale`` / sqrt(max(n, 1)) after n answers (Chang & Ying's 3/sqrt(n));
    the integral by ``n_nodes``-point Gauss-Legendre.
    """

    name: ClassVar[str] = "kl"
    delta_scale: float = 3.0
    n_nodes: int = 8

    def __post_init__(self):
        positive_finite(self.delta_scale, "delta_scale")
        _positive_int(self.n_nodes, "n_nodes")

    def candidates(self, params, state: SelectionState, rng, k: int = 1):
        k = check_k(k)
        t = state.items
        theta = float(state.estimate.theta)
        delta = self.delta_scale / math.sqrt(max(state.responses.n, 1))
        x, w = _legendre_rule(self.n_nodes)
        nodes = np.ascontiguousarray(theta + delta * x)
        return run_topk(K.topk_kl, k, t.model, theta, nodes, np.ascontiguousarray(w * delta),
                        params.a, params.b, t.c, t.d, state.eligible)


@dataclass(frozen=True)
class RandomSelection(ItemSelector):
    """Uniformly random eligible items (the baseline). Criterion value: NaN."""

    name: ClassVar[str] = "random"

    def explain_criterion(self, value: float) -> str:
        return "drawn at random"

    def candidates(self, params, state: SelectionState, rng, k: int = 1):
        k = check_k(k)
        idx = np.flatnonzero(state.eligible)
        if idx.size == 0:
            raise BankExhaustedError("no eligible item is left to administer (all administered, excluded or blocked)")
        if k == 1:
            pick = idx[rng.integers(idx.size)].reshape(1)
        else:
            pick = rng.choice(idx, size=min(k, idx.size), replace=False)
        return pick.astype(np.int64), np.full(pick.size, np.nan)
