"""The grader role: what a grader promises, the :class:`Grade` it returns, and its errors.

A grader turns an LLM's response text to one item into a verdict. It is pure and deterministic (the
same text and item give the same :class:`Grade` on every machine, in every thread, with no clock,
network or randomness involved), has a registry ``name`` and a ``version`` (a bank's protocol names
both, ``{"grader": {"name": ..., "version": ...}}``), and declares the answer types it grades.
Implementations are frozen dataclasses validated in ``__post_init__``; they implement
:meth:`Grader._grade`, and :meth:`Grader.grade` checks the inputs and the empty response once for
all of them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from catengine.errors import CatEngineError
from catengine.inline_reasoning import split_inline_reasoning

if TYPE_CHECKING:  # the item type only; importing catengine.itembank would pull in xarray
    from catengine.itembank.content import ItemContent

#: the reason of every grade of an empty (or whitespace-only) response
EMPTY_RESPONSE = "empty response"
#: the reason of the grade of a response that is only reasoning (``<think> ...`` without its closing
#: tag, or nothing after ``</think>``)
REASONING_ONLY = "no answer after the reasoning"


class GraderError(CatEngineError, ValueError):
    """A grader cannot grade an item: an unknown grader name, a version other than the one a bank's
    protocol records, an answer type the grader does not handle, or a reference answer it cannot
    read. (A response, however malformed, never raises: it gets a :class:`Grade` with its reason.)"""


@dataclass(frozen=True)
class Grade:
    """The verdict on one response: ``correct``, the final answer the grader read from the text
    (``extracted``; None when it found none) and the ``reason`` in a few words ("equivalent",
    "not equivalent", "no final answer found", "empty response", ...)."""

    correct: bool
    extracted: str | None
    reason: str

    def __post_init__(self):
        if not isinstance(self.correct, bool):
            raise TypeError(f"Grade.correct must be a bool, got {type(self.correct).__name__}")
        if self.extracted is not None and not isinstance(self.extracted, str):
            raise TypeError(f"Grade.extracted must be a str or None, got {type(self.extracted).__name__}")
        if not isinstance(self.reason, str) or not self.reason:
            raise TypeError("Grade.reason must be a non-empty str")

    def as_dict(self) -> dict:
        """``{"correct": ..., "extracted": ..., "reason": ...}`` (JSON-ready)."""
        return {"correct": self.correct, "extracted": self.extracted, "reason": self.reason}


class Grader(ABC):
    """Role: grade a response text to an item.

    ``grade(response_text, item)`` returns a :class:`Grade`. ``name`` is the registry name,
    ``version`` changes whenever a verdict could change, ``serves`` lists the other versions whose
    banks it grades (it differs from them only where they misread an answer's spelling: an answer they
    found none in, or read wrong; docs/grading.md lists each change), ``answer_types`` lists the item answer types
    (``catengine.itembank.content.ANSWER_TYPES``) the grader handles. ``response_text`` None is
    graded as an empty response, reasoning written inline before the answer (``<think> ...
    </think>``) is set aside; an item of another answer type, or whose reference answer the
    grader cannot read, raises :class:`GraderError`.
    """

    name: ClassVar[str] = ""
    version: ClassVar[str] = ""
    serves: ClassVar[tuple[str, ...]] = ()
    answer_types: ClassVar[frozenset[str]] = frozenset()

    def grade(self, response_text: str | None, item: ItemContent) -> Grade:
        """The verdict on ``response_text`` as the answer to ``item``. Reasoning written inline
        (``<think> ... </think> answer``, read as the clients read it:
        :func:`catengine.inline_reasoning.split_inline_reasoning`) is not graded, only the answer after it."""
        if response_text is None:
            response_text = ""
        if not isinstance(response_text, str):
            raise TypeError(f"response_text must be a str, got {type(response_text).__name__}")
        self.check_item(item)
        if not response_text.strip():
            return Grade(False, None, EMPTY_RESPONSE)
        answer, reasoning = split_inline_reasoning(response_text)
        if not answer.strip():
            return Grade(False, None, REASONING_ONLY if reasoning else EMPTY_RESPONSE)
        return self._grade(answer, item)

    @abstractmethod
    def _grade(self, text: str, item: ItemContent) -> Grade:
        """The verdict on a non-empty ``text``; ``item`` has one of ``answer_types``."""

    def warm_up(self) -> None:
        """Pay once per process, ahead of the first grade, what makes later grades cheaper (loading a
        library, priming a parser). Never changes a verdict; safe to call from any thread, any number
        of times. Graders with nothing to prepare do nothing."""

    def supports(self, item: ItemContent) -> bool:
        """Whether this grader handles ``item``'s answer type."""
        return getattr(item, "answer_type", None) in self.answer_types

    def check_item(self, item: ItemContent) -> None:
        """Raise :class:`GraderError` unless this grader handles ``item``'s answer type."""
        if not self.supports(item):
            raise GraderError(f"grader {self.name!r} grades answer types {sorted(self.answer_types)}; item "
                              f"{getattr(item, 'item', item)!r} has answer type {getattr(item, 'answer_type', None)!r}")

    def grades_version(self, version) -> bool:
        """Whether this grader grades the banks whose protocol records ``version`` of it: its own
        version, or one it ``serves``; None (no version recorded) accepts it."""
        return version is None or str(version) == self.version or str(version) in self.serves

    def as_protocol(self) -> dict:
        """The entry a bank's protocol records for this grader: ``{"name": ..., "version": ...}``."""
        return {"name": self.name, "version": self.version}
