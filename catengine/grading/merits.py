"""Reading a ChemBench answer on its merits: what ``chembench-corrected`` reads where ChemBench's own
patterns misread an answer or read none.

ChemBench's patterns (:mod:`catengine.grading.chembench`) read option letters only as capitals
separated by commas between ``[ANSWER]`` tags, and a number only up to its first comma or its first
character outside ASCII: ``[ANSWER]b[/ANSWER]`` and ``[ANSWER]A and C[/ANSWER]`` give no letters,
``[ANSWER]30,700[/ANSWER]`` reads 30 and ``[ANSWER]1.5 × 10⁻²³[/ANSWER]`` reads 1.5. (ChemBench's
calibration runs handed the responses its patterns could not read to an LLM, which read them as a
person would.) The functions here read such answers as a careful reader does, deterministically:

* **Letters** (:func:`merit_letters`), tried in order: the last answer span whose content is a list
  of option letters, with any case, separators (commas, spaces, "and", "/", "&") and decoration
  (``**B**``, ``(B)``, ``$B$``, ``\\boxed{B}``, ``\\text{B}``, "Option B"), or a letter that opens
  its answer (``B) ethanol``, ``(B) ethanol``), or the text of exactly one option
  (``[ANSWER]C2v[/ANSWER]`` for option C "C2v"); answer spans are ChemBench's tags in any case, with
  a closing tag whose slash or spelling slipped (``[ANSWER] A [/ANSswer]``); else the final answer
  (:func:`catengine.grading.extraction.final_answer`: a box, "The answer is (B)", "The correct option
  is **B**", "**Final Answer**\\n\\nB") read the same way; else the whole response when it is one
  short line read the same way (``**B**``).
* **Numbers** (:func:`merit_number`): the first number of the first answer span, else of the final
  answer, with a minus sign ``−``, thousands separators (``30,700``, ``1{,}024``, ``1\\,024``), a
  decimal comma (``94,7``, ``0,524``: a comma not followed by exactly three digits, or after a lone
  0), e notation (``1.2e-3``), a power of ten in any spelling (``1.2 x 10^-3``, ``1.2 × 10⁻³``,
  ``1.2 \\cdot 10^{-3}``, ``1.2*10^(-3)``, ``10^-3``) and a unit after it (``27.58kJ/mol``); a digit
  inside a word (``CO2``) is not a number; without a number, a run of number words that are whole
  words ("two"; not the "ten" inside "often"). Else the whole response when it is one short line
  ("There are two isomers.", "27.58 kJ/mol"). A number mentioned in reasoning is never guessed to be
  the answer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from catengine.grading.extraction import final_answer, superscripts_as_exponent

#: an answer span: ChemBench's opening tags in any case, up to a closing tag whose slash or spelling
#: may have slipped (the content is bounded: an answer is short)
_SPAN = re.compile(r"(?:\[ANSWER\]|\[ANS\]|<ANSWER>|<ANS>)(.{0,500}?)(?:\[/?ANS[A-Za-z]*\]|</ANS[A-Za-z]*>)",
                   re.IGNORECASE | re.DOTALL)
_WRAPPED = re.compile(r"\\(?:text|textbf|textrm|textit|mathrm|mathbf|boxed|fbox|mbox)\s*\{([^{}]*)\}")
_DECORATION = re.compile(r"\\[A-Za-z]+|[{}$*`_\"']")
_LABEL = re.compile(r"\b(?:the\s+)?(?:correct\s+)?(?:options?|choices?|answers?|letters?)\b\s*(?:is|are)?\s*:?",
                    re.IGNORECASE)
_SEPARATOR = re.compile(r"\s*(?:,|;|/|&|(?<![A-Za-z])and(?![A-Za-z])|\s)\s*", re.IGNORECASE)
_LEADING_LETTER = re.compile(r"[(\[]?([A-Za-z])[)\].:](?:\s|$)")
#: a response read whole as a letter list is one short line
_WHOLE_RESPONSE_CHARS = 80



def _power(group: str) -> str:
    """A pattern of ``^3``, ``^-3``, ``^{-3}``, ``^(-3)``, its exponent in the named ``group``."""
    return r"\s?\^\s?\{?\(?\s?(?P<" + group + r">[-+]?\d+)\s?\)?\}?"


_NUMBER = re.compile(
    r"(?<![\w.,])(?P<sign>[-+]?)(?P<mantissa>(?:[1-9]\d{0,2}(?:,\d{3})+(?!\d)|\d+)(?:[.,]\d+)?|[.,]\d+)"
    + "(?:" + _power("power") + ")?"
    + r"(?:\s?(?:[eE]|exp|EXP)\s?(?P<exponent>[-+]?\d+))?"
    + r"(?:\s?(?:\\times|\\cdot|[x\u00d7\u00b7\u22c5*])\s?10" + _power("ten") + ")?"
    + r"(?!\d)")
_GROUPED = re.compile(r"[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?")

_UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
          "sixteen seventeen eighteen nineteen").split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = "hundred thousand million billion trillion".split()
#: ChemBench's number words (``NUM_WORDS_REGEX``)
NUMBER_WORDS = _UNITS + _TENS + _SCALES
_WORD_VALUES = {"and": (1, 0), **{w: (1, k) for k, w in enumerate(_UNITS)},
                **{w: (1, 10 * k) for k, w in enumerate(_TENS, start=2)},
                **{w: (10 ** (3 * k or 2), 0) for k, w in enumerate(_SCALES)}}
_WHOLE_WORD = r"(?<![A-Za-z])(?:" + "|".join(NUMBER_WORDS) + r")(?![A-Za-z])"
#: a run of number words that are whole words (not the "ten" inside "often")
_WHOLE_NUMBER_WORDS = re.compile(rf"{_WHOLE_WORD}(?:\s+{_WHOLE_WORD})*", re.IGNORECASE)


def merit_letters(text: str, letters: Sequence[str], options: Sequence[str] = ()) -> list[str]:
    """The option letters (among ``letters``; ``options`` their texts, in the same order) ``text``
    states as its answer, read on its merits (see the module docstring), in order and without
    repeats; [] when it states none."""
    if not letters:
        return []
    candidates = list(reversed(_SPAN.findall(text)))
    answer, _ = final_answer(text)
    if answer:
        candidates.append(answer)
    stripped = text.strip()
    if "\n" not in stripped and len(stripped) <= _WHOLE_RESPONSE_CHARS:
        candidates.append(stripped)
    for candidate in candidates:
        found = letter_list(candidate, letters) or option_letters(candidate, letters, options)
        if found:
            return found
    return []


def option_letters(content: str, letters: Sequence[str], options: Sequence[str]) -> list[str]:
    """``[letter]`` of the one option whose text ``content`` repeats (``[ANSWER]C2v[/ANSWER]`` for
    option C "C2v"; case, spacing, ``$``, ``\\ce{}`` and ChemBench's ``[START_SMILES]`` tags aside),
    else []."""
    key = _option_key(content)
    if not key:
        return []
    matches = [letter for letter, option in zip(letters, options) if _option_key(option) == key]
    return matches if len(matches) == 1 else []


def _option_key(text: str) -> str:
    s = re.sub(r"\[(START|END)_[A-Z]+\]", "", text)
    previous = None
    while previous != s:
        previous, s = s, re.sub(r"\\(?:ce|pu|text|textrm|mathrm|boxed)\s*\{([^{}]*)\}", r"\1", s)
    return re.sub(r"[\s$*`]+", "", s).rstrip(".").lower()


def letter_list(content: str, letters: Sequence[str]) -> list[str]:
    """The option letters ``content`` is a list of (``A, C``, ``a and c``, ``**B**``, ``(B)``,
    ``Option B``, ``\\boxed{B}``), or the letter that opens it (``B) ethanol``); [] otherwise."""
    allowed = {letter.upper() for letter in letters}
    s = content
    previous = None
    while previous != s:
        previous, s = s, _WRAPPED.sub(r"\1", s)
    s = _LABEL.sub(" ", _DECORATION.sub(" ", s)).strip().rstrip(".").strip()
    pieces = [piece.strip("()[].:") for piece in _SEPARATOR.split(s) if piece.strip("()[].:")]
    if pieces and all(len(piece) == 1 and piece.upper() in allowed for piece in pieces):
        return list(dict.fromkeys(piece.upper() for piece in pieces))
    leading = _LEADING_LETTER.match(s)
    if leading is not None and leading.group(1).upper() in allowed:
        return [leading.group(1).upper()]
    return []


def merit_number(text: str) -> tuple[float | None, str | None]:
    """``(value, what was read)`` of the number ``text`` states as its answer, read on its merits
    (see the module docstring): the first number of the first answer span, else of the final answer;
    ``(None, what was read or None)`` when neither holds one."""
    spans = _SPAN.findall(text)
    if spans:
        return number_in(spans[0])
    answer, _ = final_answer(text)
    if answer:
        return number_in(answer)
    stripped = text.strip()
    if "\n" not in stripped and len(stripped) <= _WHOLE_RESPONSE_CHARS:
        return number_in(stripped)
    return None, None


def number_in(content: str) -> tuple[float | None, str | None]:
    """``(value, what was read)`` of the first number in ``content`` (:func:`first_number`), else of
    its first run of whole number words ("twenty three"); ``(None, content)`` when it holds neither."""
    value, read = first_number(content)
    if value is not None:
        return value, read
    words = _WHOLE_NUMBER_WORDS.search(content)
    if words is not None:
        number = words_to_number(words.group(0))
        if number is not None:
            return float(number), words.group(0)
    return None, content.strip() or None


def first_number(content: str) -> tuple[float | None, str | None]:
    """``(value, the number as written)`` of the first number in ``content`` (see the module
    docstring for the spellings read), or ``(None, content)`` when it holds none."""
    s = content.replace("\u2212", "-").replace("{,}", ",").replace("\\!", "")
    s = re.sub(r"(?<=\d)\\[,:; ](?=\d{3}(?!\d))", "", s)
    s = superscripts_as_exponent(s)
    match = _NUMBER.search(s)
    if match is None:
        return None, content.strip() or None
    value = _number_value(match)
    return value, match.group(0).strip()


def _number_value(match: re.Match) -> float | None:
    mantissa = match["mantissa"]
    if _GROUPED.fullmatch(mantissa):
        mantissa = mantissa.replace(",", "")
    mantissa = mantissa.replace(",", ".")
    try:
        value = float(mantissa)
        if match["power"] is not None:
            value = value ** int(match["power"])
        if match["exponent"] is not None:
            value *= 10.0 ** int(match["exponent"])
        if match["ten"] is not None:
            value *= 10.0 ** int(match["ten"])
    except (OverflowError, ZeroDivisionError, ValueError):
        return None
    value = -value if match["sign"] == "-" else value
    return value if math.isfinite(value) else None


def words_to_number(words: str) -> int | None:
    """ChemBench's ``text2int``: ``"twenty three"`` -> 23, ``"one hundred"`` -> 100 (None if a word is not a number word)."""
    current = result = 0
    for word in words.lower().split():
        if word not in _WORD_VALUES:
            return None
        scale, increment = _WORD_VALUES[word]
        current = current * scale + increment
        if scale > 100:
            result += current
            current = 0
    return result + current
