"""The yardstick every adaptive score is judged against: the mean of k items drawn at random.

For an LLM with C = round(A J) correct answers out of a bank of J items, the number correct among
k items drawn without replacement is hypergeometric(J, C, k), so the mean absolute error of their
plain mean about the full-benchmark accuracy A is exact:

    E|X/k - A| = sum_x Hyp(x; J, C, k) |x/k - A|.

The bank's held-out check (``calibration.heldout.score_curves``) stores its average over the held-out
LLMs beside the model-based prediction's error, and the benchmarks divide by it.
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln

__all__ = ["hypergeometric_pmf", "random_mean_mae"]


def random_mean_mae(accuracy: float, n_items: int, k: int) -> float:
    """E|mean of ``k`` of ``n_items`` items drawn without replacement - ``accuracy``| for an LLM whose
    full-benchmark accuracy is ``accuracy`` (its number correct is taken as round(accuracy n_items))."""
    n_items, k = int(n_items), int(k)
    if not 1 <= k <= n_items:
        raise ValueError(f"k must be in 1..n_items={n_items}, got {k}")
    if not 0.0 <= float(accuracy) <= 1.0:
        raise ValueError(f"accuracy must be in [0, 1], got {accuracy!r}")
    n_correct = int(round(float(accuracy) * n_items))
    x = np.arange(max(0, k - (n_items - n_correct)), min(k, n_correct) + 1)  # the support
    return float(np.sum(hypergeometric_pmf(x, n_items, n_correct, k) * np.abs(x / k - float(accuracy))))


def _log_choose(n, r):
    return gammaln(n + 1.0) - gammaln(r + 1.0) - gammaln(n - r + 1.0)


def hypergeometric_pmf(x, n_items: int, n_correct: int, k: int) -> np.ndarray:
    """P(X = x) for X ~ hypergeometric: the number correct among ``k`` of ``n_items`` items drawn
    without replacement, ``n_correct`` of them correct (``x`` inside the support). From log
    binomial coefficients (``scipy.special.gammaln``): the same values as ``scipy.stats.hypergeom``
    to ~1e-12 relative, without its per-call overhead (the score check evaluates thousands)."""
    x = np.asarray(x, dtype=np.float64)
    log_p = _log_choose(n_correct, x) + _log_choose(n_items - n_correct, k - x) - _log_choose(n_items, k)
    return np.exp(log_p)
