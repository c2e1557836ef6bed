"""Graders: the role's contract over every registered grader, the reference answers of the shipped
benchmarks graded correct in their own formats, other items' answers graded wrong, and a table of
realistic answer spellings with the verdict each should get and why."""

from __future__ import annotations

import csv
import dataclasses
import gzip
import json
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from catengine.grading import (
    EMPTY_RESPONSE,
    GRADERS,
    NO_FINAL_ANSWER,
    UNTERMINATED_BOX,
    ChemBenchCorrectedGrader,
    ChemBenchGrader,
    Grade,
    Grader,
    GraderError,
    IntegerGrader,
    MathGrader,
    final_answer,
    get_grader,
    grader_for,
    normalise_math_answer,
    parse_integer,
)
from catengine.itembank.content import OPTION_LETTERS, ItemContent
from real_data import DATA

MATH500 = DATA / "math500" / "test.jsonl.gz"
AMC23 = DATA / "amc23" / "answers.csv"
CHEMBENCH = DATA / "chembench" / "questions.jsonl.gz"


# ----------------------------------------------------------------------------- items
def math_item(answer: str, item: str = "t/0") -> ItemContent:
    return ItemContent(item=item, question="q", answer=answer, answer_type="math")


def integer_item(answer: str, item: str = "t/0") -> ItemContent:
    return ItemContent(item=item, question="q", answer=answer, answer_type="integer")


def mcq_item(correct: str, n_options: int = 4, item: str = "t/0") -> ItemContent:
    letters = tuple(c.strip() for c in correct.split(","))
    return ItemContent(item=item, question="q", answer=correct, answer_type="multiple_choice",
                       options=tuple(f"option {k}" for k in range(n_options)), correct_options=letters)


def number_item(target: str, item: str = "t/0", tolerance: float | None = 0.01) -> ItemContent:
    return ItemContent(item=item, question="q", answer=target, answer_type="number", tolerance=tolerance)


def _math500() -> list[ItemContent]:
    with gzip.open(MATH500, "rt", encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    return [ItemContent(item=f"math500/{k}", question=row["problem"], answer=row["answer"], answer_type="math")
            for k, row in enumerate(rows)]


def _chembench() -> list[ItemContent]:
    """The ChemBench items as a bank holds them: MCQ options in the key order of ``target_scores``
    (letters A, B, ...; correct = score 1), numeric targets with ChemBench's 1% tolerance."""
    items = []
    with gzip.open(CHEMBENCH, "rt", encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            example = row["question"]["examples"][0]
            if "target_scores" in example:
                options = tuple(example["target_scores"])
                correct = tuple(letter for letter, option in zip(OPTION_LETTERS, options)
                                if example["target_scores"][option] == 1)
                items.append(ItemContent(item=f"chembench/{row['item']}", question=example["input"],
                                         answer=", ".join(correct), answer_type="multiple_choice",
                                         options=options, correct_options=correct))
            else:
                items.append(ItemContent(item=f"chembench/{row['item']}", question=example["input"],
                                         answer=str(example["target"]), answer_type="number", tolerance=0.01))
    return items


@pytest.fixture(scope="module")
def math500():
    return _math500()


# ----------------------------------------------------------------------------- the contract
EXAMPLE_ITEMS = {
    "math": (math_item("\\frac{14}{3}"), "so $\\boxed{\\dfrac{14}{3}}$", "so $\\boxed{5}$"),
    "integer": (integer_item("27"), "The answer is $\\boxed{027}$.", "\\boxed{28}"),
    "chembench": (mcq_item("A, C"), "[ANSWER]C, A[/ANSWER]", "[ANSWER]A[/ANSWER]"),
    "chembench-corrected": (number_item("-41.9"), "[ANSWER]-41.9[/ANSWER]", "[ANSWER]-45[/ANSWER]"),
}


def test_every_registered_grader_has_an_example():
    assert set(EXAMPLE_ITEMS) == set(GRADERS)


@pytest.mark.parametrize("name", sorted(GRADERS))
def test_grader_contract(name):
    cls = GRADERS[name]
    grader = get_grader(name)
    assert isinstance(grader, Grader) and type(grader) is cls and cls.name == name
    assert dataclasses.is_dataclass(grader) and isinstance(cls.version, str) and cls.version
    assert cls.answer_types and grader.as_protocol() == {"name": name, "version": cls.version}
    with pytest.raises(dataclasses.FrozenInstanceError):
        grader.name = "other"  # type: ignore[misc]
    item, right, wrong = EXAMPLE_ITEMS[name]
    first = grader.grade(right, item)
    assert isinstance(first, Grade) and first.correct is True and first.reason
    assert grader.grade(right, item) == first  # deterministic
    assert grader.grade(wrong, item).correct is False
    for empty in ("", "  \n\t", None):
        assert grader.grade(empty, item) == Grade(False, None, EMPTY_RESPONSE)
    with pytest.raises(TypeError):
        grader.grade(b"bytes", item)
    # an answer type the grader does not handle is refused, never guessed
    other = next(candidate for candidate in (math_item("1"), integer_item("1"), mcq_item("A"), number_item("1"))
                 if candidate.answer_type not in cls.answer_types)
    with pytest.raises(GraderError, match="answer type"):
        grader.grade(right, other)


@pytest.mark.parametrize("name", sorted(GRADERS))
def test_graders_give_the_same_verdicts_in_worker_threads(name):
    """math-verify's own timeouts use signal.alarm, which raises outside the main thread: the graders
    turn them off, so a grader works, with the same verdicts, on any thread."""
    grader = get_grader(name)
    item, right, wrong = EXAMPLE_ITEMS[name]
    cases = [right, wrong, "", "no answer here"] * 5
    serial = [grader.grade(text, item) for text in cases]
    with ThreadPoolExecutor(max_workers=4) as pool:
        threaded = list(pool.map(lambda text: (threading.current_thread() is not threading.main_thread(),
                                               grader.grade(text, item)), cases))
    assert all(on_worker for on_worker, _ in threaded)
    assert [grade for _, grade in threaded] == serial


def test_math_grader_on_worker_threads_matches_the_main_thread(math500):
    items = math500[::10]
    texts = [f"The answer is \\boxed{{{items[(k * 7) % len(items)].answer}}}" for k in range(len(items))]
    grader = MathGrader()
    serial = [grader.grade(text, item) for text, item in zip(texts, items)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        threaded = list(pool.map(grader.grade, texts, items))
    assert threaded == serial


def test_grade_is_validated_and_serialisable():
    assert Grade(True, "5", "equivalent").as_dict() == {"correct": True, "extracted": "5", "reason": "equivalent"}
    for bad in ((1, "5", "x"), (True, 5, "x"), (True, "5", "")):
        with pytest.raises(TypeError):
            Grade(*bad)


def test_registry_and_grader_for():
    assert set(GRADERS) == {"math", "integer", "chembench", "chembench-corrected"}
    with pytest.raises(GraderError, match="unknown grader 'exact'.*registered: chembench"):
        get_grader("exact")
    item = math_item("5")
    assert isinstance(grader_for(item, {"grader": {"name": "math", "version": "1"}}), MathGrader)
    assert isinstance(grader_for(item, {"grader": {"name": "math"}}), MathGrader)  # no version: the registered one
    with pytest.raises(GraderError, match="version '0'.*version '2' \\(serving versions '1'\\)"):
        grader_for(item, {"grader": {"name": "math", "version": "0"}})
    # the registered version, and the versions it serves (whose misread spellings it reads right)
    assert isinstance(grader_for(item, {"grader": {"name": "math", "version": "2"}}), MathGrader)
    assert MathGrader().grades_version("1") and MathGrader().grades_version(None)
    assert not ChemBenchCorrectedGrader().grades_version("1")  # it reads answers on their merits: other verdicts
    with pytest.raises(GraderError, match="chembench-corrected.*version '1'"):
        grader_for(mcq_item("A"), {"grader": {"name": "chembench-corrected", "version": "1"}})
    with pytest.raises(GraderError, match="names no grader"):
        grader_for(item, {"prompts": {}})
    with pytest.raises(GraderError, match="names no grader"):
        grader_for(item, {"grader": "math"})
    with pytest.raises(GraderError, match="answer type"):
        grader_for(item, {"grader": {"name": "chembench", "version": "1"}})
    assert isinstance(grader_for(integer_item("3"), {"grader": {"name": "math", "version": "1"}}), MathGrader)


def test_settings_are_validated():
    assert MathGrader(max_answer_chars=50).max_answer_chars == 50
    for bad in (0, -1, 2.5, True, "300"):
        with pytest.raises(ValueError, match="max_answer_chars"):
            MathGrader(max_answer_chars=bad)


def test_unreadable_references_raise():
    with pytest.raises(GraderError, match="not an integer"):
        IntegerGrader().grade("\\boxed{3}", integer_item("three"))
    with pytest.raises(GraderError, match="not a finite number"):
        ChemBenchGrader().grade("[ANSWER]3[/ANSWER]", number_item("n/a"))


# ----------------------------------------------------------------------------- extraction
def test_final_answer_extraction():
    assert final_answer("so \\boxed{\\frac{1}{2}} and") == ("\\frac{1}{2}", "")
    assert final_answer("nested \\boxed{\\{1, \\frac{2}{3}\\}} end") == ("\\{1, \\frac{2}{3}\\}", "")
    assert final_answer("$\\boxed 5$.") == ("5", "")
    assert final_answer("\\fbox{7}") == ("7", "")
    assert final_answer("\\boxed{1} then \\boxed{2}") == ("2", "")
    assert final_answer("\\boxed{1} then \\boxed{\\frac{2}{") == (None, UNTERMINATED_BOX)
    assert final_answer("\\boxed{}") == ("", "")
    assert final_answer("Final Answer: The final answer is $\\frac{3}{4}$. I hope it is correct.") == ("\\frac{3}{4}", "")
    assert final_answer("**Final Answer:** 42") == ("42", "")
    assert final_answer("The answer is 3.5. Then we check.") == ("3.5", "")
    assert final_answer("The answer is $\\$18.90$.") == ("\\$18.90", "")
    assert final_answer("Final answer:\n\n$x = 2$") == ("x = 2", "")
    assert final_answer("I think it is 42.") == (None, NO_FINAL_ANSWER)


def test_extraction_is_linear_in_the_response_length():
    """A long chain of thought (here 2 MB of text with many unmatched cues) is read quickly."""
    import time

    text = ("We consider the answer and $x$ { \\boxed" * 1) + "the answer, maybe $ 1 + 2 " * 80_000 + "\\boxed{7}"
    start = time.perf_counter()
    assert final_answer(text) == ("7", "")
    assert MathGrader().grade(text, math_item("7")).correct
    assert time.perf_counter() - start < 2.0


def test_normalise_math_answer():
    assert normalise_math_answer("11,\\! 111,\\! 111,\\! 100") == "11111111100"
    assert normalise_math_answer("\\$32,\\!348") == "\\$32348"
    assert normalise_math_answer("32\\,348") == "32348"
    assert normalise_math_answer("(1,234)") == "(1,234)"  # a pair keeps its comma
    assert normalise_math_answer("3, 5, 7") == "3, 5, 7"
    assert normalise_math_answer("90°") == "90^\\circ"
    assert normalise_math_answer("\\text{an ellipse}") == "\\text{ellipse}"
    assert normalise_math_answer("\\text{5.4 cents}") == "5.4"


def test_parse_integer():
    for text, value in [("27", 27), ("027", 27), ("+27", 27), ("27.0", 27), ("27.", 27), ("$27$", 27), ("1,024", 1024),
                        ("1{,}024", 1024), ("1\\,024", 1024), ("\\text{27}", 27), ("\\mathbf{27}", 27), ("x = 27", 27),
                        ("27 \\text{ ways}", 27), ("27 ways", 27), ("27^\\circ", 27), ("\u221227", -27)]:
        assert parse_integer(text) == value, text
    for text in ("27.5", "\\frac{54}{2}", "3^3", "twenty-seven", "1,02", "", "27, 28"):
        assert parse_integer(text) is None, text


# ----------------------------------------------------------------------------- the shipped benchmarks
def test_every_math500_reference_boxed_is_graded_correct(math500):
    grader = MathGrader()
    wrong = [(item.item, item.answer, grade) for item in math500
             if not (grade := grader.grade(f"The answer is \\boxed{{{item.answer}}}", item)).correct]
    assert len(math500) == 500 and not wrong


def test_every_math500_reference_on_a_minerva_final_line_is_graded_correct(math500):
    grader = MathGrader()
    wrong = [(item.item, item.answer) for item in math500
             if not grader.grade(f"Final Answer: The final answer is ${item.answer}$. I hope it is correct.", item).correct]
    assert not wrong


def _both_ways(*pairs):
    return {pair for a, b in pairs for pair in ((a, b), (b, a))}


#: (reference, another item's reference given as the answer) pairs the math grader accepts though
#: the strings differ, each for a stated reason. Grading every non-integer MATH500 reference against
#: every other reference, in both roles, accepts exactly these (two integer references never match:
#: they are distinct plain digits); the test below re-checks a sample.
EXPLAINED_PAIRS = _both_ways(
    # the same number or expression, spelled differently
    ("\\frac{1}{4}", "\\frac14"),
    ("2 \\sqrt{5}", "2\\sqrt{5}"),
    ("10,\\!080", "10080"),
    # the same values as an unordered answer list ("find all integers n", "all the integer roots")
    ("1,-2", "-2,1"),
    # units and unit-like marks are not compared: the number is
    ("120^\\circ", "120"),
    ("30^\\circ", "30"),
    ("36^\\circ", "36"),
    ("90^\\circ", "90"),
    ("\\$36", "36"),
    ("36^\\circ", "\\$36"),  # 36 degrees and 36 dollars are both 36 (a known limit)
    ("15\\mbox{ cm}^2", "15"),
    # a base subscript is dropped: 40_9 reads as 40 (the digits match; the base is not checked)
    ("40_9", "40"),
    # the value of an assignment
    ("x=5", "5"),
) | {
    # an unordered answer list accepts the same values written in parentheses: the integers listed
    ("1,-2", "(-2,1)"),
    ("-2,1", "(-2,1)"),
    # an ordered pair accepts a bare list of the same entries in the same order (not "1,-2")
    ("(-2,1)", "-2,1"),
    # math-verify compares an equation answer's right side with a number reference: "... = 0" is 0
    # (a known leniency: an answer that is an equation for a question asking for a number)
    ("0", "5x - 7y + 11z + 4 = 0"),
}


def test_other_items_references_are_graded_wrong_unless_equivalent(math500):
    """A deterministic sample of 240 (item, another item's reference) pairs whose reference strings
    differ: only the pairs of EXPLAINED_PAIRS may be accepted (different spellings of one integer
    cannot occur: the integer references are plain digits)."""
    rng = random.Random(20240517)
    pairs = set()
    while len(pairs) < 240:
        i, j = rng.randrange(len(math500)), rng.randrange(len(math500))
        if math500[i].answer != math500[j].answer:
            pairs.add((i, j))
    grader = MathGrader()
    accepted = {(math500[i].answer, math500[j].answer) for i, j in sorted(pairs)
                if grader.grade(f"The answer is \\boxed{{{math500[j].answer}}}", math500[i]).correct}
    assert accepted <= EXPLAINED_PAIRS, accepted - EXPLAINED_PAIRS
    for gold, other in EXPLAINED_PAIRS:
        assert grader.grade(f"\\boxed{{{other}}}", math_item(gold)).correct, (gold, other)
    assert not grader.grade("\\boxed{1,-2}", math_item("(-2,1)")).correct  # an ordered pair keeps its order


def test_amc23_answers_are_graded_by_the_integer_and_math_graders():
    with open(AMC23, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 40
    for row in rows:
        item = integer_item(row["answer"], item=f"amc23/{row['item']}")
        value = int(row["answer"])
        for grader in (IntegerGrader(), MathGrader()):
            assert grader.grade(f"Thus the answer is $\\boxed{{{value}}}$.", item).correct, (grader.name, row)
            assert grader.grade(f"The final answer is {value}.", item).correct, (grader.name, row)
            assert not grader.grade(f"\\boxed{{{value + 1}}}", item).correct, (grader.name, row)
        assert IntegerGrader().grade(f"\\boxed{{{value:,}.0}}", item).correct
        assert IntegerGrader().grade(f"\\boxed{{{'-' if value < 0 else ''}0{abs(value)}}}", item).correct


def test_every_chembench_reference_in_its_answer_format_is_graded_correct():
    """Every ChemBench item's reference, written as ChemBench asks (``[ANSWER]A, C[/ANSWER]``,
    ``[ANSWER]<target>[/ANSWER]``), is correct under both ChemBench graders, except, under the
    reproducing one, the 18 numeric items whose target is <= 0 (never correct in the calibration
    data; listed in data/chembench/SOURCE.md)."""
    items = _chembench()
    assert len(items) == 2854
    reproducing, corrected = ChemBenchGrader(), ChemBenchCorrectedGrader()
    never_correct = []
    for item in items:
        if item.answer_type == "multiple_choice":
            response = f"[ANSWER]{', '.join(item.correct_options)}[/ANSWER]"
        else:
            response = f"[ANSWER]{item.answer}[/ANSWER]"
        assert corrected.grade(response, item).correct, (item.item, response)
        grade = reproducing.grade(response, item)
        if not grade.correct:
            assert item.answer_type == "number" and float(item.answer) <= 0, (item.item, response, grade)
            assert grade.reason.startswith("target <= 0")
            never_correct.append(float(item.answer))
    assert len(never_correct) == 18 and sorted(never_correct)[-3:] == [0.0, 0.0, 0.0]
    assert sum(item.answer_type == "multiple_choice" for item in items) == 2599


# ----------------------------------------------------------------------------- the verdict table
MATH_TABLE = [
    # (reference, response, correct, why)
    ("\\frac{14}{3}", "The answer is $\\boxed{\\frac{14}{3}}$.", True, "the reference itself"),
    ("\\frac{14}{3}", "\\boxed{\\dfrac{14}{3}}", True, "\\dfrac is \\frac in display style"),
    ("\\frac{14}{3}", "\\boxed{\\tfrac{14}{3}}", True, "\\tfrac is \\frac in text style"),
    ("\\frac{14}{3}", "\\boxed{14/3}", True, "a/b is the same fraction"),
    ("\\frac{14}{3}", "\\boxed{4\\frac{2}{3}}", True, "a mixed number: 4 2/3 = 14/3 (read as 4 + 2/3, not 4 * 2/3)"),
    ("\\frac{14}{3}", "\\boxed{\\frac{28}{6}}", True, "an unreduced fraction of the same value is equal"),
    ("\\frac{14}{3}", "\\boxed{4.666667}", True, "numbers are compared after rounding to 6 decimals"),
    ("\\frac{14}{3}", "\\boxed{4.67}", False, "a rounded decimal is a different number"),
    ("\\frac{1}{2}", "\\boxed{0.5}", True, "an exact decimal equals the fraction"),
    ("\\frac{1}{3}", "\\boxed{0.333}", False, "0.333 differs from 1/3 in the 4th decimal"),
    ("\\frac 59", "\\boxed{\\frac{5}{9}}", True, "the reference's brace-less \\frac 59"),
    ("\\$32,\\!348", "\\boxed{32348}", True, "the dollar sign and the ,\\! thousands separator are spelling"),
    ("\\$32,\\!348", "\\boxed{\\$32,348}", True, "a comma-grouped number is one number"),
    ("\\$32,\\!348", "The answer is 32,348 dollars.", True, "final-answer line; grouping comma and unit word go"),
    ("\\$32,\\!348", "\\boxed{32\\,348}", True, "a thin space between digit groups is a separator"),
    ("\\$32,\\!348", "\\boxed{32,349}", False, "a different number"),
    ("11,\\! 111,\\! 111,\\! 100", "\\boxed{11111111100}", True, "the same integer without separators"),
    ("11,\\! 111,\\! 111,\\! 100", "\\boxed{11,111,111,100}", True, "the same integer, comma-grouped"),
    ("58,500", "\\boxed{58500}", True, "a comma-grouped reference is one number"),
    ("864 \\mbox{ inches}^2", "\\boxed{864}", True, "the unit after a number is not compared"),
    ("864 \\mbox{ inches}^2", "\\boxed{864 \\text{ square inches}}", True, "a \\text unit after the number"),
    ("864 \\mbox{ inches}^2", "The answer is 864 square inches.", True, "a plain unit after the number"),
    ("5.4 \\text{ cents}", "\\boxed{\\text{5.4 cents}}", True, "a number and its unit inside \\text{}"),
    ("5.4 \\text{ cents}", "\\boxed{5.40}", True, "a trailing zero does not change the number"),
    ("\\frac{270}7\\text{ degrees}", "\\boxed{\\frac{270}{7}^\\circ}", True, "degrees written ^\\circ vs the word"),
    ("90^\\circ", "\\boxed{90}", True, "the degree mark is a unit"),
    ("90^\\circ", "\\boxed{90°}", True, "the degree sign ° is ^\\circ"),
    ("90^\\circ", "\\boxed{90^{\\circ}}", True, "braced ^{\\circ}"),
    ("90^\\circ", "\\boxed{\\frac{\\pi}{2}}", False, "radians are not converted: pi/2 is not the number 90"),
    ("\\text{(C)}", "\\boxed{C}", True, "a choice letter with or without \\text{( )}"),
    ("\\text{(C)}", "\\boxed{\\textbf{(C)}}", True, "\\textbf is \\text"),
    ("\\text{(C)}", "\\boxed{B}", False, "another choice"),
    ("\\text{Evelyn}", "\\boxed{\\text{Evelyn}}", True, "the same word"),
    ("\\text{ellipse}", "\\boxed{\\text{an ellipse}}", True, "a leading article inside \\text{} is dropped"),
    ("\\text{even}", "\\boxed{\\text{odd}}", False, "a different word"),
    ("x \\in [-2,7]", "\\boxed{[-2,7]}", True, "the interval without 'x \\in'"),
    ("x \\in [-2,7]", "\\boxed{[-2,7)}", False, "an open end is a different interval"),
    ("x \\in [-2,7]", "\\boxed{-2 \\le x \\le 7}", False,
     "an inequality is not compared with an interval reference (math-verify's default)"),
    ("(-\\infty, 0]", "\\boxed{(-\\infty, 0)}", False, "0 belongs to the reference interval only"),
    ("(-\\infty, 2) \\cup (3, \\infty)", "\\boxed{(-\\infty,2)\\cup(3,\\infty)}", True, "spacing"),
    ("\\left[ \\frac{\\pi^2}{8}, \\frac{5 \\pi^2}{4} \\right]", "\\boxed{[\\pi^2/8, 5\\pi^2/4]}", True,
     "\\left[ ... \\right] is [ ... ]"),
    ("1 \\pm \\sqrt{19}", "\\boxed{1 \\pm \\sqrt{19}}", True, "\\pm stands for both roots"),
    ("1 \\pm \\sqrt{19}", "\\boxed{1+\\sqrt{19}, 1-\\sqrt{19}}", True, "both roots listed"),
    ("1 \\pm \\sqrt{19}", "\\boxed{1+\\sqrt{19}}", False, "one root of two"),
    ("\\{1\\pm\\sqrt{5},-2\\}", "\\boxed{-2, 1+\\sqrt{5}, 1-\\sqrt{5}}", True, "the set's elements in another order"),
    ("\\begin{pmatrix} 1/5 \\\\ -18/5 \\end{pmatrix}", "\\boxed{\\begin{pmatrix} 0.2 \\\\ -3.6 \\end{pmatrix}}", True,
     "a matrix compares entry by entry"),
    ("\\begin{pmatrix} 1/5 \\\\ -18/5 \\end{pmatrix}",
     "\\boxed{\\begin{bmatrix} \\frac{1}{5} \\\\ -\\frac{18}{5} \\end{bmatrix}}", True, "bmatrix is a matrix too"),
    ("\\begin{pmatrix} 1/5 \\\\ -18/5 \\end{pmatrix}", "\\boxed{\\begin{pmatrix} 1/5 \\\\ 18/5 \\end{pmatrix}}", False,
     "one entry's sign differs"),
    ("(6,31,-1)", "\\boxed{(6, 31, -1)}", True, "a tuple, spaced"),
    ("(6,31,-1)", "\\boxed{(-1, 31, 6)}", False, "a tuple is ordered"),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "\\boxed{(3, \\frac{\\pi}{2})}", True, "\\left( ... \\right) is ( ... )"),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "\\boxed{\\left(3,\\pi/2\\right)}", True, "the same point"),
    ("p - q", "\\boxed{-q + p}", True, "the same expression reordered"),
    ("p - q", "\\boxed{q - p}", False, "the opposite expression"),
    ("3, 5, 7", "\\boxed{7, 5, 3}", True, "an answer list is unordered"),
    ("3, 5, 7", "\\boxed{3, 5}", False, "a missing element"),
    ("\\frac{14}{3}", "First $\\boxed{5}$; correcting that, $\\boxed{\\frac{14}{3}}$.", True, "the last box counts"),
    ("\\frac{14}{3}", "$\\boxed{\\frac{14}{3}}$. Wait, actually $\\boxed{5}$.", False, "the last box counts"),
    ("27", "The answer is 27.\n\nDouble-checking gives $\\boxed{28}$.", False,
     "a box beats a final-answer line: 28 is the answer given"),
    ("27", "Thus we get $\\boxed{27}$ apples in total.", True, "a box inside a sentence"),
    ("27", "I computed 27 but I am not sure.", False, "no box and no final-answer line: no answer"),
    ("27", "", False, "empty response"),
    ("\\frac{14}{3}", "Let $3x = 14$, so $x = \\boxed{\\frac{14}{", False, "cut off inside the box: no answer"),
    ("\\frac{14}{3}", "Let $3x = 14$, so we divide both sides by", False, "cut off before any answer"),
    ("\\frac{14}{3}", "Final Answer: The final answer is $\\frac{14}{3}$. I hope it is correct.", True,
     "Minerva's final line"),
    ("\\frac{14}{3}", "**Final Answer:** 14/3", True, "a markdown final-answer line"),
    ("x=5", "\\boxed{5}", True, "the value of an assignment"),
    ("5", "\\boxed{x = 5}", True, "an assignment whose value is the reference"),
    ("\\dfrac{33}{100}", "\\boxed{33\\%}", True, "a percent is a hundredth"),
    ("25", "\\boxed{25\\%}", True, "math-verify reads X% as X when the reference is X (a percent question's answer)"),
    ("\\frac{3\\sqrt{3}}{4}", "\\boxed{\\frac{3}{4}\\sqrt{3}}", True, "the same product"),
    ("2\\sqrt{113}", "\\boxed{\\sqrt{452}}", True, "sqrt(452) = 2 sqrt(113)"),
    ("3\\sqrt{13}", "\\boxed{3 \\sqrt 13}", False, "in LaTeX \\sqrt 13 is sqrt(1) followed by 3"),
    ("6 - 5i", "\\boxed{6-5i}", True, "a complex number, spacing"),
    ("\\pi", "\\boxed{3.14159}", False, "a decimal approximation of pi is not pi"),
    ("\\cot x", "\\boxed{\\frac{\\cos x}{\\sin x}}", True, "an identity"),
    ("(a+5)(b+2)", "\\boxed{ab+2a+5b+10}", True, "the expanded product"),
    ("y = 2x + 3", "\\boxed{y=3+2x}", True, "the same equation"),
    ("5x - 7y + 11z + 4 = 0", "\\boxed{10x - 14y + 22z + 8 = 0}", True, "a plane's equation times 2: the same plane"),
    ("52_8", "\\boxed{52_8}", True, "a base-8 numeral"),
    ("1\\frac{4}{5}", "\\boxed{\\frac{9}{5}}", True, "a mixed-number reference"),
    (".0000672", "\\boxed{6.72 \\times 10^{-5}}", True, "scientific notation"),
    ("\\$18.90", "\\boxed{18.9}", True, "dollars and a trailing zero"),
    ("27", "$\\boxed 27$", True, "\\boxed without braces takes the next token"),
    ("27", "\\fbox{27}", True, "\\fbox is a box"),
    ("27", "\\boxed{}", False, "an empty box"),
    ("5", "\\boxed{" + "+".join(["x"] * 200) + "}", False, "an answer longer than 300 characters is not compared"),
    ("5", "\\boxed{9^{9^{9}}}", False, "a number of ~370 million digits is not built"),
    ("5", "\\boxed{\\sum_{n=1}^{10^{9}} \\frac{1}{n}}", False, "an unevaluated sum is not a final value"),
]

MATH_REASONS = {
    "empty response": [("27", "")],
    "no final answer found": [("27", "I computed 27 but I am not sure.")],
    "unterminated": [("\\frac{14}{3}", "Let $3x = 14$, so $x = \\boxed{\\frac{14}{")],
    "empty final answer": [("27", "\\boxed{}")],
    "answer too long to compare": [("5", "\\boxed{" + "+".join(["x"] * 200) + "}")],
    "answer too large to compare": [("5", "\\boxed{9^{9^{9}}}")],
    "unevaluated sum": [("5", "\\boxed{\\sum_{n=1}^{10^{9}} \\frac{1}{n}}")],
    "not equivalent": [("p - q", "\\boxed{q - p}")],
    "equivalent": [("p - q", "\\boxed{-q + p}")],
}

INTEGER_TABLE = [
    ("27", "The answer is 27.", True, "a final-answer line"),
    ("27", "\\boxed{027}", True, "a leading zero"),
    ("27", "\\boxed{27.0}", True, "a zero fractional part"),
    ("27", "The final answer is $27$.", True, "inside $...$"),
    ("1024", "\\boxed{1,024}", True, "a comma-grouped integer"),
    ("1024", "\\boxed{1{,}024}", True, "LaTeX's {,} grouping"),
    ("27", "\\boxed{x = 27}", True, "an assignment"),
    ("27", "\\boxed{27 \\text{ ways}}", True, "a unit word"),
    ("27", "\\boxed{\\frac{54}{2}}", False, "an expression is not an integer literal (use the math grader)"),
    ("27", "\\boxed{27.5}", False, "not an integer"),
    ("27", "\\boxed{28}", False, "another integer"),
    ("27", "\\boxed{-27}", False, "the sign counts"),
    ("27", "27", False, "a bare number without a box or a final-answer line is not read"),
]

CHEMBENCH_TABLE = [
    # (grader, item, response, correct, why)
    ("chembench", mcq_item("A, C"), "[ANSWER]A, C[/ANSWER]", True, "exactly the correct letters"),
    ("chembench", mcq_item("A, C"), "[ANSWER]C,A[/ANSWER]", True, "a set: order and spacing do not matter"),
    ("chembench", mcq_item("A, C"), "[ANSWER]A[/ANSWER]", False, "a partial set is wrong"),
    ("chembench", mcq_item("A, C"), "[ANSWER]A, B, C[/ANSWER]", False, "an extra letter is wrong"),
    ("chembench", mcq_item("A, C"), "<ANS>A, C</ANS>", True, "a tag variant ChemBench reads"),
    ("chembench", mcq_item("A, C"), "[ANSWER]A C[/ANSWER]", False,
     "ChemBench's tag pattern reads comma-separated letters only"),
    ("chembench", mcq_item("B"), "[ANSWER]B, D[/ANSWER]", False, "several letters where one was expected"),
    ("chembench", mcq_item("B"), "B", True, "an untagged response that is exactly one letter"),
    ("chembench", mcq_item("B"), "The answer is B", False, "untagged prose is not read"),
    ("chembench", mcq_item("B"), "[ANSWER]B. Because the ester hydrolyses.[/ANSWER]", True,
     "the letter, then its explanation"),
    ("chembench", mcq_item("B"), "[ANSWER]b[/ANSWER]", False, "ChemBench reads capital letters only"),
    ("chembench", mcq_item("B"), "[ANSWER]E[/ANSWER]", False, "not one of the item's four option letters"),
    ("chembench", mcq_item("B"), "I'm sorry, but [ANSWER]B[/ANSWER]", True,
     "a refusal phrase does not void the answer: ChemBench's reports flag such replies and score them"),
    ("chembench", mcq_item("B"), "I do not think A holds. [ANSWER]B[/ANSWER]", True,
     "'I do not' is one of ChemBench's refusal phrases, even inside reasoning; the answer is scored"),
    ("chembench", mcq_item("B"), "I'm sorry, I cannot answer this question.", False, "a refusal without an answer"),
    ("chembench", number_item("27.58"), "[ANSWER]27.58[/ANSWER]", True, "the target"),
    ("chembench", number_item("27.58"), "[ANSWER]27.7[/ANSWER]", True, "|27.7 - 27.58| = 0.12 < 1% of 27.58"),
    ("chembench", number_item("27.58"), "[ANSWER]28[/ANSWER]", False, "|28 - 27.58| = 0.42 > 1% of 27.58"),
    ("chembench", number_item("27.58"), "[ANSWER]2.758e1[/ANSWER]", True, "e notation"),
    ("chembench", number_item("27.58"), "[ANSWER]2.758 x 10^1[/ANSWER]", True, "x 10^ notation"),
    ("chembench", number_item("27.58"), "[ANSWER]2.758 \\times 10^{1}[/ANSWER]", True, "\\times 10^{} notation"),
    ("chembench", number_item("27.58"), "[ANSWER]27.58 kJ/mol[/ANSWER]", True, "the first number between the tags"),
    ("chembench", number_item("27.58"), "[ANSWER]\n27.58\n[/ANSWER]", True, "white space around the number"),
    ("chembench", number_item("27.58"), "The answer is 27.58.", False, "no tags and no number words: no number"),
    ("chembench", number_item("3.27E-22"), "[ANSWER]3.27 \\times 10^{-22}[/ANSWER]", True, "a tiny target"),
    ("chembench", number_item("1024"), "[ANSWER]1,024[/ANSWER]", False,
     "ChemBench's number pattern stops at the comma: it reads 1"),
    ("chembench", number_item("2"), "There are two isomers.", True, "no tags: ChemBench's number-word fallback"),
    ("chembench", number_item("10"), "It is often said to be 3.", True,
     "the number-word fallback matches inside words: 'often' reads as ten (reproduced quirk)"),
    ("chembench", number_item("-41.9"), "[ANSWER]-41.9[/ANSWER]", False,
     "target <= 0: ChemBench's bound 0.01 * target is negative, never met (reproduced quirk)"),
    ("chembench", number_item("0"), "[ANSWER]0[/ANSWER]", False, "target 0: the bound is 0, never met"),
    ("chembench-corrected", number_item("-41.9"), "[ANSWER]-41.9[/ANSWER]", True, "the bound uses |target|"),
    ("chembench-corrected", number_item("-41.9"), "[ANSWER]-41.6[/ANSWER]", True, "within 1% of |target|"),
    ("chembench-corrected", number_item("-41.9"), "[ANSWER]41.9[/ANSWER]", False, "the sign counts"),
    ("chembench-corrected", number_item("0"), "[ANSWER]0[/ANSWER]", True, "an exact answer is always correct"),
    ("chembench-corrected", number_item("0"), "[ANSWER]0.001[/ANSWER]", False, "nothing else is within 1% of 0"),
]


def test_the_verdict_table_has_at_least_60_spellings():
    assert len(MATH_TABLE) + len(INTEGER_TABLE) + len(CHEMBENCH_TABLE) >= 60
    assert len(MATH_TABLE) >= 60


@pytest.mark.parametrize("reference, response, correct, why", MATH_TABLE, ids=[row[3][:60] for row in MATH_TABLE])
def test_math_verdicts(reference, response, correct, why):
    grade = MathGrader().grade(response, math_item(reference))
    assert grade.correct is correct, (why, grade)


@pytest.mark.parametrize("reason, cases", sorted(MATH_REASONS.items()))
def test_math_reasons(reason, cases):
    for reference, response in cases:
        assert reason in MathGrader().grade(response, math_item(reference)).reason


@pytest.mark.parametrize("reference, response, correct, why", INTEGER_TABLE, ids=[row[3][:60] for row in INTEGER_TABLE])
def test_integer_verdicts(reference, response, correct, why):
    grade = IntegerGrader().grade(response, integer_item(reference))
    assert grade.correct is correct, (why, grade)


@pytest.mark.parametrize("name, item, response, correct, why", CHEMBENCH_TABLE,
                         ids=[f"{row[0]}: {row[4][:60]}" for row in CHEMBENCH_TABLE])
def test_chembench_verdicts(name, item, response, correct, why):
    grade = get_grader(name).grade(response, item)
    assert grade.correct is correct, (why, grade)


def test_chembench_extracted_and_reasons():
    grader = ChemBenchGrader()
    assert grader.grade("[ANSWER]C, A[/ANSWER]", mcq_item("A, C")) == Grade(True, "A, C", "exactly the correct letters")
    assert grader.grade("[ANSWER]B, D[/ANSWER]", mcq_item("B")).reason == "several letters where one was expected"
    assert grader.grade("[ANSWER]A[/ANSWER]", mcq_item("A, C")).reason == "not the set of correct letters"
    assert grader.grade("The answer is B", mcq_item("B")) == Grade(False, None, "no answer letters found")
    assert grader.grade("Sorry, [ANSWER]B[/ANSWER]", mcq_item("B")).reason == "exactly the correct letters"
    assert grader.grade("Sorry, I cannot tell.", mcq_item("B")).reason.startswith("refusal detected")
    assert grader.grade("[ANSWER]2.758 x 10^1[/ANSWER]", number_item("27.58")) == Grade(
        True, "2.758 x 10^1", "within 1% of the target")
    assert grader.grade("[ANSWER]n/a[/ANSWER]", number_item("27.58")) == Grade(False, "n/a", "no number found")
    assert grader.grade("[ANSWER]27.58[/ANSWER]", number_item("27.58", tolerance=None)).correct  # 1% by default
    assert not grader.grade("[ANSWER]27.7[/ANSWER]", number_item("27.58", tolerance=0.001)).correct


# ----------------------------------------------------------------------------- verdicts without a parse
#: plain numbers in the spellings the numeric shortcut reads, and near misses it must leave alone
NUMBER_SPELLINGS = [
    "3", "-3", "+3", "0", "-0", "3.0", "03", "0.75", ".75", "-.75", "\\frac{3}{4}", "\\dfrac{3}{4}", "-\\frac{3}{4}",
    "\\frac{-3}{4}", "3/4", "-3/4", "\\frac{6}{8}", "0.333333", "0.3333333", "0.333", "\\frac{1}{3}", "0.3333335",
    "0.3333325", "\\frac{2}{3}", "0.666667", "0.6666666", "1000000", "1000000.0000001", "1000000.000003",
    "123456789012", "123456789012.5", "\\frac{7}{1}", "7", "7.000001", "7.0000021", "-7", "\\frac{0}{5}", "0.0",
    "12.5", "\\frac{25}{2}", "25/2", "0.0000001", "0.000002", "0.0000025", "100.00", "1.5", "\\tfrac{3}{2}",
    "-1.5", "-\\dfrac{3}{2}", "\\frac{1}{0}", "3.", "1\\frac{1}{2}", "2.5e1", "\\frac13",
]


def _math_verify_verdict(reference: str, answer: str) -> bool:
    """math-verify's own verdict on two normalised answers (no shortcut of this package)."""
    from math_verify import parse, verify

    gold = parse("\\boxed{" + normalise_math_answer(reference) + "}", parsing_timeout=None)
    pred = parse("\\boxed{" + normalise_math_answer(answer) + "}", parsing_timeout=None)
    return bool(gold) and bool(pred) and verify(gold, pred, timeout_seconds=None)


def test_the_numeric_shortcut_gives_math_verifys_verdict():
    """Every pair of NUMBER_SPELLINGS the shortcut decides gets math-verify's verdict, and the
    shortcut decides most of them (it is worth having) but not the 6-decimal rounding band."""
    from catengine.grading.math_grader import _canonical_text, _numeric_verdict

    decided = []
    for reference in NUMBER_SPELLINGS:
        for answer in NUMBER_SPELLINGS:
            verdict = _numeric_verdict(_canonical_text(normalise_math_answer(answer)),
                                       _canonical_text(normalise_math_answer(reference)))
            if verdict is not None:
                decided.append((reference, answer, verdict))
    assert len(decided) > 0.6 * len(NUMBER_SPELLINGS) ** 2
    disagree = [(r, a, v) for r, a, v in decided if v != _math_verify_verdict(r, a)]
    assert not disagree
    undecided = {(r, a) for r in NUMBER_SPELLINGS for a in NUMBER_SPELLINGS} - {(r, a) for r, a, _ in decided}
    assert ("\\frac{1}{3}", "0.3333335") in undecided and ("\\frac{1}{0}", "3") in undecided


def test_spellings_the_canonical_text_equates_are_equivalent_under_math_verify(math500):
    """Each non-integer MATH500 reference respelt (sizing commands before delimiters, \\dfrac,
    spacing commands, spaces) reads as the same canonical text, and math-verify agrees they are
    equivalent; spaces between two letters or digits are kept (they may carry meaning)."""
    from catengine.grading.math_grader import _canonical_text

    def respell(answer: str) -> str:
        text = answer.replace("\\frac", "\\dfrac").replace("(", "\\left( ").replace(")", " \\right)")
        text = text.replace("[", "\\left[").replace("]", "\\right]")
        return text.replace(",", ", \\,") if "(" in answer or "[" in answer else text

    checked = 0
    for item in math500:
        if item.answer.strip().isdigit() or "\\{" in item.answer or "\\left" in item.answer:
            continue
        spelt = respell(item.answer)
        if spelt == item.answer:
            continue
        reference = normalise_math_answer(item.answer)
        assert _canonical_text(normalise_math_answer(spelt)) == _canonical_text(reference), item.answer
        checked += 1
        if checked % 4 == 0:  # math-verify's own verdict on a quarter of them (its parse is slow)
            assert _math_verify_verdict(item.answer, spelt), (item.answer, spelt)
    assert checked > 60
    assert _canonical_text("2 3") != _canonical_text("23") and _canonical_text("\\pi r") != _canonical_text("\\pir")
    assert _canonical_text("\\left. x \\right|") != _canonical_text(". x |")  # \left. is not a delimiter to drop


def test_warming_up_changes_no_verdict(math500):
    grader = MathGrader()
    responses = [(f"\\boxed{{{math500[(k * 7) % 500].answer}}}", math500[k]) for k in range(0, 500, 25)]
    before = [grader.grade(text, item) for text, item in responses]
    threads = [threading.Thread(target=grader.warm_up) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    grader.warm_up()  # again: returns at once
    assert [grader.grade(text, item) for text, item in responses] == before
