"""Where an LLM stands relative to the LLMs a bank was calibrated on, and whether it extrapolates.

The model's prediction of the items a session did not ask is only as good as the calibration
population around the LLM: items that few calibration LLMs solved have parameters the data barely
identify, and for an LLM stronger than all of them the prediction saturates at their ceiling
(docs/math.md §7.8). The standing therefore rests on evidence that neither the model nor its
trait prior can shrink: the LLM's own answers against the calibration runs' recorded answers to
the *same items* (the bank's ``/responses``).

* ``percentile``: with A the session's answered items and y its answers, each calibration run r
  that answered some of A is compared with the LLM on the items of A it answered,
  d_r = sum_{j in A, r answered j} (y_j - x_rj); the percentile is the share of runs with
  d_r > 0, ties (d_r = 0, a run that answered none of A among them) counting half;
* ``extrapolation``: ``"above"`` when the LLM's answers exceed those of the calibration runs'
  top band on the same items by more than ``MARGIN`` standard errors, ``"below"`` when they fall
  short of the bottom band's by as much, ``""`` otherwise. The bands are the 2 ``EDGE`` of runs
  with the highest / lowest accuracy (at least one run; centred on the 1 - ``EDGE`` / ``EDGE``
  quantile). With p_j the band's answer rate on item j (over the band runs that answered j) and
  q_j = (successes + 1/2) / (answers + 1) its Jeffreys-smoothed value, the evidence is the score
  statistic of a shift of the band's log-odds,

      z = sum_{j in A} (y_j - p_j) / sqrt(sum_{j in A} q_j (1 - q_j)),

  over the items of A some band run answered (z = 0 on none). The smoothing keeps the variance
  positive where the band answered all or none of the items right; the rates themselves are not
  smoothed, so an LLM that answers like the band is not pushed beyond it (on a benchmark where a
  tenth of the calibration runs solve nothing, a smoothed rate of 1/(2 (n + 1)) would flag every
  LLM that also solves nothing as "below" after enough items). The flag compares the LLM with
  the band's answer *rates*, not with each run's single 0/1 answers: the runs' own coin flips do
  not enter, and the comparison is the locally most powerful one against a band whose log-odds
  the LLM exceeds on every item by the same amount. Measured on simulated banks fitted to data a 2PL
  cannot represent (``benchmarks/score_misspecification.py``), it fires for more of the LLMs
  beyond the calibration maximum than flagging the percentile beyond 1 - ``EDGE`` does, at every
  test length (after 10 items 0.87 / 0.92 against 0.68 / 0.84), while firing for at most 0.09 of
  the LLMs inside the calibration population's middle 80%.

The comparisons need no model and no prior: the same items are compared, whichever rule chose them
(a selection that depends only on the answers before each item keeps E[y_j - x_rj | past] equal
to the LLM's probability of solving j minus run r's answer, so an LLM better than run r on every
item is ahead of it in expectation). Banks that store no calibration answers rank the session's
trait estimate among the calibration traits (``/subjects``) instead, beyond their ``EDGE`` and
1 - ``EDGE`` quantiles.

Pure numpy: no session, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

EDGE = 0.05  # the flag's bands: the calibration runs around their 5th / 95th accuracy percentiles
MARGIN = 0.5  # standard errors by which the answers must pass a band's for the flag to fire


@dataclass(frozen=True)
class Population:
    """The calibration LLMs of a bank: their traits (sorted), full-benchmark accuracies (or None) and
    recorded answers ``responses`` (runs x the bank's items, int8: 1 / 0, -1 where a run has no
    answer; or None), which the standing compares with a session's answers; from them
    ``band_rates`` (2, 2, items): the bottom and top bands' answer rates and smoothed rates
    (:func:`band_rates`; NaN where no band run answered)."""

    thetas: np.ndarray
    accuracies: np.ndarray | None = None
    responses: np.ndarray | None = None

    def __post_init__(self):
        t = np.sort(np.asarray(self.thetas, dtype=np.float64).reshape(-1))
        t = t[np.isfinite(t)]
        if t.size == 0:
            raise ValueError("a calibration population needs at least one finite trait")
        t.flags.writeable = False
        object.__setattr__(self, "thetas", t)
        object.__setattr__(self, "_edges", (float(np.quantile(t, EDGE)), float(np.quantile(t, 1.0 - EDGE))))
        if self.accuracies is not None:
            a = np.sort(np.asarray(self.accuracies, dtype=np.float64).reshape(-1))
            a = a[np.isfinite(a)]
            a.flags.writeable = False
            object.__setattr__(self, "accuracies", a if a.size else None)
        if self.responses is not None:
            r = np.asarray(self.responses)
            if r.ndim != 2 or r.shape[0] == 0:
                raise ValueError(f"responses must be a (runs, items) matrix with at least one run, got shape {r.shape}")
            r = np.where((r == 0) | (r == 1), r, -1).astype(np.int8)
            r = np.ascontiguousarray(r)
            r.flags.writeable = False
            object.__setattr__(self, "responses", r)
            rates = band_rates(r)
            rates.flags.writeable = False
            object.__setattr__(self, "band_rates", rates)
        else:
            object.__setattr__(self, "band_rates", None)

    @property
    def size(self) -> int:
        return int(self.thetas.size)

    @property
    def edges(self) -> tuple[float, float]:
        """The calibration traits' ``EDGE`` and 1 - ``EDGE`` quantiles (the rule without responses)."""
        return self._edges

    @property
    def n_runs(self) -> int:
        """The calibration runs the standing ranks among (response rows, else traits)."""
        return int(self.thetas.size if self.responses is None else self.responses.shape[0])


@dataclass(frozen=True)
class Standing:
    """A session's rank among the calibration LLMs (see the module docstring)."""

    percentile: float
    n_calibration: int
    extrapolation: str  # "above" | "below" | ""

    def describe(self) -> str:
        text = f"ahead of {100 * self.percentile:.0f}% of the {self.n_calibration} calibration LLM runs"
        if self.extrapolation == "above":
            text += "; beyond the strongest calibration LLMs: the model extrapolates, the score rests on the design draws"
        elif self.extrapolation == "below":
            text += "; below the weakest calibration LLMs: the model extrapolates, the score rests on the design draws"
        return text

    def to_dict(self) -> dict:
        return {"percentile": self.percentile, "n_calibration": self.n_calibration, "extrapolation": self.extrapolation}


def band_rates(responses: np.ndarray, edge: float = EDGE) -> np.ndarray:
    """(2, 2, items): [rate, smoothed rate] of the calibration runs' bottom (0) and top (1) bands on
    every item: successes / answers of the band's runs that answered it and (successes + 1/2) /
    (answers + 1), NaN where none did.
    ``responses`` (runs, items) 1 / 0 / -1; a band is the ceil(2 ``edge`` runs) runs (at least one)
    with the lowest / highest accuracy over the items they answered; runs with no answer rank in
    neither."""
    r = np.asarray(responses)
    answered = r >= 0
    counts = answered.sum(axis=1)
    ranked = np.flatnonzero(counts > 0)
    out = np.full((2, 2, r.shape[1]), np.nan)
    if ranked.size == 0:
        return out
    accuracy = np.where(answered[ranked], r[ranked], 0).sum(axis=1) / counts[ranked]
    order = ranked[np.argsort(accuracy, kind="stable")]
    size = max(1, math.ceil(2.0 * edge * order.size - 1e-9))
    for side, band in enumerate((order[:size], order[order.size - size:])):
        n = answered[band].sum(axis=0)
        wins = np.where(answered[band], r[band], 0).sum(axis=0)
        out[side, 0] = np.where(n > 0, wins / np.maximum(n, 1), np.nan)
        out[side, 1] = np.where(n > 0, (wins + 0.5) / (n + 1.0), np.nan)
    return out


def band_evidence(rates: np.ndarray, items, correct) -> tuple[float, float]:
    """(z_below, z_above): the score statistics of the session's answers ``correct`` to ``items``
    against the bottom and top bands' answer rates ``rates`` (:func:`band_rates`) on the same items
    (module docstring); 0 for a band that answered none of them."""
    items = np.asarray(items, dtype=np.int64).reshape(-1)
    y = np.asarray(correct, dtype=np.float64).reshape(-1)
    z = []
    for side in range(2):
        p, q = rates[side, 0, items], rates[side, 1, items]
        ok = np.isfinite(p)
        var = float(np.sum(q[ok] * (1.0 - q[ok])))
        z.append(float(np.sum(y[ok] - p[ok])) / math.sqrt(var) if var > 0.0 else 0.0)
    return z[0], z[1]


def flag_of_evidence(z_below: float, z_above: float) -> str:
    """``"above"`` when the answers pass the top band's by more than ``MARGIN`` standard errors,
    ``"below"`` when they fall short of the bottom band's by as much (the larger excess wins, in a
    population so small that its bands overlap), else ``""``."""
    up, down = z_above - MARGIN, -z_below - MARGIN
    if up > 0.0 and up >= down:
        return "above"
    return "below" if down > 0.0 else ""


def answer_percentile(responses: np.ndarray, items, correct) -> float:
    """The share of calibration runs (rows of ``responses``) that answered fewer of the session's
    ``items`` correctly than its answers ``correct``, each run on the items it answered, ties
    counting half (module docstring). 0.5 before any answer."""
    items = np.asarray(items, dtype=np.int64).reshape(-1)
    y = np.asarray(correct, dtype=np.float64).reshape(-1)
    x = responses[:, items]
    d = np.where(x >= 0, y[None, :] - x, 0.0).sum(axis=1)
    return float((np.count_nonzero(d > 0) + 0.5 * np.count_nonzero(d == 0)) / d.size)


def extrapolation_flag(population: Population | None, theta: float, items=(), correct=()) -> str:
    """``standing(population, theta, items, correct).extrapolation`` ("" without a population, or
    without responses and a finite ``theta``): what the selectors check at every step."""
    if population is None:
        return ""
    if population.responses is not None:
        return flag_of_evidence(*band_evidence(population.band_rates, items, correct))
    if theta is None or not math.isfinite(theta):
        return ""
    low, high = population.edges
    return "above" if theta > high else "below" if theta < low else ""


def standing(population: Population | None, theta: float | None, items=(), correct=()) -> Standing | None:
    """The standing of a session with answers ``correct`` to the bank items ``items`` (bank
    indices) and trait estimate ``theta``: among the calibration runs' answers to the same items when
    the bank stores them, else among the calibration traits (:func:`trait_standing`). None without
    a population (or, without responses, without a finite ``theta``)."""
    if population is None:
        return None
    if population.responses is None:
        return trait_standing(population, theta)
    percentile = answer_percentile(population.responses, items, correct)
    return Standing(percentile, population.n_runs, flag_of_evidence(*band_evidence(population.band_rates, items, correct)))


def trait_standing(population: Population | None, theta: float) -> Standing | None:
    """The rank of a trait estimate ``theta`` among the calibration traits (None without a population
    or a finite theta): the standing of banks that store no calibration answers."""
    if population is None or theta is None or not np.isfinite(theta):
        return None
    t = population.thetas
    below = np.searchsorted(t, theta, side="left")
    not_above = np.searchsorted(t, theta, side="right")
    percentile = float((below + not_above) / (2.0 * t.size))
    low, high = population.edges
    return Standing(percentile, int(t.size), "above" if theta > high else "below" if theta < low else "")
