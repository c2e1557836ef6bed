"""Answer spellings real LLMs write, with the verdict each grader should give.

Every row is (response text, item, expected verdict, where the spelling comes from). The spellings
come from peer tools' test tables and extraction code and from real LLM replies:

* math-verify (huggingface/Math-Verify, ``tests/test_all.py``, ``tests/test_yujianll.py``): its
  table of model outputs (boxes joined by "and", ``14{,}916``, ``125\\textnormal{ miles}``,
  "Final Answer: The largest $n$ is 34.", ``\\(\\boxed{\\text{C}}\\)``, percent spellings, ...);
* lm-evaluation-harness (EleutherAI): ``minerva_math`` (its few-shot "Final Answer: The final
  answer is $[2,5)$. I hope it is correct."), ``gsm8k`` (``#### 72``), ``gpqa`` chain of thought
  ("The answer is (C)") and ``aime`` (``\\boxed{}`` or ``$...$``);
* openai/simple-evals (``ANSWER_PATTERN`` "Answer: $ANSWER" as the last line,
  ``ANSWER_PATTERN_MULTICHOICE`` "Answer: B" / "Answer: $B$");
* QwenLM/Qwen2.5-Math evaluation (``parser.py``: "the final answer is $\\boxed{}$", units and
  ``^\\circ`` and ``\\%`` in boxes, a trailing full stop, "answer is (B)");
* DeepSeek-R1 / QwQ reply shapes (``<think> ... </think>`` before the answer, or only the closing
  tag when the chat template opened the block; "**Final Answer**" then ``\\[ \\boxed{} \\]``; a
  self-correction "Wait, ..." that boxes again; DeepSeek-R1-Zero's ``<answer> ... </answer>``);
* ChemBench's calibration runs (lamalab-org/chembench-paper @ 8fe22914,
  ``src/data/chem-bench-main/reports/<model>/reports/*/<question>.json``): the replies of the 22
  calibration LLMs to the ChemBench questions, quoted with the model and question they come from.

A math row's verdict is also math-verify's own on the answer the grader extracts (after
``normalise_math_answer``), checked below; where math-verify alone would read the raw spelling
differently, the difference is one of the plain-text spellings the normaliser rewrites (``√3``,
``x²``, ``1.2e-3``, ``10^-3``, ``1 000``), also checked below.
"""

from __future__ import annotations

import pytest

from catengine.grading import (
    EMPTY_RESPONSE,
    NO_FINAL_ANSWER,
    REASONING_ONLY,
    ChemBenchCorrectedGrader,
    ChemBenchGrader,
    IntegerGrader,
    MathGrader,
    final_answer,
    get_grader,
    normalise_math_answer,
)
from catengine.grading.math_grader import _plain_text_math
from catengine.itembank.content import ItemContent


def math_item(answer: str) -> ItemContent:
    return ItemContent(item="t/0", question="q", answer=answer, answer_type="math")


def integer_item(answer: str) -> ItemContent:
    return ItemContent(item="t/0", question="q", answer=answer, answer_type="integer")


def mcq_item(correct: str, options: int | tuple[str, ...] = 4) -> ItemContent:
    letters = tuple(c.strip() for c in correct.split(","))
    texts = options if isinstance(options, tuple) else tuple(f"option {k}" for k in range(options))
    return ItemContent(item="t/0", question="q", answer=correct, answer_type="multiple_choice",
                       options=texts, correct_options=letters)


def number_item(target: str, tolerance: float = 0.01) -> ItemContent:
    return ItemContent(item="t/0", question="q", answer=target, answer_type="number", tolerance=tolerance)


R1_THINK = "<think>\nLet me count again... maybe it is \\boxed{4}? No, I missed one.\n</think>\n\n"

# ----------------------------------------------------------------------------- math
#: (response, reference, correct, source)
MATH_ROWS = [
    # boxed letters (MATH500 has a few letter answers, \text{(C)})
    ("The answer is $\\boxed{\\text{(B)}}$.", "\\text{(B)}", True, "Qwen2.5-Math: a choice letter boxed in \\text{( )}"),
    ("\\boxed{B}", "\\text{(B)}", True, "math-verify test_all: \\boxed{\\text{C}} matches \\boxed{\\text{(C)}}"),
    ("\\(\\boxed{\\text{B}}\\).", "\\text{(B)}", True, "math-verify test_all: \\(\\boxed{\\text{C}}\\)."),
    ("$\\boxed{(B)}$", "\\text{(B)}", True, "a letter in parentheses"),
    ("$\\boxed{\\textbf{(B)}}$", "\\text{(B)}", True, "AMC solutions' \\textbf{(B)}"),
    ("The answer is (B).", "\\text{(B)}", True, "lm-eval gpqa cot: 'The answer is (X)'"),
    ("The correct option is **B**.", "\\text{(B)}", True, "GPT-4o: a bold letter after 'correct option is'"),
    ("Answer: B", "\\text{(B)}", True, "simple-evals ANSWER_PATTERN_MULTICHOICE 'Answer: X'"),
    ("Answer: $B$", "\\text{(B)}", True, "simple-evals ANSWER_PATTERN_MULTICHOICE allows 'Answer: $X$'"),
    ("\\boxed{C}", "\\text{(B)}", False, "another letter"),
    ("**B**", "\\text{(B)}", False, "a bold letter alone: no box and no final-answer line, so no answer"),
    # assignments, units, degrees, money, percent
    ("\\boxed{x=3}", "3", True, "Qwen2.5-Math strip_string drops 'x='"),
    ("Thus $k = \\boxed{3}$.", "3", True, "math-verify test_all: 'k = \\frac{1}{3}'"),
    ("\\boxed{3\\text{ cm}}", "3", True, "Qwen2.5-Math strip_string: a \\text{} unit"),
    ("The area is $\\boxed{15\\text{ cm}^2}$.", "15", True, "MATH reference 15\\mbox{ cm}^2"),
    ("The distance is $\\boxed{125\\textnormal{ miles}}.$", "125", True, "math-verify test_all"),
    ("\\boxed{10~\\text{cm}}", "10", True, "a tilde (LaTeX's unbreakable space) before the unit"),
    ("\\boxed{10\\,\\mathrm{m/s}}", "10", True, "a thin space and an upright unit"),
    ("\\boxed{90^\\circ}", "90", True, "math-verify test_all: \\boxed{90^\\circ}"),
    ("The angle is $\\boxed{90 \\text{ degrees}}$.", "90^\\circ", True, "degrees as a word"),
    ("\\boxed{\\$5}", "5", True, "Qwen2.5-Math strip_string removes \\$"),
    ("\\boxed{5.40}", "\\$5.40", True, "MATH money reference"),
    ("The answer is $5.40.", "5.40", True, "a markdown dollar sign, not LaTeX math"),
    ("\\boxed{50\\%}", "50", True, "math-verify: X% equals a reference X"),
    ("\\boxed{50\\%}", "\\frac12", True, "math-verify: X% equals X/100"),
    ("\\boxed{0.5}", "50\\%", True, "math-verify: X/100 equals a reference X%"),
    ("Final Answer: The final answer is $28 \\%$. I hope it is correct.", "28\\%", True, "math-verify percent test"),
    # fractions and numbers
    ("\\boxed{\\dfrac12}", "\\frac12", True, "brace-less \\dfrac, math-verify test_all"),
    ("\\boxed{\\tfrac{1}{2}}", "\\frac{1}{2}", True, "\\tfrac"),
    ("\\boxed{1/2}", "\\frac{1}{2}", True, "a/b"),
    ("\\boxed{\\frac{2}{4}}", "\\frac{1}{2}", True, "unreduced"),
    ("\\boxed{0.33}", "\\frac13", False, "a rounded decimal is another number"),
    ("Therefore $\\boxed{\\frac94\\pi}$.", "\\frac{9}{4}\\pi", True, "math-verify test_all"),
    ("The answer is $\\boxed{\\sqrt 2+\\sqrt 5}$", "\\sqrt{2}+\\sqrt{5}", True, "math-verify test_all"),
    ("\\boxed{4\\sqrt{2}}", "4", False, "math-verify issue 41"),
    ("\\boxed{5.}", "5", True, "Qwen2.5-Math strip_string: a full stop inside the box"),
    ("The answer is 5.", "5", True, "a sentence's full stop"),
    ("\\boxed{6}", "5", False, "another number"),
    # thousands separators and scientific notation
    ("Therefore, $\\boxed{14{,}916}$ is our answer.", "14916", True, "math-verify test_all: {,}"),
    ("the answer is: \\[ \\boxed{11,\\! 111,\\! 111,\\! 100} \\]", "11111111100", True, "math-verify test_all: ,\\!"),
    ("is $\\boxed{32, 349}$", "32349", False, "math-verify test_all: '32, 349' is two numbers"),
    ("\\boxed{1,000}", "1000", True, "comma-grouped"),
    ("\\boxed{1\\,000}", "1000", True, "thin-space-grouped"),
    ("\\boxed{1 000}", "1000", True, "space-grouped (math-verify's expression tests: '1 000' is 1000)"),
    ("\\boxed{1.2 \\times 10^{-3}}", "0.0012", True, "scientific notation in LaTeX"),
    ("\\boxed{1.2 \\cdot 10^{-3}}", "0.0012", True, "\\cdot for the product"),
    ("\\boxed{1.2 × 10^{-3}}", "0.0012", True, "a unicode multiplication sign"),
    ("\\boxed{1.2 \\times 10^-3}", "0.0012", True, "an exponent with its sign but no braces"),
    ("Answer: 1.2 x 10^-3", "0.0012", True, "plain-text scientific notation"),
    ("\\boxed{1.2e-3}", "0.0012", True, "e notation (the task brief; ChemBench's own number spellings)"),
    ("\\boxed{1.2E3}", "1200", True, "e notation, capital E"),
    ("\\boxed{1.2e-4}", "0.0012", False, "a different power of ten"),
    # unicode and plain-text mathematics (answers written outside LaTeX)
    ("\\boxed{−5}", "-5", True, "a unicode minus sign"),
    ("The answer is −5.", "-5", True, "a unicode minus sign on an answer line"),
    ("Answer: √3", "\\sqrt{3}", True, "a unicode square root"),
    ("Answer: 2√3", "2\\sqrt{3}", True, "a unicode square root after a coefficient"),
    ("Answer: 2√(3)", "2\\sqrt{3}", True, "a unicode square root of a bracket"),
    ("Answer: 2 sqrt(3)", "2\\sqrt{3}", True, "sqrt() as in code"),
    ("Answer: √2", "\\sqrt{3}", False, "another root"),
    ("Answer: π/2", "\\frac{\\pi}{2}", True, "a unicode pi"),
    ("Answer: (-∞, 3)", "(-\\infty, 3)", True, "a unicode infinity"),
    ("Answer: 2x² + 3", "2x^2+3", True, "a unicode superscript"),
    ("Answer: ½", "\\frac{1}{2}", True, "a vulgar fraction"),
    ("Answer: 2½", "2\\frac{1}{2}", True, "a mixed number with a vulgar fraction"),
    ("\\boxed{2·3}", "6", True, "a unicode middle dot for the product"),
    # tuples, intervals, lists, sets
    ("\\boxed{(1,2)}", "(1,2)", True, "an ordered pair"),
    ("\\boxed{\\left(1, 2\\right)}", "(1,2)", True, "\\left( ... \\right)"),
    ("\\boxed{(2,1)}", "(1,2)", False, "a pair is ordered"),
    ("\\boxed{[2, 5)}", "[2,5)", True, "a half-open interval"),
    ("Final Answer: The final answer is $[2,5)$. I hope it is correct.", "[2,5)", True,
     "lm-eval minerva_math few-shot answer"),
    ("\\boxed{(2,5)}", "[2,5)", False, "another interval"),
    ("Thus, the answer is $x \\in \\boxed{(2,12) \\cup (12,102)}$", "(2,12) \\cup (12,102)", True, "math-verify test_all"),
    ("Thus, the values are: \\[ \\boxed{[-4, 0]} \\]", "[-4,0]", True, "math-verify test_all"),
    ("\\boxed{1, 2}", "1,2", True, "a list"),
    ("\\boxed{2, 1}", "1,2", True, "a list is unordered"),
    ("\\boxed{\\{1, 2\\}}", "1,2", True, "a set"),
    ("\\boxed{19, 46, \\text{ and } 82}", "19, 46, 82", True, "math-verify test_yujianll: '19, 46, \\text{ and } 82'"),
    ("so the solutions are $n = \\boxed{1,-2}.$", "1,-2", True, "MATH500 reference solution"),
    ("Thus, the integers are \\[ \\boxed{-2} \\quad \\text{and} \\quad \\boxed{1}. \\]", "1,-2", True,
     "math-verify test_all (DeepSeek-R1 distill): boxes joined by 'and' are one answer"),
    ("The integers are \\boxed{-2} and \\boxed{1}.", "1,-2", True, "math-verify joins boxes linked by 'and'"),
    ("$\\boxed{-2}$, $\\boxed{1}$", "1,-2", True, "math-verify joins boxes linked by commas"),
    ("The integers are \\boxed{-2} and \\boxed{1}.", "1", False, "two values where one was asked"),
    ("\\boxed{1}", "1,-2", False, "one value of two"),
    ("\\boxed{5}, \\boxed{5}", "5", True, "the same box twice is one answer"),
    ("An intermediate value is $\\boxed{3}$, which we use next.\n\nSo the result is $\\boxed{5}$.", "5", True,
     "boxes linked by prose are not joined: the last one counts"),
    # final-answer lines and headings
    ("**Final Answer:** 5", "5", True, "markdown final-answer line"),
    ("**Final Answer**: 5", "5", True, "markdown final-answer line, colon outside the bold"),
    ("**Final Answer**\n\n5", "5", True, "DeepSeek-R1 / QwQ heading, the answer on the next line without a box"),
    ("### Final Answer\n\n\\[ \\boxed{5} \\]", "5", True, "QwQ heading and display box"),
    ("### Final Answer\nThe total is $5$.", "5", True, "a heading, then a sentence with the answer in math"),
    ("**Final Answer**\nThe number of ways is 27.", "27", True, "a heading, then a sentence stating the answer"),
    ("Final Answer: The largest $n$ is 34.", "34", True, "math-verify test_all ('Final Answer' issue)"),
    ("**Final Answer:** There are 27 ways.", "27", True, "a sentence with a subject after 'Final Answer:'"),
    ("The answer is $\\boxed{5}$.", "5", True, "Qwen2.5-Math / Minerva"),
    ("Therefore, the final answer is \\(\\boxed{5}\\).", "5", True, "Qwen2.5-Math chain-of-thought ending"),
    ("The final answer is: $\\boxed{5}$", "5", True, "Llama-3.1 'The final answer is: $\\boxed{}$'"),
    ("Answer: 5", "5", True, "simple-evals math: last line 'Answer: $ANSWER'"),
    ("ANSWER: 5", "5", True, "upper case"),
    ("Answer: \\frac{14}{3}", "\\frac{14}{3}", True, "simple-evals: the answer without $"),
    ("**Answer:** \\( \\frac{14}{3} \\)", "\\frac{14}{3}", True, "markdown, inline math"),
    ("The answer is **14/3**.", "\\frac{14}{3}", True, "a bold answer"),
    ("The answer is 5.\n\n## Final Answer\n", "5", True, "an empty heading after the answer line"),
    ("<think>\n2 + 3 = 5\n</think>\n<answer>5</answer>", "5", True, "DeepSeek-R1-Zero's <answer> tags"),
    ("<answer> $\\frac{1}{2}$ </answer>", "\\frac12", True, "math in <answer> tags (Open-R1 / TinyZero style)"),
    ("<answer>The answer is 7.</answer>", "7", True, "a final-answer line inside <answer> tags"),
    ("<answer>6</answer>", "5", False, "another number in <answer> tags"),
    ("Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether.\n#### 72", "72", True,
     "lm-eval gsm8k answer format '#### 72'"),
    ("#### 71", "72", False, "another number after ####"),
    ("$$-\\frac{3}{2}a=b\\Rightarrow\\frac{a}{b}=\\boxed{-\\frac{2}{3}}.$$\nFinal Answer: The final answer is "
     "$-\\frac{2}{3}$. I hope it is correct.", "-\\frac{2}{3}", True, "lm-eval minerva_math few-shot solution"),
    ("Therefore, $\\boxed{\\text{Evelyn}}$ is our answer.", "\\text{Evelyn}", True, "math-verify test_all"),
    ("Thus, there are $\\boxed{2}$ distinct possible values for $B$.", "2", True, "math-verify test_all"),
    # reasoning models, self-correction, truncation
    (R1_THINK + "The answer is $5$.", "5", True, "DeepSeek-R1: a draft box in the thinking is not the answer"),
    (R1_THINK + "The answer is $5$.", "4", False, "DeepSeek-R1: the draft in the thinking is not graded"),
    ("Okay, 2+3 is 5, so \\boxed{5}... let me double-check.\n</think>\n\n**Final Answer**\n\\[\n\\boxed{5}\n\\]", "5", True,
     "DeepSeek-R1 distill: the chat template wrote the opening <think>"),
    ("<think>\nLet me compute. It is \\boxed{5", "5", False, "cut off inside the thinking: no answer"),
    ("<think>\n2+3=5, so \\boxed{5}\n</think>", "5", False, "nothing after the thinking: no answer"),
    ("So $\\boxed{4}$.\n\nWait, I miscounted: the count is $\\boxed{5}$.", "5", True, "QwQ self-correction: the last box"),
    ("\\boxed{\\boxed{5}}", "5", True, "a box in a box"),
    ("\\[\n\\boxed{5}\n\\]", "5", True, "a display box over three lines"),
    ("so the answer is", "5", False, "cut off after the cue"),
    ("The answer is $\\boxed{", "5", False, "cut off inside the box"),
]

# ----------------------------------------------------------------------------- integer
#: (response, reference, correct, source)
INTEGER_ROWS = [
    ("Thus the answer is $\\boxed{27}$.", "27", True, "lm-eval aime / AMC"),
    ("\\boxed{027}", "27", True, "AIME's three digits"),
    ("The final answer is: $\\boxed{27}$", "27", True, "Llama-3.1"),
    ("**Final Answer**\n\\[\n\\boxed{27}\n\\]", "27", True, "DeepSeek-R1 / QwQ"),
    ("### Final Answer\n\\boxed{27}", "27", True, "QwQ heading"),
    ("**Final Answer:** **27**", "27", True, "a bold answer after a bold cue"),
    ("**Answer:** 27", "27", True, "markdown answer line"),
    ("Answer: 27", "27", True, "simple-evals 'Answer: $ANSWER'"),
    ("The answer is 27 ways.", "27", True, "a unit word and a full stop"),
    ("Answer: 27 cm²", "27", True, "a unit with a unicode superscript"),
    ("#### 27", "27", True, "lm-eval gsm8k '#### <number>'"),
    ("<think>\nadd them\n</think>\n<answer>27</answer>", "27", True, "DeepSeek-R1-Zero's <answer> tags"),
    ("\\boxed{27}.", "27", True, "a full stop after the box"),
    ("\\boxed{27.}", "27", True, "a full stop inside the box"),
    ("\\boxed{27\\text{ cm}^2}", "27", True, "a squared unit"),
    ("\\boxed{27 \\mbox{ cm}^2}", "27", True, "MATH's \\mbox unit, squared"),
    ("\\boxed{27 \\, \\text{ways}}", "27", True, "a thin space before the unit"),
    ("\\boxed{27\\ \\text{ways}}", "27", True, "a control space before the unit"),
    ("\\boxed{27~\\text{cm}}", "27", True, "a tilde before the unit"),
    ("\\boxed{27\\ \\mathrm{cm}}", "27", True, "an upright unit"),
    ("\\boxed{27 \\text{ ways}.}", "27", True, "a unit and a full stop inside the box"),
    ("\\boxed{27\\,\\%}", "27", True, "a thin space before the percent sign"),
    ("\\boxed{27^{\\circ}}", "27", True, "degrees"),
    ("\\boxed{\\$27}", "27", True, "dollars"),
    ("\\boxed{\\displaystyle 27}", "27", True, "a style command"),
    ("\\boxed{{27}}", "27", True, "doubled braces"),
    ("\\boxed{\\textbf{27}}", "27", True, "bold"),
    ("\\boxed{n = 27}", "27", True, "an assignment"),
    ("\\boxed{27.00}", "27", True, "zero decimals"),
    ("\\boxed{1 024}", "1024", True, "space-grouped thousands"),
    ("\\boxed{1{,}024}", "1024", True, "LaTeX {,} grouping"),
    ("\\boxed{−27}", "-27", True, "a unicode minus sign"),
    (R1_THINK + "\\boxed{27}", "27", True, "DeepSeek-R1: the draft box in the thinking is set aside"),
    (R1_THINK + "\\boxed{27}", "4", False, "DeepSeek-R1: the draft box in the thinking is not the answer"),
    ("<think>\nSo the total is \\boxed{27}", "27", False, "cut off inside the thinking"),
    ("\\boxed{27.5}", "27", False, "not an integer"),
    ("\\boxed{26}", "27", False, "another integer"),
    ("\\boxed{2.7 \\times 10^1}", "27", False, "an expression, not an integer literal (the integer grader's rule)"),
    ("The values are \\boxed{27} and \\boxed{28}.", "27", False, "two answers where one was asked"),
    ("\\boxed{27, 28}", "27", False, "a list is not an integer"),
]

# ----------------------------------------------------------------------------- ChemBench
PG = ("C1", "C2", "C2v", "D2h")  # the options of ChemBench's point_group question pointgroups_6

#: (grader, response, item, correct, source); "ChemBench <model>, <question>" quotes a calibration reply
CHEMBENCH_ROWS = [
    # ChemBench's own patterns: what the calibration data was scored by
    ("chembench", "[ANSWER]B,C[/ANSWER]", mcq_item("B, C"), True, "ChemBench GPT-4o, biochem_6"),
    ("chembench", "[ANSWER] B, C [/ANSWER]", mcq_item("B, C"), True, "ChemBench Llama-3.1-70B, biochem_6"),
    ("chembench", "The closest option to this value is 107.14 deg C.\n\nTherefore, the correct answer is [ANSWER]D[/ANSWER].",
     mcq_item("D"), True, "ChemBench GPT-4o, polymer_chemistry_24"),
    ("chembench", "**[ANSWER]B[/ANSWER]**", mcq_item("B"), True, "ChemBench Gemma-2-9B: bold tags"),
    ("chembench", "[ANSWER]\nB\n[/ANSWER]", mcq_item("B"), True, "the letter on its own line"),
    ("chembench", "[ANSWER]B[ANSWER]", mcq_item("B"), True, "a closing tag without its slash (ChemBench reads it)"),
    ("chembench", "[ANSWER]B[/ANSWER].", mcq_item("B"), True, "a full stop after the tags"),
    ("chembench", "<think>\nIs it [ANSWER]A[/ANSWER]? No: B.\n</think>\n[ANSWER]B[/ANSWER]", mcq_item("B"), True,
     "a reasoning model's thinking is set aside (its draft tags are not the answer)"),
    ("chembench", " [ANSWER]C2v[/ANSWER]", mcq_item("C", PG), False,
     "ChemBench Phi-3, pointgroups_6: an option's text, not its letter (ChemBench's pattern reads none)"),
    ("chembench", "[ANSWER]C E[/ANSWER]", mcq_item("C, E", 5), False,
     "ChemBench Gemma-1.1-7B, bonding_2: letters without commas (ChemBench's pattern reads none)"),
    ("chembench", "[ANSWER] A [/ANSswer]", mcq_item("A"), False, "ChemBench Llama-3.1-70B, noe: a misspelt closing tag"),
    ("chembench", "\\[ \\text{[ANSWER]}C\\text{[/ANSWER]} \\]", mcq_item("C"), False,
     "ChemBench Mistral-Large-2, IX_2020_cal: tags inside LaTeX \\text{}"),
    ("chembench", "Therefore, the correct answer is **Option B**.", mcq_item("B"), False,
     "ChemBench o1, organic_reactivity_7: untagged"),
    ("chembench", "[ANSWER]1.43e5[/ANSWER]", number_item("143000"), True, "ChemBench Claude-2, icho_uk_2010_1a: e notation"),
    ("chembench", "[ANSWER]4.75e-23[/ANSWER]", number_item("4.78E-23"), True, "ChemBench Gemma-2-9B, icho_uk_2023_q2h1"),
    ("chembench", "**[ANSWER]1.09[/ANSWER]**", number_item("1.09"), True, "ChemBench Gemma-2-9B, icho_uk_2019_1b2"),
    ("chembench", "[ANSWER]27.4[/ANSWER]", number_item("27.58"), True, "ChemBench Gemma-2-9B, icho_uk_2010_2a: within 1%"),
    ("chembench", "[ANSWER]98,55[/ANSWER]", number_item("98.4"), True,
     "ChemBench Llama-3.1-8B, icho_uk_2022_q1f: a decimal comma; ChemBench reads 98, within 1% of 98.4"),
    ("chembench", "[ANSWER]30,700[/ANSWER]", number_item("30680"), False,
     "ChemBench o1, icho_uk_2022_q1e: ChemBench's pattern stops at the comma and reads 30"),
    ("chembench", "[ANSWER]1.50 x 10⁻²³[/ANSWER]", number_item("1.5E-23"), False,
     "ChemBench Gemma-2-9B, icho_uk_2023_q2h3: superscripts are not read (ChemBench reads 1.50)"),
    ("chembench", "[ANSWER]1.2 \\cdot 10^{-3}[/ANSWER]", number_item("0.0012"), False,
     "ChemBench's pattern knows x, *, × and \\times, not \\cdot"),
    ("chembench", "[ANSWER]-285.8 kJ mol^{-1}[/ANSWER]", number_item("-285.8"), False,
     "ChemBench Mixtral-8x7B, icho_uk_2020_2g: target <= 0, never correct under ChemBench's bound"),
    ("chembench", "The final answer is: $\\boxed{8}$", number_item("8"), False,
     "ChemBench Llama-3.1-405B, icho_uk_2011_2f: untagged, and no number words"),
    # chembench-corrected: the same answer format, each answer read on its merits
    ("chembench-corrected", "[ANSWER]B,C[/ANSWER]", mcq_item("B, C"), True, "ChemBench GPT-4o, biochem_6"),
    ("chembench-corrected", " [ANSWER]C2v[/ANSWER]", mcq_item("C", PG), True,
     "ChemBench Phi-3, pointgroups_6: the text of option C (the calibration data scored it correct)"),
    ("chembench-corrected", "[ANSWER]C2[/ANSWER]", mcq_item("C", PG), False, "the text of another option"),
    ("chembench-corrected", "[ANSWER]C E[/ANSWER]", mcq_item("C, E", 5), True,
     "ChemBench Gemma-1.1-7B, bonding_2 (ChemBench's prompt asks for 'comma- or space-separated' letters)"),
    ("chembench-corrected", "[ANSWER] A [/ANSswer]", mcq_item("A"), True, "ChemBench Llama-3.1-70B, noe"),
    ("chembench-corrected", "\\[ \\text{[ANSWER]}C\\text{[/ANSWER]} \\]", mcq_item("C"), True,
     "ChemBench Mistral-Large-2, IX_2020_cal"),
    ("chembench-corrected", "Therefore, the correct answer is **Option B**.", mcq_item("B"), True,
     "ChemBench o1, organic_reactivity_7"),
    ("chembench-corrected", "Unfortunately, I do not have enough chemistry knowledge to determine the best answer between "
     "the two options. Since a response is required, I will make my best guess. [ANSWER]B[/ANSWER]", mcq_item("B", 2), True,
     "ChemBench Claude-2, preference_choung_1000: a refusal phrase, then an answer (scored correct in the calibration data)"),
    ("chembench-corrected", "I'm sorry, but I can't help with that.", mcq_item("B"), False, "a refusal without an answer"),
    ("chembench-corrected", "[ANSWER]b[/ANSWER]", mcq_item("B"), True, "a lower-case letter"),
    ("chembench-corrected", "[ANSWER]a, c[/ANSWER]", mcq_item("A, C"), True, "lower-case letters"),
    ("chembench-corrected", "[ANSWER]A and C[/ANSWER]", mcq_item("A, C"), True, "letters joined by 'and'"),
    ("chembench-corrected", "[ANSWER]A and C[/ANSWER]", mcq_item("A"), False, "one letter too many"),
    ("chembench-corrected", "[ANSWER](B)[/ANSWER]", mcq_item("B"), True, "a letter in parentheses"),
    ("chembench-corrected", "[ANSWER]**B**[/ANSWER]", mcq_item("B"), True, "a bold letter"),
    ("chembench-corrected", "[ANSWER]B) It hydrolyses the ester.[/ANSWER]", mcq_item("B"), True, "'B) text'"),
    ("chembench-corrected", "[ANSWER]$\\boxed{B}$[/ANSWER]", mcq_item("B"), True, "a boxed letter in the tags"),
    ("chembench-corrected", "[ANSWER]Option B[/ANSWER]", mcq_item("B"), True, "'Option B'"),
    ("chembench-corrected", "The correct option is B.", mcq_item("B"), True, "an untagged final statement"),
    ("chembench-corrected", "The answer is (B).", mcq_item("B"), True, "lm-eval gpqa 'The answer is (X)'"),
    ("chembench-corrected", "Answer: B", mcq_item("B"), True, "simple-evals 'Answer: X'"),
    ("chembench-corrected", "**B**", mcq_item("B"), True, "a bold letter as the whole reply"),
    ("chembench-corrected", "B) 1.2 g/mol", mcq_item("B"), True, "'B) text' as the whole reply"),
    ("chembench-corrected", "**Final Answer**\n\n\\boxed{B}", mcq_item("B"), True, "QwQ-style boxed letter"),
    ("chembench-corrected", "The answer is a mixture of A and C.", mcq_item("A, C"), False,
     "prose, not a list of letters: the 'a' is an article"),
    ("chembench-corrected", "I think A is wrong.", mcq_item("A"), False, "a remark, not an answer"),
    ("chembench-corrected", "[ANSWER]E[/ANSWER]", mcq_item("B"), False, "not one of the four option letters"),
    ("chembench-corrected", "[ANSWER]30,700[/ANSWER]", number_item("30680"), True,
     "ChemBench o1, icho_uk_2022_q1e: a thousands separator"),
    ("chembench-corrected", "[ANSWER]114,89[/ANSWER]", number_item("115"), True,
     "ChemBench Llama-3.1-8B, icho_uk_2011_1a: a decimal comma"),
    ("chembench-corrected", "[ANSWER]1.50 x 10⁻²³[/ANSWER]", number_item("1.5E-23"), True,
     "ChemBench Gemma-2-9B, icho_uk_2023_q2h3: unicode superscripts"),
    ("chembench-corrected", "[ANSWER]1.2 \\cdot 10^{-3}[/ANSWER]", number_item("0.0012"), True, "\\cdot 10^{}"),
    ("chembench-corrected", "[ANSWER]1.2*10^(-3)[/ANSWER]", number_item("0.0012"), True, "*10^()"),
    ("chembench-corrected", "[ANSWER]1.2e-3[/ANSWER]", number_item("0.0012"), True, "e notation"),
    ("chembench-corrected", "[ANSWER]−41.9[/ANSWER]", number_item("-41.9"), True, "a unicode minus sign"),
    ("chembench-corrected", "[ANSWER]-285.8 kJ mol^{-1}[/ANSWER]", number_item("-285.8"), True,
     "ChemBench Mixtral-8x7B, icho_uk_2020_2g: a negative target can be answered"),
    ("chembench-corrected", "[ANSWER]27.58kJ/mol[/ANSWER]", number_item("27.58"), True, "a unit written against the number"),
    ("chembench-corrected", "[ANSWER]CO2: 44[/ANSWER]", number_item("44"), True, "the digit of CO2 is not a number"),
    ("chembench-corrected", "[ANSWER]two[/ANSWER]", number_item("2"), True, "a number word"),
    ("chembench-corrected", "The final answer is: $\\boxed{8}$", number_item("8"), True,
     "ChemBench Llama-3.1-405B, icho_uk_2011_2f: an untagged boxed answer"),
    ("chembench-corrected", "In calcium carbide, each calcium atom is bonded to two carbon atoms, so there must be "
     "2 x 2 = [ANSWER]4[/ANswer] carbon atoms.", number_item("4"), True,
     "ChemBench Mixtral-8x7B, icho_uk_2020_1d: a misspelt closing tag"),
    ("chembench-corrected", "There are two isomers.", number_item("2"), True, "a one-line reply in words"),
    ("chembench-corrected", "It is often said to be hard.", number_item("10"), False, "the 'ten' inside 'often' is no number"),
    ("chembench-corrected", "Since there are four silicate anions, the total charge is -16.\n\nTo balance the charges we "
     "need to adjust the charge of the silicate anion.\n\nHowever, the charge", number_item("4"), False,
     "ChemBench Llama-3.1-8B, icho_uk_2020_4e: a cut-off reasoning states no answer (no number is guessed)"),
    ("chembench-corrected", "[ANSWER]I cannot answer.[/ANSWER]", number_item("27.58"), False, "no number in the tags"),
    ("chembench-corrected", "[ANSWER]30,700[/ANSWER]", number_item("31170"), False, "1.5% away from the target"),
]


# ----------------------------------------------------------------------------- the tests
def test_the_tables_are_broad():
    assert len(MATH_ROWS) >= 100 and len(INTEGER_ROWS) >= 35 and len(CHEMBENCH_ROWS) >= 60
    for rows in (MATH_ROWS, INTEGER_ROWS):
        assert all(source for *_, source in rows)
        assert {correct for _, _, correct, _ in rows} == {True, False}
    assert {(name, correct) for name, _, _, correct, _ in CHEMBENCH_ROWS} == {
        (name, correct) for name in ("chembench", "chembench-corrected") for correct in (True, False)}


@pytest.mark.parametrize("response, reference, correct, source", MATH_ROWS, ids=[row[3][:70] for row in MATH_ROWS])
def test_math_spellings(response, reference, correct, source):
    grade = MathGrader().grade(response, math_item(reference))
    assert grade.correct is correct, (source, grade)


@pytest.mark.parametrize("response, reference, correct, source", INTEGER_ROWS, ids=[row[3][:70] for row in INTEGER_ROWS])
def test_integer_spellings(response, reference, correct, source):
    grade = IntegerGrader().grade(response, integer_item(reference))
    assert grade.correct is correct, (source, grade)


@pytest.mark.parametrize("reference, response", [(r, s) for s, r, correct, _ in INTEGER_ROWS if correct])
def test_the_math_grader_accepts_every_integer_spelling_the_integer_grader_accepts(reference, response):
    assert MathGrader().grade(response, math_item(reference)).correct


@pytest.mark.parametrize("name, response, item, correct, source", CHEMBENCH_ROWS,
                         ids=[f"{row[0]}: {row[4][:60]}" for row in CHEMBENCH_ROWS])
def test_chembench_spellings(name, response, item, correct, source):
    grade = get_grader(name).grade(response, item)
    assert grade.correct is correct, (source, grade)


def _math_verify(reference: str, answer: str, normalise: bool = True) -> bool:
    """math-verify's own verdict on two answers (after ``normalise_math_answer`` when ``normalise``)."""
    from math_verify import parse, verify

    prepare = normalise_math_answer if normalise else str.strip
    gold = parse("\\boxed{" + prepare(reference) + "}", parsing_timeout=None)
    pred = parse("\\boxed{" + prepare(answer) + "}", parsing_timeout=None)
    return bool(gold) and bool(pred) and verify(gold, pred, timeout_seconds=None)


def test_math_verdicts_are_math_verifys_on_the_extracted_answer():
    """Every math row with an extracted answer gets math-verify's own verdict on that answer (after
    the normaliser). Where math-verify given the raw spelling would say otherwise, the normaliser
    rewrote a plain-text spelling math-verify does not read (and that is all it did differently)."""
    disagree, raw_differs = [], []
    for response, reference, correct, source in MATH_ROWS:
        grade = MathGrader().grade(response, math_item(reference))
        if grade.extracted is None or grade.reason not in ("equivalent", "not equivalent"):
            continue
        if _math_verify(reference, grade.extracted) is not correct:
            disagree.append((source, grade))
        if _math_verify(reference, grade.extracted, normalise=False) is not correct:
            raw_differs.append((grade.extracted, source))
    assert not disagree
    unexplained = [(answer, source) for answer, source in raw_differs
                   if _plain_text_math(answer) == answer and normalise_math_answer(answer) == answer.strip()]
    assert not unexplained
    assert len(raw_differs) >= 10  # the plain-text rows: √3, x², 1.2e-3, 10^-3, 1 000, ...


def test_chembench_corrected_keeps_the_letters_chembench_reads():
    """Where ChemBench's own patterns read letters, ``chembench-corrected`` reads the same letters
    (it reads on its merits only what those patterns cannot read)."""
    for name, response, item, correct, source in CHEMBENCH_ROWS:
        if item.answer_type != "multiple_choice":
            continue
        reproducing = ChemBenchGrader().grade(response, item)
        if reproducing.extracted is not None:
            assert ChemBenchCorrectedGrader().grade(response, item).extracted == reproducing.extracted, source


# ----------------------------------------------------------------------------- reasons and extraction
def test_reasoning_only_replies_have_their_own_reason():
    for grader, item in ((MathGrader(), math_item("5")), (IntegerGrader(), integer_item("5")),
                         (ChemBenchGrader(), mcq_item("B")), (ChemBenchCorrectedGrader(), number_item("5"))):
        assert grader.grade("<think>\nthe answer is \\boxed{5} [ANSWER]B[/ANSWER]", item).reason == REASONING_ONLY
        assert grader.grade("<think>\nstill thinking\n</think>\n\n", item).reason == REASONING_ONLY
        assert grader.grade("  ", item).reason == EMPTY_RESPONSE


@pytest.mark.parametrize("text, answer", [
    ("The integers are \\boxed{-2} and \\boxed{1}.", "-2, 1"),
    ("$\\boxed{1}$, $\\boxed{3}$, and $\\boxed{5}$", "1, 3, 5"),
    ("\\boxed{1} then \\boxed{2}", "2"),
    ("\\boxed{5}\n\n\\boxed{5}", "5"),
    ("**Final Answer**\n\n5", "5"),
    ("### Final Answer\nThe total is $5$.", "5"),
    ("Final Answer: The largest $n$ is 34.", "34"),
    ("Answer: 5 because it is prime", "5 because it is prime"),
    ("The answer is 5 because it is prime.", "5 because it is prime"),
    ("The correct choice is (C).", "(C)"),
    ("\\boxed{5.}", "5"),
    ("\\boxed{1, 2, \\ldots}", "1, 2, \\ldots"),
    ("Natalia sold 72 clips.\n#### 72", "72"),
    ("#### Step 1\nWe add.", None),
    ("Another option is to add them.", None),
])
def test_final_answer_spellings(text, answer):
    assert final_answer(text)[0] == answer
    if answer is None:
        assert final_answer(text)[1] == NO_FINAL_ANSWER
