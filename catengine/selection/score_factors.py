"""Item selection for the full-benchmark score: D-optimal design in the bank's score factors
(docs/score_prediction.md §2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from catengine.errors import BankExhaustedError
from catengine.selection.base import ItemSelector, ItemTable, SelectionState, check_k


@dataclass(frozen=True)
class ScoreFactorDOptimal(ItemSelector):
    """The eligible item whose answer most increases log det of the score-factor posterior precision.

    With the factor posterior Normal(mode, S) given the answers so far (Laplace approximation,
    ``catengine.models.score_factors``), answering item j adds w_j g_j g_j' to the precision
    (w_j = P_j (1 - P_j) at the mode), so log det grows by log(1 + w_j g_j' S g_j). With one factor
    this is maximum Fisher information in that factor. Needs a bank with score factors (banks
    calibrated on enough LLMs carry them; it is then the default selector).
    """

    name: ClassVar[str] = "score-factor-d"

    def candidates(self, params, state: SelectionState, rng, k: int = 1):
        k = check_k(k)
        factors = state.items.score_factors
        if factors is None:
            raise ValueError("ScoreFactorDOptimal needs an item table with score factors (the bank's group of "
                             "'/items/score_loading' and '/items/score_intercept')")
        if not np.any(state.eligible):
            raise BankExhaustedError("no eligible item is left to administer (all administered, excluded or blocked)")
        r = state.responses
        if r is None or r.n == 0:
            observed, correct = np.empty(0, dtype=np.int64), np.empty(0)
        else:
            observed, correct = np.asarray(r.items), np.asarray(r.correct)
        # warm start from this session's previous mode (one or two Newton steps instead of several)
        scratch = getattr(r, "scratch", None)
        start = scratch.get("score_factor_mode") if scratch is not None else None
        mode, cov = factors.posterior(observed, correct, start=start)
        if scratch is not None:
            scratch["score_factor_mode"] = mode
        return factors.best_d_optimal(mode, cov, state.eligible, k)

    def explain_criterion(self, value: float) -> str:
        return f"gain in log det of the score-factor posterior precision = {value:.4g}"

    def check_bank(self, items: ItemTable) -> None:
        super().check_bank(items)
        if items.score_factors is None:
            raise ValueError("selector ScoreFactorDOptimal needs a bank with score factors (group '/score_factors'); "
                             "banks calibrated by this library on enough LLMs carry them")
