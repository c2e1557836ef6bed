"""A real chat-completions HTTP server on 127.0.0.1 that answers the shipped banks' questions like an
LLM of known ability (test support: the clients' and the runner's tests talk to it over HTTP through
the real ``openai`` client).

    from llm_server import LLMServer

    with LLMServer("math500_lart", theta=0.5, seed=1) as server:        # a free port chosen by the OS
        client = OpenAIChatClient(server.model, base_url=server.base_url)
        client.complete(bank.prompt("math500/3"), max_tokens=4096)
        server.counts["math500/3"]                 # chat requests received for that item (faulted ones too)
        server.inject("429", times=2, retry_after=1)   # the next two requests get 429 + Retry-After: 1
        server.restart()                             # stop and start again on the same port

Command line (a subprocess the tests can kill): ``python tests/llm_server.py --bank math500_lart
--theta 0.5 [--bank chembench_2pl] [--seed S] [--delay 0.05] [--port P] [--content amc23_lart=FILE]``
prints one JSON line ``{"base_url": ..., "model": ..., "port": ...}`` and serves until killed;
``GET /_stats`` returns the request counts, ``POST /_faults`` (a JSON object of :meth:`inject`'s
arguments) injects a fault, ``POST /_faults/clear`` clears them. :class:`ServerProcess` runs it so
(``kill()`` = SIGKILL, ``start()`` again on the same port, ``inject``, ``stats``).

**The simulated LLM** (:class:`SimulatedLLM`). A request is matched to its item by its last user
message: the exact prompt the bank's protocol renders, else the first bank question contained in it.
Whether the answer is correct is drawn once per (seed, item) from the bank's response model at the
configured trait ``theta`` (``catengine.models.information.prob_correct``: probit for LaRT, logistic
for 2PL, ...), so a repeated request gets the same reply, word for word. ``truth(item)`` says what
was drawn; ``true_accuracy(bank)`` is the realised full-bank accuracy of this LLM. Correct replies
spell the reference answer in varied but equivalent ways (math: ``\\boxed{\\frac{14}{3}}``,
``\\dfrac``, an exact decimal, ``\\left( ... \\right)`` added to or removed from a tuple, a
"Final answer:" line instead of a box, an earlier intermediate box; ChemBench multiple choice:
``[ANSWER]A, C[/ANSWER]`` with the letters in varied order and spacing; ChemBench numbers: the exact
value or one within a third of the tolerance, in plain or scientific notation); wrong replies give a
plausible wrong answer (a nearby number, the reciprocal fraction, another item's answer, the wrong
set of letters) or, now and then, none. Completion tokens: for a LaRT bank drawn from its CoT model,
log(T + offset) ~ Normal(omega_j - phi_j tau, lam_j^2) at the configured speed trait ``tau``; else a
few hundred. A drawn length above the request's ``max_tokens`` stops at the cap: ``finish_reason:
"length"``, ``completion_tokens = max_tokens`` and a reply cut off before its answer. With
``reasoning=True`` the server answers like a reasoning model behind vLLM's reasoning parser: the
chain of thought in ``reasoning_content``, the final answer alone in ``content``, and
``usage.completion_tokens_details.reasoning_tokens``; ``reasoning="reasoning"`` the same with the
field named ``reasoning`` (newer vLLM, Ollama, OpenRouter). Served without a reasoning parser
(DeepSeek-R1 distills on vLLM, llama.cpp or Ollama), the thinking is inline in ``content``:
``reasoning="think"`` sends ``<think>\nTHINKING\n</think>\n\nANSWER``, ``reasoning="think_open"``
``THINKING\n</think>\n\nANSWER`` (the chat template wrote the opening tag); neither reports
reasoning tokens. A reasoning model's thinking states a draft of the reference answer in the bank's
answer format (``$\\boxed{...}$``, ``[ANSWER]...[/ANSWER]``) before it goes on, and a reply stopped
at the output cap stops in the thinking right after that draft, so a client that grades the thinking
as the answer is caught.

**Faults** (:meth:`LLMServer.inject`): ``"429"`` (with ``Retry-After``), ``"500"`` / ``"status"``
(any HTTP status), ``"slow"`` (a delay, then the normal reply), ``"malformed"`` (a 200 whose body is
not JSON), ``"missing_choices"`` (a 200 without choices), ``"empty"`` (empty content), ``"length"``
(stopped at the cap), ``"drop"`` (the connection closed without a reply), ``"body"`` (a reply of
``status`` (default 200) with the given ``body``, ``content_type`` and ``headers``: an HTML error page,
an error object, an event stream), ``"patch"`` (the normal reply with ``patch`` merged into its JSON:
``{"usage": None}``, ``{"choice": {"finish_reason": "eos"}}``, ``{"message": {"content": None}}``,
``{"choices": []}``; ``"choice"`` and ``"message"`` name the first choice and its message, a dict
merges into a dict, ``"__delete__"`` removes the key); ``headers`` adds headers to any injected
reply; each for the next
``times`` requests (None: every one), optionally only those for one ``item``, optionally with a
``probability`` (seeded). ``delay=`` delays every reply. :meth:`LLMServer.stop` /
:meth:`~LLMServer.start` / :meth:`~LLMServer.restart` / :meth:`~LLMServer.outage` take the server
down and up again on the same port (open connections are cut). A request naming another model
gets 404 (as vLLM answers), a body that is not JSON 400.

**Counts**: ``counts`` (item -> chat requests received), ``answered`` (item -> replies with an
answer, 200s other than the malformed ones), ``faults_served`` (kind -> count), ``requests`` (one
:class:`RequestRecord` per chat request), ``unknown_prompts``; :meth:`~LLMServer.asked_more_than_once`.
Items whose prompts are identical (three pairs in ChemBench) are answered, and counted, as the
first of the pair (``SimulatedLLM.ambiguous``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import re
import signal
import socket
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from statistics import NormalDist

try:
    from real_data import AMC23_PROBLEMS
except ImportError:  # imported as tests.llm_server
    from tests.real_data import AMC23_PROBLEMS

HOST = "127.0.0.1"
FAULT_KINDS = ("429", "500", "status", "slow", "malformed", "missing_choices", "empty", "length", "drop", "body",
               "patch")
#: how a reasoning model's thinking is sent (``reasoning=`` of :class:`LLMServer`; True = "reasoning_content")
REASONING_FORMATS = ("reasoning_content", "reasoning", "think", "think_open")
#: a "patch" value that removes the key
DELETE = "__delete__"
_NORMAL = NormalDist()


# ============================================================================ deterministic draws
def _uniform(*key) -> float:
    """A uniform number in (0, 1) determined by ``key`` (the same on every run and machine)."""
    digest = hashlib.blake2b("\x1f".join(map(str, key)).encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / 2.0 ** 64


def _pick(options, *key):
    return options[int(_uniform(*key) * len(options))]


# ============================================================================ answer spellings
_FRAC = re.compile(r"^(-?)\\[dt]?frac\{(\d+)\}\{(\d+)\}$")
_INT = re.compile(r"^-?\d+$")
_DEC = re.compile(r"^-?\d+\.\d+$")


def _numeric_value(answer: str) -> Fraction | None:
    """The value of a plain integer, decimal or ``\\frac{a}{b}`` answer (None for anything else)."""
    s = answer.strip().replace(" ", "")
    if _INT.match(s) or _DEC.match(s):
        return Fraction(s)
    m = _FRAC.match(s)
    if m and int(m.group(3)) != 0:
        value = Fraction(int(m.group(2)), int(m.group(3)))
        return -value if m.group(1) else value
    return None


def _exact_decimal(value: Fraction) -> str | None:
    """``value`` as a finite decimal when it has one (denominator 2^i 5^j), else None."""
    d = value.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    if d != 1:
        return None
    places = 0
    while (value * 10 ** places).denominator != 1:
        places += 1
    return f"{float(value):.{places}f}" if places else str(value.numerator)


def _strip_left_right(s: str) -> str:
    return re.sub(r"\\(?:left|right)\s*([()\[\]])", r"\1", s).replace("( ", "(").replace(" )", ")")


def math_spellings(answer: str) -> list[str]:
    """Equivalent spellings of a math reference answer (the answer itself first)."""
    base = answer.strip()
    out = [base]
    if "\\left(" in base and "\\right)" in base:
        out.append(_strip_left_right(base))
    elif base.startswith("(") and base.endswith(")") and "," in base and base.count("(") == 1:
        out.append("\\left( " + base[1:-1].strip() + " \\right)")
    if "\\frac" in base and "\\dfrac" not in base:
        out.append(base.replace("\\frac", "\\dfrac"))
    value = _numeric_value(base)
    if value is not None and not _INT.match(base):
        decimal = _exact_decimal(value)
        if decimal is not None and decimal != base:
            out.append(decimal)
    if ", " in base and "\\" not in base:
        out.append(base.replace(", ", ","))
    seen, unique = set(), []
    for s in out:
        if s not in seen:
            seen.add(s)
            unique.append(s)
    return unique


def _normalised(s: str) -> str:
    s = _strip_left_right(s).replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    return re.sub(r"[\s{}]", "", s)


def wrong_math_answer(answer: str, others: list[str], *key) -> str:
    """A plausible wrong answer: a nearby number, the reciprocal fraction, or another item's answer."""
    value = _numeric_value(answer)
    if value is not None:
        if value.denominator != 1 and value.numerator not in (0,) and abs(value.numerator) != value.denominator:
            m = _FRAC.match(answer.strip().replace(" ", ""))
            if m and _uniform(*key, "recip") < 0.5:
                return f"{m.group(1)}\\frac{{{m.group(3)}}}{{{m.group(2)}}}"
            return str(int(value) + _pick((1, 2, -1, 3), *key, "delta"))
        delta = _pick((1, -1, 2, 10, -3), *key, "delta")
        wrong = value + delta
        return str(wrong.numerator) if wrong.denominator == 1 else f"{float(wrong):g}"
    target = _normalised(answer)
    candidates = [o for o in others if _normalised(o) != target and _numeric_value(o) is None]
    return _pick(candidates, *key, "other") if candidates else answer + " + 1"


def letter_spellings(letters: tuple[str, ...], *key) -> str:
    """The letters in a varied order and spacing (``A, C``, ``C,A``)."""
    order = list(letters)
    if _uniform(*key, "order") < 0.5:
        order.reverse()
    sep = _pick((", ", ","), *key, "sep")
    return sep.join(order)


def wrong_letters(correct: tuple[str, ...], available: tuple[str, ...], *key) -> tuple[str, ...]:
    """A plausible wrong set of option letters (another letter, one too few, one too many)."""
    others = [x for x in available if x not in correct]
    if len(correct) > 1 and (not others or _uniform(*key, "drop") < 0.5):
        return tuple(correct[:-1])
    if not others:  # every option is correct: any proper subset is wrong
        return tuple(correct[:1]) if len(correct) > 1 else ()
    extra = _pick(others, *key, "extra")
    if len(correct) == 1 and _uniform(*key, "swap") < 0.7:
        return (extra,)
    return tuple(sorted(correct + (extra,)))


def number_spellings(value: float, tolerance: float | None, *key) -> str:
    """A correct numeric answer: exact or within a third of the tolerance, plain or scientific."""
    tol = 0.01 if tolerance is None else tolerance
    v = value
    if value != 0 and _uniform(*key, "near") < 0.3:
        v = value * (1 + _pick((1, -1), *key, "sign") * tol / 3)
    form = _pick(("plain", "sci", "plain0"), *key, "form")
    if form == "sci" and v != 0:
        return f"{v:.4e}"
    if form == "plain0" and float(v).is_integer():
        return f"{v:.1f}"
    return f"{v:.6g}" if not float(v).is_integer() else str(int(v))


def wrong_number(value: float, tolerance: float | None, *key) -> str:
    if value == 0:
        return _pick(("1", "0.5", "-1"), *key, "zero")
    factor = _pick((1.25, 0.5, 2.0, 0.8, -1.0, 10.0), *key, "factor")
    return f"{value * factor:.6g}"


# ============================================================================ reply texts
_OPENINGS = ("Let me work through this step by step.", "We need to set up the problem carefully.",
             "First, let me restate what is given.", "Let's think about this systematically.")
_STEPS = ("Simplifying the expression gives a cleaner form.", "Substituting back, the conditions are satisfied.",
          "Checking the boundary cases confirms the computation.", "Combining the two results gives the value.")
_CHEM_OPENINGS = ("Considering each option in turn.", "Recall the relevant chemistry here.",
                  "Let us reason about the structure and properties involved.")


def _reasoning(key, chem: bool) -> str:
    opening = _pick(_CHEM_OPENINGS if chem else _OPENINGS, *key, "open")
    steps = [_pick(_STEPS, *key, "step", k) for k in range(1 + int(_uniform(*key, "nsteps") * 3))]
    return " ".join([opening, *steps])


def math_final(answer: str, key, other_answer: str | None) -> str:
    """The closing of a math reply that states ``answer`` (boxed, or a final-answer line)."""
    frame = _pick(("boxed", "boxed_display", "final_line", "answer_is", "two_boxes"), *key, "frame")
    if frame == "boxed":
        return f"Therefore, the final answer is $\\boxed{{{answer}}}$."
    if frame == "boxed_display":
        return f"**Final Answer**\n\\[\n\\boxed{{{answer}}}\n\\]"
    if frame == "final_line" and "$" not in answer:
        return f"Final answer: ${answer}$"
    if frame == "two_boxes" and other_answer is not None:
        return (f"An intermediate quantity is $\\boxed{{{other_answer}}}$, which we use next.\n\n"
                f"So the result is $\\boxed{{{answer}}}$.")
    return f"So the answer is $\\boxed{{{answer}}}$."


# ============================================================================ the simulated LLM
_BANKS: dict = {}
_BANK_LOCK = threading.Lock()


def load_bank(name_or_bank, content=None):
    """An ``ItemBank`` (cached per name): a shipped bank's name, a path, or a bank; a bank whose
    questions are only hashes (``amc23_lart``) gets ``content`` attached, by default the copy in
    ``../shared/data/amc23/test.jsonl`` when present."""
    from catengine import open_item_bank

    if not isinstance(name_or_bank, (str, Path)):
        return name_or_bank
    key = (str(name_or_bank), None if content is None else str(content))
    with _BANK_LOCK:
        if key not in _BANKS:
            bank = open_item_bank(name_or_bank)
            missing = bank.has_content and any(c.question is None for c in bank.contents())
            if missing:
                path = content if content is not None else (AMC23_PROBLEMS if AMC23_PROBLEMS.is_file() else None)
                if path is not None:
                    bank = bank.with_content_file(path)
            elif content is not None:
                bank = bank.with_content_file(content)
            _BANKS[key] = bank
        return _BANKS[key]


@dataclass(frozen=True)
class Reply:
    """What the simulated LLM says to one request."""

    item: str | None
    content: str
    reasoning: str | None
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int | None
    correct: bool | None


class SimulatedLLM:
    """An LLM of known ability over one or more banks (see the module docstring).

    ``theta`` (a number, or bank id -> number) and ``tau`` (the LaRT speed trait) on each bank's
    scale; ``seed`` fixes every draw; ``reasoning``: answer like a reasoning model (reasoning apart),
    False or one of :data:`REASONING_FORMATS` (True: "reasoning_content"; the format is the server's
    business, the reply is the same).
    """

    def __init__(self, banks="math500_lart", *, theta=0.0, tau: float = 0.0, seed: int = 0,
                 reasoning: bool | str = False, content: dict | None = None):
        from catengine.models.information import prob_correct

        if isinstance(banks, (str, Path)) or not isinstance(banks, (list, tuple)):
            banks = [banks]
        content = dict(content or {})
        self.banks = [load_bank(b, content.get(b if isinstance(b, str) else b.bank_id)) for b in banks]
        if reasoning is True:
            reasoning = "reasoning_content"
        if reasoning and reasoning not in REASONING_FORMATS:
            raise ValueError(f"reasoning must be False, True or one of {REASONING_FORMATS}, got {reasoning!r}")
        self.theta, self.tau, self.seed, self.reasoning = theta, float(tau), seed, reasoning or False
        self._prompt_to_item: dict[str, tuple] = {}
        self._questions: list[tuple[str, tuple]] = []
        self.ambiguous: dict[str, list[str]] = {}
        self._p: dict[str, float] = {}
        self._entry: dict[str, tuple] = {}
        for bank in self.banks:
            if not bank.has_content:
                raise ValueError(f"bank {bank.bank_id!r} holds no item content: the server cannot recognise its questions")
            th = theta.get(bank.bank_id, 0.0) if isinstance(theta, dict) else float(theta)
            p = prob_correct(bank.params, th)
            answers = [c.answer for c in bank.contents()]
            for k, c in enumerate(bank.contents()):
                self._p.setdefault(c.item, float(p[k]))
                self._entry.setdefault(c.item, (bank, k, c, answers))
                if c.question is None:
                    continue
                prompt = bank.prompt(c.item)
                if prompt in self._prompt_to_item:
                    self.ambiguous.setdefault(self._prompt_to_item[prompt][2].item, []).append(c.item)
                    continue
                self._prompt_to_item[prompt] = (bank, k, c, answers)
                self._questions.append((c.question, (bank, k, c, answers)))
        self._lock = threading.Lock()
        self._fallback: dict[str, tuple | None] = {}

    # ------------------------------------------------------------------ recognising the item
    def identify(self, prompt: str):
        """(bank, index, ItemContent, the bank's answers) of the item ``prompt`` asks, or None."""
        entry = self._prompt_to_item.get(prompt)
        if entry is not None:
            return entry
        with self._lock:
            if prompt in self._fallback:
                return self._fallback[prompt]
        found = None
        for question, candidate in self._questions:
            if question and question in prompt and (found is None or len(question) > len(found[0])):
                found = (question, candidate)
        entry = None if found is None else found[1]
        with self._lock:
            self._fallback[prompt] = entry
        return entry

    # ------------------------------------------------------------------ the truth
    def prob(self, item: str) -> float:
        """P(correct) of ``item`` at this LLM's theta."""
        return self._p[item]

    def truth(self, item: str) -> bool:
        """Whether this LLM answers ``item`` correctly (drawn once per seed and item)."""
        return _uniform(self.seed, item, "correct") < self._p[item]

    def true_accuracy(self, bank=None) -> float:
        """The realised accuracy of this LLM over every item of ``bank`` (default the first)."""
        bank = self.banks[0] if bank is None else next(b for b in self.banks if b.bank_id == bank or b is bank)
        return sum(self.truth(i) for i in bank.item_ids) / bank.n_items

    def expected_accuracy(self, bank=None) -> float:
        """The mean probability of a correct answer over every item of ``bank`` (default the first)."""
        bank = self.banks[0] if bank is None else next(b for b in self.banks if b.bank_id == bank or b is bank)
        return sum(self._p[i] for i in bank.item_ids) / bank.n_items

    def cot_length(self, item: str) -> int:
        """The completion tokens of this LLM's reply to ``item`` (before any output cap)."""
        bank, k, _, _ = self._entry[item]
        params = bank.params
        u = _uniform(self.seed, item, "length")
        if bank.response_model == "lart":
            z = _NORMAL.inv_cdf(u)
            log_t = float(params.omega[k]) - float(params.phi[k]) * self.tau + float(params.lam[k]) * z
            return max(1, int(round(math.exp(log_t) - bank.effective_cot_offset)))
        return 120 + int(u * 480)

    # ------------------------------------------------------------------ the reply
    def answer_text(self, item: str, correct: bool) -> tuple[str, str]:
        """(reasoning, final answer part) of this LLM's full reply to ``item``."""
        bank, k, c, answers = self._entry[item]
        key = (self.seed, item)
        chem = c.answer_type in ("multiple_choice", "number")
        reasoning = _reasoning(key, chem)
        if c.answer_type == "multiple_choice":
            letters = c.correct_options if correct else wrong_letters(c.correct_options, c.option_letters, *key)
            if not correct and (not letters or _uniform(*key, "noanswer") < 0.08):
                return reasoning, "None of the options can be chosen with confidence from this alone."
            return reasoning, f"[ANSWER]{letter_spellings(letters, *key)}[/ANSWER]"
        if c.answer_type == "number":
            value = float(c.answer)
            said = number_spellings(value, c.tolerance, *key) if correct else wrong_number(value, c.tolerance, *key)
            return reasoning, f"[ANSWER]{said}[/ANSWER]"
        if correct:
            said = _pick(math_spellings(c.answer), *key, "spelling") if c.answer_type == "math" else c.answer.strip()
            other = wrong_math_answer(c.answer, answers, *key, "intermediate") if c.answer_type == "math" else None
            return reasoning, math_final(said, key, other)
        if _uniform(*key, "noanswer") < 0.08:
            return reasoning, "This needs more work than I can finish here; I will stop at this point."
        if c.answer_type == "integer":
            said = str(int(c.answer) + _pick((1, -1, 2, 5, -7), *key, "delta"))
        else:
            said = wrong_math_answer(c.answer, answers, *key)
        return reasoning, math_final(said, key, None)

    def draft(self, item: str) -> str:
        """The reference answer of ``item`` in its bank's answer format (what a reasoning model's
        thinking states as a draft before it goes on)."""
        _, _, c, _ = self._entry[item]
        if c.answer_type == "multiple_choice":
            return f"[ANSWER]{', '.join(c.correct_options)}[/ANSWER]"
        if c.answer_type == "number":
            return f"[ANSWER]{c.answer}[/ANSWER]"
        return f"$\\boxed{{{c.answer.strip()}}}$"

    def reply(self, prompt: str, max_tokens: int | None, *, force: str | None = None) -> Reply:
        """The reply to ``prompt`` (``force``: "empty" or "length", the injected faults that shape it)."""
        prompt_tokens = len(prompt) // 4 + 12
        entry = self.identify(prompt)
        if entry is None:
            return Reply(None, "I am not able to tell which problem this is.", None, "stop", prompt_tokens, 12, None, None)
        item = entry[2].item
        correct = self.truth(item)
        length = self.cot_length(item)
        reasoning, final = self.answer_text(item, correct)
        if self.reasoning:
            reasoning += f" A first draft of the answer is {self.draft(item)}; let me check it."
        if force == "empty":
            return Reply(item, "", None, "stop", prompt_tokens, 1 if not self.reasoning else length,
                         (length - 1) if self.reasoning else None, correct)
        if force == "length" or (max_tokens is not None and length > max_tokens):   # cut off before the answer
            used = max_tokens if max_tokens is not None else max(1, length // 2)
            cut = reasoning[: max(1, len(reasoning) * 2 // 3)]
            if self.reasoning:   # cut right after the draft: the unfinished thinking states an answer
                cut = reasoning[: reasoning.index("; let me check it.")]
            if not self.reasoning and entry[2].answer_type in ("math", "integer") and _uniform(self.seed, item, "box") < 0.5:
                cut += " so the value is $\\boxed{" + entry[2].answer[:2]
            if self.reasoning:
                return Reply(item, "", cut, "length", prompt_tokens, used, used, correct)
            return Reply(item, cut, None, "length", prompt_tokens, used, None, correct)
        if self.reasoning:
            final_tokens = max(1, min(length - 1, len(final) // 4 + 1))
            return Reply(item, final, reasoning, "stop", prompt_tokens, length, length - final_tokens, correct)
        return Reply(item, f"{reasoning}\n\n{final}", None, "stop", prompt_tokens, length, None, correct)


# ============================================================================ faults
@dataclass
class Fault:
    """One injected fault (see :meth:`LLMServer.inject`)."""

    kind: str
    times: int | None = 1
    item: str | None = None
    status: int | None = None
    retry_after: float | str | None = None
    delay: float = 0.0
    probability: float = 1.0
    served: int = 0
    body: object = None
    content_type: str = "application/json"
    headers: dict | None = None
    patch: dict | None = None

    def __post_init__(self):
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {self.kind!r}; one of {FAULT_KINDS}")
        if self.kind == "429":
            self.status = 429
        elif self.kind == "500":
            self.status = 500
        elif self.status is None:
            self.status = 200 if self.kind in ("body", "patch") else 500
        if self.kind == "patch" and not isinstance(self.patch, dict):
            raise ValueError("a 'patch' fault needs patch= (a dict merged into the reply)")


@dataclass(frozen=True)
class RequestRecord:
    """One chat request the server received: the item it asked (None: not recognised), the fault
    served (None: none), the HTTP status sent (0: none, the connection was dropped), the request's
    max_tokens, model and other parameters (``params``: the body without ``messages``), and when
    it arrived (``time.monotonic()``)."""

    item: str | None
    fault: str | None
    status: int
    max_tokens: int | None
    model: str | None
    params: dict = field(default_factory=dict)
    at: float = field(default_factory=time.monotonic)


# ============================================================================ the HTTP server
class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, handler, app):
        self.app = app
        self.stopping = threading.Event()
        self.connections: set = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request, client_address):  # a client that hung up: not an error here
        pass

    def cut_connections(self):
        with self.connections_lock:
            open_ = list(self.connections)
        for sock in open_:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "catengine-test-llm/1"

    def setup(self):
        super().setup()
        # headers and body go out in separate writes: without this, Nagle's algorithm and the client's
        # delayed ACK hold every reply back by about 40 ms
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args):  # quiet
        pass

    def _send(self, status: int, body: bytes | dict, headers: dict | None = None,
              content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def do_GET(self):
        app: LLMServer = self.server.app
        path = self.path.split("?")[0].rstrip("/")
        if path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": app.model, "object": "model", "created": 0,
                                                         "owned_by": "catengine-tests"}]})
        elif path == "/_stats":
            self._send(200, app.stats())
        else:
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found", "code": 404}})

    def do_POST(self):
        app: LLMServer = self.server.app
        path = self.path.split("?")[0].rstrip("/")
        raw = self._body()
        if path == "/_faults":
            try:
                spec = json.loads(raw)
                app.inject(**spec)
            except (TypeError, ValueError) as exc:
                self._send(400, {"error": {"message": str(exc)}})
                return
            self._send(200, {"ok": True})
            return
        if path == "/_faults/clear":
            app.clear_faults()
            self._send(200, {"ok": True})
            return
        if path != "/v1/chat/completions":
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found", "code": 404}})
            return
        app.handle_chat(self, raw)


class LLMServer:
    """A chat-completions server on 127.0.0.1 answering as a :class:`SimulatedLLM` (module docstring).

    ``banks``: bank name(s) or ItemBank(s); ``theta``, ``tau``, ``seed``, ``reasoning``: the
    simulated LLM; ``model``: the model name it serves; ``delay``: seconds before every reply;
    ``port``: 0 = a free port chosen by the OS (kept across restarts); ``content``: bank id -> a
    JSON-lines file of questions for banks that ship only hashes; ``api_key``: if set, requests must
    carry it (``Authorization: Bearer ...``), else 401.
    """

    def __init__(self, banks="math500_lart", *, theta=0.0, tau: float = 0.0, seed: int = 0, model: str = "sim-llm",
                 delay: float = 0.0, reasoning: bool | str = False, port: int = 0, content: dict | None = None,
                 api_key: str | None = None):
        self.llm = SimulatedLLM(banks, theta=theta, tau=tau, seed=seed, reasoning=reasoning, content=content)
        self.model, self.delay, self.port, self.api_key = model, float(delay), int(port), api_key
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._rng = random.Random(seed)
        self.reset_counts()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifetime
    @property
    def running(self) -> bool:
        return self._httpd is not None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1`` (what a client's ``base_url`` is)."""
        return f"http://{HOST}:{self.port}/v1"

    def start(self) -> "LLMServer":
        """Listen (on the same port as before after a stop) and serve in a background thread."""
        if self._httpd is not None:
            return self
        deadline = time.monotonic() + 5.0
        while True:
            try:
                httpd = _HTTPServer((HOST, self.port), _Handler, self)
                break
            except OSError:
                if self.port == 0 or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        self.port = httpd.server_address[1]
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"llm-server-{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and cut every open connection (requests in flight get no reply)."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.stopping.set()
        httpd.shutdown()
        httpd.server_close()
        httpd.cut_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def restart(self) -> None:
        """Stop, then start again on the same port."""
        self.stop()
        self.start()

    def outage(self, seconds: float) -> threading.Thread:
        """Stop now and start again on the same port after ``seconds`` (in a background thread)."""
        self.stop()

        def later():
            time.sleep(seconds)
            self.start()

        thread = threading.Thread(target=later, daemon=True)
        thread.start()
        return thread

    def __enter__(self) -> "LLMServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ faults and counts
    def inject(self, kind: str, *, times: int | None = 1, item: str | None = None, status: int | None = None,
               retry_after: float | str | None = None, delay: float = 0.0, probability: float = 1.0,
               body=None, content_type: str = "application/json", headers: dict | None = None,
               patch: dict | None = None) -> Fault:
        """Serve fault ``kind`` to the next ``times`` chat requests (None: all), only those for ``item``
        if given, each with ``probability``. ``status`` for "status" (default 500) and "body" (default
        200); ``retry_after`` (the header's value: seconds or an HTTP date) for "429", "status" and
        "body"; ``delay`` seconds for "slow"; ``body`` (bytes, text or a JSON value) and
        ``content_type`` for "body"; ``patch`` for "patch"; ``headers``: more headers of the injected
        reply. Faults apply in the order injected."""
        fault = Fault(kind, times=times, item=item, status=status, retry_after=retry_after, delay=delay,
                      probability=probability, body=body, content_type=content_type, headers=headers, patch=patch)
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def reset_counts(self) -> None:
        with self._lock:
            self.counts: Counter = Counter()
            self.answered: Counter = Counter()
            self.faults_served: Counter = Counter()
            self.requests: list[RequestRecord] = []
            self.unknown_prompts: list[str] = []

    def asked_more_than_once(self) -> dict[str, int]:
        """Items the server received more than one chat request for, with their counts."""
        with self._lock:
            return {item: n for item, n in self.counts.items() if n > 1}

    def stats(self) -> dict:
        with self._lock:
            return {"requests": len(self.requests), "counts": dict(self.counts), "answered": dict(self.answered),
                    "faults_served": dict(self.faults_served), "unknown_prompts": len(self.unknown_prompts)}

    def _take_fault(self, item: str | None) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.times is not None and fault.served >= fault.times:
                    continue
                if fault.item is not None and fault.item != item:
                    continue
                if fault.probability < 1.0 and self._rng.random() >= fault.probability:
                    continue
                fault.served += 1
                self.faults_served[fault.kind] += 1
                return fault
        return None

    # ------------------------------------------------------------------ one chat request
    def _record(self, ledger, item, fault, status, body, answered=False):
        """Record one request in ``ledger`` (the request list and answered counter current when it
        arrived: a slow request that outlives a ``reset_counts`` does not spill into the new counts)."""
        requests, answered_counts = ledger
        params = {k: v for k, v in body.items() if k != "messages"}
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        with self._lock:
            requests.append(RequestRecord(item, fault, status, max_tokens, body.get("model"), params))
            if answered and item is not None:
                answered_counts[item] += 1

    def handle_chat(self, handler: _Handler, raw: bytes) -> None:
        httpd: _HTTPServer = handler.server
        if self.api_key is not None and handler.headers.get("Authorization") != f"Bearer {self.api_key}":
            handler._send(401, {"error": {"message": "invalid API key", "type": "authentication_error", "code": 401}})
            return
        try:
            body = json.loads(raw)
            messages = body["messages"]
            prompt = next(m["content"] for m in reversed(messages) if m.get("role") == "user")
            if isinstance(prompt, list):
                prompt = "".join(p.get("text", "") for p in prompt if isinstance(p, dict))
            max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
            if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
                raise ValueError(f"max_tokens must be an integer >= 1, got {max_tokens!r}")
        except (ValueError, KeyError, TypeError, StopIteration) as exc:
            handler._send(400, {"error": {"message": f"invalid request: {exc}", "type": "invalid_request_error",
                                          "code": 400}})
            return
        entry = self.llm.identify(prompt)
        item = None if entry is None else entry[2].item
        with self._lock:
            ledger = (self.requests, self.answered)
            self.counts[item if item is not None else "<unknown>"] += 1
            if item is None:
                self.unknown_prompts.append(prompt)
        model = body.get("model")
        if model != self.model:
            self._record(ledger, item, None, 404, body)
            handler._send(404, {"error": {"message": f"The model `{model}` does not exist.", "type": "NotFoundError",
                                          "code": 404}})
            return
        fault = self._take_fault(item)
        kind = fault.kind if fault is not None else None
        wait = self.delay + (fault.delay if kind == "slow" else 0.0)
        if wait > 0 and httpd.stopping.wait(wait):
            return  # stopped while waiting: no reply (the connection is cut)
        extra_headers = dict(fault.headers or {}) if fault is not None else {}
        if fault is not None and fault.retry_after is not None:
            extra_headers["Retry-After"] = fault.retry_after
        if kind == "body":
            self._record(ledger, item, kind, fault.status, body)
            payload = fault.body
            if not isinstance(payload, bytes):
                payload = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
            handler._send(fault.status, payload, extra_headers, content_type=fault.content_type)
            return
        if kind in ("429", "500", "status"):
            self._record(ledger, item, kind, fault.status, body)
            headers = extra_headers
            message = "Rate limit reached, retry later" if fault.status == 429 else "Internal server error"
            handler._send(fault.status, {"error": {"message": message, "type": "server_error", "code": fault.status}},
                          headers)
            return
        if kind == "drop":
            self._record(ledger, item, kind, 0, body)
            handler.close_connection = True
            try:
                handler.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        if kind == "malformed":
            self._record(ledger, item, kind, 200, body)
            handler._send(200, b'{"id": "chatcmpl-broken", "object": "chat.completion", "choices": [{"index": 0, "mess')
            return
        created = int(time.time())
        if kind == "missing_choices":
            self._record(ledger, item, kind, 200, body)
            handler._send(200, {"id": "chatcmpl-nochoices", "object": "chat.completion", "created": created,
                                "model": self.model, "usage": {"prompt_tokens": 10, "completion_tokens": 0,
                                                               "total_tokens": 10}})
            return
        reply = self.llm.reply(prompt, max_tokens, force=kind if kind in ("empty", "length") else None)
        message = {"role": "assistant", "content": reply.content}
        usage = {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
                 "total_tokens": reply.prompt_tokens + reply.completion_tokens}
        fmt = self.llm.reasoning
        if fmt in ("think", "think_open"):   # no reasoning parser: the thinking is inline, uncounted
            message["content"] = _inline_thinking(reply, opened=fmt == "think_open")
        else:
            if reply.reasoning is not None:
                message[fmt or "reasoning_content"] = reply.reasoning
            if reply.reasoning_tokens is not None:
                usage["completion_tokens_details"] = {"reasoning_tokens": reply.reasoning_tokens}
        self._record(ledger, item, kind, fault.status if kind == "patch" else 200, body, answered=True)
        data = {"id": f"chatcmpl-{len(ledger[0])}", "object": "chat.completion", "created": created,
                "model": self.model,
                "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason, "logprobs": None}],
                "usage": usage}
        if kind == "patch":
            _apply_patch(data, fault.patch)
        handler._send(fault.status if kind == "patch" else 200, data, extra_headers)


def _inline_thinking(reply: Reply, *, opened: bool) -> str:
    """The content of a reasoning model served without a reasoning parser: the thinking inline before
    ``</think>`` (after ``<think>`` unless the chat template wrote it: ``opened``), then the answer;
    a reply stopped in its thinking has no closing tag."""
    if reply.reasoning is None:
        return reply.content
    head = "" if opened else "<think>\n"
    if reply.finish_reason == "length":
        return f"{head}{reply.reasoning}"
    return f"{head}{reply.reasoning}\n</think>\n\n{reply.content}"


def _apply_patch(data: dict, patch: dict) -> None:
    """Merge ``patch`` into a chat-completion reply (see the module docstring's "patch" fault)."""
    for key, value in patch.items():
        if key in ("choice", "message") and data.get("choices"):
            target = data["choices"][0] if key == "choice" else data["choices"][0].get("message")
            if isinstance(target, dict) and isinstance(value, dict):
                _merge(target, value)
                continue
        _merge(data, {key: value})


def _merge(target: dict, patch: dict) -> None:
    for key, value in patch.items():
        if value == DELETE:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value


# ============================================================================ in a subprocess
class ServerProcess:
    """The server in a subprocess of its own (``python tests/llm_server.py ...``), for tests that kill
    it: ``kill()`` sends SIGKILL, ``start()`` starts it again on the same port, ``inject(...)`` and
    ``stats()`` go through its ``/_faults`` and ``/_stats`` routes.

        with ServerProcess("math500_lart", theta=0.5) as proc:
            proc.base_url, proc.stats()["counts"]
            proc.kill(); proc.start()                 # down, then up again on the same port
    """

    def __init__(self, banks="math500_lart", *, theta: float = 0.0, tau: float = 0.0, seed: int = 0,
                 model: str = "sim-llm", delay: float = 0.0, reasoning: bool | str = False, port: int = 0,
                 content: dict | None = None, startup_timeout: float = 60.0):
        banks = [banks] if isinstance(banks, str) else list(banks)
        self.args = [arg for b in banks for arg in ("--bank", b)] + [
            "--theta", str(theta), "--tau", str(tau), "--seed", str(seed), "--model", model, "--delay", str(delay)]
        self.args += ([] if not reasoning else ["--reasoning"] if reasoning is True else ["--reasoning", reasoning])
        self.args += [arg for k, v in (content or {}).items() for arg in ("--content", f"{k}={v}")]
        self.model, self.port, self.startup_timeout = model, int(port), startup_timeout
        self.process = None

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}/v1"

    def start(self) -> "ServerProcess":
        import subprocess

        if self.process is not None and self.process.poll() is None:
            return self
        self.process = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *self.args,
                                         "--port", str(self.port)], stdout=subprocess.PIPE, text=True)
        ready = {}
        reader = threading.Thread(target=lambda: ready.update(json.loads(self.process.stdout.readline() or "{}")),
                                  daemon=True)
        reader.start()
        reader.join(self.startup_timeout)
        if "port" not in ready:
            self.kill()
            raise RuntimeError(f"the test LLM server did not start within {self.startup_timeout} s")
        self.port = int(ready["port"])
        return self

    def kill(self) -> None:
        """SIGKILL the server process (only this one) and wait for it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def _call(self, path: str, payload: dict | None = None) -> dict:
        import urllib.request

        data = None if payload is None else json.dumps(payload).encode()
        with urllib.request.urlopen(urllib.request.Request(f"http://{HOST}:{self.port}{path}", data=data),
                                    timeout=10) as reply:
            return json.loads(reply.read())

    def inject(self, kind: str, **kwargs) -> None:
        """:meth:`LLMServer.inject` in the subprocess."""
        self._call("/_faults", {"kind": kind, **kwargs})

    def clear_faults(self) -> None:
        self._call("/_faults/clear", {})

    def stats(self) -> dict:
        """``{"requests", "counts", "answered", "faults_served", "unknown_prompts"}`` of the running server
        (counts start from zero at each start)."""
        return self._call("/_stats")

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.kill()


# ============================================================================ command line
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="a chat-completions server answering bank questions like an LLM")
    parser.add_argument("--bank", action="append", default=None, help="bank name (repeatable); default math500_lart")
    parser.add_argument("--theta", type=float, default=0.0)
    parser.add_argument("--tau", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="sim-llm")
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--reasoning", nargs="?", const=True, default=False, choices=(True, *REASONING_FORMATS),
                        help="answer like a reasoning model; optionally how the thinking is sent")
    parser.add_argument("--content", action="append", default=[], help="BANK=FILE: questions for a bank of hashes")
    args = parser.parse_args(argv)
    content = dict(spec.split("=", 1) for spec in args.content)
    server = LLMServer(args.bank or ["math500_lart"], theta=args.theta, tau=args.tau, seed=args.seed, model=args.model,
                       delay=args.delay, port=args.port, reasoning=args.reasoning, content=content).start()
    print(json.dumps({"base_url": server.base_url, "model": server.model, "port": server.port}), flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
