"""The yardstick every adaptive score is judged against: the mean of k items drawn at random.

For an LLM with C = round(A J) correct answers out of a bank of J items, the number correct among
k items drawn without replacement is hypergeometric(J, C, k), so the mean absolute error of their
plain mean about the full-benchmark accuracy A is exact:

    E|X/k - A| = sum_x Hyp(x; J, C, k) |x/k - A|.

The bank's score check (``calibration.score_calibration``) stores its average over the held-out
LLMs beside the model-based prediction's error, and the benchmarks divide by it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["random_mean_mae"]


def random_mean_mae(accuracy: float, n_items: int, k: int) -> float:
    """E|mean of ``k`` of ``n_items`` items drawn without replacement - ``accuracy``| for an LLM whose
    full-benchmark accuracy is ``accuracy`` (its number correct is taken as round(accuracy n_items))."""
    from scipy.stats import hypergeom

    n_items, k = int(n_items), int(k)
    if not 1 <= k <= n_items:
        raise ValueError(f"k must be in 1..n_items={n_items}, got {k}")
    if not 0.0 <= float(accuracy) <= 1.0:
        raise ValueError(f"accuracy must be in [0, 1], got {accuracy!r}")
    n_correct = int(round(float(accuracy) * n_items))
    x = np.arange(k + 1)
    return float(np.sum(hypergeom.pmf(x, n_items, n_correct, k) * np.abs(x / k - float(accuracy))))
