"""The paired design's numerics: draw probabilities, the doubly robust terms of the difference,
their predictable bounds and power tuning (docs/comparisons.md). Arrays in, numbers out.

Notation, over the ``J`` items compared: ``delta_j = y_aj - y_bj`` (in ``[lo_j, hi_j]``: ``[-1, 1]``,
or ``[-y_bj, 1 - y_bj]`` when side b's answers are known), the exactly known part ``c_j`` of the
prediction (``-y_bj`` when side b is known, else 0), the model's part ``g_j`` (``P_a(j) - P_b(j)``,
or ``P_a(j)`` when side b is known), ``S`` the sum of ``delta`` over the answered items and ``R``
the remaining ones. With the control variate ``m_j = c_j + kappa g_j``, a draw ``j`` from ``R`` with
probability ``pi_j`` gives the term

    X = (1/J) [ S + sum_R m + (delta_j - m_j) / pi_j ]

whose conditional mean is the full-benchmark difference ``(1/J) sum_all delta`` for any ``m`` and
any ``pi > 0`` fixed before the draw.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["StepParts", "draw_probabilities", "informative_weights", "power_tuning", "step_parts"]

#: draws before the control variate is tuned from the terms (kappa = 1 until then)
MIN_TUNING_DRAWS = 5


def informative_weights(p_a, p_b=None) -> np.ndarray:
    """``sqrt(P_a (1 - P_a) + P_b (1 - P_b))``: the model's SD of ``delta_j - g_j`` (without side b
    when ``p_b`` is None, its answers being known). Items both LLMs surely get right, or surely
    wrong, tell little about the difference and get the smallest weights."""
    p_a = np.asarray(p_a, dtype=float)
    v = p_a * (1.0 - p_a)
    if p_b is not None:
        p_b = np.asarray(p_b, dtype=float)
        v = v + p_b * (1.0 - p_b)
    return np.sqrt(np.maximum(v, 0.0))


def draw_probabilities(weights, uniform_share: float) -> np.ndarray:
    """``pi_j = (1 - u) w_j / sum w + u / |R|`` over the remaining items: the informative share
    mixed with a uniform floor ``u``, so that every ``pi_j >= u / |R|`` and the terms' bounds stay
    within ``4 |R| / (u J)`` of each other."""
    w = np.asarray(weights, dtype=float)
    n = w.size
    if n == 0:
        raise ValueError("no item left to draw from")
    u = float(uniform_share)
    if not 0.0 < u <= 1.0:
        raise ValueError(f"the uniform share must lie in (0, 1], got {uniform_share!r}")
    total = float(w.sum())
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("draw weights must be finite and >= 0")
    if total <= 0.0 or u == 1.0:
        return np.full(n, 1.0 / n)
    pi = (1.0 - u) * w / total + u / n
    return pi / pi.sum()


@dataclass(frozen=True)
class StepParts:
    """What a draw's term is built from, all fixed before the draw.

    ``base = (S + sum_R m) / J``; the term is ``base + (delta_j - m_j) / (J pi_j)``; ``lower`` /
    ``upper`` its smallest and largest possible values over every item and answer the draw can
    give; ``mean_guess`` the model's difference ``(S + sum_R (c + g)) / J`` and ``variance_guess``
    the term's conditional variance were the model right (they steer the confidence sequence's
    bets, nothing else). ``base0`` / ``base1``: ``base`` at ``kappa = 0`` and 1 (power tuning)."""

    base: float
    lower: float
    upper: float
    mean_guess: float
    variance_guess: float
    base0: float
    base1: float
    kappa: float


def step_parts(answered_sum: float, n_items: int, known, model, lo, hi, variance, pi, kappa: float) -> StepParts:
    """The parts of the next draw's term (module docstring); ``known``, ``model``, ``lo``, ``hi``,
    ``variance`` (the model's ``Var(delta_j)``) and ``pi`` are over the remaining items."""
    J = float(n_items)
    known = np.asarray(known, dtype=float)
    model = np.asarray(model, dtype=float)
    pi = np.asarray(pi, dtype=float)
    m = known + kappa * model
    base = (answered_sum + m.sum()) / J
    lower = base + float(np.min((np.asarray(lo) - m) / pi)) / J
    upper = base + float(np.max((np.asarray(hi) - m) / pi)) / J
    e = (1.0 - kappa) * model  # E[delta] - m under the model
    var = (float(np.sum((np.asarray(variance) + e * e) / pi)) - float(e.sum()) ** 2) / (J * J)
    return StepParts(base=base, lower=lower, upper=upper, mean_guess=(answered_sum + known.sum() + model.sum()) / J,
                     variance_guess=max(var, 0.0), base0=(answered_sum + known.sum()) / J,
                     base1=(answered_sum + known.sum() + model.sum()) / J, kappa=float(kappa))


def power_tuning(terms_without, terms_with, min_draws: int = MIN_TUNING_DRAWS) -> float:
    """``kappa`` in [0, 1] minimising the variance of ``X(kappa) = X0 + kappa (X1 - X0)`` over the
    draws so far: ``-Cov(X0, X1 - X0) / Var(X1 - X0)`` (1 before ``min_draws`` draws or when the
    model part does not vary). Computed from earlier draws only, so the next term keeps its
    conditional mean."""
    x0 = np.asarray(terms_without, dtype=float)
    x1 = np.asarray(terms_with, dtype=float)
    if x0.size < max(int(min_draws), 2):
        return 1.0
    d = x1 - x0
    var = float(np.var(d))
    if not var > 1e-15:
        return 1.0
    cov = float(np.mean((x0 - x0.mean()) * (d - d.mean())))
    return float(np.clip(-cov / var, 0.0, 1.0))
