"""LaRT selectors: criteria on the 2 x 2 precision of (theta, tau) (docs/math.md §5.3), and the authors'
replication mode."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from catengine.models.expected_information import DEFAULT_NODES, gauss_hermite_normal
from catengine.selection import _kernels as K
from catengine.selection.base import ItemSelector, SelectionState, check_k, run_topk
from catengine.selection.information import MaxFisherInformation
from catengine.validation import is_integer

#: criterion -> (its code in ``_kernels.topk_lart``, how a criterion value reads); the theta and
#: A-optimal kernels rank by minus a variance, shown as the SD / variance it leads to
_CRITERIA = {
    "theta": (0, lambda value: f"SD(θ) after this item ≈ {float(np.sqrt(max(-value, 0.0))):.4f}"),
    "d-optimal": (1, lambda value: f"det of the (θ, τ) precision after this item = {value:.4g}"),
    "a-optimal": (2, lambda value: f"Var(θ) + Var(τ) after this item ≈ {max(-value, 0.0):.4f}"),
}


@dataclass(frozen=True)
class _LaRTPrecisionSelector(ItemSelector):
    needs_cot: ClassVar[bool] = True
    criterion: ClassVar[str] = "theta"
    #: use the posterior-expected probit information over each item's (a, b) when the bank carries
    #: item-parameter uncertainty (docs/math.md §7.4); point information otherwise
    item_uncertainty: bool = True

    def __post_init__(self):
        if not isinstance(self.item_uncertainty, (bool, np.bool_)):
            raise TypeError(f"item_uncertainty must be True or False, got {self.item_uncertainty!r}")

    def explain_criterion(self, value: float) -> str:
        return _CRITERIA[self.criterion][1](value)

    def candidates(self, params, state: SelectionState, rng, k: int = 1):
        k = check_k(k)
        P = state.estimate.precision()
        if P.shape != (2, 2):
            raise ValueError(f"{type(self).__name__} needs a LaRT estimate of (theta, tau)")
        t = state.items
        cv = t.covariance
        if self.item_uncertainty and cv is not None:
            x, w = gauss_hermite_normal(DEFAULT_NODES)
            xs, ws = gauss_hermite_normal(K.NARROW_NODES)
            return run_topk(K.topk_lart_expected, k, _CRITERIA[self.criterion][0], float(state.estimate.theta), params.a,
                            params.b, cv.a_var, cv.b_var, cv.ab_cov, t.cot_info, float(P[0, 0]), float(P[0, 1]),
                            float(P[1, 1]), x, w, xs, ws, state.eligible, t.expected_info_order, t.expected_info_bound,
                            t.cot_info_max)
        return run_topk(K.topk_lart, k, _CRITERIA[self.criterion][0], float(state.estimate.theta), params.a, params.b,
                        t.cot_info, float(P[0, 0]), float(P[0, 1]), float(P[1, 1]), state.eligible,
                        t.info_order, t.info_bound, t.cot_info_max)


@dataclass(frozen=True)
class ThetaTargetedInformation(_LaRTPrecisionSelector):
    """argmin over items of [(P + diag(u_j, v_j))^-1]_11: the posterior variance of theta after the item.

    P is the current posterior precision of (theta, tau), u_j = a_j^2 h(a_j theta^ + b_j) the probit
    information at the estimate (0 for a_j <= 0; its expectation over the item's (a, b) when the bank
    carries item uncertainty and ``item_uncertainty``) and v_j = phi_j^2 / lam_j^2 the CoT information.
    Criterion value reported: minus that variance.
    """

    name: ClassVar[str] = "lart-theta"
    criterion: ClassVar[str] = "theta"


@dataclass(frozen=True)
class DOptimalInformation(_LaRTPrecisionSelector):
    """argmax over items of det(P + diag(u_j, v_j)) (D-optimal; criterion value: that determinant)."""

    name: ClassVar[str] = "lart-d"
    criterion: ClassVar[str] = "d-optimal"


@dataclass(frozen=True)
class AOptimalInformation(_LaRTPrecisionSelector):
    """argmin over items of trace((P + diag(u_j, v_j))^-1) (A-optimal; criterion value: minus that trace)."""

    name: ClassVar[str] = "lart-a"
    criterion: ClassVar[str] = "a-optimal"


@dataclass(frozen=True)
class LaRTReplicationSelection(ItemSelector):
    """The LaRT authors' active-evaluation experiment: ``n_fixed`` fixed starting items, then plain
    probit Fisher information at theta^ (CoT information not in the criterion).

    ``fixed_items``: bank indices of the starting items, administered in this order (default: the
    first ``n_fixed`` items of the bank — the paper does not list them; pass them to match a run).
    A fixed item that is no longer eligible is skipped. Combine with ``MaxItems(n_items)`` to run
    to the full bank, as the authors did.
    """

    name: ClassVar[str] = "lart-replication"
    needs_cot: ClassVar[bool] = True
    n_fixed: int = 10
    fixed_items: tuple[int, ...] | None = None

    def __post_init__(self):
        if not is_integer(self.n_fixed) or self.n_fixed < 0:
            raise ValueError(f"n_fixed must be an integer >= 0, got {self.n_fixed!r}")
        if self.fixed_items is not None:
            items = tuple(self.fixed_items)
            if any(not is_integer(v) or v < 0 for v in items):
                raise ValueError(f"fixed_items must be non-negative item indices, got {self.fixed_items!r}")
            if len(set(items)) != len(items):
                raise ValueError(f"fixed_items must not repeat an item, got {self.fixed_items!r}")
            object.__setattr__(self, "fixed_items", tuple(int(v) for v in items))
            object.__setattr__(self, "n_fixed", len(items))

    def check_bank(self, items) -> None:
        super().check_bank(items)
        fixed = self._fixed(items.n_items)
        if fixed and max(fixed) >= items.n_items:
            raise ValueError(f"fixed_items {fixed} reach beyond the bank's {items.n_items} items")

    def _fixed(self, n_items: int) -> tuple[int, ...]:
        return self.fixed_items if self.fixed_items is not None else tuple(range(min(self.n_fixed, n_items)))

    def candidates(self, params, state: SelectionState, rng, k: int = 1):
        k = check_k(k)
        if state.responses.n < self.n_fixed:
            for j in self._fixed(params.n_items):
                if j < params.n_items and state.eligible[j]:
                    return np.array([j], dtype=np.int64), np.array([np.nan])
        return MaxFisherInformation().candidates(params, state, rng, k)
