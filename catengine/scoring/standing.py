"""Where an LLM stands relative to the LLMs a bank was calibrated on, and whether it extrapolates.

The model's prediction of the items a session did not ask is only as good as the calibration
population around the LLM: items that few calibration LLMs solved have parameters the data barely
identify, and for an LLM stronger than all of them the prediction saturates at their ceiling
(docs/math.md §7.8). The bank keeps its calibration LLMs' traits (``/subjects``) and answers
(``/responses``); this module ranks a session's trait estimate among those traits.

* ``percentile``: the share of calibration LLMs (response rows) whose trait is below the estimate,
  in [0, 1] (ties count half);
* ``extrapolation``: ``"above"`` when the estimate lies above the calibration traits' upper
  ``EDGE`` quantile, ``"below"`` when under the lower one, ``""`` inside. The edge is the 95th /
  5th percentile rather than the maximum because an LLM just above the strongest calibration LLM
  has, after a short test, an estimate that falls below that maximum about half the time; the
  flag then still fires for it.

Pure numpy: no session, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

EDGE = 0.05  # the flag fires beyond the calibration traits' 5th / 95th percentiles


@dataclass(frozen=True)
class Population:
    """The calibration LLMs of a bank: their traits (sorted) and full-benchmark accuracies (or None)."""

    thetas: np.ndarray
    accuracies: np.ndarray | None = None

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

    @property
    def size(self) -> int:
        return int(self.thetas.size)

    @property
    def edges(self) -> tuple[float, float]:
        return self._edges


@dataclass(frozen=True)
class Standing:
    """A session's rank among the calibration LLMs (see the module docstring)."""

    percentile: float
    n_calibration: int
    extrapolation: str  # "above" | "below" | ""

    def describe(self) -> str:
        text = f"ahead of {100 * self.percentile:.0f}% of the {self.n_calibration} calibration LLM runs"
        if self.extrapolation == "above":
            text += "; beyond the strongest calibration LLMs: the model extrapolates, the score leans on the design draws"
        elif self.extrapolation == "below":
            text += "; below the weakest calibration LLMs: the model extrapolates, the score leans on the design draws"
        return text

    def to_dict(self) -> dict:
        return {"percentile": self.percentile, "n_calibration": self.n_calibration, "extrapolation": self.extrapolation}


def extrapolation_flag(population: Population | None, theta: float) -> str:
    """``trait_standing(population, theta).extrapolation`` without the rank ("" without a population
    or a finite theta): the test selectors make at every step."""
    if population is None or theta is None or not math.isfinite(theta):
        return ""
    low, high = population.edges
    return "above" if theta > high else "below" if theta < low else ""


def trait_standing(population: Population | None, theta: float) -> Standing | None:
    """The standing of a trait estimate ``theta`` (None without a population or a finite theta)."""
    if population is None or theta is None or not np.isfinite(theta):
        return None
    t = population.thetas
    below = np.searchsorted(t, theta, side="left")
    not_above = np.searchsorted(t, theta, side="right")
    percentile = float((below + not_above) / (2.0 * t.size))
    return Standing(percentile, int(t.size), extrapolation_flag(population, theta))
