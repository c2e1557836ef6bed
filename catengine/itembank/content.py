"""What an item asks and how it is graded: the optional ``/content`` group of a bank (schema v3).

A bank that knows its items stores, per item, the text to put to an LLM (for a multiple-choice item
its options), the reference answer, the answer type and metadata, and, at bank level, the
*administration protocol* (root attribute ``protocol``, JSON): the prompt template of each answer
type, how the final answer is extracted, which grader (name and version) scores it, and what is
known of how the calibration LLMs were run. Pure data and checks; no file I/O (see ``io.py``).

Layout of ``/content`` (dimension ``item``, the same ids in the same order as ``/items``):

=====================  =======  ===========================================================================
variable               type     meaning
=====================  =======  ===========================================================================
``question``           str      the text to ask ("" when the bank holds only its hash: attach a copy)
``question_sha256``    str      sha256 of the UTF-8 question text (verifies a user-supplied copy)
``answer``             str      the reference answer as text (LaTeX, an integer, a number, letters)
``answer_type``        str      one of :data:`ANSWER_TYPES`
``options``            str      JSON list of the option texts, in letter order A, B, ... ("[]" if none)
``correct_options``    str      JSON list of the letters that make up the correct answer ("[]" if none)
``tolerance``          float    relative tolerance of a ``number`` answer (NaN: none)
``grading_note``       str      non-empty when the calibration data's grading of this item is known to be
                                wrong, saying why (e.g. an answer format the calibration grader missed)
``meta_<field>``       str      item metadata (MATH subject and level, ChemBench topic, contest, ...)
=====================  =======  ===========================================================================

The bank's content checksum (``content_sha256``) covers this group and the protocol.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

import numpy as np

#: the answer types a bank's items can have, and what a grader compares
ANSWER_TYPES = {
    "math": "a mathematical expression, compared by equivalence (math-verify)",
    "integer": "an integer, compared exactly",
    "number": "a real number, correct within a relative tolerance of the reference",
    "multiple_choice": "a set of option letters, correct iff exactly the set of correct letters",
}
CONTENT_STRING_VARIABLES = ("question", "question_sha256", "answer", "answer_type", "options",
                            "correct_options", "grading_note")
CONTENT_VARIABLES = CONTENT_STRING_VARIABLES + ("tolerance",)
METADATA_PREFIX = "meta_"
PROTOCOL_ATTR = "protocol"
#: keys every protocol holds
PROTOCOL_KEYS = ("prompts", "answer_extraction", "grader")
OPTION_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def text_sha256(text: str) -> str:
    """The sha256 (hex) of a question's UTF-8 bytes: what ``question_sha256`` records."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ItemContent:
    """One item as an LLM is asked it and as its answer is graded (read-only).

    ``question`` is None when the bank holds only the question's hash (``question_sha256``):
    attach a copy with :meth:`catengine.itembank.bank.ItemBank.with_content_file`. ``grading_note`` is non-empty
    when the calibration data's grading of this item is known to be wrong.
    """

    item: str
    question: str | None
    answer: str
    answer_type: str
    options: tuple[str, ...] = ()
    correct_options: tuple[str, ...] = ()
    tolerance: float | None = None
    question_sha256: str = ""
    grading_note: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if self.answer_type not in ANSWER_TYPES:
            raise ValueError(f"item {self.item!r}: answer_type {self.answer_type!r} is not one of {sorted(ANSWER_TYPES)}")
        object.__setattr__(self, "options", tuple(self.options))
        object.__setattr__(self, "correct_options", tuple(self.correct_options))
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))
        if self.answer_type == "multiple_choice":
            letters = OPTION_LETTERS[:len(self.options)]
            bad = [c for c in self.correct_options if c not in letters]
            if not self.options or not self.correct_options or bad:
                raise ValueError(f"item {self.item!r}: a multiple-choice item needs options and correct letters among "
                                 f"{letters or 'its options'}; got options {len(self.options)}, correct {self.correct_options}")

    @property
    def option_letters(self) -> tuple[str, ...]:
        """The letters of the options, in order: ('A', 'B', ...)."""
        return tuple(OPTION_LETTERS[:len(self.options)])

    @property
    def has_question(self) -> bool:
        return self.question is not None

    def as_dict(self) -> dict:
        """A JSON-ready dict of every field."""
        return {"item": self.item, "question": self.question, "answer": self.answer, "answer_type": self.answer_type,
                "options": list(self.options), "correct_options": list(self.correct_options),
                "tolerance": self.tolerance, "question_sha256": self.question_sha256,
                "grading_note": self.grading_note, "metadata": dict(self.metadata)}


# ----------------------------------------------------------------------------- protocol
def render_prompt(content: ItemContent, protocol: Mapping) -> str:
    """The prompt for ``content`` under ``protocol``: its answer type's template with ``{question}``
    and ``{options}`` (one ``A. text`` line per option) filled in."""
    if content.question is None:
        raise ValueError(f"item {content.item!r} has no question text in this bank (only its sha256); "
                         "attach a copy of the questions (ItemBank.with_content_file, or --content FILE)")
    prompts = protocol.get("prompts", {})
    template = prompts.get(content.answer_type, prompts.get("default"))
    if template is None:
        raise ValueError(f"the bank's protocol has no prompt for answer type {content.answer_type!r} "
                         f"(it has {sorted(prompts)})")
    options = "\n".join(f"{letter}. {text}" for letter, text in zip(content.option_letters, content.options))
    return template.replace("{question}", content.question).replace("{options}", options)


def protocol_problems(protocol) -> list[str]:
    """Why ``protocol`` (decoded JSON) is not a valid administration protocol, or []."""
    if not isinstance(protocol, dict):
        return [f"root attribute 'protocol' must be a JSON object, got {type(protocol).__name__}"]
    problems = [f"root attribute 'protocol' lacks {key!r}" for key in PROTOCOL_KEYS if key not in protocol]
    prompts = protocol.get("prompts")
    if "prompts" in protocol and (not isinstance(prompts, dict) or not prompts or
                                  not all(isinstance(v, str) and "{question}" in v for v in prompts.values())):
        problems.append("protocol 'prompts' must map answer types to templates that contain '{question}'")
    grader = protocol.get("grader")
    if "grader" in protocol and not (isinstance(grader, dict) and isinstance(grader.get("name"), str)):
        problems.append("protocol 'grader' must be an object with a 'name' (and a 'version')")
    return problems


# ----------------------------------------------------------------------------- storage
def content_dataset(contents: list[ItemContent], item_ids):
    """The ``/content`` group (an ``xarray.Dataset``) for ``contents``, one per id of ``item_ids``."""
    import xarray as xr

    ids = [str(v) for v in item_ids]
    if [c.item for c in contents] != ids:
        first = next((k for k, (c, i) in enumerate(zip(contents, ids)) if c.item != i), min(len(contents), len(ids)))
        raise ValueError(f"content must list the bank's {len(ids)} items in order; position {first} differs "
                         f"({contents[first].item if first < len(contents) else 'missing'!r} vs "
                         f"{ids[first] if first < len(ids) else 'none'!r})")

    def strings(values):
        return ("item", np.asarray(list(values), dtype=object))

    data = {
        "question": strings("" if c.question is None else c.question for c in contents),
        "question_sha256": strings(c.question_sha256 or ("" if c.question is None else text_sha256(c.question))
                                   for c in contents),
        "answer": strings(c.answer for c in contents),
        "answer_type": strings(c.answer_type for c in contents),
        "options": strings(json.dumps(list(c.options), ensure_ascii=False) for c in contents),
        "correct_options": strings(json.dumps(list(c.correct_options)) for c in contents),
        "grading_note": strings(c.grading_note for c in contents),
        "tolerance": ("item", np.asarray([np.nan if c.tolerance is None else float(c.tolerance) for c in contents])),
    }
    fields = sorted({k for c in contents for k in c.metadata})
    for name in fields:
        data[METADATA_PREFIX + name] = strings(str(c.metadata.get(name, "")) for c in contents)
    return xr.Dataset(data, coords={"item": ("item", np.asarray(ids, dtype=object))})


def contents_from_dataset(ds) -> list[ItemContent]:
    """The items of a ``/content`` group, in order (the inverse of :func:`content_dataset`)."""
    columns = {name: [str(v) for v in ds[name].values] for name in CONTENT_STRING_VARIABLES}
    tolerance = ds["tolerance"].values
    meta = {name[len(METADATA_PREFIX):]: [str(v) for v in ds[name].values]
            for name in ds.data_vars if str(name).startswith(METADATA_PREFIX)}
    out = []
    for k, item in enumerate(str(v) for v in ds["item"].values):
        question = columns["question"][k]
        out.append(ItemContent(
            item=item, question=question if question or not columns["question_sha256"][k] else None,
            answer=columns["answer"][k], answer_type=columns["answer_type"][k],
            options=tuple(json.loads(columns["options"][k])), correct_options=tuple(json.loads(columns["correct_options"][k])),
            tolerance=None if not math.isfinite(tolerance[k]) else float(tolerance[k]),
            question_sha256=columns["question_sha256"][k], grading_note=columns["grading_note"][k],
            metadata={name: values[k] for name, values in meta.items()}))
    return out


def content_group_problems(ds, item_ids) -> list[str]:
    """Why a ``/content`` group is invalid for a bank with ``item_ids``, or []."""
    problems = []
    if "item" not in ds.coords or [str(v) for v in ds["item"].values] != [str(v) for v in item_ids]:
        return ["group '/content' needs the coordinate 'item' equal to '/items/item' (same ids, same order)"]
    missing = [name for name in CONTENT_VARIABLES if name not in ds.data_vars]
    if missing:
        return [f"group '/content' lacks variable(s) {missing}"]
    for name in ds.data_vars:
        if ds[name].dims != ("item",):
            problems.append(f"variable '/content/{name}' has dims {ds[name].dims}, expected ('item',)")
    if problems:
        return problems
    types = [str(v) for v in ds["answer_type"].values]
    bad = [k for k, t in enumerate(types) if t not in ANSWER_TYPES]
    if bad:
        problems.append(f"variable '/content/answer_type' holds {types[bad[0]]!r} for item {str(item_ids[bad[0]])!r}; "
                        f"allowed: {sorted(ANSWER_TYPES)}")
    if not problems:
        try:
            contents_from_dataset(ds)
        except (ValueError, TypeError) as exc:
            problems.append(f"group '/content' is invalid: {exc}")
    return problems


# ----------------------------------------------------------------------------- a user's copy of the questions
def read_question_file(path) -> list[dict]:
    """The records of a JSON-lines file of questions (``problem`` or ``question`` text per line, an
    optional ``item`` key), with the line number of each; errors name the file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise FileNotFoundError(f"no content file {path}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc})") from None
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{path}, line {number}: not a JSON object ({exc})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}, line {number}: expected a JSON object, got {type(record).__name__}")
        question = record.get("problem", record.get("question"))
        if not isinstance(question, str):
            raise ValueError(f"{path}, line {number}: no 'problem' or 'question' text")
        records.append({"line": number, "question": question, "item": record.get("item")})
    return records


def attach_questions(contents: list[ItemContent], path, *, prefix: str) -> list[ItemContent]:
    """``contents`` with their question texts taken from the file ``path`` (see
    :func:`read_question_file`), every text verified against the item's recorded sha256.

    Line ``k`` of the file is item ``<prefix>/k`` unless the line names its ``item`` (a bank id such as
    ``amc23/5`` or a position ``5``). Raises ValueError naming every item whose text does not match,
    and every item of the bank the file lacks.
    """
    records = read_question_file(path)
    by_item = {c.item: c for c in contents}
    found: dict[str, dict] = {}
    problems = []
    for position, record in enumerate(records):
        key = record["item"]
        item = f"{prefix}/{position}" if key is None else (str(key) if str(key) in by_item else f"{prefix}/{key}")
        if item not in by_item:
            problems.append(f"line {record['line']}: item {item!r} is not in the bank")
            continue
        if item in found:
            problems.append(f"line {record['line']}: item {item!r} appears twice (first on line {found[item]['line']})")
            continue
        found[item] = record
    updated = []
    for c in contents:
        record = found.get(c.item)
        if record is None:
            problems.append(f"item {c.item!r}: not in the file")
            updated.append(c)
            continue
        digest = text_sha256(record["question"])
        if c.question_sha256 and digest != c.question_sha256:
            problems.append(f"item {c.item!r} (line {record['line']}): the text's sha256 is {digest[:12]}..., the bank "
                            f"records {c.question_sha256[:12]}...: a different or altered question")
            updated.append(c)
            continue
        updated.append(ItemContent(**{**c.as_dict(), "question": record["question"], "question_sha256": digest}))
    if problems:
        shown = "; ".join(problems[:10]) + (f"; and {len(problems) - 10} more" if len(problems) > 10 else "")
        raise ValueError(f"{path}: {len(problems)} problem(s) attaching the questions: {shown}")
    return updated
