"""The math grader: the final answer, compared with the reference by equivalence (math-verify).

:class:`MathGrader` (``"math"``) reads the final answer (:func:`catengine.grading.extraction.final_answer`:
the last ``\\boxed{}``, else a final-answer line, else none), normalises both it and the reference
(:func:`normalise_math_answer`) and asks `math-verify <https://github.com/huggingface/Math-Verify>`_
(Apache-2.0) whether they are equivalent: ``verify(parse(reference), parse(answer))`` with its default
tolerances (numbers compared after rounding to 6 decimals, so 0.3333333 is 1/3 but 0.333 is not;
sets unordered, tuples and intervals ordered; ``x = 5`` equals ``5``; ``50\\%`` equals 50 and 0.5).

**Threads.** math-verify bounds its own work with ``signal.alarm``, which only the main thread may
set. This grader turns those timeouts off (``parsing_timeout=None``, ``timeout_seconds=None``), so it
runs the same way in any thread and its verdict never depends on the machine's speed, and bounds the
work another way, before sympy sees the answer: an answer longer than ``max_answer_chars`` is not
compared, and neither is one whose parsed form would make sympy build a gigantic number or expand a
huge power (a number that may have more than :data:`MAX_DIGITS` digits, a power of a sum with an exponent
above :data:`MAX_SUM_POWER`, a factorial of a number above :data:`MAX_FACTORIAL`) or evaluate an unevaluated
sum, product, integral, limit or derivative (not a final answer). Ordinary answers take
milliseconds; the slowest comparisons measured under the length cap (long trigonometric sums) take a
few seconds.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from dataclasses import dataclass
from typing import ClassVar

from catengine.grading.base import Grade, Grader, GraderError
from catengine.grading.extraction import final_answer
from catengine.validation import integer_at_least

#: an answer whose value has more decimal digits than this is not compared
MAX_DIGITS = 100_000
#: a power of a sum with a larger exponent is not compared (sympy would expand it)
MAX_SUM_POWER = 100
#: a factorial (or binomial, gamma) of a larger number is not compared
MAX_FACTORIAL = 20_000

EQUIVALENT = "equivalent"
NOT_EQUIVALENT = "not equivalent"
EMPTY_ANSWER = "empty final answer"
UNPARSEABLE = "answer could not be parsed"


# ----------------------------------------------------------------------------- normalisation
_TEXT_COMMANDS = r"(?:text|textrm|textbf|textit|mbox|mathrm)"
_ARTICLE = re.compile(r"(\\" + _TEXT_COMMANDS + r"\{)\s*(?:an?|the)\s+", re.IGNORECASE)
_NUMBER_IN_TEXT = re.compile(r"\\" + _TEXT_COMMANDS + r"\{\s*([-+]?\d[\d,]*(?:\.\d+)?)\s*[A-Za-z][A-Za-z .]*\}")
_THIN_SPACE_GROUP = re.compile(r"(?<=\d)\\[,:; ]\s*(?=\d{3}(?!\d))")
_GROUPED = re.compile(r"(?<![\d.,])\d{1,3}(?:,\d{3})+(?![\d,])")
_DEGREE_SIGN = re.compile(r"\s*(?:°|\\degree\b)")
_NUMBER_AND_WORDS = re.compile(r"^((?:\\\$)?\s*[-+]?\d[\d,]*(?:\.\d+)?)\s+([A-Za-z]{2,}\.?(?:\s+[A-Za-z]{2,}\.?)*)$")
#: words that after a number are mathematics, not a unit
_MATH_WORDS = {"pi", "sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "sqrt", "and", "or", "mod", "times"}


def normalise_math_answer(answer: str) -> str:
    """``answer`` with the spellings math-verify does not read rewritten (applied to the reference
    and to the response's answer alike):

    * thousands separators: ``,\\!`` and ``{,}`` become ``,``, a thin space between digit groups
      (``32\\,348``) goes, and a number grouped by commas (``32,348``, ``11,111,111,100``) loses
      its commas when the answer holds no bracket (so tuples and intervals keep theirs);
    * the degree sign ``°`` and ``\\degree`` become ``^\\circ``;
    * an article at the start of a ``\\text{}`` goes (``\\text{an ellipse}`` is ``\\text{ellipse}``),
      and a ``\\text{}`` holding a number and unit words holds only the number
      (``\\text{5.4 cents}``);
    * plain words after a number (``32348 dollars``) are a unit in ``\\text{}`` (unless one is
      mathematics: ``pi``, ``sqrt``, ``and``, ...).

    Everything else (``\\$``, ``\\dfrac``, ``\\left(``, ``\\text{}`` units after a number, ``^\\circ``,
    ``\\pm``, percent) math-verify reads itself.
    """
    text = re.sub(r",\\!\s*", ",", answer.strip()).replace("\\!", "").replace("{,}", ",")
    text = _THIN_SPACE_GROUP.sub("", text)
    text = _DEGREE_SIGN.sub("^\\\\circ", text)
    text = _ARTICLE.sub(r"\1", text)
    text = _NUMBER_IN_TEXT.sub(r"\1", text)
    if not re.search(r"[()\[\]]|\\\{|\\\}", text):
        text = _GROUPED.sub(lambda m: m.group(0).replace(",", ""), text)
    unit = _NUMBER_AND_WORDS.match(text)
    if unit is not None and not {w.strip(".").lower() for w in unit.group(2).split()} & _MATH_WORDS:
        text = f"{unit.group(1)} \\text{{ {unit.group(2)}}}"
    return text


# ----------------------------------------------------------------------------- math-verify, without signals
class _DropTimeoutWarning(logging.Filter):
    """math-verify warns once that its timeout is off; here that is deliberate (see the module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Timeout is disabled")


@functools.lru_cache(maxsize=1)
def _math_verify():
    """``(parse, verify)`` of math-verify, imported on first use (it loads sympy and ANTLR)."""
    try:
        from math_verify import parse, verify
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise ImportError("the math grader needs math-verify: pip install 'math-verify[antlr4_13_2]'") from exc
    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).addFilter(_DropTimeoutWarning())
    return parse, verify


def _parse(latex: str) -> list:
    parse, _ = _math_verify()
    return parse("\\boxed{" + latex + "}", parsing_timeout=None)


@functools.lru_cache(maxsize=4096)
def _parsed_reference(normalised: str) -> tuple:
    return tuple(_parse(normalised))


def _verify(gold: list, prediction: list) -> bool:
    if _numbers_differ(gold, prediction):
        return False
    _, verify = _math_verify()
    return bool(verify(gold, prediction, timeout_seconds=None))


def _numbers_differ(gold: list, prediction: list) -> bool:
    """Whether the reference and the answer are both numeric expressions (no symbol, no percent)
    whose values differ by more than 1e-6 of their size: math-verify would then compare their
    values, find them different and spend milliseconds to a second in ``simplify`` on their
    difference before saying so. This shortcut gives its verdict at once."""
    import sympy

    expressions = [[x for x in side if isinstance(x, sympy.Basic) and not isinstance(x, str)] for side in (gold, prediction)]
    if any(len(side) != 1 for side in expressions):
        return False
    a, b = expressions[0][0], expressions[1][0]
    for x in (a, b):
        if not isinstance(x, sympy.Expr) or not x.is_number or x.has(sympy.UnevaluatedExpr):
            return False
    try:
        difference = complex(sympy.N(a - b, 30))
        scale = max(1.0, abs(complex(sympy.N(a, 15))), abs(complex(sympy.N(b, 15))))
    except (TypeError, ValueError, ArithmeticError):
        return False
    return math.isfinite(abs(difference)) and abs(difference) > 1e-6 * scale


# ----------------------------------------------------------------------------- the cost guard
def _cost_problem(parsed: list) -> str | None:
    """Why comparing the parsed answer could make sympy run without bound, or None."""
    import sympy
    from sympy import Add, Derivative, Integral, Limit, Pow, Product, Sum

    unevaluated = (Sum, Product, Integral, Limit, Derivative)
    factorials = (sympy.factorial, sympy.factorial2, sympy.gamma, sympy.binomial, sympy.subfactorial)
    for expr in parsed:
        if isinstance(expr, sympy.MatrixBase):
            roots = list(expr)
        elif isinstance(expr, sympy.Basic):
            roots = [expr]
        else:
            continue
        for root in roots:
            for node in sympy.preorder_traversal(root):
                if isinstance(node, unevaluated):
                    return f"answer holds an unevaluated {type(node).__name__.lower()}, not a final value"
                if isinstance(node, Pow):
                    base, exponent = node.args
                    if exponent.free_symbols:
                        continue
                    size = _log10_bound(exponent)
                    if size > 7:
                        return "answer too large to compare (an exponent above 10^7)"
                    if base.has(Add) and 10 ** size > MAX_SUM_POWER:
                        return f"answer too large to compare (a power of a sum with an exponent above {MAX_SUM_POWER})"
                    if not base.free_symbols and _log10_bound(node) > MAX_DIGITS:
                        return f"answer too large to compare (a number that may have more than {MAX_DIGITS} digits)"
                elif isinstance(node, factorials) and _log10_bound(node.args[0]) > math.log10(MAX_FACTORIAL):
                    return f"answer too large to compare (a factorial of a number above {MAX_FACTORIAL})"
    return None


def _log10_bound(expr) -> float:
    """An upper bound of log10(max(|value|, 1)) of ``expr`` that sympy need not evaluate to get,
    counting a symbol as 1 (inf when there is none cheaply)."""
    import sympy

    if expr.is_Integer:
        return math.log10(max(abs(int(expr)), 1))
    if expr.is_Rational:
        return math.log10(max(abs(int(expr.p)), abs(int(expr.q)), 1))
    if expr.is_Float:
        value = abs(float(expr))
        return math.log10(max(value, 1.0)) if value < math.inf else math.inf
    if expr.is_Atom:  # symbols, pi, E, I, oo
        return 1.0
    if isinstance(expr, sympy.Pow):
        base, exponent = expr.args
        size = _log10_bound(exponent)
        return math.inf if size > 7 else 10 ** size * max(_log10_bound(base), 0.31)
    if isinstance(expr, sympy.factorial):
        size = _log10_bound(expr.args[0])
        return math.inf if size > 7 else 10 ** size * (size + 1)
    args = [_log10_bound(a) for a in expr.args if isinstance(a, sympy.Basic)]
    if not args:
        return 1.0
    return sum(args) if isinstance(expr, sympy.Mul) else max(args) + math.log10(len(args) + 1)


# ----------------------------------------------------------------------------- the grader
_INTEGER = re.compile(r"[-+]?\d{1,100}")


def _same_text(a: str, b: str) -> bool:
    """The two answers are the same text up to whitespace: equivalent without asking math-verify
    (whose parse of a long expression costs milliseconds)."""
    return "".join(a.split()) == "".join(b.split())


@dataclass(frozen=True)
class MathGrader(Grader):
    """``"math"``: the last ``\\boxed{}`` (else a final-answer line) equivalent to the reference
    under math-verify, after :func:`normalise_math_answer`. Safe in any thread (see the module
    docstring); an answer longer than ``max_answer_chars`` is graded wrong unread.

    Reasons: "equivalent", "not equivalent", "empty response", "no final answer found",
    "unterminated \\boxed{...}", "empty final answer", "answer could not be parsed",
    "answer too long to compare (...)", "answer too large to compare (...)",
    "answer holds an unevaluated ...".
    """

    name: ClassVar[str] = "math"
    version: ClassVar[str] = "1"
    answer_types: ClassVar[frozenset[str]] = frozenset({"math", "integer"})
    max_answer_chars: int = 300

    def __post_init__(self):
        object.__setattr__(self, "max_answer_chars", integer_at_least(self.max_answer_chars, "max_answer_chars", 1))

    def reference(self, item) -> list:
        """The parsed reference answer of ``item`` (cached per answer text); raises
        :class:`GraderError` when math-verify cannot read it."""
        parsed = _parsed_reference(normalise_math_answer(item.answer))
        if not parsed:
            raise GraderError(f"item {item.item!r}: math-verify cannot parse the reference answer {item.answer!r}")
        return list(parsed)

    def _grade(self, text, item):
        answer, why = final_answer(text)
        if answer is None:
            return Grade(False, None, why)
        if not answer:
            return Grade(False, answer, EMPTY_ANSWER)
        if len(answer) > self.max_answer_chars:
            return Grade(False, answer, f"answer too long to compare ({len(answer)} characters > {self.max_answer_chars})")
        normalised, reference = normalise_math_answer(answer), normalise_math_answer(item.answer)
        if _same_text(normalised, reference):
            return Grade(True, answer, EQUIVALENT)  # the reference itself, as written
        if _INTEGER.fullmatch(normalised) and _INTEGER.fullmatch(reference):  # two integers: compared exactly
            return Grade(True, answer, EQUIVALENT) if int(normalised) == int(reference) else \
                Grade(False, answer, NOT_EQUIVALENT)
        gold = self.reference(item)
        prediction = _parse(normalised)
        if not prediction:
            return Grade(False, answer, UNPARSEABLE)
        problem = _cost_problem(prediction)
        if problem is not None:
            return Grade(False, answer, problem)
        return Grade(True, answer, EQUIVALENT) if _verify(gold, prediction) else Grade(False, answer, NOT_EQUIVALENT)
