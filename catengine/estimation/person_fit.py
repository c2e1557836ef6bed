"""Person fit of one subject's answers: the standardised log-likelihood lz (Drasgow, Levine &
Williams 1985) at the current trait estimate.

    l0 = sum_j y_j log P_j + (1 - y_j) log(1 - P_j)
    lz = (l0 - E[l0]) / sqrt(Var[l0]),   E[l0] = sum_j P_j log P_j + (1 - P_j) log(1 - P_j),
                                         Var[l0] = sum_j P_j (1 - P_j) log(P_j / (1 - P_j))^2

over the answered items, P_j at the estimate (LaRT banks: the accuracy answers). Large negative lz
means answers less likely than the model expects of an LLM of that ability: right on hard items and
wrong on easy ones, i.e. an LLM whose answers do not fit the bank (contamination, a different skill
profile). With theta estimated from the same answers lz is somewhat conservative (its variance is
below 1, Snijders 2001), so the flag errs on the side of silence. Flag: lz < ``LZ_THRESHOLD``
(-1.645, one-sided 5%), reported once at least ``MIN_ITEMS`` answers are in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from catengine.estimation import _kernels as K
from catengine.estimation.state import ResponseState
from catengine.models.params import ItemParams

LZ_THRESHOLD = -1.645
MIN_ITEMS = 10

__all__ = ["LZ_THRESHOLD", "MIN_ITEMS", "PersonFit", "person_fit"]


@dataclass(frozen=True)
class PersonFit:
    """lz (NaN with no answer or no spread), the number of answers and whether the LLM is flagged."""

    lz: float
    n_items: int
    flagged: bool

    @property
    def message(self) -> str:
        if self.n_items < MIN_ITEMS or not math.isfinite(self.lz):
            return f"person fit not assessed ({self.n_items} answers; needs {MIN_ITEMS})"
        if self.flagged:
            return (f"does not fit the bank: lz = {self.lz:.2f} < {LZ_THRESHOLD} (answers less likely than the model "
                    "expects at this ability; treat the interval with caution)")
        return f"fits the bank: lz = {self.lz:.2f}"

    def to_dict(self) -> dict:
        return {"lz": self.lz if math.isfinite(self.lz) else None, "n_items": self.n_items, "flagged": self.flagged, "message": self.message}


def person_fit(params: ItemParams, state: ResponseState, theta: float) -> PersonFit:
    """lz of the answers in ``state`` at ``theta``."""
    n = state.n
    if n == 0:
        return PersonFit(math.nan, 0, False)
    l0, e, v = K.lz_terms(state.model, float(theta), state.a, state.b, state.c, state.d, state.y, n)
    lz = (l0 - e) / math.sqrt(v) if v > 0 else math.nan
    return PersonFit(lz, n, bool(n >= MIN_ITEMS and math.isfinite(lz) and lz < LZ_THRESHOLD))
