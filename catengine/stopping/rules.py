"""Stopping rules (docs/math.md §5.5), composable with :class:`AnyOf` / :class:`AllOf`."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from statistics import NormalDist
from typing import ClassVar

import numpy as np

from catengine.validation import integer_at_least, is_number, positive_finite
from catengine.estimation.base import TraitEstimate

_NORMAL = NormalDist()


class StopState:
    """What a stopping rule sees: ``n_items`` answered, the current ``estimate``, ``n_eligible``
    (items still eligible), ``max_information()`` (largest point information about theta among
    eligible items at the estimate; computed on first use, O(bank)) and ``predicted_score(level)``
    (the session's default full-benchmark score estimate, ``CATSession.predicted_score``; computed
    on first use per level)."""

    __slots__ = ("n_items", "estimate", "n_eligible", "_max_info", "_max_info_fn", "_scores", "_score_fn")

    def __init__(self, n_items: int, estimate: TraitEstimate, n_eligible: int,
                 max_information: Callable[[], float] | None = None,
                 predicted_score: Callable[[float], object] | None = None):
        self.n_items = n_items
        self.estimate = estimate
        self.n_eligible = n_eligible
        self._max_info = None
        self._max_info_fn = max_information
        self._scores: dict[float, object] = {}
        self._score_fn = predicted_score

    def max_information(self) -> float:
        if self._max_info is None:
            if self._max_info_fn is None:
                raise ValueError("this StopState cannot compute item information (no bank attached)")
            self._max_info = float(self._max_info_fn())
        return self._max_info

    def predicted_score(self, level: float = 0.95):
        if level not in self._scores:
            if self._score_fn is None:
                raise ValueError("this StopState cannot predict the full-benchmark score (no session attached)")
            self._scores[level] = self._score_fn(level)
        return self._scores[level]


class StoppingRule(ABC):
    """Role: decide whether an adaptive test may stop.

    ``reason(state)`` returns a short human-readable reason when the rule is met, else ``None``.
    Implementations are frozen dataclasses validated in ``__post_init__``.
    """

    name: ClassVar[str] = ""

    @abstractmethod
    def reason(self, state: StopState) -> str | None:
        """Why the test may stop now, or None."""

    def is_met(self, state: StopState) -> bool:
        return self.reason(state) is not None


class _ItemCountRule(StoppingRule):
    """Met once ``n`` items were answered. A subclass names the smallest allowed ``n`` and the wording
    of its reason (``{n}`` stands for n) as class keywords: ``class R(_ItemCountRule, smallest_n=1,
    wording="reached {n} items")``; it declares the field ``n`` with its default."""

    smallest_n: ClassVar[int] = 0
    wording: ClassVar[str] = ""

    def __init_subclass__(cls, *, smallest_n: int, wording: str, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.smallest_n, cls.wording = smallest_n, wording

    def __post_init__(self):
        object.__setattr__(self, "n", integer_at_least(self.n, "n", self.smallest_n))

    def reason(self, state):
        return self.wording.format(n=self.n) if state.n_items >= self.n else None


@dataclass(frozen=True)
class MaxItems(_ItemCountRule, smallest_n=1, wording="reached {n} items"):
    """Stop after ``n`` answers."""

    name: ClassVar[str] = "max-items"
    n: int = 50


@dataclass(frozen=True)
class MinItems(_ItemCountRule, smallest_n=0, wording="at least {n} items"):
    """Met once ``n`` items were answered (use inside AllOf to forbid stopping earlier)."""

    name: ClassVar[str] = "min-items"
    n: int = 5


@dataclass(frozen=True)
class StandardErrorBelow(StoppingRule):
    """Met when the posterior SD of ``trait`` ("theta" or "tau") is at most ``target``."""

    name: ClassVar[str] = "se-below"
    target: float = 0.3
    trait: str = "theta"

    def __post_init__(self):
        object.__setattr__(self, "target", positive_finite(self.target, "target"))
        if self.trait not in ("theta", "tau"):
            raise ValueError(f"trait must be 'theta' or 'tau', got {self.trait!r}")

    def reason(self, state):
        sd = state.estimate.theta_sd if self.trait == "theta" else state.estimate.tau_sd
        if sd is None:
            return None
        return f"posterior SD of {self.trait} {sd:.3f} <= {self.target}" if sd <= self.target else None


@dataclass(frozen=True)
class InformationBelow(StoppingRule):
    """No informative item left: every eligible item has point information about theta below
    ``threshold`` at the current estimate (also met when nothing is eligible)."""

    name: ClassVar[str] = "information-below"
    threshold: float = 1e-3

    def __post_init__(self):
        object.__setattr__(self, "threshold", positive_finite(self.threshold, "threshold"))

    def reason(self, state):
        if state.n_eligible == 0:
            return "no eligible item left"
        best = state.max_information()
        return f"no informative item left (max information {best:.2g} < {self.threshold:g})" if best < self.threshold else None


@dataclass(frozen=True)
class RivalOrderDecided(StoppingRule):
    """Met when the order with every named rival LLM is decided: P(theta > theta_k) > ``probability``
    or < 1 - ``probability`` for each rival k.

    ``rivals``: (name, theta, theta_sd) triples, e.g. from the bank's calibration sample with
    :meth:`from_bank`. P(theta > theta_k) = Phi((theta^ - theta_k) / sqrt(sd^2 + sd_k^2)) (the
    subject under test is independent of the calibration sample).
    """

    name: ClassVar[str] = "rival-order"
    rivals: tuple[tuple[str, float, float], ...] = ()
    probability: float = 0.95

    def __post_init__(self):
        items = self.rivals.items() if isinstance(self.rivals, Mapping) else self.rivals
        try:
            if isinstance(self.rivals, Mapping):
                rivals = tuple((str(k), float(v[0]), float(v[1])) for k, v in items)
            else:
                rivals = tuple((str(r[0]), float(r[1]), float(r[2])) for r in items)
        except (TypeError, ValueError, IndexError):
            raise ValueError(f"rivals must be (name, theta, theta_sd) triples, got {self.rivals!r}") from None
        if not rivals:
            raise ValueError("name at least one rival")
        for r in rivals:
            if not (math.isfinite(r[1]) and math.isfinite(r[2]) and r[2] >= 0):
                raise ValueError(f"rival {r[0]!r} needs a finite theta and a finite SD >= 0, got {r[1:]}")
        object.__setattr__(self, "rivals", rivals)
        p = self.probability
        if not is_number(p) or not 0.5 < p < 1:
            raise ValueError(f"probability must lie in (0.5, 1), got {p!r}")

    @classmethod
    def from_bank(cls, bank, rivals, probability: float = 0.95) -> "RivalOrderDecided":
        """Rivals by subject id from the bank's ``subjects`` group (theta and theta_sd)."""
        subjects = bank.subjects
        if subjects is None:
            raise ValueError(f"bank {bank.bank_id!r} stores no calibration subjects; pass rivals as (name, theta, sd)")
        ids = [str(s) for s in subjects["subject"].values]
        position = {s: k for k, s in enumerate(ids)}
        theta = np.asarray(subjects["theta"].values, dtype=float)
        sd = np.asarray(subjects["theta_sd"].values, dtype=float)
        out = []
        for r in rivals:
            if str(r) not in position:
                raise KeyError(f"rival {r!r} is not a subject of bank {bank.bank_id!r}; known: {ids[:10]}{' ...' if len(ids) > 10 else ''}")
            k = position[str(r)]
            out.append((str(r), float(theta[k]), float(sd[k])))
        return cls(rivals=tuple(out), probability=probability)

    def probabilities(self, estimate: TraitEstimate) -> dict[str, float]:
        """P(subject's theta > rival's theta) for each rival."""
        out = {}
        for name, m, s in self.rivals:
            scale = math.sqrt(estimate.theta_sd**2 + s * s)
            out[name] = _NORMAL.cdf((estimate.theta - m) / scale) if scale > 0 else float(estimate.theta > m)
        return out

    def reason(self, state):
        probs = self.probabilities(state.estimate)
        p = self.probability
        if all(v > p or v < 1 - p for v in probs.values()):
            ahead = sum(v > p for v in probs.values())
            return f"order with {len(probs)} rival(s) decided (ahead of {ahead})"
        return None


@dataclass(frozen=True)
class ScoreIntervalBelow(StoppingRule):
    """Met when the interval of the predicted full-benchmark accuracy at ``level`` is at most
    ``half_width`` either side (as a proportion: 0.03 = 3 points): "stop once the score is known to
    within 3 points". The interval is the session's default estimate (``predicted_score()``:
    the model's, or the design-based one for randomised sessions), half its width ``(high - low) /
    2``, so a clipped, asymmetric interval counts by its width. Combine it with ``MinItems`` and a
    ``MaxItems`` cap: a benchmark whose score the answers cannot pin down would otherwise run to
    its end."""

    name: ClassVar[str] = "score-within"
    half_width: float = 0.03
    level: float = 0.95

    def __post_init__(self):
        w = positive_finite(self.half_width, "half_width")
        if w >= 0.5:
            raise ValueError(f"half_width is a proportion of the benchmark and must lie in (0, 0.5), got {w!r}")
        object.__setattr__(self, "half_width", w)
        if not is_number(self.level) or not 0 < self.level < 1:
            raise ValueError(f"level must lie in (0, 1), got {self.level!r}")

    def reason(self, state):
        score = state.predicted_score(self.level)
        half = 0.5 * (score.high - score.low)
        if half <= self.half_width:
            return (f"predicted accuracy {score.accuracy:.1%} known to within +-{100 * half:.1f} points "
                    f"({self.level:.0%} interval, target +-{100 * self.half_width:g} points)")
        return None


def _check_rules(rules) -> tuple[StoppingRule, ...]:
    rules = tuple(rules)
    if not rules:
        raise ValueError("a composite stopping rule needs at least one rule")
    for r in rules:
        if not isinstance(r, StoppingRule):
            raise TypeError(f"expected StoppingRule instances, got {type(r).__name__}")
    return rules


@dataclass(frozen=True, init=False)
class _CompositeRule(StoppingRule):
    """A rule over ``rules``, given as arguments or as one iterable."""

    rules: tuple[StoppingRule, ...]

    def __init__(self, *rules):
        if len(rules) == 1 and not isinstance(rules[0], StoppingRule):
            rules = tuple(rules[0])
        object.__setattr__(self, "rules", _check_rules(rules))


@dataclass(frozen=True, init=False)
class AnyOf(_CompositeRule):
    """Met when any of ``rules`` is met."""

    name: ClassVar[str] = "any-of"

    def reason(self, state):
        for r in self.rules:
            why = r.reason(state)
            if why is not None:
                return why
        return None


@dataclass(frozen=True, init=False)
class AllOf(_CompositeRule):
    """Met when all of ``rules`` are met."""

    name: ClassVar[str] = "all-of"

    def reason(self, state):
        reasons = []
        for r in self.rules:
            why = r.reason(state)
            if why is None:
                return None
            reasons.append(why)
        return " and ".join(reasons)


#: the default stop: the predicted full-benchmark accuracy known to within this many points (95%) ...
DEFAULT_SCORE_HALF_WIDTH = 0.05
#: ... after at least this many answers ...
DEFAULT_MIN_ITEMS = 10
#: ... or at this many answers (both capped at the bank size)
DEFAULT_MAX_ITEMS = 100


def default_stopping(n_items: int) -> StoppingRule:
    """The score users ask for, to a stated precision: stop once the predicted full-benchmark
    accuracy's 95% interval (``predicted_score()``) is at most ``DEFAULT_SCORE_HALF_WIDTH`` (5 points)
    either side after at least ``DEFAULT_MIN_ITEMS`` answers, or at ``DEFAULT_MAX_ITEMS`` answers;
    both counts capped at the bank size. The stop reason says which."""
    n = int(n_items)
    if n < 1:
        raise ValueError(f"a bank has at least one item, got n_items={n_items!r}")
    return AnyOf(AllOf(MinItems(min(DEFAULT_MIN_ITEMS, n)), ScoreIntervalBelow(DEFAULT_SCORE_HALF_WIDTH)),
                 MaxItems(min(DEFAULT_MAX_ITEMS, n)))


def item_limit(rule: StoppingRule) -> int | None:
    """The number of answers after which ``rule`` certainly stops (a MaxItems reachable through
    AnyOf only; the smallest if several), or None if it has no such hard limit. Batches
    (``CATSession.next_items``) never propose beyond it."""
    if isinstance(rule, MaxItems):
        return int(rule.n)
    if isinstance(rule, AnyOf):
        limits = [n for n in (item_limit(r) for r in rule.rules) if n is not None]
        return min(limits) if limits else None
    if isinstance(rule, AllOf):  # stops only when every part does: the largest limit, if all have one
        limits = [item_limit(r) for r in rule.rules]
        return None if any(n is None for n in limits) else max(limits)
    return None
