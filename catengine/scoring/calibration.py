"""The score curves of the bank's stored held-out check: how far held-out real LLMs' full-benchmark
scores fell from the model-based prediction, beyond what the model's own interval allows
(docs/math.md §7.6; written at calibration time by ``calibration.heldout.score_curves``).

The model-based prediction treats the unanswered items as conditionally independent given the
trait. Real LLMs are not: an LLM that is better than its theta at, say, geometry is better on every
geometry item it was not asked. That part of the error does not shrink as the trait estimate
sharpens, so the cross-fit measures it as a residual SD per unanswered item, ``delta(L)`` (the SD of
the mean residual over the unanswered items, in proportion-correct units), and the engine adds
(delta(L) n_U)^2 to the variance of the predicted number correct (n_U the unanswered items of the
bank or category). For CoT tokens the discrepancy is multiplicative: the unrecorded part of the
total is multiplied by exp(eta), eta ~ Normal(-s^2 / 2, s(L)^2) (mean 1), s(L) measured on the log
scale. Both are tabulated by test length L: linear between lengths, constant beyond (the shrinking
n_U makes the accuracy term vanish when every item is answered).

Stored in the bank's ``interval_calibration`` record under ``score_curves``::

    {"pei": {"test_length": [5, 10, ...], "residual_sd": [0.03, ...], "cot_log_sd": [0.2, ...] | null,
             "accuracy_mae": [...], "random_mean_mae": [...], ...}}

``accuracy_mae`` is the same check's mean absolute error of the model-based accuracy after L items,
``random_mean_mae`` the exact expected one of the plain mean of L random items for the same LLMs
(``catengine.scoring.random_mean_mae``; banks checked before it was stored lack it). Their ratio says whether the
model earns its keep on this bank: where it exceeds 1 at the longest checked length, the model's
score is worse than random items (seen on banks from 8-22 LLMs), and sessions default to the
randomised selection whose design-based estimate does not depend on the model
(``catengine.selection.default_selector_for``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ScoreCalibration", "ScoreCurve"]


def _table(values, name, n):
    arr = np.asarray(values, dtype=float)
    if arr.shape != (n,) or not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"score curve {name!r} must hold {n} finite values >= 0, got {values!r}")
    return tuple(float(v) for v in arr)


@dataclass(frozen=True)
class ScoreCurve:
    """delta(L) and s(L) on a grid of test lengths (``cot_log_sd`` None: not measured)."""

    test_length: tuple[int, ...]
    residual_sd: tuple[float, ...]
    cot_log_sd: tuple[float, ...] | None
    selection: str
    measured_on: str
    accuracy_mae: tuple[float, ...] | None = None
    random_mean_mae: tuple[float, ...] | None = None

    def __post_init__(self):
        L = np.asarray(self.test_length, dtype=float)
        if L.ndim != 1 or L.size == 0 or np.any(np.diff(L) <= 0) or L[0] < 1:
            raise ValueError(f"test_length must be increasing positive integers, got {self.test_length!r}")
        for name in ("residual_sd", "cot_log_sd", "accuracy_mae", "random_mean_mae"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _table(getattr(self, name), name, L.size))

    def versus_random(self, n_items: int) -> float | None:
        """The check's model-based accuracy MAE over the random mean's after ``n_items`` answers
        (linear between checked lengths), or None: not stored, ``n_items`` outside the checked lengths,
        or random items' error is 0."""
        if self.accuracy_mae is None or self.random_mean_mae is None:
            return None
        if not self.test_length[0] <= n_items <= self.test_length[-1]:
            return None
        model = float(np.interp(float(n_items), self.test_length, self.accuracy_mae))
        random = float(np.interp(float(n_items), self.test_length, self.random_mean_mae))
        return model / random if random > 0 else None

    def loses_to_random(self) -> bool:
        """True when the model-based score erred more than random items' mean at the longest checked
        length where random items err at all (False when the check did not store both)."""
        if self.accuracy_mae is None or self.random_mean_mae is None:
            return False
        for model, random in reversed(list(zip(self.accuracy_mae, self.random_mean_mae))):
            if random > 0:
                return model > random
        return False

    def residual(self, n_items: int) -> float:
        """delta(L): 0 before any answer (the prior predictive needs no correction)."""
        return 0.0 if n_items <= 0 else float(np.interp(float(n_items), self.test_length, self.residual_sd))

    def cot_log(self, n_items: int) -> float:
        if self.cot_log_sd is None or n_items <= 0:
            return 0.0
        return float(np.interp(float(n_items), self.test_length, self.cot_log_sd))

    def pointwise_max(self, other: "ScoreCurve", selection: str, measured_on: str) -> "ScoreCurve":
        """The curve with the larger delta(L) and s(L) of ``self`` and ``other`` at every length (on the
        union of their grids); the check's errors are ``other``'s (the narrower evidence it adds)."""
        grid = tuple(sorted(set(self.test_length) | set(other.test_length)))
        res = tuple(max(self.residual(L), other.residual(L)) for L in grid)
        cot = None
        if self.cot_log_sd is not None or other.cot_log_sd is not None:
            cot = tuple(max(self.cot_log(L), other.cot_log(L)) for L in grid)
        mae = rnd = None
        if other.accuracy_mae is not None and other.random_mean_mae is not None:
            mae = tuple(float(np.interp(L, other.test_length, other.accuracy_mae)) for L in grid)
            rnd = tuple(float(np.interp(L, other.test_length, other.random_mean_mae)) for L in grid)
        return ScoreCurve(grid, res, cot, selection, measured_on, mae, rnd)

    def describe(self, n_items: int) -> str:
        where = f"cross-fitted on {self.measured_on} with {self.selection} selection"
        ratio = self.versus_random(n_items)
        if ratio is not None:
            where += f"; on that check the model-based accuracy erred {ratio:.2f}x as much as the mean of {n_items} random items"
        res, cot = self.residual(n_items), self.cot_log(n_items)
        if res == 0.0 and cot == 0.0:
            return f"not widened: the score check found the model's intervals wide enough after {n_items} items, {where}"
        text = f"widened by a residual SD {res:.3f} per unanswered item"
        if self.cot_log_sd is not None:
            text += f" (CoT: log SD {cot:.3f})"
        return f"{text}, {where}"


@dataclass(frozen=True)
class ScoreCalibration:
    """The parsed ``score_curves`` of a bank's interval-calibration record."""

    curves: dict

    @classmethod
    def from_record(cls, record: dict, measured_on: str, source: str = "bank") -> "ScoreCalibration | None":
        raw = record.get("score_curves")
        if not raw:
            return None
        if not isinstance(raw, dict):
            raise ValueError(f"{source}: interval_calibration 'score_curves' must be an object")
        curves = {}
        for name, cur in raw.items():
            try:
                cot, mae, rnd = cur.get("cot_log_sd"), cur.get("accuracy_mae"), cur.get("random_mean_mae")
                curves[str(name)] = ScoreCurve(tuple(int(v) for v in cur["test_length"]), tuple(cur["residual_sd"]),
                                               None if cot is None else tuple(cot), str(name), measured_on,
                                               None if mae is None else tuple(mae), None if rnd is None else tuple(rnd))
            except (AttributeError, KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"{source}: score curve {name!r} is malformed ({exc})") from None
        return cls(curves)

    def loses_to_random(self, selector_name: str) -> bool:
        """Whether the check measured ``selector_name`` and found its model-based score worse than
        random items' at the longest checked length (:meth:`ScoreCurve.loses_to_random`): sessions
        of such a bank default to randomised selection (``catengine.selection.default_selector_for``)."""
        curve = self.curves.get(selector_name)
        return curve is not None and curve.loses_to_random()

    def curve(self, selector_name: str) -> ScoreCurve:
        """The curve of a selector: its own if measured, else the pointwise largest of all curves."""
        if selector_name in self.curves:
            return self.curves[selector_name]
        grid = tuple(sorted(set().union(*(c.test_length for c in self.curves.values()))))
        res = tuple(max(c.residual(L) for c in self.curves.values()) for L in grid)
        with_cot = [c for c in self.curves.values() if c.cot_log_sd is not None]
        cot = tuple(max(c.cot_log(L) for c in with_cot) for L in grid) if with_cot else None
        first = next(iter(self.curves.values()))
        return ScoreCurve(grid, res, cot, f"{selector_name} (not measured; largest of {', '.join(sorted(self.curves))})",
                          first.measured_on)
