"""The bank's stored held-out check of its intervals: an SD factor c(L) by test length, measured by
replaying held-out real LLMs at calibration time (docs/math.md §7.5; written by ``calibration.heldout``).

The bank's root attribute ``interval_calibration`` is a JSON object::

    {"version": 1, "method": "cross-fitted replay", "folds": 5, "n_subjects": 118,
     "calibration_method": "saem", "estimator": "map", "scoring": "lart", "selection": "pei",
     "curves": {"pei":    {"test_length": [5, 10, ...], "c": [1.0, 1.12, ...], ...},
                "random": {"test_length": [...], "c": [...], ...}},
     "beyond": {"above": {"n_held_out": 28, "curves": {"pei": {...}}, "score_curves": {...}},
                "below": {...}},
     "measured": {...}, "seconds": 12.5}

``c`` is a table by test length, smoothed, and below 1 only where the check had evidence for it
(see ``calibration.heldout.interval_curves``). An
optional ``z95`` list (same lengths) is the calibrated multiplier of the 95% interval: theta +-
z95(L) SD instead of +- 1.96 SD (interpolated like c; banks without it use 1.96). Between the tabulated lengths c(L) is linear in
L; below the first and beyond the last it is held constant; with no answer (L = 0) it is 1 (the
population prior needs no correction). A session uses the curve of its own selector's name, and,
for a selector the check did not run, the pointwise largest of the stored curves (conservative).

``beyond`` (optional) is the strength-ordered check: the same curves, measured on the LLMs above
(below) every calibration LLM of a bank fitted without them (:meth:`IntervalCalibration.curve`
with ``side`` gives the pointwise larger of a selector's curve and that side's). Sessions apply
its score curves beyond the calibration population (``catengine.session.scoring.score_curve``);
its trait curves are evidence, reported with the bank, and not applied: switching a session's
trait factor when its estimate crosses the population's edge would widen the reported interval
with one more answer, which sessions never do (the envelope below).

Sessions apply the nonincreasing envelopes of the stored tables, c'(L) = max over l >= L of c(l)
(and the same for z95), never the raw tables: a stored c(L) that grows with L (the error that
item-parameter uncertainty adds does not shrink with more answers, while the posterior SD does)
would otherwise make the reported interval shrink more slowly than the model's posterior, or
even widen with more answers. With the envelope the reported SD c'(L) SD_L shrinks at least as
fast as the posterior SD_L, and it is never below c(L) SD_L, so the check's coverage at every
length is kept (at the price of wider intervals at the lengths before the largest c).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

__all__ = ["IntervalCalibration", "IntervalCurve", "right_envelope"]

SIDES = ("above", "below")


def right_envelope(values: np.ndarray) -> np.ndarray:
    """max(values[i:]) for every i: the smallest nonincreasing sequence at or above ``values``."""
    return np.maximum.accumulate(np.asarray(values, dtype=float)[::-1])[::-1].copy()


@dataclass(frozen=True)
class IntervalCurve:
    """c(L) on a grid of test lengths, and what it was measured on (for the estimate's note)."""

    test_length: tuple[int, ...]
    c: tuple[float, ...]
    selection: str
    measured_on: str
    z95: tuple[float, ...] | None = None

    def __post_init__(self):
        L = np.asarray(self.test_length, dtype=float)
        c = np.asarray(self.c, dtype=float)
        if L.ndim != 1 or L.size == 0 or L.shape != c.shape:
            raise ValueError(f"an interval curve needs matching, non-empty test_length and c lists, got {self.test_length!r} / {self.c!r}")
        if np.any(np.diff(L) <= 0) or L[0] < 1:
            raise ValueError(f"test_length must be increasing positive integers, got {self.test_length!r}")
        if not np.all(np.isfinite(c)) or np.any(c <= 0):
            raise ValueError(f"c must be finite and > 0, got {self.c!r}")
        z = None
        if self.z95 is not None:
            z = np.asarray(self.z95, dtype=float)
            if z.shape != c.shape or not np.all(np.isfinite(z)) or np.any(z <= 0):
                raise ValueError(f"z95 must be finite, > 0 and match test_length, got {self.z95!r}")
        # what sessions apply: the nonincreasing envelopes (module docstring), as arrays once (read every step)
        object.__setattr__(self, "_tables", (L, right_envelope(c), None if z is None else right_envelope(z)))

    def factor(self, n_items: int) -> float:
        if n_items <= 0:
            return 1.0
        L, c, _ = self._tables
        return float(np.interp(float(n_items), L, c))

    def multiplier(self, n_items: int) -> float | None:
        """z95(L), the calibrated 95% multiplier of the SD (None: the curve has none, use 1.96)."""
        L, _, z = self._tables
        if z is None or n_items <= 0:
            return None
        return float(np.interp(float(n_items), L, z))

    def pointwise_max(self, other: "IntervalCurve", selection: str, measured_on: str) -> "IntervalCurve":
        """The curve that applies the larger factor and multiplier of ``self`` and ``other`` at every
        length (on the union of their grids; a missing z95 counts as 1.96)."""
        grid = sorted(set(self.test_length) | set(other.test_length))
        c = tuple(max(self.factor(L), other.factor(L)) for L in grid)
        z95 = None
        if self.z95 is not None or other.z95 is not None:
            z95 = tuple(max(self.multiplier(L) or 1.96, other.multiplier(L) or 1.96) for L in grid)
        return IntervalCurve(tuple(grid), c, selection, measured_on, z95)

    def describe(self, n_items: int) -> str:
        z = self.multiplier(n_items)
        interval = "" if z is None else f", 95% interval +-{z:.2f} SD"
        return (f"SD x c({n_items}) = {self.factor(n_items):.3f}{interval}, cross-fitted on {self.measured_on} "
                f"with {self.selection} selection")


def _parse_curves(curves: dict, measured_on: str, source: str, what: str) -> dict:
    out = {}
    for name, cur in curves.items():
        try:
            z95 = cur.get("z95")
            out[str(name)] = IntervalCurve(tuple(int(v) for v in cur["test_length"]), tuple(float(v) for v in cur["c"]),
                                           str(name), measured_on, None if z95 is None else tuple(float(v) for v in z95))
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{source}: interval_calibration {what}curve {name!r} is malformed ({exc})") from None
    return out


@dataclass(frozen=True)
class IntervalCalibration:
    """The parsed ``interval_calibration`` attribute (see the module docstring)."""

    curves: dict
    selection: str
    measured_on: str
    record: dict
    #: the parsed ``score_curves`` (``catengine.scoring.calibration.ScoreCalibration``), or None
    scores: object = None
    #: the strength-ordered check (record ``beyond``), per side ("above", "below"): its interval
    #: curves by selector name, and its ScoreCalibration (or None)
    beyond: dict = None
    beyond_scores: dict = None

    @classmethod
    def from_json(cls, text: str, source: str = "bank") -> "IntervalCalibration":
        try:
            record = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{source}: attribute 'interval_calibration' is not valid JSON ({exc})") from None
        if not isinstance(record, dict) or not isinstance(record.get("curves"), dict) or not record["curves"]:
            raise ValueError(f"{source}: 'interval_calibration' needs a non-empty 'curves' object")
        n = record.get("n_subjects", "?")
        folds = record.get("folds", "?")
        groups = record.get("n_llm_groups")
        llms = f"{n} calibration runs of {groups} LLMs" if isinstance(groups, int) and isinstance(n, int) and groups < n \
            else f"{n} calibration LLMs"
        measured_on = f"{llms} ({folds} folds, {record.get('calibration_method', '?')} banks)"
        curves = _parse_curves(record["curves"], measured_on, source, "")
        selection = str(record.get("selection", next(iter(curves))))
        from catengine.scoring.calibration import ScoreCalibration

        beyond, beyond_scores = {}, {}
        edge = record.get("beyond")
        if edge is not None and not isinstance(edge, dict):
            raise ValueError(f"{source}: interval_calibration 'beyond' must be an object or null")
        for side in SIDES:
            part = (edge or {}).get(side)
            if part is None:
                continue
            if not isinstance(part, dict) or not isinstance(part.get("curves"), dict):
                raise ValueError(f"{source}: interval_calibration beyond.{side} needs a 'curves' object")
            where = (f"the {part.get('n_held_out', '?')} runs {side} every calibration LLM (strength-ordered check "
                     f"of {measured_on})")
            beyond[side] = _parse_curves(part["curves"], where, source, f"beyond.{side} ")
            beyond_scores[side] = ScoreCalibration.from_record(part, where, source)
        return cls(curves, selection, measured_on, record, ScoreCalibration.from_record(record, measured_on, source),
                   beyond, beyond_scores)

    def curve(self, selector_name: str, side: str = "") -> IntervalCurve:
        """The curve for a selector: its own if measured, else the pointwise maximum of all curves.
        ``side`` "above" / "below": for a trait estimate beyond the calibration population, the
        pointwise larger of that curve and the strength-ordered check's on that side (its own
        selector's, else the largest it measured); the random folds' curve where that side was
        not checked."""
        inside = self._inside_curve(selector_name)
        edge = (self.beyond or {}).get(side) if side else None
        if not edge:
            return inside
        other = edge.get(selector_name)
        if other is None:  # the check replays the default selector only: the largest it measured
            other = next(iter(edge.values()))
            for cur in list(edge.values())[1:]:
                other = other.pointwise_max(cur, other.selection, other.measured_on)
        return inside.pointwise_max(other, f"{inside.selection}; beyond ({side}): the larger of it and the "
                                    f"strength-ordered check's", f"{inside.measured_on} and {other.measured_on}")

    def _inside_curve(self, selector_name: str) -> IntervalCurve:
        if selector_name in self.curves:
            return self.curves[selector_name]
        grid = sorted(set().union(*(c.test_length for c in self.curves.values())))
        c = [max(cur.factor(L) for cur in self.curves.values()) for L in grid]
        z95 = None
        if all(cur.z95 is not None for cur in self.curves.values()):
            z95 = tuple(max(cur.multiplier(L) for cur in self.curves.values()) for L in grid)
        return IntervalCurve(tuple(grid), tuple(c), f"{selector_name} (not measured; largest of "
                             f"{', '.join(sorted(self.curves))})", self.measured_on, z95)

    @property
    def summary(self) -> str:
        parts = []
        for name, cur in self.curves.items():
            parts.append(f"{name}: c = " + ", ".join(f"{c:.2f}@{L}" for L, c in zip(cur.test_length, cur.c)))
        return f"cross-fitted on {self.measured_on}; " + "; ".join(parts)

