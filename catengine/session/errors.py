"""Exceptions and warnings of the session layer (all exceptions derive from CatEngineError)."""

from __future__ import annotations

from catengine.errors import CatEngineError

__all__ = [
    "CoTBeyondCalibrationWarning",
    "CoTIgnoredWarning",
    "CoTOutOfRangeError",
    "CorruptLogWarning",
    "InvalidResponseError",
    "ItemAlreadyAnsweredError",
    "LogConfigMismatchError",
    "ResumeMismatchWarning",
    "SessionLogError",
    "SessionLogLockedError",
    "UnknownItemError",
    "UnknownSubjectError",
]


class _MessageKeyError(KeyError):
    """KeyError whose str() is the plain message (KeyError quotes its argument)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownItemError(CatEngineError, _MessageKeyError):
    """An item id that is not in the bank."""


class UnknownSubjectError(CatEngineError, _MessageKeyError):
    """A subject id with no session (start one with ``Engine.start`` or ``next_item``)."""


class ItemAlreadyAnsweredError(CatEngineError, ValueError):
    """An answer for an item this subject has already answered."""


class InvalidResponseError(CatEngineError, ValueError):
    """An answer that is not 0/1, or a CoT length that is negative, NaN or infinite."""


class SessionLogError(CatEngineError, ValueError):
    """A session log that cannot be replayed (corrupt in the middle, wrong bank, inconsistent)."""


class SessionLogLockedError(SessionLogError):
    """Another writer (this process or another one) holds the session log's lock."""


class LogConfigMismatchError(SessionLogError):
    """A session log to resume records a configuration (selector, estimator, stopping rule, exposure
    controls, seed) that differs from the one asked for; the message names each difference."""


class CoTOutOfRangeError(InvalidResponseError):
    """A CoT length outside the plausible range (see ``catengine.session.session.MAX_COT_TOKENS``)."""


class CorruptLogWarning(UserWarning):
    """The last line of a session log was corrupt (e.g. torn by a crash) and was skipped."""


class CoTIgnoredWarning(UserWarning):
    """A CoT length was given for a bank whose response model does not use it; it was ignored."""


class CoTBeyondCalibrationWarning(UserWarning):
    """A CoT length longer than any the bank's calibration saw (the longest in its stored calibration
    responses, else its protocol's output cap): the answer is recorded, and the speed estimate (tau)
    extrapolates beyond the calibration data. Given once per session."""


class ResumeMismatchWarning(UserWarning):
    """Replaying a log recomputed an estimate that differs from the logged one (code or platform change)."""
