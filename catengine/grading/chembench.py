"""ChemBench's rules: the answers between ``[ANSWER]`` tags, scored as ChemBench scored its reports.

:class:`ChemBenchGrader` (``"chembench"``) reproduces how the per-question correctness of the
ChemBench calibration data was computed (ChemBench, chembench-paper @ 344e10e5,
``src/chembench/{constant,utils,prompter,metrics,analysis}.py``, MIT, (c) 2024 ChemBench
maintainers; the patterns below are ChemBench's own):

**Refusals.** ChemBench flags a response containing one of its refusal phrases (any case: "sorry",
"I cannot", "I do not", "As an AI", "Unfortunately,", ...; :data:`REFUSAL_PHRASES`), but its
calibration data scored the answer such a response gives all the same: in chembench-paper @
8fe22914, the 91 Claude-2 reports whose reply holds a refusal phrase and an ``[ANSWER]`` tag are all
flagged (``triggered_refusal``) and 49 of them scored correct. So this grader scores the answer; a
response with a refusal phrase and no answer it can read is wrong, with the reason "refusal
detected".

**Multiple choice.** The letters are read from every ``[ANSWER]...[/ANSWER]`` (also ``[ANS]``,
``<ANS>``, ``<ANSWER>``, ``<ans>`` and their closing forms) holding capital letters separated by
commas (``A``, ``A, C``, ``B. because ...``); without tags, a response that is exactly one letter,
or only letters separated by commas or spaces, is read as those letters. Only the item's option
letters count. Correct iff the set of letters is exactly the set of correct letters: a partial or
a larger set is wrong.

**Numbers.** The first ``[ANSWER] ... [/ANSWER]`` (only this spelling; the closing tag may lack its
slash) on one line; its first number, with scientific notation (``6.02e23``, ``3 x 10^8``,
``3 \\times 10^{8}``, ``3 × 10^8``, ``10^-3``). Without tags, ChemBench's fallback: the first run
of number words anywhere in the response (matched inside words too: "often" reads as ten).
Correct iff ``|answer - target| < tolerance * target`` with the item's relative tolerance (0.01
when the item has none). **Quirk:** for a target <= 0 the bound is <= 0, so such an item is never
correct, not even for the exact answer; ChemBench's calibration data has 18 such items, every
calibration LLM scored wrong on each. This grader reproduces that, so the responses of a new LLM
are scored as those of the calibration LLMs were. ChemBench's numbers are evaluated arithmetically
here (mantissa, ``e`` exponent, ``x 10^n``), where ChemBench handed them to ``pint``.

:class:`ChemBenchCorrectedGrader` (``"chembench-corrected"``) keeps ChemBench's answer format and
scoring and corrects its defects: the bound is ``tolerance * |target|``, an exact answer always
correct (a target <= 0 can then be answered correctly); and answers ChemBench's patterns misread or cannot read are read on their merits
(:mod:`catengine.grading.merits`). Use it to score answers on their merits; use ``"chembench"`` to
score them as the bank's calibration data was scored.

ChemBench's calibration runs handed the responses its patterns could not read to an LLM extractor;
``"chembench"`` does not reproduce it (an answer that none of the rules above reads is wrong).
Reasoning written inline before the answer (``<think> ... </think>``) is set aside before any rule
applies (:meth:`catengine.grading.base.Grader.grade`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import ClassVar

from catengine.grading.base import Grade, Grader, GraderError
from catengine.grading.merits import NUMBER_WORDS, merit_letters, merit_number, words_to_number

#: ChemBench's MCQ answer pattern (``MCQ_REGEX_TEMPLATE_1``)
MCQ_PATTERN = (r"(?:\[ANSWER\]|\[ANS\]|<ANS>|<ANSWER>|<ans>)\s*([A-Z](?:,\s*[A-Z])*)\s*(?:\..*?|,.*?)?"
               r"(?:\[/?ANSWER\]|\[/ANS\]|</ANS>|</ANSWER>|</ans>)")
#: ChemBench's numeric answer pattern (``FLOATQ_REGEX_TEMPLATE_1``)
NUMBER_ANSWER_PATTERN = r"\[ANSWER\][\s\n]*(.*?)[\s\n]*\[/?ANSWER\]"
#: ChemBench's number pattern (``NUM_REGEX``)
NUMBER_PATTERN = (r"(?<!\w)([+-]?[0-9]*\.?[0-9]+\s?)?([\^]([-+]?[0-9]+))?(?:(?:[eE]|exp|EXP)[-+]?[0-9]+)?"
                  r"(?:([*x]|\\times|\u00d7)\s?[0-9]+[\^]([-+]?[0-9]+|{([-+]?[0-9]+)}))?(?!\w)")
#: ChemBench's refusal phrases (``detect_refusal``, matched case-insensitively anywhere)
REFUSAL_PHRASES = (
    "I'm sorry", "Sorry", "I am sorry", "I apologize", "As an AI", "I'm an", "I'm just", "As a language model",
    "As an Assistant", "I cannot", "I do not", "Hello!", "is illegal and unethical", "I'm really sorry", "OpenAI",
    "unethical", "not ethical", "not legal", "My apologies", "but I cannot",
    "If you have any other non-malicious requests", "I'm not able to provide", "I am really sorry",
    "I cannot create", "I cannot support", "I can't provide", "I can't assist", "I can't answer", "Unfortunately,",
)
_NUM_WORDS = "|".join(NUMBER_WORDS)
#: ChemBench's number-word pattern (``NUM_WORDS_REGEX``)
NUMBER_WORDS_PATTERN = rf"((?:{_NUM_WORDS})(?:\s+(?:{_NUM_WORDS}))*)"

_MCQ = re.compile(MCQ_PATTERN, re.DOTALL)
_NUMBER_ANSWER = re.compile(NUMBER_ANSWER_PATTERN)
_NUMBER = re.compile(NUMBER_PATTERN)
_REFUSAL = re.compile("|".join(REFUSAL_PHRASES), re.IGNORECASE)
_NUMBER_WORDS = re.compile(NUMBER_WORDS_PATTERN, re.IGNORECASE)
_ALPHABET = tuple(chr(c) for c in range(ord("A"), ord("Z") + 1))
_NUMBER_VALUE = re.compile(r"([+-]?[0-9]*\.?[0-9]+)?\s?(?:\^([-+]?[0-9]+))?(?:(?:[eE]|exp|EXP)([-+]?[0-9]+))?"
                           r"(?:\s*(?:[*x\u00d7]|\\times)\s?([0-9]+)\^(?:([-+]?[0-9]+)|\{([-+]?[0-9]+)\}))?")

REFUSAL = "refusal detected (ChemBench's refusal phrases)"
EXACT_LETTERS = "exactly the correct letters"
SEVERAL_LETTERS = "several letters where one was expected"
WRONG_LETTERS = "not the set of correct letters"
NO_LETTERS = "no answer letters found"
NO_NUMBER = "no number found"
NOT_POSITIVE_TARGET = "target <= 0: never correct under ChemBench's bound tolerance * target"


def mcq_letters(text: str, letters) -> list[str]:
    """The option letters (among ``letters``) ChemBench reads from ``text``, in order of appearance
    in its parsed form, without repeats."""
    matches = sorted(set(_MCQ.findall(text)))
    if matches:
        prepared = str(matches)
    elif text in _ALPHABET:
        prepared = text
    elif "," in text or " " in text:
        pieces = text.split("," if "," in text else " ")
        prepared = ",".join(pieces) if all(p.strip() in _ALPHABET for p in pieces) else ""
    else:
        prepared = ""
    if not prepared or not letters:
        return []
    found = re.findall("(?:" + "|".join(map(re.escape, letters)) + ")", prepared, re.IGNORECASE)
    return list(dict.fromkeys(found))


def number_value(match: str) -> float | None:
    """The value of a number ChemBench's pattern matched (``2.5``, ``6.02e23``, ``3 x 10^8``,
    ``3 \\times 10^{8}``, ``10^-3``), or None when it overflows or is not one."""
    text = match.strip()
    try:
        return float(text.replace("x", "*").replace("\\times", "*"))
    except ValueError:
        pass
    parts = _NUMBER_VALUE.fullmatch(text)
    if parts is None or not text:
        return None
    mantissa, power, exponent, base, base_power, braced_power = parts.groups()
    try:
        value = float(mantissa) if mantissa else 1.0
        if power is not None:
            value = value ** int(power)
        if exponent is not None:
            value *= 10.0 ** int(exponent)
        if base is not None:
            value *= float(int(base)) ** int(base_power if base_power is not None else braced_power)
    except (OverflowError, ZeroDivisionError, ValueError):
        return None
    return value if math.isfinite(value) else None


def chembench_number(text: str) -> tuple[float | None, str | None]:
    """``(value, what was read)`` of a numeric answer as ChemBench parses it: the first number of the
    first ``[ANSWER]`` span, else (no span) the first run of number words; ``(None, span or None)``
    when neither gives a number."""
    span = _NUMBER_ANSWER.search(text)
    if span is not None:
        number = next((m.group(0) for m in _NUMBER.finditer(span.group(0)) if m.group(0)), None)
        if number is None:
            return None, span.group(1)
        return number_value(number), number.strip()
    words = _NUMBER_WORDS.search(text)
    if words is None:
        return None, None
    value = words_to_number(words.group(1))
    return (None if value is None else float(value)), words.group(1)


@dataclass(frozen=True)
class ChemBenchGrader(Grader):
    """``"chembench"``: ChemBench's parsing and scoring, as its calibration data was scored,
    quirk included (see the module docstring).

    Reasons: "exactly the correct letters", "several letters where one was expected",
    "not the set of correct letters", "no answer letters found", "within 1% of the target",
    "not within 1% of the target", "target <= 0: never correct ...", "no number found",
    "refusal detected (...)", "empty response".
    """

    name: ClassVar[str] = "chembench"
    version: ClassVar[str] = "2"
    serves: ClassVar[tuple[str, ...]] = ("1",)  # docs/grading.md: what version 1 misread
    answer_types: ClassVar[frozenset[str]] = frozenset({"multiple_choice", "number"})
    #: whether the numeric bound is ``tolerance * |target|`` (True) or ChemBench's ``tolerance * target``
    absolute_target: ClassVar[bool] = False
    #: relative tolerance of a numeric item that states none
    default_tolerance: ClassVar[float] = 0.01
    #: whether answers are read on their merits (:mod:`catengine.grading.merits`, no refusal rule)
    #: or by ChemBench's patterns alone
    reads_on_merits: ClassVar[bool] = False

    def target(self, item) -> float:
        """``item``'s numeric target; raises :class:`GraderError` when its answer is not a number."""
        try:
            value = float(item.answer)
        except (TypeError, ValueError):
            value = math.nan
        if not math.isfinite(value):
            raise GraderError(f"item {item.item!r}: the reference answer {item.answer!r} is not a finite number")
        return value

    def _grade(self, text, item):
        grade = self._grade_letters(text, item) if item.answer_type == "multiple_choice" else self._grade_number(text, item)
        if grade.extracted is None and not self.reads_on_merits:
            refusal = _REFUSAL.search(text)  # no answer read: say when the response refused
            if refusal is not None:
                return Grade(False, None, f"{REFUSAL}: {refusal.group(0)!r}")
        return grade

    def _grade_letters(self, text, item) -> Grade:
        found = mcq_letters(text, item.option_letters)
        if not found and self.reads_on_merits:
            found = merit_letters(text, item.option_letters, item.options)
        if not found:
            return Grade(False, None, NO_LETTERS)
        extracted = ", ".join(sorted(found))
        correct = set(item.correct_options)
        if set(found) == correct:
            return Grade(True, extracted, EXACT_LETTERS)
        return Grade(False, extracted, SEVERAL_LETTERS if len(correct) == 1 and len(found) > 1 else WRONG_LETTERS)

    def _grade_number(self, text, item) -> Grade:
        target = self.target(item)
        tolerance = self.default_tolerance if item.tolerance is None else float(item.tolerance)
        value, read = self.read_number(text)
        if value is None:
            return Grade(False, read, NO_NUMBER)
        bound = tolerance * (abs(target) if self.absolute_target else target)
        if not self.absolute_target and target <= 0:
            return Grade(False, read, NOT_POSITIVE_TARGET)
        within = abs(value - target) < bound or (self.absolute_target and value == target)
        percent = f"{100 * tolerance:g}%"
        return Grade(within, read, f"within {percent} of the target" if within else f"not within {percent} of the target")

    def read_number(self, text: str) -> tuple[float | None, str | None]:
        """``(value, what was read)`` of the numeric answer in ``text``: ChemBench's reading
        (:func:`chembench_number`), or on its merits (:func:`catengine.grading.merits.merit_number`)
        when :attr:`reads_on_merits`."""
        return merit_number(text) if self.reads_on_merits else chembench_number(text)


@dataclass(frozen=True)
class ChemBenchCorrectedGrader(ChemBenchGrader):
    """``"chembench-corrected"``: ChemBench's answer format and scoring with its defects corrected,
    to score answers on their merits: the numeric bound is ``tolerance * |target|`` (an exact answer
    always correct, so a target <= 0 can be answered correctly); answers ChemBench's patterns misread
    or cannot read are read as a careful reader does (:mod:`catengine.grading.merits`:
    ``[ANSWER]b[/ANSWER]``, ``[ANSWER]A and C[/ANSWER]``, "The correct option is (B)",
    ``[ANSWER]30,700[/ANSWER]``, ``[ANSWER]1.5 × 10⁻²³[/ANSWER]``, ``[ANSWER]−41.9[/ANSWER]``); and a
    refusal phrase does not void an answer the response gives (the calibration data never voided one)."""

    name: ClassVar[str] = "chembench-corrected"
    version: ClassVar[str] = "2"
    serves: ClassVar[tuple[str, ...]] = ()  # version 1 read fewer answers on their merits: verdicts differ
    absolute_target: ClassVar[bool] = True
    reads_on_merits: ClassVar[bool] = True
