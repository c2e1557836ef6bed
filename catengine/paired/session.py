"""``PairedSession``: two LLMs asked the same items, and which one is better on the full benchmark,
with an interval that holds at a data-dependent stop (docs/comparisons.md).

>>> pair = PairedSession(bank, rng=7)
>>> while not pair.finished:
...     item = pair.next_item()
...     pair.record(item, correct_a, correct_b)          # cot_length_a=, cot_length_b= on LaRT banks
>>> c = pair.comparison()
>>> c.difference, c.low, c.high, c.decision             # "a", "b", "tie" or "undecided"

Each step draws one item at random with known probabilities that favour the items whose answers
the two LLMs' current trait estimates leave most uncertain, mixed with a uniform share; both LLMs
answer it. Every draw gives a term whose conditional mean is the full-benchmark difference
``A_a - A_b`` whatever the bank's model gets wrong (the model only serves as a control variate),
and the interval is a confidence sequence over those terms (``catengine.paired.confidence``): it
holds the difference at every step at once with probability at least ``1 - alpha``. Each LLM's
trait is estimated by its own :class:`~catengine.session.CATSession` (no log), which also
predicts its chain-of-thought total on LaRT banks.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from catengine.closing import Closing
from catengine.errors import BankExhaustedError
from catengine.models.information import prob_correct
from catengine.paired.confidence import CONFIDENCE_SEQUENCES
from catengine.paired.design import draw_probabilities, informative_weights, power_tuning, step_parts
from catengine.session.bank_log import bank_fingerprint, item_table
from catengine.session.errors import InvalidResponseError, SessionLogError, UnknownItemError
from catengine.session.log import LogWriter, restore_rng, rng_state_to_json
from catengine.session.session import CATSession

__all__ = ["Comparison", "DECISIONS", "DEFAULT_MAX_ITEMS", "PairedSession", "PairedStep", "PairedStopping",
           "PAIRED_LOG_FORMAT", "read_paired_log"]

DECISIONS = ("a", "b", "tie", "undecided")
PAIRED_LOG_FORMAT = "catengine.paired-log"
PAIRED_LOG_VERSION = 1
#: the uniform share of the draw probabilities (each item's probability is at least this over the
#: number of items left)
DEFAULT_UNIFORM_SHARE = 0.5
#: the betting sequence's truncation: every bet keeps at least 1 - this of the capital
DEFAULT_TRUNCATION = 0.75
#: a paired session's default item cap (or the whole comparison when it has fewer items): pairs far
#: apart stop long before it, so it sets what a close pair may cost (docs/comparisons.md, "The
#: default cap", measured with benchmarks/paired.py)
DEFAULT_MAX_ITEMS = 500


def _check_correct(value, what: str) -> int:
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer, float, np.floating)) and float(value) in (0.0, 1.0):
        return int(value)
    raise InvalidResponseError(f"{what} must be 0 or 1 (also accepted: 0.0, 1.0, true, false), got {value!r}")


@dataclass(frozen=True)
class PairedStopping:
    """When a paired session stops: once decided (``"a"`` / ``"b"``, ``on_decision``), tied
    (``on_tie``) or after ``max_items`` items (None: :data:`DEFAULT_MAX_ITEMS`, or every item
    compared when there are fewer), never before ``min_items``; always when no item is left. The
    confidence sequence is valid at any of these stops, or at any other."""

    max_items: int | None = None
    min_items: int = 0
    on_decision: bool = True
    on_tie: bool = True

    def __post_init__(self):
        if self.max_items is not None and (isinstance(self.max_items, bool) or int(self.max_items) != self.max_items
                                           or self.max_items < 1):
            raise ValueError(f"max_items must be a positive integer or None, got {self.max_items!r}")
        if isinstance(self.min_items, bool) or int(self.min_items) != self.min_items or self.min_items < 0:
            raise ValueError(f"min_items must be a non-negative integer, got {self.min_items!r}")

    def cap(self, n_items: int) -> int:
        """The item cap of a comparison over ``n_items`` items."""
        return min(int(self.max_items if self.max_items is not None else DEFAULT_MAX_ITEMS), n_items)


def _stopping(stopping) -> PairedStopping:
    if stopping is None:
        return PairedStopping()
    if isinstance(stopping, PairedStopping):
        return stopping
    from catengine.stopping import MaxItems

    if isinstance(stopping, MaxItems):
        return PairedStopping(max_items=int(stopping.n))
    if isinstance(stopping, (int, np.integer)) and not isinstance(stopping, bool):
        return PairedStopping(max_items=int(stopping))
    raise TypeError(f"stopping must be a PairedStopping, a MaxItems, an item count or None, got {type(stopping).__name__}")


@dataclass(frozen=True)
class PairedStep:
    """One paired answer: the item, both answers, its draw probability, the control variate's weight
    ``kappa``, the term it gave and the interval after it."""

    step: int
    item: str
    correct_a: int
    correct_b: int
    cot_length_a: float | None
    cot_length_b: float | None
    probability: float
    kappa: float
    term: float
    low: float
    high: float


@dataclass(frozen=True)
class Comparison:
    """The full-benchmark comparison of two LLMs after ``n_items`` paired answers.

    * ``difference``: the estimated full-benchmark accuracy of a minus b over the ``n_bank_items``
      items compared (the mean of the design's terms, kept inside the interval; ``design_mean`` is
      the mean itself), ``low`` / ``high``: the confidence sequence at ``level`` (valid at any
      stop), ``decision``: ``"a"`` (low > 0), ``"b"`` (high < 0), ``"tie"`` (the interval lies
      within +-``margin``) or ``"undecided"``;
    * ``method``: ``"paired"`` (both LLMs answer) or ``"against-known"`` (side b's answers are known
      for every item: a calibration LLM of the bank); ``interval``: the confidence sequence used;
    * ``model_difference``, ``accuracy_a``, ``accuracy_b``: the model's predictions (answered items
      count as answered; side b exact when known); ``kappa``: the control variate's weight for the
      next draw;
    * LaRT banks: ``cot_total_a`` / ``cot_total_b`` (predicted chain-of-thought tokens for running
      every compared item once; exact for a known side b when its lengths are stored),
      ``cot_difference`` (a - b), and ``cot_difference_design`` with ``cot_difference_sd``: the same
      difference estimated from the draws alone (unbiased whatever the model gets wrong; its SD a
      martingale central-limit figure, not a confidence sequence), None without lengths.
    """

    difference: float
    low: float
    high: float
    decision: str
    n_items: int
    method: str
    interval: str
    level: float
    margin: float
    n_bank_items: int
    subject_a: str
    subject_b: str
    design_mean: float
    model_difference: float
    accuracy_a: float
    accuracy_b: float
    kappa: float
    stop_reason: str | None = None
    cot_total_a: float | None = None
    cot_total_b: float | None = None
    cot_difference: float | None = None
    cot_difference_design: float | None = None
    cot_difference_sd: float | None = None

    def __post_init__(self):
        if self.decision not in DECISIONS:
            raise ValueError(f"decision must be one of {DECISIONS}, got {self.decision!r}")

    @property
    def winner(self) -> str | None:
        """The subject id of the better LLM when decided, else None."""
        return {"a": self.subject_a, "b": self.subject_b}.get(self.decision)

    def to_dict(self) -> dict:
        out = asdict(self)
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in out.items()}

    def summary(self) -> str:
        """One line: the difference in points with its interval and the decision."""
        verdict = {"a": f"{self.subject_a} is better", "b": f"{self.subject_b} is better",
                   "tie": f"tie within +-{100 * self.margin:g} points", "undecided": "undecided"}[self.decision]
        return (f"{self.subject_a} - {self.subject_b}: {100 * self.difference:+.1f} points "
                f"[{100 * self.low:+.1f}, {100 * self.high:+.1f}] ({100 * self.level:g}% confidence sequence, "
                f"{self.n_items} of {self.n_bank_items} items): {verdict}")


class PairedSession(Closing):
    """Two LLMs compared on the same items (module docstring).

    * ``stopping``: a :class:`PairedStopping`, a ``MaxItems`` or an item cap (default: stop once
      decided or tied, else after :data:`DEFAULT_MAX_ITEMS` items);
    * ``margin``: the half-width of a tie, a proportion (0.01 = 1 point); ``alpha``: the confidence
      sequence's error (its level is ``1 - alpha``);
    * ``rng``: Generator | int | None, drawn from for the design's draws only; ``log``: a path, every
      proposal and answer appended as JSON lines (:meth:`resume` rebuilds the session from it);
    * ``subjects``: the two LLMs' names (labels only); ``items``: the bank items compared (default
      all), e.g. the ones both LLMs have answers for;
    * ``uniform_share`` (default 0.5): the share of each draw's probability spread evenly;
      ``power_tuning`` (default on): weight the model's predictions by the ``kappa`` in [0, 1]
      that minimises the terms' variance over the earlier draws; ``confidence``: ``"betting"``
      (default) or ``"empirical-bernstein"``; ``truncation``: the bets' cap.

    ``next_item()`` proposes an item (the same one until it is answered); ``record(item, correct_a,
    correct_b, cot_length_a=None, cot_length_b=None)`` takes both answers to it. Only proposed items
    can be recorded: the guarantee rests on the draws' known probabilities.
    """

    def __init__(self, bank, *, stopping=None, margin: float = 0.01, alpha: float = 0.05, rng=None, log=None,
                 subjects=("a", "b"), items=None, uniform_share: float = DEFAULT_UNIFORM_SHARE,
                 power_tuning: bool = True, confidence: str = "betting", truncation: float = DEFAULT_TRUNCATION,
                 fsync: bool = False):
        self._set_up(bank, None, stopping=stopping, margin=margin, alpha=alpha, rng=rng, log=log, subjects=subjects,
                     items=items, uniform_share=uniform_share, power_tuning=power_tuning, confidence=confidence,
                     truncation=truncation, fsync=fsync)

    def _set_up(self, bank, known, *, stopping=None, margin: float = 0.01, alpha: float = 0.05, rng=None, log=None,
                subjects=("a", "b"), items=None, uniform_share: float = DEFAULT_UNIFORM_SHARE, power_tuning: bool = True,
                confidence: str = "betting", truncation: float = DEFAULT_TRUNCATION, fsync: bool = False) -> None:
        """The constructor's work; ``known``: side b's recorded answers when it is a calibration LLM
        (:meth:`against_calibration`), else None."""
        _known = known
        self.bank = bank
        self.params = bank.params
        self.stopping = _stopping(stopping)
        margin = float(margin)
        if not 0.0 <= margin < 1.0 or not math.isfinite(margin):
            raise ValueError(f"margin must be a proportion in [0, 1), got {margin!r}")
        self.margin = margin
        alpha = float(alpha)
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
        self.alpha = alpha
        if confidence not in CONFIDENCE_SEQUENCES:
            raise ValueError(f"confidence must be one of {sorted(CONFIDENCE_SEQUENCES)}, got {confidence!r}")
        self.confidence = confidence
        self.uniform_share = float(uniform_share)
        if not 0.0 < self.uniform_share <= 1.0:
            raise ValueError(f"uniform_share must lie in (0, 1], got {uniform_share!r}")
        self.power_tuning = bool(power_tuning)
        self.truncation = float(truncation)
        subjects = tuple(str(s) for s in subjects)
        if len(subjects) != 2 or subjects[0] == subjects[1] or not all(subjects):
            raise ValueError(f"subjects must be two different non-empty names, got {subjects!r}")
        self.subjects = subjects
        self._rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        self._rng_start = rng_state_to_json(self._rng)

        # the items compared (the population), as bank indices
        if items is None:
            population = np.arange(bank.n_items)
        else:
            population = np.array([self._bank_index(i) for i in items], dtype=np.int64)
            if population.size == 0:
                raise ValueError("items is empty: nothing to compare")
            if np.unique(population).size != population.size:
                raise ValueError("items names an item twice")
        self._population = population
        self._position = {int(j): k for k, j in enumerate(population)}
        J = population.size
        self.n_bank_items = J

        # side b known (a calibration LLM of the bank) or asked
        self._known = _known
        if _known is not None:
            yb = np.asarray(_known["correct"], dtype=float)
            if yb.shape != (J,) or not np.all((yb == 0) | (yb == 1)):
                raise ValueError("the known side's answers must be 0/1, one per compared item")
            self._yb = yb.astype(np.int64)
            self._offset = -yb  # c_j: the exactly known part of delta's prediction
            self._lo, self._hi = -yb, 1.0 - yb
        else:
            self._yb = None
            self._offset = np.zeros(J)
            self._lo, self._hi = -np.ones(J), np.ones(J)

        grid = np.arange(int(round(self._lo.sum())), int(round(self._hi.sum())) + 1) / J
        self._cs = CONFIDENCE_SEQUENCES[confidence](grid, alpha=alpha, truncation=self.truncation)
        self._remaining = np.ones(J, dtype=bool)
        self._answered_sum = 0.0
        self._terms: list[float] = []
        self._terms0: list[float] = []
        self._terms1: list[float] = []
        self._cot_terms: list[float | None] = []
        self._history: list[PairedStep] = []
        self._pending = None
        self._sessions = [CATSession(bank, subject=subjects[0])]
        self._sessions.append(None if _known is not None else CATSession(bank, subject=subjects[1]))
        self._cot_answered = 0.0  # sum of (T_a - T_b) over the answered items (None once a length is missing)

        self._owns_writer = False
        self._writer = None
        if log is not None:
            self._writer = LogWriter(log, fsync=fsync)
            self._owns_writer = True
            self._writer.write(self._header())

    # ------------------------------------------------------------------ construction variants
    @classmethod
    def against_calibration(cls, bank, subject: str, *, name: str = "a", items=None, **kwargs) -> "PairedSession":
        """One LLM (side a, labelled ``name``) against the calibration LLM ``subject`` of ``bank``
        (side b), whose answers the bank stores (``bank.responses``): only side a is asked, and
        side b's full-benchmark accuracy is known exactly, so the interval carries side a's
        uncertainty alone. The items compared are those ``subject`` has answers for (and, if
        given, among ``items``)."""
        responses = bank.responses
        if responses is None:
            raise ValueError(f"bank {bank.bank_id!r} keeps no calibration responses: there is no LLM to compare against")
        ids = [str(s) for s in responses["subject"].values]
        if subject not in ids:
            close = [s for s in ids if subject.lower() in s.lower()][:5]
            raise KeyError(f"{subject!r} is not a calibration LLM of bank {bank.bank_id!r}"
                           + (f"; did you mean {', '.join(map(repr, close))}?" if close else
                              f" ({len(ids)} runs, e.g. {', '.join(map(repr, ids[:3]))})"))
        row = ids.index(subject)
        item_ids = [str(i) for i in responses["item"].values]
        correct = np.asarray(responses["correct"].values[row], dtype=float)
        cots = np.asarray(responses["cot_length"].values[row], dtype=float) if "cot_length" in responses else None
        by_id = {i: k for k, i in enumerate(item_ids)}
        wanted = list(bank.item_ids) if items is None else [str(i) for i in items]
        chosen = [i for i in wanted if i in by_id and correct[by_id[i]] in (0.0, 1.0)]
        if not chosen:
            raise ValueError(f"{subject!r} has no answers to the items compared")
        cols = [by_id[i] for i in chosen]
        known = {"subject": subject, "correct": correct[cols],
                 "cot": None if cots is None or np.any(~np.isfinite(cots[cols])) else cots[cols]}
        self = cls.__new__(cls)
        self._set_up(bank, known, subjects=(name, subject),
                     items=chosen if len(chosen) < bank.n_items or items is not None else None, **kwargs)
        return self

    # ------------------------------------------------------------------ views
    @property
    def method(self) -> str:
        return "paired" if self._known is None else "against-known"

    @property
    def sessions(self) -> tuple:
        """The two sides' trait sessions (``CATSession``; None for a known side b)."""
        return tuple(self._sessions)

    @property
    def item_ids(self) -> list[str]:
        """The bank items compared (``items=``, default every item of the bank), in bank order."""
        return [self.bank.item_ids[int(j)] for j in self._population]

    @property
    def history(self) -> list[PairedStep]:
        return list(self._history)

    @property
    def n_items(self) -> int:
        """Paired answers recorded."""
        return len(self._history)

    @property
    def rng(self) -> np.random.Generator:
        return self._rng

    @property
    def pending_item(self) -> str | None:
        return None if self._pending is None else self.bank.item_ids[int(self._population[self._pending["position"]])]

    def _bounds(self) -> tuple[float, float]:
        """The attainable range of the difference: every unanswered delta at its extremes."""
        J = self.n_bank_items
        rem = self._remaining
        return ((self._answered_sum + self._lo[rem].sum()) / J, (self._answered_sum + self._hi[rem].sum()) / J)

    def interval(self) -> tuple[float, float]:
        """The confidence sequence now, intersected with the attainable range."""
        low, high = self._cs.interval()
        lo_bound, hi_bound = self._bounds()
        low, high = max(low, lo_bound), min(high, hi_bound)
        if low > high:  # only after the sequence has failed (probability <= alpha): the attainable range decides
            low, high = (lo_bound, hi_bound) if not self._remaining.any() else (min(low, high), max(low, high))
        return low, high

    def decision(self) -> str:
        low, high = self.interval()
        tol = 1e-12
        if low > tol:
            return "a"
        if high < -tol:
            return "b"
        if low >= -self.margin - tol and high <= self.margin + tol:
            return "tie"
        return "undecided"

    @property
    def stop_reason(self) -> str | None:
        n = self.n_items
        if not self._remaining.any():
            return "every item compared was answered"
        if n < self.stopping.min_items:
            return None
        decision = self.decision()
        if decision in ("a", "b") and self.stopping.on_decision:
            return f"decided: {self.subjects[0 if decision == 'a' else 1]} is better"
        if decision == "tie" and self.stopping.on_tie:
            return f"tie within +-{100 * self.margin:g} points"
        cap = self.stopping.cap(self.n_bank_items)
        if n >= cap:
            return f"reached {cap} items"
        return None

    @property
    def finished(self) -> bool:
        return self.stop_reason is not None

    # ------------------------------------------------------------------ the loop
    def _bank_index(self, item_id) -> int:
        try:
            return self.bank.index_of(str(item_id))
        except KeyError:
            raise UnknownItemError(f"item {str(item_id)[:200]!r} is not in bank {self.bank.bank_id!r}") from None

    def _model(self, positions):
        """(g, Var(delta)) of the given population positions at the current trait estimates."""
        idx = self._population[positions]
        p_a = prob_correct(self.params, self._sessions[0].estimate.theta, idx)
        if self._known is not None:
            return p_a, p_a * (1.0 - p_a), informative_weights(p_a)
        p_b = prob_correct(self.params, self._sessions[1].estimate.theta, idx)
        return p_a - p_b, p_a * (1.0 - p_a) + p_b * (1.0 - p_b), informative_weights(p_a, p_b)

    def next_item(self) -> str:
        """The item both LLMs answer next (the same one until it is recorded). Raises
        :class:`BankExhaustedError` when every compared item was answered. It keeps proposing after
        the stopping rule is met; check :attr:`finished` to stop."""
        if self._pending is not None:
            return self.pending_item
        remaining = np.flatnonzero(self._remaining)
        if remaining.size == 0:
            raise BankExhaustedError(f"all {self.n_bank_items} items compared have been answered")
        g, var, weights = self._model(remaining)
        pi = draw_probabilities(weights, self.uniform_share)
        kappa = power_tuning(self._terms0, self._terms1) if self.power_tuning else 1.0
        parts = step_parts(self._answered_sum, self.n_bank_items, self._offset[remaining], g, self._lo[remaining],
                           self._hi[remaining], var, pi, kappa)
        rng_before = rng_state_to_json(self._rng) if self._writer is not None else None
        k = int(np.searchsorted(np.cumsum(pi), self._rng.random() * pi.sum(), side="right"))
        k = min(k, remaining.size - 1)
        cot = self._cot_parts(remaining, pi, k)
        self._pending = {"position": int(remaining[k]), "probability": float(pi[k]), "g": float(g[k]), "parts": parts,
                         "cot": cot}
        item = self.pending_item
        self._emit({"event": "propose", "step": self.n_items + 1, "item": item, "probability": float(pi[k]),
                    "kappa": kappa, "rng": rng_before})
        return item

    def record(self, item, correct_a, correct_b=None, cot_length_a=None, cot_length_b=None, *,
               evidence: dict | None = None) -> Comparison:
        """Both LLMs' answers to the proposed item (0/1) and, on LaRT banks, their CoT lengths in
        tokens (as ``CATSession.record`` takes them). Against a known side b, ``correct_b`` may be
        left out (its stored answer is used; given, it must agree). ``evidence``: a JSON-able dict
        kept with the answer in the log (e.g. both replies and their grades; not read on resume).
        Returns the comparison (without the model's CoT figures: :meth:`comparison` has them). Bad
        input raises and leaves the session unchanged."""
        if self._pending is None or str(item) != self.pending_item:
            expected = self.pending_item
            raise InvalidResponseError(
                f"record answers to the proposed item ({expected!r})" if expected is not None else
                "no item is proposed: call next_item() first (only proposed items can be recorded)")
        pos = self._pending["position"]
        y_a = _check_correct(correct_a, "correct_a")
        if self._known is not None:
            y_b = int(self._yb[pos])
            if correct_b is not None and _check_correct(correct_b, "correct_b") != y_b:
                raise InvalidResponseError(f"correct_b {correct_b!r} disagrees with {self.subjects[1]!r}'s stored answer {y_b}")
            if cot_length_b is None and self._known.get("cot") is not None:
                cot_length_b = float(self._known["cot"][pos])
        else:
            if correct_b is None:
                raise InvalidResponseError("correct_b is required: both LLMs answer every item")
            y_b = _check_correct(correct_b, "correct_b")
        item = self.pending_item
        a_session, b_session = self._sessions
        a_session.record(item, y_a, cot_length_a)
        if b_session is not None:
            try:
                b_session.record(item, y_b, cot_length_b)
            except BaseException:
                self._sessions[0] = self._rebuilt(0)
                raise
        self._apply(pos, y_a, y_b, cot_length_a, cot_length_b, evidence)
        return self.comparison(details=False)

    def _rebuilt(self, side: int) -> CATSession:
        """Side ``side``'s trait session again from the recorded steps (after the other side refused
        an answer half-way through a record)."""
        session = CATSession(self.bank, subject=self.subjects[side])
        for step in self._history:
            session.record(step.item, step.correct_a if side == 0 else step.correct_b,
                           step.cot_length_a if side == 0 else step.cot_length_b)
        return session

    def _apply(self, pos: int, y_a: int, y_b: int, cot_a, cot_b, evidence=None) -> None:
        p = self._pending
        parts, pi, g = p["parts"], p["probability"], p["g"]
        J = self.n_bank_items
        delta = float(y_a - y_b)
        c = float(self._offset[pos])
        x = parts.base + (delta - c - parts.kappa * g) / (J * pi)
        x0 = parts.base0 + (delta - c) / (J * pi)
        x1 = parts.base1 + (delta - c - g) / (J * pi)
        self._cs.update(x, parts.lower, parts.upper, parts.mean_guess, parts.variance_guess)
        self._terms.append(x)
        self._terms0.append(x0)
        self._terms1.append(x1)
        self._cot_terms.append(self._cot_term(p["cot"], cot_a, cot_b))
        self._answered_sum += delta
        self._remaining[pos] = False
        self._pending = None
        low, high = self.interval()
        step = PairedStep(step=len(self._history) + 1, item=self.bank.item_ids[int(self._population[pos])],
                          correct_a=y_a, correct_b=y_b, cot_length_a=None if cot_a is None else float(cot_a),
                          cot_length_b=None if cot_b is None else float(cot_b), probability=pi, kappa=parts.kappa,
                          term=x, low=low, high=high)
        self._history.append(step)
        event = {"event": "record", "step": step.step, "item": step.item, "correct_a": y_a, "correct_b": y_b,
                 "cot_length_a": step.cot_length_a, "cot_length_b": step.cot_length_b, "term": x,
                 "low": low, "high": high, "decision": self.decision()}
        if evidence is not None:
            event["evidence"] = evidence
        self._emit(event)

    # ------------------------------------------------------------------ chain-of-thought (LaRT banks)
    def _expected_cot(self, side: int, positions) -> np.ndarray | None:
        """E[T_j] under each side's tau posterior (closed form), or the known side's stored lengths."""
        if not self.params.model.has_cot:
            return None
        if side == 1 and self._known is not None:
            cot = self._known.get("cot")
            return None if cot is None else cot[positions]
        est = self._sessions[side].estimate
        if est.tau is None or not math.isfinite(est.tau):
            return None
        idx = self._population[positions]
        p = self.params
        tau_sd = est.tau_sd if est.tau_sd is not None and math.isfinite(est.tau_sd) else 0.0
        return p.model.expected_cot_length(p, est.tau, tau_sd, self.bank.effective_cot_offset, idx)

    def _cot_parts(self, remaining, pi, k):
        """The CoT difference's design term parts for a draw (None on logistic banks)."""
        f_a = self._expected_cot(0, remaining)
        f_b = self._expected_cot(1, remaining)
        if f_a is None or f_b is None:
            return None
        f = f_a - f_b
        return {"base": float(f.sum()), "f": float(f[k]), "pi": float(pi[k])}

    def _cot_term(self, parts, cot_a, cot_b):
        """The draw's term of the CoT-total difference, and the answered sum updated with it."""
        if parts is None or cot_a is None or cot_b is None or self._cot_answered is None:
            self._cot_answered = None
            return None
        diff = float(cot_a) - float(cot_b)
        term = self._cot_answered + parts["base"] + (diff - parts["f"]) / parts["pi"]
        self._cot_answered += diff
        return term

    def _cot_totals(self):
        """Model-based CoT totals of both sides over the compared items, and the design estimate of
        their difference with its SD (None where lengths are missing)."""
        if not self.params.model.has_cot:
            return None, None, None, None
        totals = []
        answered = np.flatnonzero(~self._remaining)
        rest = np.flatnonzero(self._remaining)
        by_item = {s.item: s for s in self._history}
        for side in (0, 1):
            f = self._expected_cot(side, np.arange(self.n_bank_items))
            if f is None:
                totals.append(None)
                continue
            total = float(f[rest].sum())
            for pos in answered:
                step = by_item[self.bank.item_ids[int(self._population[pos])]]
                value = step.cot_length_a if side == 0 else step.cot_length_b
                total += float(f[pos]) if value is None else value
            totals.append(total)
        terms = self._cot_terms
        design = sd = None
        if terms and all(t is not None for t in terms):
            design = float(np.mean(terms))
            sd = float(np.std(terms, ddof=1) / math.sqrt(len(terms))) if len(terms) > 1 else math.inf
        return totals[0], totals[1], design, sd

    # ------------------------------------------------------------------ the comparison
    def comparison(self, details: bool = True) -> Comparison:
        """The comparison now (:class:`Comparison`). ``details=False`` leaves out the model's CoT
        totals (the part that costs a pass over the bank)."""
        low, high = self.interval()
        J = self.n_bank_items
        mean = float(np.mean(self._terms)) if self._terms else float("nan")
        difference = min(max(mean, low), high) if self._terms else 0.5 * (low + high)
        idx = self._population[np.flatnonzero(self._remaining)]
        known_a = float(sum(s.correct_a for s in self._history))
        p_a = prob_correct(self.params, self._sessions[0].estimate.theta, idx) if idx.size else np.zeros(0)
        acc_a = (known_a + float(p_a.sum())) / J
        if self._known is None:
            p_b = prob_correct(self.params, self._sessions[1].estimate.theta, idx) if idx.size else np.zeros(0)
            acc_b = (float(sum(s.correct_b for s in self._history)) + float(p_b.sum())) / J
        else:
            acc_b = float(self._yb.sum()) / J
        model_difference = acc_a - acc_b
        cot_a = cot_b = cot_design = cot_sd = None
        if details:
            cot_a, cot_b, cot_design, cot_sd = self._cot_totals()
        return Comparison(
            difference=float(difference), low=float(low), high=float(high), decision=self.decision(),
            n_items=self.n_items, method=self.method, interval=f"{self.confidence} confidence sequence",
            level=1.0 - self.alpha, margin=self.margin, n_bank_items=J, subject_a=self.subjects[0],
            subject_b=self.subjects[1], design_mean=mean, model_difference=float(model_difference),
            accuracy_a=float(acc_a), accuracy_b=float(acc_b),
            kappa=power_tuning(self._terms0, self._terms1) if self.power_tuning else 1.0,
            stop_reason=self.stop_reason, cot_total_a=cot_a, cot_total_b=cot_b,
            cot_difference=None if cot_a is None or cot_b is None else cot_a - cot_b,
            cot_difference_design=cot_design, cot_difference_sd=cot_sd)

    # ------------------------------------------------------------------ log
    def config(self) -> dict:
        return {"margin": self.margin, "alpha": self.alpha, "uniform_share": self.uniform_share,
                "power_tuning": self.power_tuning, "confidence": self.confidence, "truncation": self.truncation,
                "stopping": asdict(self.stopping), "subjects": list(self.subjects),
                "items": None if self.n_bank_items == self.bank.n_items and np.all(self._population == np.arange(self.bank.n_items))
                else [self.bank.item_ids[int(j)] for j in self._population],
                "against": None if self._known is None else self._known["subject"]}

    def _header(self) -> dict:
        from catengine import __version__

        source = getattr(self.bank, "source", "<memory>")
        if source and source != "<memory>":
            source = str(Path(source).resolve())
        return {"event": "header", "format": PAIRED_LOG_FORMAT, "version": PAIRED_LOG_VERSION,
                "library_version": __version__,
                "bank": {"bank_id": self.bank.bank_id, "bank_version": int(self.bank.version), "source": source,
                         "response_model": self.params.response_model, "n_items": self.bank.n_items,
                         "fingerprint": bank_fingerprint(item_table(self.bank))},
                "config": self.config(), "rng": self._rng_start}

    def _emit(self, event: dict) -> None:
        if self._writer is not None:
            self._writer.write(event)

    def note(self, payload: dict) -> None:
        """Append a ``note`` event (a JSON-able dict, e.g. the settings of a run) to the log; notes do
        not change the session and are skipped on resume (read them with :func:`read_paired_log`)."""
        if not isinstance(payload, dict):
            raise TypeError(f"a note is a dict, got {type(payload).__name__}")
        self._emit({"event": "note", **{k: v for k, v in payload.items() if k != "event"}})

    def close(self) -> None:
        if self._owns_writer and self._writer is not None:
            self._writer.close()

    @classmethod
    def resume(cls, log, bank=None, *, fsync: bool = False) -> "PairedSession":
        """Rebuild a paired session from its log (the same draws, answers and interval) and keep
        appending to it. ``bank``: the bank it ran on (default: opened from the path in the log);
        it must match the logged fingerprint."""
        path = Path(log)
        if not path.is_file():
            raise FileNotFoundError(f"paired log {path} does not exist")
        writer = LogWriter(path, fsync=fsync, must_be_new=False)
        try:
            header, events = read_paired_log(path)
            writer.sync_size()  # a torn last line was cut off
            meta = header["bank"]
            if bank is None:
                from catengine.itembank import open_item_bank

                if not meta.get("source") or meta["source"] == "<memory>":
                    raise SessionLogError(f"{path} was written for an in-memory bank; pass bank= to resume it")
                bank = open_item_bank(meta["source"])
            if bank_fingerprint(item_table(bank)) != meta.get("fingerprint"):
                raise SessionLogError(f"{path} was written for bank {meta.get('bank_id')!r} v{meta.get('bank_version')} "
                                      "with another fingerprint than the bank given")
            cfg = header["config"]
            kwargs = dict(stopping=PairedStopping(**cfg["stopping"]), margin=cfg["margin"], alpha=cfg["alpha"],
                          rng=restore_rng(header["rng"]), uniform_share=cfg["uniform_share"],
                          power_tuning=cfg["power_tuning"], confidence=cfg["confidence"], truncation=cfg["truncation"])
            if cfg.get("against"):
                session = cls.against_calibration(bank, cfg["against"], name=cfg["subjects"][0], items=cfg.get("items"),
                                                  **kwargs)
            else:
                session = cls(bank, subjects=tuple(cfg["subjects"]), items=cfg.get("items"), **kwargs)
            for event in events:
                if event.get("event") == "propose":
                    item = session.next_item()
                    if item != event.get("item"):
                        raise SessionLogError(f"{path}: step {event.get('step')} proposed {event.get('item')!r} in the log "
                                              f"but {item!r} on replay: the log was edited or the bank differs")
                elif event.get("event") == "record":
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        session.record(event["item"], event["correct_a"], event["correct_b"],
                                       event.get("cot_length_a"), event.get("cot_length_b"))
                    if not math.isclose(session._terms[-1], float(event["term"]), rel_tol=1e-6, abs_tol=1e-9):
                        raise SessionLogError(f"{path}: step {event.get('step')} replays to another term than the log's")
        except BaseException:
            writer.close()
            raise
        session._writer = writer
        session._owns_writer = True
        return session


def read_paired_log(path) -> tuple[dict, list[dict]]:
    """``(header, events)`` of a paired log; a torn last line (a crash mid-write) is skipped."""
    path = Path(path)
    lines = path.read_bytes().split(b"\n")
    events = []
    for k, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            events.append(json.loads(raw))
        except ValueError:
            if k >= len(lines) - 2:  # the last line, torn
                warnings.warn(f"{path}:{k + 1}: the torn last line of the paired log was skipped", RuntimeWarning,
                              stacklevel=2)
                with open(path, "r+b") as fh:
                    fh.truncate(sum(len(line) + 1 for line in lines[:k]))
                break
            raise SessionLogError(f"{path}:{k + 1}: not valid JSON") from None
    if not events or events[0].get("format") != PAIRED_LOG_FORMAT:
        raise SessionLogError(f"{path} is not a paired-session log")
    if events[0].get("version") != PAIRED_LOG_VERSION:
        raise SessionLogError(f"{path} has paired-log version {events[0].get('version')!r}; this library reads "
                              f"{PAIRED_LOG_VERSION}")
    return events[0], events[1:]
