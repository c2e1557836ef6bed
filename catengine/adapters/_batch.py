"""Shared by the harness adapters: a batch of answers is checked whole before any of it is recorded.

Each answer that came back is checked as ``CATSession.record`` checks it (correct 0/1; for LaRT
banks a CoT length that is finite, >= 0, within ``session.max_cot_length`` and above the bank's log
floor); the valid ones are then recorded, all of them, and the bad ones are reported together in
one :class:`BatchAnswerError` naming each one's file / log, line, sample and value. Nothing valid
is left unrecorded (to be paid for again) because another answer of its batch was bad.
"""

from __future__ import annotations

import math

from catengine.errors import CatEngineError

__all__ = ["BatchAnswerError", "check_answer", "format_cot", "summary_of"]


class BatchAnswerError(CatEngineError, ValueError):
    """Some answers of a batch could not be recorded; every valid one was.

    ``problems``: one message per answer not recorded (naming its file or log, line, sample and
    value); ``recorded``: the items recorded from this batch; ``pending``: the items the session
    still waits for. ``report``: the adapter's own report of the batch, when it has one.
    """

    def __init__(self, message: str, *, problems, recorded, pending, report=None):
        super().__init__(message)
        self.problems = list(problems)
        self.recorded = list(recorded)
        self.pending = list(pending)
        self.report = report


def format_cot(value) -> str:
    """A token count as written in a message: integers as integers, large or fractional values in %g."""
    if isinstance(value, (int, float)) and math.isfinite(float(value)) and float(value).is_integer() and abs(value) < 1e7:
        return str(int(value))
    return f"{value:g}" if isinstance(value, (int, float)) else repr(value)


def check_answer(session, correct, cot_length):
    """(correct, CoT length) as the session would record them, or the session's own error
    (InvalidResponseError / CoTOutOfRangeError) without recording anything. CoT lengths are checked
    for LaRT banks only (the adapters pass none to other banks)."""
    from catengine.session.session import _check_correct, _check_cot  # the checks record() applies

    y = _check_correct(correct)
    if not session.params.model.has_cot or cot_length is None:
        return y, None
    return y, _check_cot(cot_length, session.max_cot_length, session.cot_offset)


def summary_of(recorded, problems, pending, *, what: str) -> str:
    """The tail of a BatchAnswerError message: what was recorded, what was not, what is pending."""
    shown = ", ".join(repr(i) for i in recorded[:10]) + (f" (+{len(recorded) - 10} more)" if len(recorded) > 10 else "")
    lines = [f"{len(problems)} answer(s) of {what} not recorded:"]
    lines += [f"  - {p}" for p in problems]
    lines.append(f"{len(recorded)} valid answer(s) recorded" + (f": {shown}" if recorded else "") + ".")
    if pending:
        lines.append(f"still pending: {', '.join(map(repr, pending))}")
    return "\n".join(lines)
