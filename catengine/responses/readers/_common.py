"""Shared machinery of the harness log readers: reports, token counting, matrix assembly."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from catengine.responses.data import MISSING, ResponseData

__all__ = ["BadSample", "CotLengthApproximationWarning", "FileReport", "MAX_ID_LENGTH", "Origin", "ReadReport",
           "id_length_problem"]

WHITESPACE_SOURCE = "whitespace-approximation"

#: the longest subject or item id accepted where ids arrive from outside (these readers, ``catengine
#: serve``), in characters: real ids are names and task/sample keys, and a longer one is damage
#: (a document pasted into an id field) that would be copied into every matrix, bank and log line
MAX_ID_LENGTH = 1000


def id_length_problem(value: str, kind: str) -> str | None:
    """Why ``value`` (a ``kind`` id, e.g. "item") is refused for its length, or None; the message
    quotes only the id's first 40 characters."""
    if len(value) <= MAX_ID_LENGTH:
        return None
    return (f"{kind} id of {len(value):,} characters is too long (ids are at most {MAX_ID_LENGTH:,} characters): "
            f"{value[:40]!r}...")


class CotLengthApproximationWarning(UserWarning):
    """CoT lengths were approximated by whitespace word counts (no recorded count, no tokenizer)."""


@dataclass(frozen=True)
class FileReport:
    """What a reader took from one file.

    ``metric`` is the harness metric or the Inspect scorer used as correctness; ``filter`` the
    harness filter (None when the file has none / for Inspect); ``cot_source`` how CoT lengths
    were obtained (see the package docstring); ``n_missing`` samples without a usable score
    (Inspect samples that errored); ``status`` the Inspect eval status ("" for harness files).
    """

    path: str
    subject: str
    task: str
    rows_read: int
    rows_used: int
    metric: str
    cot_source: str
    filter: str | None = None
    n_missing: int = 0
    status: str = ""


@dataclass(frozen=True)
class ReadReport:
    """Provenance of a read: one :class:`FileReport` per file plus summary flags.

    ``cot_approximate`` is True when any CoT length is a whitespace word count (not tokens).
    ``expected_not_observed`` lists ``expected_items`` with no response in these logs (not an error).
    """

    files: tuple[FileReport, ...]
    cot_approximate: bool
    expected_not_observed: tuple[str, ...] = ()

    @property
    def cot_sources(self) -> tuple[str, ...]:
        out: list[str] = []
        for f in self.files:
            for s in f.cot_source.split("+"):
                if s not in out:
                    out.append(s)
        return tuple(out)

    def summary(self) -> str:
        lines = []
        for f in self.files:
            extra = f", filter {f.filter!r}" if f.filter is not None else ""
            extra += f", {f.n_missing} missing" if f.n_missing else ""
            extra += f", status {f.status}" if f.status else ""
            lines.append(
                f"{Path(f.path).name}: subject {f.subject!r}, task {f.task!r}, {f.rows_used}/{f.rows_read} rows, "
                f"metric {f.metric!r}{extra}, CoT {f.cot_source}"
            )
        if self.cot_approximate:
            lines.append("CoT lengths marked whitespace-approximation are word counts, not tokens")
        return "\n".join(lines)


@dataclass(frozen=True)
class Origin:
    """Where one (subject, item) answer was read: the file (full path), the location text used in
    messages (``"<file name> line 3"``), the line (JSONL) and the harness's own sample / document id,
    and how its CoT length was obtained (``"recorded:output_tokens"``, ...)."""

    file: str
    where: str
    line: int | None
    sample: object
    cot_source: str = "none"


@dataclass(frozen=True)
class BadSample:
    """A sample a reader could not use (collected instead of raised by the adapters' batch readers):
    its file (full path), line, the harness's sample / document id and the message, which names
    the file, line, sample and value."""

    file: str
    line: int | None
    sample: object
    message: str

    def __str__(self) -> str:
        return self.message


# ------------------------------------------------------------------------------ helpers
def _list_files(paths, patterns: tuple[str, ...], what: str) -> list[Path]:
    """Files from a path, a directory (searched recursively for ``patterns``) or a list of them."""
    if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__"):
        paths = [paths]
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = sorted({f for pat in patterns for f in path.rglob(pat) if f.is_file()})
            if not found:
                raise ValueError(f"directory {path} contains no {what} files (looked for {', '.join(patterns)})")
            out.extend(found)
        elif path.is_file():
            out.append(path)
        else:
            raise ValueError(f"{path}: no such file or directory")
    if not out:
        raise ValueError(f"no {what} files given")
    seen = set()
    for f in out:
        key = f.resolve()
        if key in seen:
            raise ValueError(f"{f} is given more than once")
        seen.add(key)
    return out


def _tokenizer_label(tokenizer) -> str:
    name = getattr(tokenizer, "__qualname__", None) or getattr(tokenizer, "__name__", None) or type(tokenizer).__name__
    return f"tokenizer:{name}"


def _count_tokens(text: str, tokenizer: Callable | None) -> float:
    if tokenizer is None:
        return float(len(text.split()))
    out = tokenizer(text)
    if isinstance(out, (bool, np.bool_)):
        raise TypeError(f"tokenizer returned {out!r}; expected a token count (int) or a sequence of tokens")
    if isinstance(out, (int, np.integer)):
        n = int(out)
    elif hasattr(out, "__len__"):
        n = len(out)
    else:
        raise TypeError(
            f"tokenizer returned a {type(out).__name__}; expected a token count (int) or a sequence of tokens"
        )
    if n < 0:
        raise ValueError(f"tokenizer returned a negative token count {n}")
    return float(n)


def _text_length(texts: list[str], tokenizer: Callable | None) -> tuple[float, str]:
    """(length, source) of generated texts: the mean over several generations; NaN if none."""
    if not texts:
        return math.nan, "none"
    source = WHITESPACE_SOURCE if tokenizer is None else _tokenizer_label(tokenizer)
    lengths = [_count_tokens(t, tokenizer) for t in texts]
    return float(sum(lengths) / len(lengths)), source


def _recorded_count(value, name: str, where: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{where}: recorded token count {name!r} = {value!r} is not a number")
    x = float(value)
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"{where}: recorded token count {name!r} = {value!r} must be finite and >= 0")
    return x


def _join_sources(sources: Iterable[str]) -> str:
    out: list[str] = []
    for s in sources:
        if s not in out:
            out.append(s)
    real = [s for s in out if s != "none"]
    return "+".join(real) if real else "none"


def _expected_ids(expected_items) -> tuple[str, ...] | None:
    if expected_items is None:
        return None
    ids = getattr(expected_items, "item_ids", expected_items)
    if isinstance(ids, str):
        raise ValueError("expected_items must be a collection of item ids (or a bank), not a single string")
    return tuple(str(v) for v in ids)


def _cell_text(c: int, t: float) -> str:
    cot = "NA" if math.isnan(t) else (str(int(t)) if float(t).is_integer() else f"{t:g}")
    return f"correct={c}, cot_tokens={cot}"


class _Assembler:
    """Collects (subject, item) cells from several files and builds a ResponseData."""

    def __init__(self):
        self.subjects: dict[str, None] = {}
        self.items: dict[str, str] = {}  # item id -> benchmark
        self.item_where: dict[str, str] = {}
        self.item_file: dict[str, str] = {}
        self.cells: dict[tuple[str, str], tuple[int, float, str]] = {}
        self.origins: dict[tuple[str, str], Origin] = {}

    def add(self, subject: str, item: str, correct: int, cot: float, where: str, benchmark: str, file: str,
            origin: Origin | None = None):
        for value, kind in ((subject, "subject"), (item, "item")):
            problem = id_length_problem(value, kind)
            if problem:
                raise ValueError(f"{where}: {problem}")
        self.subjects.setdefault(subject, None)
        known = self.items.get(item)
        if known is None:
            self.items[item] = benchmark
            self.item_where[item] = where
            self.item_file[item] = file
        elif known != benchmark:
            raise ValueError(
                f"{where}: item id {item!r} comes from task {benchmark!r} here but from task {known!r} at "
                f"{self.item_where[item]}; use an item_id template that includes the task"
            )
        key = (subject, item)
        old = self.cells.get(key)
        if old is None:
            self.cells[key] = (correct, cot, where)
            if origin is not None:
                self.origins[key] = origin
            return
        c0, t0, w0 = old
        if c0 == correct and (t0 == cot or (math.isnan(t0) and math.isnan(cot))):
            return  # an exact repeat (e.g. the same run given twice) carries no new information
        raise ValueError(
            f"duplicated sample: item {item!r} of subject {subject!r} appears at {w0} ({_cell_text(c0, t0)}) "
            f"and at {where} ({_cell_text(correct, cot)}) with different values"
        )

    def build(self, expected_items) -> tuple[ResponseData, tuple[str, ...]]:
        expected = _expected_ids(expected_items)
        item_order = list(self.items)
        not_observed: tuple[str, ...] = ()
        if expected is not None:
            exp_set = set(expected)
            unknown = [i for i in item_order if i not in exp_set]
            if unknown:
                raise ValueError(self._unknown_message(unknown, expected))
            observed = set(item_order)
            item_order = [i for i in expected if i in observed]
            not_observed = tuple(i for i in expected if i not in observed)
        if not item_order:
            raise ValueError("the logs contain no samples")
        subjects = list(self.subjects)
        col = {item: j for j, item in enumerate(item_order)}
        row = {s: i for i, s in enumerate(subjects)}
        correct = np.full((len(subjects), len(item_order)), MISSING, dtype=np.int8)
        cot = np.full(correct.shape, np.nan)
        for (s, item), (c, t, _) in self.cells.items():
            correct[row[s], col[item]] = c
            cot[row[s], col[item]] = t
        has_cot = bool(np.isfinite(cot).any())
        observed = (correct != MISSING) | (np.isfinite(cot) if has_cot else False)
        empty = np.flatnonzero(~np.asarray(observed).any(axis=1))
        if empty.size:
            raise ValueError(
                f"subject {subjects[int(empty[0])]!r} has no usable sample (every sample is missing or errored)"
            )
        data = ResponseData.from_arrays(
            correct,
            cot if has_cot else None,
            subject_ids=subjects,
            item_ids=item_order,
            item_metadata={"benchmark": [self.items[i] for i in item_order]},
        )
        return data, not_observed

    def _unknown_message(self, unknown: list[str], expected: tuple[str, ...]) -> str:
        by_file: dict[str, list[str]] = {}
        for item in unknown:
            by_file.setdefault(self.item_file[item], []).append(item)
        per_file_total: dict[str, int] = {}
        for item, f in self.item_file.items():
            per_file_total[f] = per_file_total.get(f, 0) + 1
        parts = []
        for f, items in by_file.items():
            task = self.items[items[0]]
            shown = ", ".join(repr(i) for i in items[:5]) + (f" (+{len(items) - 5} more)" if len(items) > 5 else "")
            if len(items) == per_file_total[f]:
                parts.append(f"{f} (task {task!r}): none of its {len(items)} items are in the bank, e.g. {shown}")
            else:
                parts.append(f"{f} (task {task!r}): {len(items)} of {per_file_total[f]} items not in the bank: {shown}")
        observed = set(self.items)
        absent = [i for i in expected if i not in observed]
        tail = f"; {len(absent)} of the {len(expected)} bank items have no sample in these logs"
        if absent:
            tail += " (e.g. " + ", ".join(repr(i) for i in absent[:5]) + ")"
        return f"{len(unknown)} item(s) in the logs are not in the bank: " + "; ".join(parts) + tail


def _finish(assembler: _Assembler, reports: list[FileReport], expected_items, return_report: bool, stacklevel: int = 3):
    data, not_observed = assembler.build(expected_items)
    approximate = any(WHITESPACE_SOURCE in r.cot_source.split("+") for r in reports)
    if approximate:
        warnings.warn(
            "CoT lengths were approximated by whitespace word counts (the logs record no token "
            "counts and no tokenizer was given); pass tokenizer= for token counts",
            CotLengthApproximationWarning,
            stacklevel=stacklevel,
        )
    report = ReadReport(files=tuple(reports), cot_approximate=approximate, expected_not_observed=not_observed)
    return (data, report) if return_report else data


# The reader modules import the helpers above from this (partly initialised) package.
