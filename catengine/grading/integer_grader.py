"""The integer grader: the final answer read as an integer literal, compared exactly.

:class:`IntegerGrader` (``"integer"``) reads the final answer as the math grader does (the last
``\\boxed{}``, else a final-answer line) and accepts it only when it is an integer written as a
number: ``27``, ``027``, ``+27``, ``27.0``, ``$27$``, ``\\boxed{027}``, ``1,024``, ``1{,}024``,
``1\\,024``, ``1 024``, ``\\text{27}``, ``\\mathbf{27}``, ``{27}``, ``\\displaystyle 27``, ``x = 27``,
``27 \\text{ ways}``, ``27\\ \\text{cm}^2``, ``27 ways``, ``27 cm²``, ``27^\\circ``, ``27\\%``, ``−27``.
An expression that merely evaluates to an integer (``\\frac{54}{2}``, ``3^3``) is not an integer
literal and is graded wrong ("not an integer"); use the math grader for those. No sympy is
involved, so grading takes microseconds in any thread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from catengine.grading.base import Grade, Grader, GraderError
from catengine.grading.extraction import final_answer

EQUAL = "equal"
NOT_EQUAL = "not equal"
NOT_AN_INTEGER = "not an integer"

_WRAPPER = re.compile(r"\\(?:text|textbf|textrm|mathbf|mathrm|mbox|boxed)\s*\{([^{}]*)\}|^\{([^{}]*)\}$")
#: a unit after the number: \text{...} (squared or cubed), degrees, percent
_UNIT_TEXT = re.compile(r"\\(?:text|textrm|mbox|mathrm)\s*\{[^{}]*\}(?:\s*\^\s*\{?\s*[23]\s*\}?)?"
                        r"|\^\s*\{?\s*\\circ\s*\}?|°|\\%|%")
#: spacing and style commands, which change no number
_SPACING = re.compile(r"\\(?:[,:; !]|q?quad(?![A-Za-z])|displaystyle|textstyle|bf(?![A-Za-z]))|~")
_ASSIGNMENT = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?\s*=\s*")
_INTEGER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.0*)?")
_SPACE_GROUPED = re.compile(r"[+-]?\d{1,3}(?: \d{3})+")
#: a number followed by plain unit words (``27 ways``, ``27 cm^2``, ``27 cm²``, ``27 m/s``)
_NUMBER_AND_UNIT = re.compile(r"^([+-]?[\d,.]+)\s+[A-Za-z][A-Za-z ]*(?:\^\s*\{?[23]\}?|[\u00b2\u00b3])?(?:/[A-Za-z]+)?$")


def parse_integer(text: str) -> int | None:
    """The integer ``text`` spells (see the module docstring for the spellings read), or None."""
    s = text.strip().replace("\u2212", "-")
    s = re.sub(r"^\$+|\$+$", "", s).strip()
    s = re.sub(r"^\\[(\[]|\\[)\]]$", "", s).strip()
    s = s.replace("\\!", "").replace("{,}", ",").replace("\\$", "")
    s = re.sub(r"(?<=\d)\\[,:; ]\s*(?=\d{3}(?!\d))", "", s)
    s = _SPACING.sub(" ", s).strip()
    if _SPACE_GROUPED.fullmatch(s):  # 1 024
        s = s.replace(" ", "")
    s = _ASSIGNMENT.sub("", s)
    before_units = s
    s = _UNIT_TEXT.sub("", s).strip()
    if not s:  # the whole answer was text: maybe \text{27}
        s = before_units
    previous = None
    while previous != s:
        previous, s = s, _WRAPPER.sub(lambda m: m.group(1) if m.group(1) is not None else m.group(2), s).strip()
    if s.endswith("."):  # the full stop of a sentence
        s = s[:-1].strip()
    s = _NUMBER_AND_UNIT.sub(r"\1", s)  # 27 ways
    if not _INTEGER.fullmatch(s):
        return None
    return int(s.split(".")[0].replace(",", ""))


@dataclass(frozen=True)
class IntegerGrader(Grader):
    """``"integer"``: the final answer is an integer literal equal to the reference.

    Reasons: "equal", "not equal", "not an integer", "empty response", "no final answer found",
    "unterminated \\boxed{...}".
    """

    name: ClassVar[str] = "integer"
    version: ClassVar[str] = "2"
    serves: ClassVar[tuple[str, ...]] = ("1",)  # docs/grading.md: what version 1 misread
    answer_types: ClassVar[frozenset[str]] = frozenset({"integer"})

    def reference(self, item) -> int:
        """``item``'s reference answer as an int; raises :class:`GraderError` when it is not one."""
        value = parse_integer(item.answer)
        if value is None:
            raise GraderError(f"item {item.item!r}: the reference answer {item.answer!r} is not an integer")
        return value

    def _grade(self, text, item):
        reference = self.reference(item)
        answer, why = final_answer(text)
        if answer is None:
            return Grade(False, None, why)
        value = parse_integer(answer)
        if value is None:
            return Grade(False, answer, NOT_AN_INTEGER)
        return Grade(value == reference, answer, EQUAL if value == reference else NOT_EQUAL)
