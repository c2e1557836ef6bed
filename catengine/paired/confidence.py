"""Confidence sequences for a mean that every term shares: ``E[X_t | past] = mu`` with each term in
bounds ``[L_t, U_t]`` known before it is drawn (docs/comparisons.md).

The paired design's terms (``catengine.paired.session``) are such terms: their conditional mean is
the full-benchmark difference whatever the model gets wrong, and their bounds follow from the
known draw probabilities. The sets here hold ``mu`` at every step at once with probability at
least ``1 - alpha``, so they stay valid at a stop chosen from the data.

Two constructions, both pure numpy:

* :class:`BettingConfidenceSequence` (the default): testing by betting (Waudby-Smith and Ramdas
  2023) on a lattice of candidate means. For each candidate ``m`` two capital processes
  ``K+_t(m) = prod_i (1 + l+_i(m) (X_i - m))`` and ``K-_t(m) = prod_i (1 - l-_i(m) (X_i - m))``
  with predictable bets ``l+-_i(m) >= 0`` truncated so that every factor stays at least
  ``1 - truncation > 0``: ``l+_i(m) <= truncation / (m - L_i)``, ``l-_i(m) <= truncation / (U_i -
  m)``. At the true mean both are nonnegative martingales starting at 1, and so is their average;
  a candidate is rejected for good once ``max(K+, K-) / 2 >= 1 / alpha`` (Ville's inequality: the
  true mean is ever rejected with probability at most ``alpha``). Bets follow the approximate
  growth-rate-adaptive rule ``l(m) = (mu_hat - m) / (s2_hat + (mu_hat - m)^2)`` with the
  predictable running mean and variance of the terms.
* :class:`EmpiricalBernsteinConfidenceSequence`: the predictable plug-in empirical-Bernstein
  sequence (Howard, Ramdas, McAuliffe and Sekhon 2021; Waudby-Smith and Ramdas 2023), closed form,
  for terms with a predictable lower and upper bound. Wider than the betting sequence; kept as a
  cross-check.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["BettingConfidenceSequence", "EmpiricalBernsteinConfidenceSequence", "CONFIDENCE_SEQUENCES"]


def _check_alpha(alpha: float) -> float:
    alpha = float(alpha)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    return alpha


def _check_term(x: float, lower: float, upper: float, variance: float) -> tuple[float, float, float, float]:
    x, lower, upper, variance = float(x), float(lower), float(upper), float(variance)
    if not all(math.isfinite(v) for v in (x, lower, upper, variance)):
        raise ValueError(f"a term, its bounds and its variance guess must be finite, got {x}, [{lower}, {upper}], {variance}")
    tol = 1e-9 * max(1.0, abs(lower), abs(upper))
    if not lower - tol <= x <= upper + tol:
        raise ValueError(f"term {x!r} lies outside its predictable bounds [{lower!r}, {upper!r}]")
    if variance < 0:
        raise ValueError(f"the variance guess must be >= 0, got {variance!r}")
    return x, lower, upper, variance


class _RunningMoments:
    """Predictable running mean and variance of the terms, each with one prior pseudo-observation
    (the caller's guess of the next term's mean and variance, made before it is drawn).

    ``scaled``: the variance is the caller's guess for the next term times the running mean of
    ``(X_i - mu_hat_{i-1})^2 / guess_i`` (with the pseudo-observation 1): it follows the terms'
    variance as it shrinks with the items left, and corrects the guess by what the terms show."""

    def __init__(self, scaled: bool = True):
        self.n = 0
        self.total = 0.0
        self.squares = 0.0  # sum of (X_i - mu_hat_{i-1})^2
        self.ratios = 0.0  # sum of (X_i - mu_hat_{i-1})^2 / guess_i
        self.scaled = bool(scaled)
        self._guess = None

    def predict(self, mean_guess: float, variance_guess: float, floor: float) -> tuple[float, float]:
        mean = (mean_guess + self.total) / (self.n + 1)
        if self.scaled and variance_guess > floor:
            variance = variance_guess * (1.0 + self.ratios) / (self.n + 1)
        else:
            variance = (variance_guess + self.squares) / (self.n + 1)
        return mean, max(variance, floor)

    def add(self, x: float, predicted_mean: float, variance_guess: float, floor: float) -> None:
        r = (x - predicted_mean) ** 2
        self.squares += r
        self.ratios += r / max(variance_guess, floor)
        self.total += x
        self.n += 1


class BettingConfidenceSequence:
    """Hedged betting confidence sequence on a lattice of candidate means (module docstring).

    ``grid``: every value the mean can take, increasing (the paired design's target, a difference
    of two proportions over ``J`` items, lies on the lattice ``k / J``, so the set is exact, not
    rounded). ``update(x, lower, upper, mean_guess, variance_guess)`` adds one term with its
    predictable bounds and a predictable guess of its mean and variance (they only steer the bets;
    any guess keeps the guarantee). ``interval()`` is the hull of the candidates not rejected.
    """

    name = "betting"

    def __init__(self, grid, *, alpha: float = 0.05, truncation: float = 0.75, variance_floor: float = 1e-6,
                 scaled: bool = True):
        grid = np.asarray(grid, dtype=float)
        if grid.ndim != 1 or grid.size == 0 or not np.all(np.isfinite(grid)) or np.any(np.diff(grid) <= 0):
            raise ValueError("grid must be a non-empty, finite, strictly increasing 1-D array")
        self.alpha = _check_alpha(alpha)
        truncation = float(truncation)
        if not 0.0 < truncation < 1.0:
            raise ValueError(f"truncation must lie in (0, 1), got {truncation!r}")
        self.truncation = truncation
        self.variance_floor = float(variance_floor)
        self.grid = grid
        self._log_up = np.zeros(grid.size)
        self._log_down = np.zeros(grid.size)
        self._alive = np.ones(grid.size, dtype=bool)
        self._moments = _RunningMoments(scaled)
        self._threshold = math.log(2.0 / self.alpha)  # max(K+, K-) / 2 >= 1 / alpha

    @property
    def n(self) -> int:
        return self._moments.n

    def bets(self, lower: float, upper: float, mean_guess: float, variance_guess: float) -> tuple[np.ndarray, np.ndarray]:
        """The bets ``(l+, l-)`` of every candidate on the next term (predictable: no term value)."""
        mean, variance = self._moments.predict(mean_guess, variance_guess, self.variance_floor)
        g = self.grid
        gap = mean - g
        bet = gap / (variance + gap * gap)
        with np.errstate(divide="ignore"):
            cap_up = np.where(g > lower, self.truncation / np.maximum(g - lower, 1e-300), np.inf)
            cap_down = np.where(g < upper, self.truncation / np.maximum(upper - g, 1e-300), np.inf)
        return np.clip(bet, 0.0, cap_up), np.clip(-bet, 0.0, cap_down)

    def update(self, x: float, lower: float, upper: float, mean_guess: float = 0.0, variance_guess: float = 0.25) -> None:
        x, lower, upper, variance_guess = _check_term(x, lower, upper, variance_guess)
        mean, _ = self._moments.predict(float(mean_guess), variance_guess, self.variance_floor)
        up, down = self.bets(lower, upper, float(mean_guess), variance_guess)
        g = self.grid
        with np.errstate(divide="ignore", invalid="ignore"):
            self._log_up += np.log(np.maximum(1.0 + up * (x - g), 0.0))
            self._log_down += np.log(np.maximum(1.0 - down * (x - g), 0.0))
        capital = np.maximum(self._log_up, self._log_down)
        alive = self._alive & (capital < self._threshold)
        if not alive.any():
            # only when the true mean was rejected too (probability <= alpha): keep the least rejected
            # candidates rather than an empty set
            live = np.where(self._alive, capital, np.inf)
            alive = self._alive & (live == live.min())
        self._alive = alive
        self._moments.add(x, mean, variance_guess, self.variance_floor)

    def capital(self, value: float) -> tuple[float, float]:
        """``(K+, K-)`` now at the grid point nearest ``value`` (each a nonnegative martingale with
        mean 1 when ``value`` is the terms' mean)."""
        k = int(np.argmin(np.abs(self.grid - float(value))))
        return math.exp(self._log_up[k]), math.exp(self._log_down[k])

    def contains(self, value: float, tol: float = 1e-9) -> bool:
        """Whether a candidate within ``tol`` of ``value`` is still in the set."""
        near = np.abs(self.grid - float(value)) <= tol
        return bool(np.any(self._alive & near))

    def interval(self) -> tuple[float, float]:
        idx = np.flatnonzero(self._alive)
        return float(self.grid[idx[0]]), float(self.grid[idx[-1]])


class EmpiricalBernsteinConfidenceSequence:
    """Predictable plug-in empirical-Bernstein confidence sequence for terms with predictable bounds.

    With ``s_i = mu_hat_{i-1} - L_i`` (lower side), the process
    ``exp(sum_i l_i (X_i - mu) - sum_i (X_i - mu_hat_{i-1})^2 psi(l_i s_i) / s_i^2)``,
    ``psi(u) = -log(1 - u) - u``, is a nonnegative supermartingale at the true mean for
    ``0 <= l_i s_i < 1`` (Fan, Grama and Liu's inequality ``exp(u z - z^2 psi(u)) <= 1 + u z`` for
    ``z >= -1``), which gives the lower bound; the upper bound mirrors it with ``U_i - mu_hat``.
    Each side at ``alpha / 2``; bets ``l_i = sqrt(2 log(2 / alpha) / (s2_hat i log(1 + i)))``
    truncated at ``truncation / s_i``. The bounds are intersected over time and rounded inwards to
    ``grid`` when one is given."""

    name = "empirical-bernstein"

    def __init__(self, grid=None, *, alpha: float = 0.05, truncation: float = 0.75, variance_floor: float = 1e-6,
                 scaled: bool = True):
        self.alpha = _check_alpha(alpha)
        self.truncation = float(truncation)
        if not 0.0 < self.truncation < 1.0:
            raise ValueError(f"truncation must lie in (0, 1), got {truncation!r}")
        self.grid = None if grid is None else np.asarray(grid, dtype=float)
        self.variance_floor = float(variance_floor)
        self._moments = _RunningMoments(scaled)
        self._sums = np.zeros(2)  # per side: sum l X (X mirrored on the upper side)
        self._penalty = np.zeros(2)
        self._bets = np.zeros(2)  # per side: sum l
        self._low, self._high = -math.inf, math.inf

    @property
    def n(self) -> int:
        return self._moments.n

    def update(self, x: float, lower: float, upper: float, mean_guess: float = 0.0, variance_guess: float = 0.25) -> None:
        x, lower, upper, variance_guess = _check_term(x, lower, upper, variance_guess)
        mean, variance = self._moments.predict(float(mean_guess), variance_guess, self.variance_floor)
        t = self._moments.n + 1
        base = math.sqrt(2.0 * math.log(2.0 / self.alpha) / (variance * t * math.log(1.0 + t)))
        level = math.log(2.0 / self.alpha)
        for side, (sign, reach) in enumerate(((1.0, mean - lower), (-1.0, upper - mean))):
            reach = max(reach, 1e-12)
            lam = min(base, self.truncation / reach)
            u = lam * reach
            self._sums[side] += lam * sign * x
            self._penalty[side] += (x - mean) ** 2 * (-math.log1p(-u) - u) / reach**2
            self._bets[side] += lam
        low = (self._sums[0] - level - self._penalty[0]) / self._bets[0]
        high = (-self._sums[1] + level + self._penalty[1]) / self._bets[1]
        self._low, self._high = max(self._low, low), min(self._high, high)
        self._moments.add(x, mean, variance_guess, self.variance_floor)

    def contains(self, value: float, tol: float = 1e-9) -> bool:
        low, high = self.interval()
        return low - tol <= float(value) <= high + tol

    def interval(self) -> tuple[float, float]:
        low, high = self._low, self._high
        if self.grid is not None:
            inside = self.grid[(self.grid >= low - 1e-12) & (self.grid <= high + 1e-12)]
            if inside.size:
                return float(inside[0]), float(inside[-1])
            centre = float(self.grid[np.argmin(np.abs(self.grid - 0.5 * (low + high)))]) if math.isfinite(low + high) else 0.0
            return centre, centre
        return low, high


#: the confidence sequences by name (``PairedSession(confidence=...)``)
CONFIDENCE_SEQUENCES = {cls.name: cls for cls in (BettingConfidenceSequence, EmpiricalBernsteinConfidenceSequence)}
