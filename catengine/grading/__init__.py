"""Graders: a response text to an item in, a :class:`Grade` out (role :class:`Grader`; registry
``GRADERS`` name -> class; ``docs/grading.md``).

=========================  ===================================  =================================
name                       class                                answer types
=========================  ===================================  =================================
``math``                   :class:`MathGrader`                  math, integer
``integer``                :class:`IntegerGrader`               integer
``chembench``              :class:`ChemBenchGrader`             multiple_choice, number
``chembench-corrected``    :class:`ChemBenchCorrectedGrader`    multiple_choice, number
=========================  ===================================  =================================

A bank's protocol names its grader, ``{"grader": {"name": "math", "version": "1"}}``;
:func:`grader_for` returns that grader for an item, refusing another version.
"""

from __future__ import annotations

from collections.abc import Mapping

from catengine.grading.base import EMPTY_RESPONSE, REASONING_ONLY, Grade, Grader, GraderError
from catengine.grading.chembench import ChemBenchCorrectedGrader, ChemBenchGrader
from catengine.grading.extraction import NO_FINAL_ANSWER, UNTERMINATED_BOX, final_answer
from catengine.grading.integer_grader import IntegerGrader, parse_integer
from catengine.grading.math_grader import MathGrader, normalise_math_answer

GRADERS: dict[str, type[Grader]] = {
    cls.name: cls for cls in (MathGrader, IntegerGrader, ChemBenchGrader, ChemBenchCorrectedGrader)
}


def get_grader(name: str) -> Grader:
    """The registered grader called ``name``, with its default settings."""
    cls = GRADERS.get(name)
    if cls is None:
        raise GraderError(f"unknown grader {name!r}; registered: {', '.join(sorted(GRADERS))}")
    return cls()


def grader_for(item, protocol: Mapping) -> Grader:
    """The grader a bank's ``protocol`` names (its ``"grader"`` entry, ``{"name": ..., "version":
    ...}``), checked against ``item``: raises :class:`GraderError` when the protocol names no
    grader or an unknown one, when the registered grader does not grade the recorded version (neither
    its own nor one it ``serves``: its verdicts could differ from those the bank was built with), or
    when the grader does not grade ``item``'s answer type. A protocol entry without a version accepts
    the registered one."""
    entry = protocol.get("grader") if isinstance(protocol, Mapping) else None
    if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
        raise GraderError(f"the bank's protocol names no grader (expected {{'grader': {{'name': ..., 'version': ...}}}}, "
                          f"got {entry!r})")
    grader = get_grader(entry["name"])
    version = entry.get("version")
    if not grader.grades_version(version):
        raise GraderError(f"the bank's protocol records grader {grader.name!r} version {version!r}, but this library's "
                          f"{grader.name!r} grader is version {grader.version!r}"
                          + (f" (serving versions {', '.join(map(repr, grader.serves))})" if grader.serves else "")
                          + ": its verdicts may differ from the ones the bank was built with; use the library version "
                          "the bank names, or regrade under the registered version on purpose")
    grader.check_item(item)
    return grader


__all__ = [
    "EMPTY_RESPONSE",
    "GRADERS",
    "NO_FINAL_ANSWER",
    "REASONING_ONLY",
    "UNTERMINATED_BOX",
    "ChemBenchCorrectedGrader",
    "ChemBenchGrader",
    "Grade",
    "Grader",
    "GraderError",
    "IntegerGrader",
    "MathGrader",
    "final_answer",
    "get_grader",
    "grader_for",
    "normalise_math_answer",
    "parse_integer",
]
