"""Per-item identification diagnostics of a calibration (which items the data do not pin down).

Shared by every calibrator: an item is *not identified* when it is perfect (every observed answer
identical: no finite maximum-likelihood estimate) or its slope ran away (above ``max_slope`` on the
bank's logistic scale, the signature of (quasi-)separation in small samples). An item is
*prior-dominated* when the prior carries more precision on its slope than its answers do (its
estimate is then mostly the prior's: honest, but say so). A calibrator reports ``converged_``
only when its optimiser converged *and* no fitted item is unidentified.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_MAX_SLOPE = 10.0  # on the logistic scale; a probit slope is multiplied by 1.702 first


@dataclass(frozen=True)
class ItemDiagnostics:
    """Flags per item (J,) bool arrays; ``item_ids`` name them."""

    item_ids: tuple
    perfect: np.ndarray
    runaway_slope: np.ndarray
    prior_dominated: np.ndarray
    non_discriminating: np.ndarray
    max_slope: float
    max_fitted_slope: float

    @property
    def unidentified(self) -> np.ndarray:
        """Items without a data-determined estimate: perfect items and runaway slopes."""
        return self.perfect | self.runaway_slope

    @property
    def fit_identified(self) -> bool:
        """True when no fitted (non-perfect) item has a runaway slope."""
        return not bool(self.runaway_slope.any())

    def summary(self) -> dict:
        """Counts and the first few item ids of every flag (JSON-serialisable)."""
        out = {"max_slope_threshold": float(self.max_slope), "max_fitted_slope": float(self.max_fitted_slope)}
        for name in ("perfect", "runaway_slope", "prior_dominated", "non_discriminating"):
            flags = getattr(self, name)
            out[f"n_{name}"] = int(flags.sum())
            out[f"first_{name}"] = [str(self.item_ids[k]) for k in np.flatnonzero(flags)[:5]]
        return out

    def message(self) -> str:
        """One line for a warning when items are not identified ('' when all are)."""
        if self.fit_identified:
            return ""
        ids = ", ".join(repr(str(self.item_ids[k])) for k in np.flatnonzero(self.runaway_slope)[:5])
        return (
            f"{int(self.runaway_slope.sum())} item(s) have slopes above {self.max_slope:g} (largest "
            f"{self.max_fitted_slope:.3g}), e.g. {ids}: the answers do not identify them (separation in a "
            "small sample); fit with a prior (the default) or drop them"
        )


def item_diagnostics(item_ids, a, *, perfect, max_slope=DEFAULT_MAX_SLOPE, a_prior_precision=None,
                     a_data_precision=None) -> ItemDiagnostics:
    """Build :class:`ItemDiagnostics` from bank-scale logistic slopes ``a`` (J,) and flags.

    ``a_prior_precision`` (scalar or (J,)) and ``a_data_precision`` (J,) are the prior's and the
    answers' precision on each slope (same scale); the item is prior-dominated when the prior's
    exceeds the data's. Leave them None when the fit has no prior.
    """
    a = np.asarray(a, dtype=np.float64)
    perfect = np.asarray(perfect, bool)
    fitted = ~perfect
    runaway = fitted & (np.abs(a) > max_slope)
    if a_prior_precision is None or a_data_precision is None:
        dominated = np.zeros(a.shape, bool)
    else:
        dominated = fitted & (np.broadcast_to(np.asarray(a_prior_precision, float), a.shape) > np.asarray(a_data_precision, float))
    largest = float(np.max(np.abs(a[fitted]))) if fitted.any() else 0.0
    return ItemDiagnostics(
        item_ids=tuple(item_ids), perfect=perfect, runaway_slope=runaway, prior_dominated=dominated,
        non_discriminating=fitted & (a <= 0), max_slope=float(max_slope), max_fitted_slope=largest,
    )
