"""The doubly robust full-benchmark score: the model's prediction, corrected by the design draws
where they show it is wrong (docs/math.md §7.8). Pure numpy: no session, no I/O.

Inputs per group (the bank, or one category): the model-based prediction M with its SD
sqrt(P) and interval [lo_M, hi_M] (docs/math.md §7.6, widened by the bank's score check), and the
design-based estimate D with its standard error s from n design draws (docs/math.md §7.7: unbiased
whatever the model gets wrong). Their difference d = D - M estimates the model's bias on this LLM
plus noise of variance about P + s^2.

* Point estimate: M + w d with the positive-part shrinkage weight
  w = max(0, 1 - k^2 (P + s^2) / d^2), k = ``EVIDENCE`` = 2: while the draws agree with the model
  within k SDs of d the score is the model's, so a right model keeps its accuracy (a smaller k let
  the design's noise into sessions whose model was right: 26% more error in
  tests/test_scoring_doubly_robust.py); the further they disagree, the closer the score moves to
  the design estimate. It is a compromise, not an unbiased estimator: a bias the draws cannot yet
  tell from noise stays in the point estimate (the interval below carries it).
* Beyond the calibration population (``extrapolating``: the LLM's trait lies outside the
  calibration LLMs' 5th-95th percentiles, ``catengine.scoring.standing``) the model's prediction
  of the unasked items cannot be checked against any calibration LLM like this one, and its bias
  there is systematic (it saturates at the calibration LLMs' ceiling). There the point estimate is
  the design estimate itself, w = 1, unbiased whatever the model gets wrong; the model still
  serves as the design estimate's control variate (the residuals y - f), so a right model still
  makes it less noisy.
* Interval: the hull of the model's interval and the interval of the precision-weighted
  combination, M + w_e d +- q sqrt(P_e s^2 / (P_e + s^2)) with w_e = P_e / (P_e + s^2), P_e =
  max(P, d^2 - s^2) the moment estimate of the model's squared error and q the Student-t quantile
  with n - 1 degrees of freedom when P_e is estimated from the draws (P_e > P), and with the
  Welch-Satterthwaite (n - 1) (1 + s^2 / P)^2 when P_e = P: the combination's variance is then
  uncertain only through s^2, and with s^2 >> P it is nearly the model's, whose variance the bank's
  check measured (with n - 1 the t quantile of a few draws widened every short session's interval
  beyond the model's, and random-split coverage reached 0.98-1.00 at 5-10 items). Inside the
  population it is never narrower than the model's
  interval, and it widens exactly when the residuals on the design draws disagree with the model
  (P_e grows with d^2). When extrapolating, the interval is the hull of the combination's and the
  design estimate's own, D +- q s, whose validity does not rest on the model. The model's own
  interval is centred on its biased prediction there and holds only by the width the bank's
  strength-ordered check adds to it; on real LLMs stronger than every calibration LLM (MATH500,
  AMC23) leaving it out kept coverage at 0.92-1.00 with intervals 30-45% narrower.
  Both ends are projected onto the attainable range.

The SD reported with it is the interval's half-width divided by the normal quantile (the SD of a normal
interval as wide). Measured on real LLMs,
strength-ordered and random splits: ``benchmarks/score_extrapolation.py`` (docs/validation.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from catengine.scoring.model_based import z_quantile

__all__ = ["DoublyRobustEstimate", "EVIDENCE", "combine_model_and_design"]

#: the disagreement, in SDs of d, beyond which the point estimate starts moving to the design estimate
EVIDENCE = 2.0


@dataclass(frozen=True)
class DoublyRobustEstimate:
    mean: float
    sd: float
    low: float
    high: float
    weight: float  # the weight of the design estimate in the point estimate


def combine_model_and_design(model_mean: float, model_sd: float, model_low: float, model_high: float,
                             design_mean: float, design_se: float, n_draws: int, *, level: float = 0.95,
                             bounds=(-math.inf, math.inf), extrapolating: bool = False) -> DoublyRobustEstimate:
    """The doubly robust estimate of one group (module docstring); all in the same units."""
    values = (model_mean, model_sd, design_mean, design_se)
    if not all(math.isfinite(float(v)) for v in values) or model_sd < 0 or design_se < 0:
        raise ValueError(f"the model and design estimates must be finite with SDs >= 0, got {values}")
    if int(n_draws) < 2:
        raise ValueError(f"a doubly robust estimate needs at least 2 design draws, got {n_draws}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    from scipy.special import stdtrit  # the Student-t quantile (scipy.stats loads slowly)

    P = float(model_sd) ** 2
    s2 = float(design_se) ** 2
    d = float(design_mean) - float(model_mean)
    d2 = d * d
    P_e = max(P, d2 - s2)
    total = P_e + s2
    w_e = P_e / total if total > 0 else 0.0
    if extrapolating:  # beyond the calibration population: the design estimate (module docstring)
        w = 1.0
    else:
        w = max(0.0, 1.0 - EVIDENCE**2 * (P + s2) / d2) if d2 > 0 else 0.0
    mean = float(model_mean) + w * d
    nu = int(n_draws) - 1
    q = float(stdtrit(nu, 0.5 + level / 2.0))  # the design estimate's own interval
    centre = float(model_mean) + w_e * d
    # the combination's variance P s^2 / (P + s^2) is uncertain only through s^2 while P_e = P (the
    # model's variance, from the bank's check, not from the draws): Welch-Satterthwaite degrees of freedom
    # (infinite, the normal quantile, when P is so small beside s^2 that their ratio squared overflows)
    nu_combined = nu
    if P_e == P and P > 0:
        ratio = s2 / P
        nu_combined = nu * (1.0 + ratio) ** 2 if ratio < 1e100 else math.inf
    q_combined = float(stdtrit(nu_combined, 0.5 + level / 2.0))
    half = q_combined * math.sqrt(P_e * s2 / total) if total > 0 else 0.0
    lo_b, hi_b = float(bounds[0]), float(bounds[1])
    m_lo = float(model_low) if math.isfinite(model_low) else float(model_mean) - z_quantile(level) * float(model_sd)
    m_hi = float(model_high) if math.isfinite(model_high) else float(model_mean) + z_quantile(level) * float(model_sd)
    if extrapolating:  # the model's own interval is what cannot be trusted here (module docstring)
        low = min(centre - half, float(design_mean) - q * math.sqrt(s2))
        high = max(centre + half, float(design_mean) + q * math.sqrt(s2))
    else:
        low, high = min(m_lo, centre - half), max(m_hi, centre + half)
    low, high = max(lo_b, low), min(hi_b, high)
    mean = min(max(mean, low), high)
    return DoublyRobustEstimate(mean, (high - low) / (2.0 * z_quantile(level)), low, high, w)
