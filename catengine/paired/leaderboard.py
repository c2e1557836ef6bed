"""Leaderboards: several LLMs' full-benchmark accuracies on one bank, ranked, with the pairs that
cannot be separated shown as ties and the error controlled over all pairs at once
(``catengine rank``; docs/comparisons.md).

Each LLM's score is its session's default ``predicted_score()`` (one adaptive test per LLM, read
from its session log). Sessions of different LLMs are independent given their items, so the
difference of two accuracies has standard error ``sqrt(sd_i^2 + sd_k^2)``, with each ``sd`` read
off its score's 95% interval (the larger half-width over ``z_0.975``, so a Student-t or asymmetric
interval keeps its width). Over the ``P = K (K - 1) / 2`` pairs of ``K`` LLMs:

* ``bonferroni`` (default): each difference's interval at level ``1 - alpha / P``; a pair is
  separated when its interval excludes 0. All intervals hold at once with probability at least
  ``1 - alpha``, so every separated pair is in the right order with that probability.
* ``holm``: Holm's step-down on the pairs' two-sided p-values (separates at least the pairs
  Bonferroni does); the intervals shown are still Bonferroni's.

A pair not separated is a tie. Each LLM's rank range runs from 1 + the LLMs separated above it to
K - the LLMs separated below it.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import NormalDist

__all__ = ["CORRECTIONS", "Leaderboard", "PairResult", "Score", "leaderboard_from_logs", "rank", "scores_from_logs"]

CORRECTIONS = ("bonferroni", "holm")
_NORMAL = NormalDist()


@dataclass(frozen=True)
class Score:
    """One LLM's predicted full-benchmark accuracy with its 95% interval (``sd``: the standard error
    used for differences)."""

    subject: str
    accuracy: float
    low: float
    high: float
    sd: float
    n_items: int = 0
    method: str = ""
    source: str = ""

    @classmethod
    def from_estimate(cls, subject: str, estimate, *, source: str = "") -> "Score":
        """From a ``ScoreEstimate`` (any level): ``sd`` = the larger half-width over the level's z."""
        z = _NORMAL.inv_cdf(0.5 + float(estimate.level) / 2)
        half = max(float(estimate.high) - float(estimate.accuracy), float(estimate.accuracy) - float(estimate.low))
        return cls(subject=str(subject), accuracy=float(estimate.accuracy), low=float(estimate.low),
                   high=float(estimate.high), sd=max(half, 0.0) / z, n_items=int(estimate.n_observed),
                   method=str(estimate.method), source=str(source))


@dataclass(frozen=True)
class PairResult:
    """Accuracy of ``a`` minus ``b`` with its simultaneous interval, p-value and whether the pair is
    separated (``better``: the one ranked above when separated)."""

    a: str
    b: str
    difference: float
    low: float
    high: float
    p_value: float
    separated: bool

    @property
    def better(self) -> str | None:
        if not self.separated:
            return None
        return self.a if self.difference > 0 else self.b


@dataclass(frozen=True)
class Leaderboard:
    """Scores ranked by accuracy (highest first), every pair's result, and the error control used."""

    scores: tuple[Score, ...]
    pairs: tuple[PairResult, ...]
    alpha: float
    correction: str
    pair_level: float
    _index: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self):
        index = {}
        for p in self.pairs:
            index[(p.a, p.b)] = p
            index[(p.b, p.a)] = p
        object.__setattr__(self, "_index", index)

    def pair(self, a: str, b: str) -> PairResult:
        return self._index[(a, b)]

    def ties(self, subject: str) -> list[str]:
        """The LLMs not separated from ``subject``, in leaderboard order."""
        return [s.subject for s in self.scores if s.subject != subject and not self.pair(subject, s.subject).separated]

    def rank_range(self, subject: str) -> tuple[int, int]:
        above = below = 0
        for s in self.scores:
            if s.subject == subject:
                continue
            p = self.pair(subject, s.subject)
            if p.separated:
                if p.better == s.subject:
                    above += 1
                else:
                    below += 1
        return 1 + above, len(self.scores) - below

    def to_dict(self) -> dict:
        return {"alpha": self.alpha, "correction": self.correction, "pair_level": self.pair_level,
                "scores": [{**asdict(s), "rank": list(self.rank_range(s.subject)), "ties": self.ties(s.subject)}
                           for s in self.scores],
                "pairs": [{**asdict(p), "better": p.better} for p in self.pairs]}

    def lines(self) -> list[str]:
        """The leaderboard as text: rank range, LLM, accuracy [interval], items, ties."""
        width = max([len(s.subject) for s in self.scores] + [3])
        out = [f"{'rank':>7s}  {'LLM':{width}s}  {'accuracy':>8s}  {'95% interval':>15s}  {'items':>5s}  tied with"]
        for s in self.scores:
            best, worst = self.rank_range(s.subject)
            rank_text = str(best) if best == worst else f"{best}-{worst}"
            ties = self.ties(s.subject)
            out.append(f"{rank_text:>7s}  {s.subject:{width}s}  {100 * s.accuracy:7.1f}%  "
                       f"[{100 * s.low:5.1f}, {100 * s.high:5.1f}]  {s.n_items:5d}  "
                       + (", ".join(ties) if ties else "-"))
        n_sep = sum(p.separated for p in self.pairs)
        out.append(f"{n_sep} of {len(self.pairs)} pairs separated ({self.correction}, familywise error "
                   f"{self.alpha:g}: every separated pair is in the right order with probability at least "
                   f"{1 - self.alpha:g}); the others are ties")
        return out


def rank(scores, *, alpha: float = 0.05, correction: str = "bonferroni") -> Leaderboard:
    """The leaderboard of ``scores`` (:class:`Score` objects of different LLMs on one bank)."""
    scores = list(scores)
    if len(scores) < 2:
        raise ValueError(f"a leaderboard needs at least two LLMs, got {len(scores)}")
    names = [s.subject for s in scores]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"subject(s) {', '.join(map(repr, dup))} appear twice")
    alpha = float(alpha)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {CORRECTIONS}, got {correction!r}")
    ordered = sorted(scores, key=lambda s: (-s.accuracy, s.subject))
    raw = []
    for i, a in enumerate(ordered):
        for b in ordered[i + 1:]:
            d = a.accuracy - b.accuracy
            se = math.hypot(a.sd, b.sd)
            p = 0.0 if se == 0.0 and d != 0.0 else (1.0 if se == 0.0 else 2.0 * (1.0 - _NORMAL.cdf(abs(d) / se)))
            raw.append((a.subject, b.subject, d, se, p))
    P = len(raw)
    z = _NORMAL.inv_cdf(1.0 - alpha / (2 * P))
    separated = [p < alpha / P for *_, p in raw]
    if correction == "holm":
        order = sorted(range(P), key=lambda k: raw[k][4])
        separated = [False] * P
        for step, k in enumerate(order):
            if raw[k][4] < alpha / (P - step):
                separated[k] = True
            else:
                break
    pairs = tuple(PairResult(a=a, b=b, difference=d, low=d - z * se, high=d + z * se, p_value=p, separated=sep)
                  for (a, b, d, se, p), sep in zip(raw, separated))
    return Leaderboard(scores=tuple(ordered), pairs=pairs, alpha=alpha, correction=correction,
                       pair_level=1.0 - alpha / P)


def scores_from_logs(logs, bank=None) -> list[Score]:
    """Every subject's default ``predicted_score()`` from session logs (``catengine run`` /
    ``evaluate`` / ``CATSession`` / ``Engine`` logs, one or several subjects each). The logs are
    read, not changed: each is replayed from a temporary copy. ``bank``: the bank they ran on
    (default: the one the first log names); every log must have run on it."""
    from catengine.session import resume

    scores = []
    with tempfile.TemporaryDirectory(prefix="catengine-rank-") as tmp:
        for k, log in enumerate(logs):
            path = Path(log)
            if not path.is_file():
                raise FileNotFoundError(f"session log {path} does not exist")
            copy = Path(tmp) / f"{k}.jsonl"
            shutil.copyfile(path, copy)
            engine = resume(copy, bank)
            try:
                bank = engine.bank
                for subject, session in engine.sessions.items():
                    if session.n_items == 0:
                        continue
                    scores.append(Score.from_estimate(subject, session.predicted_score(by=False), source=str(path)))
            finally:
                engine.close()
    return scores


def leaderboard_from_logs(logs, bank=None, *, alpha: float = 0.05, correction: str = "bonferroni") -> Leaderboard:
    """:func:`rank` of :func:`scores_from_logs`."""
    return rank(scores_from_logs(logs, bank), alpha=alpha, correction=correction)
