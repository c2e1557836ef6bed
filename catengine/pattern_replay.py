"""Adaptive replay of a known answer pattern in one call: :func:`replay`.

An LLM has answered some or all of a bank's items already (a full evaluation run, a file from a
harness). :func:`replay` gives it the adaptive test it would have had: a :class:`CATSession` on the
bank, with the items the pattern has no answer for excluded before the first proposal, proposes
items, each proposal is answered from the pattern, and the session stops on its stopping rule. The
result holds the trajectory, the predicted score with its interval (the design-based one is the
accuracy over the answered items, the model's over the whole bank), the model's own prediction
beside the design-based one, and the reference a replay allows: the same estimator on every
available answer.
``catengine evaluate`` is this function and a printout.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from catengine.errors import CatEngineError


class UnknownItemsError(CatEngineError, ValueError):
    """A replayed pattern answers items that are not in the bank (the message names them)."""


@dataclass(frozen=True)
class ReplayStep:
    """One administered item of a replay: the answer recorded and the estimate after it."""

    step: int
    item: str
    correct: int
    cot_length: float | None
    criterion: float | None
    estimate: object  # TraitEstimate

    def to_dict(self) -> dict:
        e = self.estimate
        return {"step": self.step, "item": self.item, "correct": self.correct, "cot_length": self.cot_length,
                "criterion": self.criterion, "theta": e.theta, "theta_sd": e.theta_sd, "tau": e.tau, "tau_sd": e.tau_sd}


@dataclass
class ReplayResult:
    """What :func:`replay` returns.

    ``session`` (closed), ``steps``, ``score`` (the session's default score: design-based whenever
    its draws allow, else the model's), ``model_score`` (the model's prediction; ``score`` itself
    when that is the model's), ``design_score`` (None unless ``score`` is design-based: ``"design"`` or
    ``"doubly-robust"``), ``full``
    (the same estimator on every available answer), ``full_accuracy`` (their observed accuracy),
    ``n_available`` (answers to bank items), ``skipped`` (the bank's items without an answer, excluded),
    ``ignored`` (answers to items outside the bank, left out with ``ignore_unknown_items``) and
    ``stop_reason``.
    """

    session: object
    steps: list[ReplayStep]
    score: object
    model_score: object
    design_score: object | None
    full: object
    full_accuracy: float
    n_available: int
    skipped: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    stop_reason: str = ""

    @property
    def estimate(self):
        """The adaptive trait estimate at the stop."""
        return self.session.estimate

    def summary(self, subject: str | None = None) -> dict:
        """A JSON-ready summary (``catengine evaluate --json`` prints it as ``{"summary": ...}``)."""
        from catengine.console import calibration_size, describe_stopping, standing_text

        est, session = self.estimate, self.session
        lo, hi = est.interval(0.95)
        return {"subject": subject, "n_items": est.n_items, "theta": est.theta, "theta_sd": est.theta_sd,
                "theta_95": [lo, hi], "tau": est.tau, "tau_sd": est.tau_sd, "stop_reason": self.stop_reason,
                "skipped_unanswered": len(self.skipped), "ignored_unknown_items": len(self.ignored),
                "full_n_items": self.n_available, "full_theta": self.full.theta, "full_theta_sd": self.full.theta_sd,
                "score": self.score.to_dict(), "model_score": self.model_score.to_dict(),
                "design_score": None if self.design_score is None else self.design_score.to_dict(),
                "full_accuracy": self.full_accuracy, "interval_calibration": est.interval_calibration,
                "person_fit": session.person_fit().to_dict(),
                "standing": standing_text(self.score, calibration_size(session)),
                "stopping": describe_stopping(session.stopping)}


def _answer(item: str, value) -> tuple[int, float | None]:
    """``(correct, cot length or None)`` from a pattern's value: ``correct`` or ``(correct, cot)``."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"item {item!r}: an answer is correct (0/1) or (correct, CoT length), got {value!r}")
        return value[0], value[1]
    return value, None


def unknown_items_message(bank, answers: Mapping, foreign: list[str]) -> str:
    """Why a pattern with answers to ``foreign`` items cannot be replayed on ``bank``."""
    from catengine.itembank.ids import foreign_ids_message

    lead = (f"none of the {len(answers)} answered items is in the bank" if len(foreign) == len(answers)
            else f"{len(foreign)} of the {len(answers)} answered items are not in the bank")
    return f"{lead}: {foreign_ids_message(bank.bank_id, bank.item_ids, foreign)}"


def replay(bank, answers: Mapping, *, selector=None, estimator=None, stopping=None, exposure=(), seed=None,
           subject: str = "subject", log=None, ignore_unknown_items: bool = False,
           on_step: Callable[[ReplayStep], None] | None = None) -> ReplayResult:
    """Replay ``answers`` (item id -> correct 0/1, or -> (correct, CoT length in tokens)) adaptively on
    ``bank`` with the session's defaults unless ``selector``, ``estimator``, ``stopping`` or
    ``exposure`` are given; ``seed`` seeds the design's draws; ``log`` appends the session to a
    JSON-lines log; ``on_step(step)`` is called after each recorded answer.

    CoT lengths count on LaRT banks only. Answers to items outside the bank raise
    :class:`UnknownItemsError` naming them, unless ``ignore_unknown_items`` (then they are left out
    and listed in ``result.ignored``); a pattern with no answer in the bank always raises.
    """
    from catengine.session import CATSession

    in_bank = set(bank.item_ids)
    foreign = [item for item in answers if item not in in_bank]
    known = [item for item in answers if item in in_bank]
    if foreign and (not known or not ignore_unknown_items):
        raise UnknownItemsError(unknown_items_message(bank, answers, foreign))
    pattern = {item: _answer(item, answers[item]) for item in known}
    lart = bank.params.model.has_cot
    session = CATSession(bank, selector=selector, estimator=estimator, stopping=stopping, exposure=exposure, rng=seed,
                         subject=subject, log=log)
    steps = []
    # the bank's items without an answer are left out before the first draw: the design draws are
    # then over the answered items alone, and the design-based score estimates their accuracy
    # (``full_accuracy``) exactly unbiasedly
    skipped = [item for item in bank.item_ids if item not in pattern]
    try:
        for item in skipped:
            session.exclude(item)
        while not session.finished:
            item = session.next_item()
            correct, cot = pattern[item]
            estimate = session.record(item, correct, cot if lart else None)
            record = session.history[-1]
            step = ReplayStep(record.step, item, int(correct), cot if lart else None,
                              None if math.isnan(record.criterion) else record.criterion, estimate)
            steps.append(step)
            if on_step is not None:
                on_step(step)
        score = session.predicted_score(record=True)  # design-based whenever the draws allow it
    finally:
        session.close()
    design = score if score.method in ("design", "doubly-robust") else None
    model = session.predicted_score(method="model") if design is not None else score
    full = CATSession(bank, estimator=session.estimator, stopping=session.stopping)
    for item, (correct, cot) in pattern.items():
        full.record(item, correct, cot if lart else None)
    stop_reason = session.stop_reason or ""
    if stop_reason == "no item left in the bank" and skipped:  # the pattern ran out, not the bank
        stop_reason = (f"every available answer is used ({len(pattern)} of the bank's {bank.n_items} items have "
                       "one; the others cannot be administered)")
    return ReplayResult(session=session, steps=steps, score=score, model_score=model, design_score=design,
                        full=full.estimate, full_accuracy=sum(int(c) for c, _ in pattern.values()) / len(pattern),
                        n_available=len(pattern), skipped=skipped, ignored=foreign, stop_reason=stop_reason)
