"""The trait curves of the held-out check (docs/math.md §7.5): from the replays of held-out LLMs,
the factor c(L) by which a session multiplies its SD after L items and the multiplier z95(L) of its
95% interval.

After L items, with theta_L / SD_L the adaptive estimate and theta_F / SD_F the estimate from all of
the LLM's answers (same fold bank),

    z_L = (theta_L - theta_F) / d_L,   d_L^2 = SD_L^2 - SD_F^2

should have RMS 1 (the estimates are nested). What the model cannot see (multidimensionality,
local dependence, selection capitalising on chance beyond the item-parameter correction) makes it
larger. c(L) is fitted so that the calibrated SDs make the pooled RMS of z exactly 1 at every
tabulated length, with the full-length SDs scaled by the longest length's factor (the engine holds
c constant beyond the table):

    c(L_max)^2 = mean(diff^2) / mean(SD_Lmax^2 - SD_F^2)
    c(L)^2     = (mean(diff_L^2) + c(L_max)^2 mean(SD_F^2)) / mean(SD_L^2)

then smoothed over neighbouring lengths (weights 1/4, 1/2, 1/4 in log c). A factor below 1 is
replaced by min(1, its 70% upper confidence bound) (:func:`narrowing_floor`): the check narrows the
model's intervals only with evidence. The table is not forced monotone: measured on MATH500
the excess is U-shaped in L (the first maximum-information items are those whose slopes the
calibration overestimated most; misfit accumulates later), and an isotonic fit pooled the early
excess away.
"""

from __future__ import annotations

import numpy as np

from calibration.common import Z95

__all__ = ["MIN_LLMS_TO_NARROW", "Z95_CONFIDENCE", "fit_factors", "interval_multipliers", "narrowing_floor",
           "quantile_bound_order", "robust_scale", "smooth_table"]

Z95_CONFIDENCE = 0.5  # z95(L) lies above the held-out 95% quantile of |z| with at least this probability
NARROWING_CONFIDENCE = 0.7  # c(L) < 1 only by its upper confidence bound at this confidence
MIN_LLMS_TO_NARROW = 24  # fewer held-out LLMs: c(L) >= 1 and z95(L) = 1.96 (no narrowing without evidence)
Z95_BOUNDS = (1.0, 3.0)  # z95(L) is kept in this range
MAD_TO_SD = 1.0 / 0.6744897501960817  # median |z| of Normal(0, 1) is 0.6745


def smooth_table(values, log_scale: bool = False) -> np.ndarray:
    """(1/4, 1/2, 1/4) moving average over neighbouring test lengths (end points: (2/3, 1/3)), in
    log scale for factors, linear for variances (which may be 0)."""
    x = np.asarray(values, dtype=float)
    x = np.log(x) if log_scale else x
    if x.size >= 3:
        out = np.empty_like(x)
        out[1:-1] = 0.25 * x[:-2] + 0.5 * x[1:-1] + 0.25 * x[2:]
        out[0] = (2 * x[0] + x[1]) / 3
        out[-1] = (2 * x[-1] + x[-2]) / 3
        x = out
    return np.exp(x) if log_scale else x


def fit_factors(diff: np.ndarray, sd: np.ndarray, full_sd: np.ndarray) -> dict:
    """c(L) from pooled replays: ``diff`` and ``sd`` (llm, length), ``full_sd`` (llm,). See the module docstring."""
    diff, sd, full_sd = (np.asarray(v, dtype=float) for v in (diff, sd, full_sd))
    d2 = np.clip(sd * sd - full_sd[:, None] ** 2, 1e-300, None)
    mse = np.mean(diff * diff, axis=0)
    c_max2 = float(mse[-1] / np.mean(d2[:, -1]))
    c2 = (mse + c_max2 * np.mean(full_sd**2)) / np.mean(sd * sd, axis=0)
    c2[-1] = c_max2
    raw = np.sqrt(c2)
    c = narrowing_floor(smooth_table(raw, log_scale=True), diff.shape[0])
    rms_z = np.sqrt(mse / np.mean(d2, axis=0))
    cover = np.mean(np.abs(diff) <= Z95 * sd, axis=0)
    cal_sd = sd * c[None, :]
    cal_d = np.sqrt(np.clip(cal_sd**2 - (c[-1] * full_sd[:, None]) ** 2, 1e-300, None))
    z95 = interval_multipliers(np.abs(diff) / cal_sd)
    return {
        "c": [round(float(v), 4) for v in c],
        "z95": [round(float(v), 4) for v in z95],
        "coverage_z95_in_sample": [round(float(v), 4) for v in np.mean(np.abs(diff) <= z95[None, :] * cal_sd, axis=0)],
        "c_raw": [round(float(v), 4) for v in raw],
        "rms_ratio_model": [round(float(v), 4) for v in rms_z],
        "coverage_model": [round(float(v), 4) for v in cover],
        "rms_ratio_calibrated_in_sample": [round(float(v), 4) for v in np.sqrt(mse / np.mean(cal_d**2, axis=0))],
        "coverage_calibrated_in_sample": [round(float(v), 4) for v in np.mean(np.abs(diff) <= Z95 * cal_sd, axis=0)],
        "n_llms": int(diff.shape[0]),
    }


def narrowing_floor(c, n: int) -> np.ndarray:
    """c(L) below 1 only with evidence: where the fitted factor is below 1 it is replaced by
    min(1, its upper confidence bound), c sqrt(n / chi2_{n, 1 - NARROWING_CONFIDENCE}) (n held-out
    LLMs; n c_hat^2 / c^2 ~ chi2_n for normal z), and by 1 with fewer than ``MIN_LLMS_TO_NARROW``
    (24) held-out LLMs: the chi-square bound assumes normal z, and real misses are heavy-tailed (on
    ChemBench PSN banks, 17 held-out LLMs per check, fold seed 1, it let random selection's coverage
    after 25 items fall to 0.86; docs/honest_intervals.md).
    A plain floor at 1 made the check's noise widen only: on a simulated 2PL, whose model is true,
    the intervals after 10 items came out 12% too wide."""
    from scipy.stats import chi2

    c = np.asarray(c, dtype=float)
    if n < MIN_LLMS_TO_NARROW:
        return np.maximum(c, 1.0)
    upper = c * np.sqrt(n / chi2.ppf(1.0 - NARROWING_CONFIDENCE, n))
    return np.where(c >= 1.0, c, np.minimum(1.0, upper))


def robust_scale(z) -> float:
    """The normal-consistent scale of ``z``: median |z| / 0.6745 (1 for standard normal draws)."""
    return float(np.median(np.abs(np.asarray(z, dtype=float)))) * MAD_TO_SD


def quantile_bound_order(n: int, level: float = 0.95, confidence: float | None = None) -> int:
    """The smallest k with P(Binomial(n, level) <= k - 1) >= ``confidence``: the k-th smallest of n
    draws lies above the ``level`` quantile with at least that probability (n + 1: no such order)."""
    from scipy.stats import binom

    confidence = Z95_CONFIDENCE if confidence is None else confidence
    return int(binom.ppf(confidence, n, level)) + 1  # ppf: the smallest j with P(B <= j) >= confidence


def interval_multipliers(abs_z: np.ndarray) -> np.ndarray:
    """z95(L): the multiplier of the calibrated SD that makes the 95% interval, per test length.

    ``abs_z`` (llm, length): |theta_L - theta_F| / (c(L) SD_L) of the held-out LLMs. c(L) makes the
    RMS of z honest, but the held-out z are not normal: on MATH500 after c(L) a few LLMs sit far
    out and the rest well inside, so +-1.96 SD covered 99% of them. z95(L) estimates the 95%
    quantile of |z| at each length: the k-th smallest of the n held-out values, k the smallest order
    with P(Binomial(n, 0.95) < k) >= ``Z95_CONFIDENCE`` (0.5: a median-unbiased estimate), kept in
    ``Z95_BOUNDS`` and not smoothed over lengths. With fewer than ``MIN_LLMS_TO_NARROW`` (24) LLMs
    it is the normal 1.96: no narrowing without evidence. The engine's 95% interval is
    theta +- z95(L) SD; the SD stays the RMS-honest one. The forms tried before (a 70% bound,
    smoothing, floors of 1.5 and of 1.96 where c <= 1) and what each did on the nested audit are in
    docs/honest_intervals.md.
    """
    abs_z = np.asarray(abs_z, dtype=float)
    n = abs_z.shape[0]
    k = quantile_bound_order(n)
    if n < MIN_LLMS_TO_NARROW or k > n:
        return np.full(abs_z.shape[1], Z95)
    return np.clip(np.sort(abs_z, axis=0)[k - 1], *Z95_BOUNDS)
