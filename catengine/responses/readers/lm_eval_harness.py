"""Reader for lm-evaluation-harness ``--log_samples`` output.

The harness writes one ``samples_<task>_<timestamp>.jsonl`` file per task and run (``.jsonl.gz``
is read too), one JSON object per line with ``doc_id``, ``doc``, ``target``, ``arguments``,
``resps`` (raw model outputs, one list per request), ``filtered_resps`` (after the task's answer
filter), ``filter`` (the filter's name), ``metrics`` (names of the metrics computed) and each
metric's value as a top-level field (``"acc": 1.0``, ``"exact_match": 0.0``). Tasks with several
filters (e.g. GSM8K's ``strict-match`` and ``flexible-extract``) write one line per doc and filter.

Correctness is one binary metric (values 0/1 or true/false). CoT length is, in order:

1. a recorded token count: the first of :data:`RECORDED_TOKEN_FIELDS` present as a top-level
   number on the line (or the field named by ``cot_field``);
2. otherwise the length of the generated text in ``resps`` (the raw generation, which contains
   the chain of thought; ``filtered_resps`` usually holds only the extracted answer; choose with
   ``text_field``) measured by ``tokenizer``, or by a whitespace word count (an approximation,
   flagged). With several generations per doc (repeats), the mean length. Log-likelihood tasks
   have no generated text: their lengths are missing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from catengine.responses.data import ResponseData, jsonl_objects
from catengine.responses.readers._common import (
    BadSample,
    FileReport,
    Origin,
    ReadReport,
    _Assembler,
    _finish,
    _join_sources,
    _list_files,
    _recorded_count,
    _text_length,
)

__all__ = ["RECORDED_TOKEN_FIELDS", "SampleCells", "read_lm_eval_cells", "read_lm_eval_samples", "task_from_filename"]

#: Top-level fields read as a recorded CoT token count, in this order of preference.
RECORDED_TOKEN_FIELDS = ("cot_tokens", "output_tokens", "completion_tokens")

#: Fields of a logged sample that are never metrics.
_NOT_METRICS = frozenset(
    {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics",
     "doc_hash", "prompt_hash", "target_hash", "task_name", "task", *RECORDED_TOKEN_FIELDS}
)

_FILENAME = re.compile(
    r"^samples_(?P<task>.+?)(?:_(?P<ts>\d{4}-\d{2}-\d{2}T[0-9.\-:]+))?\.jsonl(?:\.gz)?$"
)
_ITEM_FIELDS = ("task", "doc_id", "filter")


def task_from_filename(path) -> str:
    """Task name of ``samples_<task>_<timestamp>.jsonl`` (the timestamp is optional)."""
    name = Path(path).name
    m = _FILENAME.match(name)
    if m is None:
        raise ValueError(
            f"{name}: cannot tell the task from the file name; lm-evaluation-harness names sample "
            "logs samples_<task>_<timestamp>.jsonl (samples_<task>.jsonl is accepted too)"
        )
    return m.group("task")


def _read_lines(path: Path) -> list[tuple[int, dict]]:
    rows = []
    for lineno, rec in jsonl_objects(path):
        if "doc_id" not in rec:
            raise ValueError(f"{path.name} line {lineno}: no 'doc_id' field (is this an lm-eval samples file?)")
        doc_id = rec["doc_id"]
        if isinstance(doc_id, bool) or not isinstance(doc_id, int) or doc_id < 0:
            raise ValueError(f"{path.name} line {lineno}: doc_id {doc_id!r} is not a document index (an integer >= 0)")
        if rec.get("filter") is not None and not isinstance(rec["filter"], str):
            raise ValueError(f"{path.name} line {lineno} (doc_id {doc_id}): filter {rec['filter']!r} is not a filter name")
        rows.append((lineno, rec))
    if not rows:
        raise ValueError(f"{path.name}: the file has no samples")
    return rows


def _per_task(option, task: str, what: str, where: str, *, required: bool):
    """The option for ``task``: the option itself, or its entry in a task -> value mapping."""
    if not isinstance(option, Mapping):
        return option
    if task not in option and required:
        raise ValueError(
            f"{where} (task {task!r}): the {what} mapping has no entry for this task "
            f"(it has: {', '.join(map(repr, option)) or 'nothing'})"
        )
    return option.get(task)


def _select_filter(path: Path, task: str, rows, filter_name):
    filters: dict = {}
    for _, rec in rows:
        key = rec.get("filter")
        filters[key] = filters.get(key, 0) + 1
    if len(filters) == 1:
        return next(iter(filters)), rows
    listing = ", ".join(f"{k!r} ({n} rows)" for k, n in filters.items())
    if filter_name is None:
        raise ValueError(
            f"{path.name} (task {task!r}): several filters in one file: {listing}; pass filter_name= "
            "(a name, or a mapping task -> name) to choose one"
        )
    if filter_name not in filters:
        raise ValueError(f"{path.name} (task {task!r}): filter {filter_name!r} is not in the file; available: {listing}")
    return filter_name, [(ln, rec) for ln, rec in rows if rec.get("filter") == filter_name]


def _metric_names(rec: dict) -> list[str]:
    listed = rec.get("metrics")
    if isinstance(listed, list) and all(isinstance(m, str) for m in listed):
        return list(listed)
    return [
        k for k, v in rec.items() if k not in _NOT_METRICS and isinstance(v, (int, float, bool))
    ]


def _binary(value) -> int | None:
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, float, np.integer, np.floating)) and float(value) in (0.0, 1.0):
        return int(value)
    return None


def _select_metric(path: Path, task: str, rows, metric) -> str:
    if metric is not None:
        return metric
    names: list[str] = []
    for _, rec in rows:
        for m in _metric_names(rec):
            if m not in names:
                names.append(m)
    if not names:
        raise ValueError(f"{path.name} (task {task!r}): no metric fields found; pass metric=")
    if len(names) == 1:
        return names[0]
    binary = [m for m in names if all(m in rec and _binary(rec[m]) is not None for _, rec in rows)]
    if len(binary) == 1:
        return binary[0]
    raise ValueError(
        f"{path.name} (task {task!r}): cannot infer the correctness metric: metrics {', '.join(map(repr, names))}"
        f" of which binary (0/1 on every line): {', '.join(map(repr, binary)) or 'none'}; pass metric= "
        "(a name, or a mapping task -> name)"
    )


def _texts(value) -> list[str]:
    """Generated strings inside resps / filtered_resps (nested lists), in order."""
    out: list[str] = []
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            out.extend(_texts(v))
    return out


def read_lm_eval_samples(
    paths_by_subject: Mapping,
    *,
    metric: str | Mapping[str, str] | None = None,
    filter_name: str | Mapping[str, str] | None = None,
    tokenizer: Callable | None = None,
    text_field: str = "resps",
    cot_field: str | None = None,
    item_id: str = "{task}/{doc_id}",
    expected_items=None,
    return_report: bool = False,
) -> ResponseData | tuple[ResponseData, ReadReport]:
    """Read lm-evaluation-harness sample logs into a ResponseData (one subject per model run).

    Parameters
    ----------
    paths_by_subject : mapping subject id -> a samples file, a directory (searched recursively
        for ``samples_*.jsonl[.gz]``) or a list of them; several task files per subject are fine.
        The task comes from the file name ``samples_<task>_<timestamp>.jsonl``.
    metric : the correctness metric (e.g. ``"acc"``, ``"exact_match"``), or a mapping task ->
        metric. Default: inferred per file (the only metric, or the only binary one); files that
        infer different metrics raise ("mixed metrics") unless the mapping confirms them.
    filter_name : which filter's lines to use when a file has several (name or task -> name).
    tokenizer : callable text -> int or token sequence, used when no count is recorded. Default:
        whitespace word count (an approximation; warned and reported).
    text_field : ``"resps"`` (raw generations, default) or ``"filtered_resps"``.
    cot_field : top-level field holding a recorded token count (default: the first of
        :data:`RECORDED_TOKEN_FIELDS` present).
    item_id : format template for item ids; fields ``task``, ``doc_id``, ``filter``.
    expected_items : item ids (or a bank with ``.item_ids``); log items outside it raise, and
        the columns follow its order.
    return_report : also return a :class:`~catengine.responses.readers.ReadReport`.
    """
    assembler, reports, _ = _read(paths_by_subject, metric=metric, filter_name=filter_name, tokenizer=tokenizer,
                                  text_field=text_field, cot_field=cot_field, item_id=item_id, problems=None)
    return _finish(assembler, reports, expected_items, return_report)


@dataclass(frozen=True)
class SampleCells:
    """What :func:`read_lm_eval_cells` read: the answers (``data``; None when no line was usable),
    the report, where each (subject, item) answer came from, and the lines that could not be used."""

    data: ResponseData | None
    report: ReadReport | None
    origins: Mapping[tuple[str, str], Origin]
    problems: tuple[BadSample, ...]


def read_lm_eval_cells(paths_by_subject: Mapping, *, metric=None, filter_name=None, tokenizer=None,
                       text_field: str = "resps", cot_field: str | None = None, item_id: str = "{task}/{doc_id}",
                       expected_items=None) -> SampleCells:
    """As :func:`read_lm_eval_samples`, for a caller that records the answers (``catengine lm-eval
    ingest``): a line whose value cannot be used (a metric missing or not binary, a recorded token
    count that is not a number >= 0) is collected as a :class:`BadSample` instead of stopping the
    read, so the caller can record every valid line and report every bad one. Problems of a whole
    file (unreadable JSON, no metric, several filters, items outside the bank, conflicting
    duplicates) still raise, before anything is returned."""
    problems: list[BadSample] = []
    assembler, reports, _ = _read(paths_by_subject, metric=metric, filter_name=filter_name, tokenizer=tokenizer,
                                  text_field=text_field, cot_field=cot_field, item_id=item_id, problems=problems)
    if not assembler.cells and problems:
        return SampleCells(None, None, {}, tuple(problems))
    data, report = _finish(assembler, reports, expected_items, True, stacklevel=4)
    return SampleCells(data, report, dict(assembler.origins), tuple(problems))


def _read(paths_by_subject, *, metric, filter_name, tokenizer, text_field, cot_field, item_id, problems):
    if not isinstance(paths_by_subject, Mapping) or not paths_by_subject:
        raise ValueError("paths_by_subject must be a non-empty mapping subject id -> path(s)")
    if text_field not in ("resps", "filtered_resps"):
        raise ValueError(f"text_field must be 'resps' or 'filtered_resps', got {text_field!r}")
    try:
        item_id.format(task="t", doc_id=0, filter="f")
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"item_id template {item_id!r} is invalid ({exc}); allowed fields: {', '.join(_ITEM_FIELDS)}") from None

    assembler = _Assembler()
    reports: list[FileReport] = []
    inferred: list[tuple[str, str, str]] = []  # (file, task, metric) for the mixed-metrics check
    for subject, paths in paths_by_subject.items():
        subject = str(subject)
        if not subject:
            raise ValueError("subject ids must be non-empty strings")
        for path in _list_files(paths, ("samples_*.jsonl", "samples_*.jsonl.gz"), "lm-eval samples"):
            task = task_from_filename(path)
            rows = _read_lines(path)
            n_read = len(rows)
            used_filter, rows = _select_filter(
                path, task, rows, _per_task(filter_name, task, "filter_name", path.name, required=False)
            )
            chosen = _select_metric(path, task, rows, _per_task(metric, task, "metric", path.name, required=True))
            if metric is None:
                inferred.append((path.name, task, chosen))
            sources, n_bad = [], 0
            for lineno, rec in rows:
                where = f"{path.name} line {lineno}"
                doc_id = rec["doc_id"]
                try:
                    value, cot, source = _line_values(rec, chosen, f"{where} (doc_id {doc_id!r})", cot_field, text_field,
                                                      tokenizer)
                except ValueError as exc:
                    if problems is None:
                        raise
                    problems.append(BadSample(file=str(path), line=lineno, sample=doc_id, message=str(exc)))
                    n_bad += 1
                    continue
                sources.append(source)
                item = item_id.format(task=task, doc_id=doc_id, filter=used_filter)
                assembler.add(subject, item, value, cot, where, benchmark=task, file=path.name,
                              origin=Origin(file=str(path), where=where, line=lineno, sample=doc_id, cot_source=source))
            reports.append(
                FileReport(
                    path=str(path),
                    subject=subject,
                    task=task,
                    rows_read=n_read,
                    rows_used=len(rows) - n_bad,
                    metric=chosen,
                    cot_source=_join_sources(sources),
                    filter=used_filter,
                )
            )
    distinct = {m for _, _, m in inferred}
    if len(distinct) > 1:
        listing = "; ".join(f"{f} (task {t!r}): {m!r}" for f, t, m in inferred)
        suggestion = {t: m for _, t, m in inferred}
        raise ValueError(
            f"mixed metrics across files: {listing}. Correctness must mean the same thing in every "
            f"file; pass metric= with one name, or a mapping task -> metric to confirm, e.g. metric={suggestion!r}"
        )
    return assembler, reports, problems


def _line_values(rec: dict, chosen: str, where: str, cot_field, text_field: str, tokenizer) -> tuple[int, float, str]:
    """(correct, CoT length, CoT source) of one logged line; ValueError naming ``where`` otherwise."""
    if chosen not in rec:
        # the line's own metric values: the harness's "metrics" list names the metrics computed, which
        # need not be on the line (a line cut down by a tool, a metric that failed)
        present = [m for m in _metric_names(rec) if m in rec]
        listed = rec.get("metrics")
        note = (f" (its 'metrics' list names {chosen!r}, but the line has no {chosen!r} field)"
                if isinstance(listed, list) and chosen in listed else "")
        raise ValueError(
            f"{where}: metric {chosen!r} is not recorded; "
            f"this sample has: {', '.join(map(repr, present)) or 'no metric values'}{note}"
        )
    value = _binary(rec[chosen])
    if value is None:
        raise ValueError(f"{where}: metric {chosen!r} = {rec[chosen]!r} is not binary; correctness must be 0/1 (true/false)")
    cot, source = _cot(rec, where, cot_field, text_field, tokenizer)
    return value, cot, source


def _cot(rec: dict, where: str, cot_field, text_field: str, tokenizer) -> tuple[float, str]:
    fields = (cot_field,) if cot_field is not None else RECORDED_TOKEN_FIELDS
    for name in fields:
        if name in rec and rec[name] is not None:
            return _recorded_count(rec[name], name, where), f"recorded:{name}"
    texts = _texts(rec.get(text_field))
    return _text_length(texts, tokenizer)
