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

**Shortcuts.** Three cases get math-verify's verdict without its parser: two integers, two texts
that read the same once spellings that cannot change a parse are dropped (:func:`_canonical_text`),
and two plain numbers (:func:`_numeric_verdict`). :meth:`MathGrader.warm_up` primes the parser's
lazily built prediction tables once per process.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import threading
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

from catengine.grading.base import Grade, Grader, GraderError
from catengine.grading.extraction import final_answer, superscripts_as_exponent
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
_SPACE_BEFORE_PERCENT = re.compile(r"(?:\s|\\[,:; !])+(?=\\%)")
_GROUPED = re.compile(r"(?<![\d.,])\d{1,3}(?:,\d{3})+(?![\d,])")
_DEGREE_SIGN = re.compile(r"\s*(?:°|\\degree\b)")
_NUMBER_AND_WORDS = re.compile(r"^((?:\\\$)?\s*[-+]?\d[\d,]*(?:\.\d+)?)\s+([A-Za-z]{2,}\.?(?:\s+[A-Za-z]{2,}\.?)*)"
                               r"(\^\{?[23]\}?)?$")
#: words that after a number are mathematics, not a unit
_MATH_WORDS = {"pi", "sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "sqrt", "and", "or", "mod", "times"}

#: unicode mathematics LLMs write outside LaTeX, as LaTeX
_UNICODE_SYMBOLS = {"\u2212": "-", "\u221e": "\\infty ", "\u00b7": "\\cdot ", "\u22c5": "\\cdot ", "\u2264": "\\le ",
                    "\u2265": "\\ge ", "\u2260": "\\ne ", "\u00b1": "\\pm ", "\u03c0": "\\pi "}
_VULGAR_FRACTIONS = {"\u00bd": (1, 2), "\u2153": (1, 3), "\u2154": (2, 3), "\u00bc": (1, 4), "\u00be": (3, 4),
                     "\u2155": (1, 5), "\u2156": (2, 5), "\u2157": (3, 5), "\u2158": (4, 5), "\u2159": (1, 6),
                     "\u215a": (5, 6), "\u215b": (1, 8), "\u215c": (3, 8), "\u215d": (5, 8), "\u215e": (7, 8)}
_ROOT = re.compile(r"(?<!\\)(?:\u221a|\bsqrt)\s*(?=[(\d.A-Za-z{])")
_BARE_SIGNED_EXPONENT = re.compile(r"\^\s*([-+]\s*\d+(?:\.\d+)?)")
_TIMES_TEN = re.compile(r"(?<=\d)\s*(?:x|\*)\s*(?=10\s*\^)")
_E_NOTATION = re.compile(r"([-+]?(?:\d+\.?\d*|\.\d+))[eE]([-+]?\d+)")
_SPACE_GROUPED = re.compile(r"[-+]?\d{1,3}(?: \d{3})+(?:\.\d+)?")


def _plain_text_math(text: str) -> str:
    """``text`` with mathematics written outside LaTeX rewritten as LaTeX: unicode signs (``−``,
    ``∞``, ``·``, ``≤``, ``π``, ...), superscripts (``x²``, ``10⁻³``), vulgar fractions (``½``,
    ``2½``), square roots (``√3``, ``√(x+1)``, ``sqrt(2)``), a tilde space (``10~\\text{cm}``), an
    exponent with a sign but no braces (``10^-3``), ``x`` or ``*`` before a power of ten
    (``1.2 x 10^-3``), and, as the whole answer, a number in e notation (``1.2e-3``) or grouped by
    spaces (``1 000``)."""
    for symbol, latex in _UNICODE_SYMBOLS.items():
        text = text.replace(symbol, latex)
    text = superscripts_as_exponent(text, braces=True)
    for symbol, (p, q) in _VULGAR_FRACTIONS.items():
        text = text.replace(symbol, f"\\frac{{{p}}}{{{q}}}")
    text = _square_roots(text)
    text = text.replace("~", " ")
    text = _BARE_SIGNED_EXPONENT.sub(lambda m: "^{" + m.group(1).replace(" ", "") + "}", text)
    text = _TIMES_TEN.sub(" \\\\times ", text)
    if _E_NOTATION.fullmatch(text.strip()):
        text = _E_NOTATION.sub(r"\1\\times 10^{\2}", text.strip())
    if _SPACE_GROUPED.fullmatch(text.strip()):
        text = text.strip().replace(" ", "")
    return text


def _square_roots(text: str) -> str:
    """``√3``, ``√x``, ``√(x+1)``, ``√{x+1}`` and ``sqrt(2)`` as ``\\sqrt{...}``."""
    out, k = [], 0
    for match in _ROOT.finditer(text):
        if match.start() < k:
            continue
        out.append(text[k:match.start()])
        k = match.end()
        if text[k] in "({":
            close = _closing(text, k)
            if close is None:
                out.append(text[match.start():k])
                continue
            out.append("\\sqrt{" + text[k + 1:close] + "}")
            k = close + 1
        else:
            operand = re.match(r"\d*\.?\d+|[A-Za-z]", text[k:])
            if operand is None:
                out.append(text[match.start():k])
                continue
            out.append("\\sqrt{" + operand.group(0) + "}")
            k += operand.end()
    return "".join(out) + text[k:]


def _closing(text: str, open_at: int) -> int | None:
    """The index of the bracket closing the one at ``open_at`` (None if it never closes)."""
    pairs = {"(": ")", "{": "}"}
    opening, closing = text[open_at], pairs[text[open_at]]
    depth = 0
    for k in range(open_at, len(text)):
        if text[k] == opening:
            depth += 1
        elif text[k] == closing:
            depth -= 1
            if depth == 0:
                return k
    return None


def normalise_math_answer(answer: str) -> str:
    """``answer`` with the spellings math-verify does not read rewritten (applied to the reference
    and to the response's answer alike):

    * mathematics written outside LaTeX (:func:`_plain_text_math`): unicode signs, superscripts,
      vulgar fractions and roots (``−3``, ``x²``, ``10⁻³``, ``½``, ``√3``, ``sqrt(2)``, ``∞``),
      ``10^-3``, ``1.2 x 10^-3``, ``1.2e-3`` and ``1 000``;
    * thousands separators: ``,\\!`` and ``{,}`` become ``,``, a thin space between digit groups
      (``32\\,348``) goes, and a number grouped by commas (``32,348``, ``11,111,111,100``) loses
      its commas when the answer holds no bracket (so tuples and intervals keep theirs);
    * the degree sign ``°`` and ``\\degree`` become ``^\\circ``;
    * an article at the start of a ``\\text{}`` goes (``\\text{an ellipse}`` is ``\\text{ellipse}``),
      and a ``\\text{}`` holding a number and unit words holds only the number
      (``\\text{5.4 cents}``);
    * plain words after a number (``32348 dollars``, ``27 cm^2``) are a unit in ``\\text{}`` (unless
      one is mathematics: ``pi``, ``sqrt``, ``and``, ...), and a space before ``\\%`` goes.

    Everything else (``\\$``, ``\\dfrac``, ``\\left(``, ``\\text{}`` units after a number, ``^\\circ``,
    ``\\pm``, percent) math-verify reads itself.
    """
    text = _plain_text_math(answer.strip())
    text = re.sub(r",\\!\s*", ",", text.strip()).replace("\\!", "").replace("{,}", ",")
    text = _THIN_SPACE_GROUP.sub("", text)
    text = _SPACE_BEFORE_PERCENT.sub("", text)
    text = _DEGREE_SIGN.sub("^\\\\circ", text)
    text = _ARTICLE.sub(r"\1", text)
    text = _NUMBER_IN_TEXT.sub(r"\1", text)
    if not re.search(r"[()\[\]]|\\\{|\\\}", text):
        text = _GROUPED.sub(lambda m: m.group(0).replace(",", ""), text)
    unit = _NUMBER_AND_WORDS.match(text)
    if unit is not None and not {w.strip(".").lower() for w in unit.group(2).split()} & _MATH_WORDS:
        text = f"{unit.group(1)} \\text{{ {unit.group(2)}}}{unit.group(3) or ''}"
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


#: answers of the shapes LLMs write (numbers, fractions, roots, tuples, intervals, sets, equations,
#: polynomials, matrices, units, text): parsing them once primes math-verify's ANTLR parser, whose
#: prediction tables are built lazily over a process's first few hundred parses
_WARM_UP_ANSWERS = (
    r"42", r"-3.5", r"\frac{14}{3}", r"-\dfrac{1}{2}", r"2\sqrt{113}", r"\frac{\sqrt{3}}{2}", r"7\pi",
    r"\frac{5\pi^2}{4}", r"(2,4)", r"\left( 3, \frac{\pi}{2} \right)", r"[-2,7]", r"(-\infty, 3) \cup (5, \infty)",
    r"(3,4]", r"\{1\pm\sqrt{5},-2\}", r"1 \pm \sqrt{19}", r"x=5", r"y = -2x + 3", r"x^8 + x^7 + x^2 + x + 1",
    r"\frac{11+9a}{20}", r"8n^2 + 4n + 1", r"6+9i", r"2516_8", r"36^\circ", r"15\mbox{ cm}^2", r"\text{(B)}",
    r"\text{ellipse}", r"50\%", r"\$5.40", r"\begin{pmatrix} -1/3 \\ 2/3 \end{pmatrix}",
    r"\begin{pmatrix} -1 & 0 \\ 0 & -1 \end{pmatrix}", r"1,-2", r"\sqrt[3]{2}", r"\log_2 3", r"\cos 2x", r"5r^5",
    r"1\frac{4}{5}", r"11\sqrt2", r"a^2 b", r"\infty", r"\binom{8}{3}", r"4!", r"e^{2}", r"\frac{1}{x-1}",
)
_warmed_up = threading.Event()
_warm_up_lock = threading.Lock()


def warm_up_parser() -> None:
    """Parse :data:`_WARM_UP_ANSWERS` once per process (later calls return at once)."""
    if _warmed_up.is_set():
        return
    with _warm_up_lock:
        if _warmed_up.is_set():
            return
        for answer in _WARM_UP_ANSWERS:
            _parse(answer)
        _warmed_up.set()


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


# ----------------------------------------------------------------------------- verdicts without a parse
_INTEGER = re.compile(r"[-+]?\d{1,100}")
_SIZED_DELIMITER = re.compile(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|big|Big)(?![A-Za-z])\s*(?=[()\[\]|]|\\[{}|])")
_FRACTION_STYLE = re.compile(r"\\[dt]frac(?![A-Za-z])")
_SPACING = re.compile(r"\\(?:[,:;> ]|quad|qquad|displaystyle|textstyle)(?![A-Za-z])")
_WHITESPACE = re.compile(r"\s+")


def _canonical_text(answer: str) -> str:
    """``answer`` (normalised) with the spellings that cannot change its parse removed: sizing
    commands before a delimiter (``\\left(`` is ``(``), ``\\dfrac`` / ``\\tfrac`` (``\\frac``),
    spacing and style commands, and whitespace, except one space between two letters or digits
    (``x y``, ``2 3``, ``\\pi r`` keep theirs: removing it could change the meaning)."""
    text = _SIZED_DELIMITER.sub("", answer)
    text = _FRACTION_STYLE.sub(r"\\frac", text)
    text = _SPACING.sub(" ", text)

    def space(match) -> str:
        before, after = text[match.start() - 1: match.start()], text[match.end(): match.end() + 1]
        return " " if before.isalnum() and after.isalnum() else ""

    return _WHITESPACE.sub(space, text).strip()


_RATIONAL = re.compile(
    r"(?P<sign>[-+]?)(?:"
    r"\\frac\{(?P<fsign>[-+]?)(?P<num>\d{1,12})\}\{(?P<den>\d{1,12})\}"
    r"|(?P<snum>\d{1,12})/(?P<sden>\d{1,12})"
    r"|(?P<int>\d{1,12})(?P<frac>\.\d{1,12})?"
    r"|(?P<bare>\.\d{1,12}))")


def _rational(answer: str) -> tuple[Fraction, bool] | None:
    """``(value, written with a decimal point)`` of an answer that is a plain number: an integer, a
    decimal or a fraction of integers (``-\\frac{3}{4}``, ``\\frac{-3}{4}``, ``3/4``, ``0.75``, ``.75``),
    with at most 12 digits in each part; None for anything else (and for a zero denominator)."""
    m = _RATIONAL.fullmatch(answer)
    if m is None:
        return None
    sign = -1 if m["sign"] == "-" else 1
    if m["num"] is not None or m["snum"] is not None:
        num, den = (int(m["num"]), int(m["den"])) if m["num"] is not None else (int(m["snum"]), int(m["sden"]))
        if den == 0 or (m["num"] is not None and m["fsign"] and m["sign"]):
            return None
        return Fraction(sign * (-1 if m["fsign"] == "-" else 1) * num, den), False
    digits = (m["int"] or "") + (m["frac"] or "") if m["bare"] is None else m["bare"]
    if len(digits.replace(".", "").lstrip("0")) > 12:  # beyond what a float holds exactly: math-verify's business
        return None
    return sign * Fraction(digits), "." in digits


def _numeric_verdict(answer: str, reference: str) -> bool | None:
    """Equivalence of two plain numbers (:func:`_rational`) decided without math-verify, with its
    verdict: exact rationals are equal or not; with a decimal on either side math-verify compares
    both rounded to 6 decimals, so equal values are equivalent and values more than 2e-6 apart are
    not (rounding moves each by at most 5e-7); anything closer is left to math-verify (None)."""
    a, b = _rational(answer), _rational(reference)
    if a is None or b is None:
        return None
    if a[0] == b[0]:
        return True
    if not (a[1] or b[1]) or abs(a[0] - b[0]) > Fraction(2, 1_000_000):
        return False
    return None


# ----------------------------------------------------------------------------- the grader


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
    version: ClassVar[str] = "2"
    serves: ClassVar[tuple[str, ...]] = ("1",)  # docs/grading.md: what version 1 misread
    answer_types: ClassVar[frozenset[str]] = frozenset({"math", "integer"})
    max_answer_chars: int = 300

    def __post_init__(self):
        object.__setattr__(self, "max_answer_chars", integer_at_least(self.max_answer_chars, "max_answer_chars", 1))

    def warm_up(self) -> None:
        """Prime math-verify's parser (:func:`warm_up_parser`: about a second of CPU, once per process)."""
        warm_up_parser()

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
        if _INTEGER.fullmatch(normalised) and _INTEGER.fullmatch(reference):  # two integers: compared exactly
            return Grade(True, answer, EQUIVALENT) if int(normalised) == int(reference) else \
                Grade(False, answer, NOT_EQUIVALENT)
        canonical, canonical_reference = _canonical_text(normalised), _canonical_text(reference)
        if canonical == canonical_reference:
            return Grade(True, answer, EQUIVALENT)  # the reference itself, spelt differently
        verdict = _numeric_verdict(canonical, canonical_reference)
        if verdict is not None:  # two plain numbers: math-verify's verdict without its parse
            return Grade(verdict, answer, EQUIVALENT if verdict else NOT_EQUIVALENT)
        gold = self.reference(item)
        prediction = _parse(normalised)
        if not prediction:
            return Grade(False, answer, UNPARSEABLE)
        problem = _cost_problem(prediction)
        if problem is not None:
            return Grade(False, answer, problem)
        return Grade(True, answer, EQUIVALENT) if _verify(gold, prediction) else Grade(False, answer, NOT_EQUIVALENT)
