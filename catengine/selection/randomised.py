"""A randomised adaptive selector: every eligible item has a known, positive selection probability.

It keeps adaptivity (the probabilities follow the current trait posterior) but draws instead of
maximising, so that the design-based full-benchmark estimate (``predicted_score(method="design")``,
docs/math.md §7.7, ``catengine.scoring.design``) is unbiased whatever the IRT model gets wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from catengine.errors import BankExhaustedError
from catengine.scoring.model_based import expected_probabilities, response_and_slope
from catengine.selection import _kernels
from catengine.selection.base import ItemSelector, SelectionState, check_k

WEIGHTS = ("sqrt-variance", "information", "uniform")


@dataclass(frozen=True)
class RandomisedSelection(ItemSelector):
    """Draw the next item with probability pi(j) = (1 - eps) w_j / sum w + eps / |E| over the eligible items E.

    ``weight``:

    * ``"sqrt-variance"`` (default): w_j = sqrt(f_j (1 - f_j)), f_j = E_q P_j(theta) under the
      current posterior q = Normal(theta^, SD^2). Under the model this is the residual SD of item j,
      and drawing in proportion to it minimises the variance of the design estimator's correction
      (Zrnic & Candes 2024);
    * ``"information"``: w_j = Fisher information about theta at theta^ (a randomised
      maximum-information CAT: better theta, a noisier design estimate);
    * ``"uniform"``: w_j = 1 (simple random sampling without replacement).

    ``uniform_share`` = eps in (0, 1] keeps every probability >= eps / |E| > 0, which bounds the
    inverse-probability weights (1 / (J pi) <= 1 / eps while all items are eligible) when the model
    is wrong. The default 0.5 came from simulations with a deliberately wrong bank
    (tests/test_scoring_design.py): with 0.2 the rare large weights of surprising answers made the
    design interval cover about 91% at 30-50 items, with 0.5 about 95%, at no loss in accuracy.
    The criterion value of a proposal is its selection probability pi_t(j_t): the
    session stores it in its history and log (``criterion``), so the design estimate can be
    recomputed from a log and after a resume. With ``k > 1`` (randomesque exposure control) the
    ``k`` items are drawn without replacement and the criterion values are first-draw
    probabilities, which are then no longer the probability of the administered item: the
    design-based estimate refuses such sessions.
    """

    name: ClassVar[str] = "randomised"
    draws_by_design: ClassVar[bool] = True
    weight: str = "sqrt-variance"
    uniform_share: float = 0.5
    n_nodes: int = 21

    def __post_init__(self):
        if self.weight not in WEIGHTS:
            raise ValueError(f"weight must be one of {', '.join(WEIGHTS)}, got {self.weight!r}")
        u = self.uniform_share
        if isinstance(u, bool) or not isinstance(u, (int, float, np.integer, np.floating)) or not (
            math.isfinite(u) and 0.0 < u <= 1.0
        ):
            raise ValueError(f"uniform_share must lie in (0, 1] (every item needs a positive probability), got {u!r}")
        if isinstance(self.n_nodes, bool) or not isinstance(self.n_nodes, (int, np.integer)) or not 1 <= self.n_nodes <= 200:
            raise ValueError(f"n_nodes must be an integer in 1..200, got {self.n_nodes!r}")

    def probabilities(self, params, state: SelectionState, expected=None) -> np.ndarray:
        """Selection probability of every item of the bank at this step (0 outside the eligible set; sums to 1
        within rounding).

        ``expected``: E_q P_j(theta) of every item under the state's posterior, when the caller has
        it already (computed with this selector's ``n_nodes``); the "sqrt-variance" weight uses it.
        The weights, their total and the probabilities are one compiled pass each
        (``catengine.selection._kernels.design_probabilities``), the pass the compiled replay makes."""
        eligible = np.ascontiguousarray(state.eligible, dtype=bool)
        est = state.estimate
        if self.weight == "uniform":
            values, from_expected = np.ones(params.n_items), False
        elif self.weight == "sqrt-variance":
            f = expected_probabilities(params, est.theta, est.theta_sd, self.n_nodes) if expected is None else expected
            values, from_expected = np.ascontiguousarray(f, dtype=np.float64), True
        else:
            p, slope = response_and_slope(params, np.array([est.theta]))
            p, slope = p[0], slope[0]
            pq = np.clip(p * (1.0 - p), 1e-300, None)
            values, from_expected = np.ascontiguousarray((params.a * slope) ** 2 / pq, dtype=np.float64), False
        if values.shape != eligible.shape:
            raise ValueError(f"expected probabilities must hold one value per item ({eligible.size}), got {values.shape}")
        out = np.empty(values.size)
        if _kernels.design_probabilities(values, from_expected, eligible, float(self.uniform_share), out) == 0:
            raise BankExhaustedError("no eligible item is left to administer (all administered, excluded or blocked)")
        return out

    def candidates(self, params, state: SelectionState, rng, k: int = 1):
        k = check_k(k)
        pi = self.probabilities(params, state)
        if k == 1:  # draw_one, told that pi sums to 1 (within rounding)
            pick = np.array([_kernels.draw_index(pi, float(rng.random((1,))[0]), 1.0)], dtype=np.int64)
        else:
            n_pos = int(np.count_nonzero(pi))
            pick = rng.choice(params.n_items, size=min(k, n_pos), replace=False, p=pi)
            pick = np.asarray(pick, dtype=np.int64).reshape(-1)
        return pick, pi[pick]


def draw_one(pi: np.ndarray, rng) -> np.ndarray:
    """One index drawn with probabilities ``pi`` (non-negative, positive sum): the draw that
    ``rng.choice(pi.size, size=1, replace=False, p=pi)`` makes (one uniform, inverted through the
    normalised cumulative sums: the same stream and the same index), without its checks of ``pi``,
    which cost more than the draw at every design step. One compiled pass
    (``catengine.selection._kernels.draw_index``, the compiled replay's). Shape (1,), int64."""
    u = float(rng.random((1,))[0])
    return np.array([_kernels.draw_index(np.ascontiguousarray(pi, dtype=np.float64), u, math.nan)], dtype=np.int64)
