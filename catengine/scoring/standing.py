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
* ``extrapolation``: ``"above"`` when the percentile exceeds 1 - ``EDGE``, ``"below"`` when it is
  under ``EDGE``, ``""`` otherwise.

The comparison needs no model and no prior: the same items are compared, whichever rule chose them
(a selection that depends only on the answers before each item keeps E[y_j - x_rj | past] equal
to the LLM's probability of solving j minus run r's answer, so an LLM better than run r on every
item is ahead of it in expectation). Banks that store no calibration answers rank the session's
trait estimate among the calibration traits (``/subjects``) instead, with the same ``EDGE``.

Pure numpy: no session, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

EDGE = 0.05  # the flag fires beyond the calibration runs' 5th / 95th percentiles


@dataclass(frozen=True)
class Population:
    """The calibration LLMs of a bank: their traits (sorted), full-benchmark accuracies (or None) and
    recorded answers ``responses`` (runs x the bank's items, int8: 1 / 0, -1 where a run has no
    answer; or None), which the standing compares with a session's answers."""

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


def answer_percentile(responses: np.ndarray, items, correct) -> float:
    """The share of calibration runs (rows of ``responses``) that answered fewer of the session's
    ``items`` correctly than its answers ``correct``, each run on the items it answered, ties
    counting half (module docstring). 0.5 before any answer."""
    items = np.asarray(items, dtype=np.int64).reshape(-1)
    y = np.asarray(correct, dtype=np.float64).reshape(-1)
    x = responses[:, items]
    d = np.where(x >= 0, y[None, :] - x, 0.0).sum(axis=1)
    return float((np.count_nonzero(d > 0) + 0.5 * np.count_nonzero(d == 0)) / d.size)


def flag_of(percentile: float) -> str:
    """``"above"`` / ``"below"`` beyond the ``EDGE`` quantiles of the calibration runs, else ``""``."""
    return "above" if percentile > 1.0 - EDGE else "below" if percentile < EDGE else ""


def extrapolation_flag(population: Population | None, theta: float, items=(), correct=()) -> str:
    """``standing(population, theta, items, correct).extrapolation`` ("" without a population, or
    without responses and a finite ``theta``): what the selectors check at every step."""
    if population is None:
        return ""
    if population.responses is not None:
        return flag_of(answer_percentile(population.responses, items, correct))
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
    return Standing(percentile, population.n_runs, flag_of(percentile))


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
