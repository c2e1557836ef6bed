"""Recovery-audit metrics (docs/math.md §4, Jiang et al. 2026): pure functions of numpy arrays.

Every function validates its input, never mutates it, and returns a Python float (NaN where the
metric is undefined, e.g. a correlation of a constant vector) without emitting warnings.

=================================  ===========================================================
function                           definition
=================================  ===========================================================
:func:`kendall_tau_b`              Kendall tau-b (ties corrected): (C - D) / sqrt((n0 - n1)(n0 - n2))
:func:`aggregate_score_error`      mean_i | mean_j pi_ij - mean_j pi^_ij |
:func:`item_mean_error`            mean_j | mean_i pi_ij - mean_i pi^_ij |
:func:`pearson`                    Pearson correlation over the pairs where both are finite
:func:`rmse`                       sqrt(mean (x^ - x)^2) over the finite pairs
:func:`insufficient_coverage`      share of subjects with <= 5 items whose difficulty lies
                                   within 0.2 of their true ability (|d_j - theta_i| <= 0.2)
:func:`marginal_reliability`       1 / (1 + mean_i 1 / I(theta_i)) (unit ability variance)
:func:`skewness_g1`                adjusted Fisher-Pearson G1 = sqrt(n (n-1)) / (n-2) * m3 / m2^1.5
:func:`mc_standard_error`          sd / sqrt(n) of the finite replications (Monte-Carlo SE)
=================================  ===========================================================

Helpers for putting a fit on the generating scale before computing RMSEs:
:func:`mean_sigma_link` (theta* = A theta^ + B) and :func:`link_items` (a* = a^ / A,
b* = b^ - a^ B / A, which keeps a^ theta^ + b^ = a* theta* + b*).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from catengine.validation import is_integer

__all__ = [
    "LOGISTIC_PROBIT_D",
    "aggregate_score_error",
    "insufficient_coverage",
    "item_mean_error",
    "kendall_tau_b",
    "link_items",
    "marginal_reliability",
    "mc_standard_error",
    "mean_sigma_link",
    "pearson",
    "rmse",
    "skewness_g1",
]

#: logistic(D z) ~ Phi(z): a probit slope times D is (approximately) the logistic slope.
LOGISTIC_PROBIT_D = 1.702


def _vector(x, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {arr.shape}")
    return arr


def _pair(x, y, names=("x", "y")) -> tuple[np.ndarray, np.ndarray]:
    x = _vector(x, names[0])
    y = _vector(y, names[1])
    if x.shape != y.shape:
        raise ValueError(f"{names[0]} and {names[1]} must have the same length, got {x.size} and {y.size}")
    ok = np.isfinite(x) & np.isfinite(y)
    return x[ok], y[ok]


def _matrix(p, name: str) -> np.ndarray:
    arr = np.asarray(p, dtype=np.float64)
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 2-D (subject x item) array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains non-finite probabilities")
    return arr


# ----------------------------------------------------------------------------- ranking
def kendall_tau_b(x, y) -> float:
    """Kendall's tau-b between ``x`` and ``y`` (pairs with a non-finite value are dropped).

    tau_b = (C - D) / sqrt((n0 - n1) (n0 - n2)) with C / D the concordant / discordant pairs,
    n0 = n (n - 1) / 2, n1 / n2 the pairs tied in x / in y. NaN with fewer than 2 pairs or when
    either variable is constant. Computed by ``scipy.stats.kendalltau`` (O(n log n)), which uses
    this definition (``variant="b"``); the tests pin it on hand-counted examples.
    """
    x, y = _pair(x, y)
    if x.size < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return math.nan
    return float(stats.kendalltau(x, y, variant="b").statistic)


# ----------------------------------------------------------------------------- scores
def _mean_abs_error_of_means(p_true, p_hat, axis: int) -> float:
    p_true = _matrix(p_true, "p_true")
    p_hat = _matrix(p_hat, "p_hat")
    if p_true.shape != p_hat.shape:
        raise ValueError(f"p_true and p_hat must have the same shape, got {p_true.shape} and {p_hat.shape}")
    return float(np.mean(np.abs(p_true.mean(axis=axis) - p_hat.mean(axis=axis))))


def aggregate_score_error(p_true, p_hat) -> float:
    """mean_i | mean_j pi_ij - mean_j pi^_ij |: error of the expected full-benchmark score per subject."""
    return _mean_abs_error_of_means(p_true, p_hat, axis=1)


def item_mean_error(p_true, p_hat) -> float:
    """mean_j | mean_i pi_ij - mean_i pi^_ij |: error of each item's expected proportion correct."""
    return _mean_abs_error_of_means(p_true, p_hat, axis=0)


# ----------------------------------------------------------------------------- parameters
def pearson(x, y) -> float:
    """Pearson correlation of the finite pairs; NaN with fewer than 2 pairs or a constant variable."""
    x, y = _pair(x, y)
    if x.size < 2:
        return math.nan
    dx = x - x.mean()
    dy = y - y.mean()
    sxx = float(dx @ dx)
    syy = float(dy @ dy)
    if sxx == 0.0 or syy == 0.0:
        return math.nan
    r = float(dx @ dy) / math.sqrt(sxx * syy)
    return min(1.0, max(-1.0, r))


def rmse(estimate, truth) -> float:
    """Root-mean-square error sqrt(mean (estimate - truth)^2) over the finite pairs (NaN if none)."""
    e, t = _pair(estimate, truth, ("estimate", "truth"))
    if e.size == 0:
        return math.nan
    return float(np.sqrt(np.mean((e - t) ** 2)))


def mean_sigma_link(theta_true, theta_hat) -> tuple[float, float]:
    """(A, B) of the mean-sigma link theta* = A theta^ + B that gives theta^ the mean and SD of theta.

    Used to put a fit on the generating scale before RMSEs are taken (a fit identifies theta only up
    to its own standardisation). Returns (1, 0) when theta^ is constant.
    """
    t, h = _pair(theta_true, theta_hat, ("theta_true", "theta_hat"))
    if t.size < 2:
        return 1.0, 0.0
    sh = float(np.std(h))
    if sh == 0.0:
        return 1.0, 0.0
    a = float(np.std(t)) / sh
    return a, float(t.mean() - a * h.mean())


def link_items(a_hat, b_hat, A: float, B: float) -> tuple[np.ndarray, np.ndarray]:
    """Slope-intercept item parameters on the linked scale theta* = A theta^ + B.

    a* = a^ / A, b* = b^ - a^ B / A, so that a^ theta^ + b^ = a* theta* + b* for every theta^.
    """
    a_hat = _vector(a_hat, "a_hat")
    b_hat = _vector(b_hat, "b_hat")
    if not (math.isfinite(A) and A != 0.0 and math.isfinite(B)):
        raise ValueError(f"the link needs a finite A != 0 and a finite B, got A={A}, B={B}")
    return a_hat / A, b_hat - a_hat * B / A


# ----------------------------------------------------------------------------- design diagnostics
def insufficient_coverage(theta, difficulty, *, window: float = 0.2, max_items: int = 5) -> float:
    """Share of subjects with at most ``max_items`` items whose difficulty lies within ``window`` of
    their ability: mean_i [ #{j : |d_j - theta_i| <= window} <= max_items ].

    Seed 003's "insufficient difficulty coverage" (window 0.2, at most 5 items), computed from the
    TRUE abilities and difficulties d_j = -b_j / a_j. Items with a non-finite difficulty (a = 0:
    non-discriminating) are never within the window.
    """
    theta = _vector(theta, "theta")
    d = _vector(difficulty, "difficulty")
    if theta.size == 0:
        raise ValueError("theta is empty")
    if not np.all(np.isfinite(theta)):
        raise ValueError("theta contains non-finite values")
    if not (window >= 0 and math.isfinite(window)):
        raise ValueError(f"window must be a finite number >= 0, got {window!r}")
    if not is_integer(max_items) or max_items < 0:
        raise ValueError(f"max_items must be an integer >= 0, got {max_items!r}")
    d = np.sort(d[np.isfinite(d)])
    # count of d in [theta - w, theta + w] by binary search (O((N + J) log J)); the tiny slack
    # makes |d - theta| == window count as "within" despite rounding of theta +- window
    slack = 1e-12 * (1.0 + np.abs(theta))
    lo = np.searchsorted(d, theta - window - slack, side="left")
    hi = np.searchsorted(d, theta + window + slack, side="right")
    return float(np.mean((hi - lo) <= max_items))


def marginal_reliability(test_information) -> float:
    """1 / (1 + mean_i 1 / I(theta_i)) from the test information I(theta_i) of each subject.

    The reliability var(theta) / (var(theta) + mean error variance) at unit ability variance, with
    the error variance of subject i approximated by 1 / I(theta_i). 0 if some I is 0.
    """
    info = _vector(test_information, "test_information")
    if info.size == 0:
        raise ValueError("test_information is empty")
    if np.any(~np.isfinite(info)) or np.any(info < 0):
        raise ValueError("test_information must be finite and >= 0")
    if np.any(info == 0):
        return 0.0
    return float(1.0 / (1.0 + np.mean(1.0 / info)))


def skewness_g1(x) -> float:
    """Adjusted Fisher-Pearson sample skewness G1 (Joanes & Gill 1998; ``scipy.stats.skew(bias=False)``).

    g1 = m3 / m2^(3/2) with biased central moments m_k = mean (x - mean x)^k; G1 = sqrt(n (n - 1)) /
    (n - 2) * g1. NaN for n < 3 or constant x. The audit reports |G1| of the true abilities.
    """
    x = _vector(x, "x")
    x = x[np.isfinite(x)]
    n = x.size
    if n < 3:
        return math.nan
    d = x - x.mean()
    m2 = float(np.mean(d * d))
    if m2 <= 1e-300 or m2 <= (1e-14 * float(np.max(np.abs(x)))) ** 2:
        return math.nan
    m3 = float(np.mean(d * d * d))
    g1 = m3 / m2**1.5
    return float(math.sqrt(n * (n - 1.0)) / (n - 2.0) * g1)


# ----------------------------------------------------------------------------- Monte-Carlo summaries
def mc_standard_error(values) -> float:
    """Monte-Carlo standard error of a mean over replications: sd(ddof=1) / sqrt(n) of the finite
    values (NaN with fewer than 2)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    if v.size < 2:
        return math.nan
    return float(np.std(v, ddof=1) / math.sqrt(v.size))
