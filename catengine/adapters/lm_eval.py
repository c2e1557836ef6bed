"""An adaptive test inside lm-evaluation-harness, through files only (the harness is never imported).

The loop, for one model (``subject``) and a bank whose item ids name harness documents:

    catengine lm-eval next   --bank BANK --log run.jsonl --k 20 > samples.json      # the next batch
    lm_eval --model ... --tasks TASK --samples samples.json --log_samples --output_path OUT
    catengine lm-eval ingest --log run.jsonl OUT                                    # its answers
    ... repeat until ``next`` exits with status 1 (the stopping rule is met)

``next`` writes the batch in the form the harness's ``--samples`` option reads (lm_eval/_cli/run.py,
``EvaluatorConfig._process_arguments``: a JSON object, inline or in a file, mapping task names to
lists of document indices, e.g. ``{"gsm8k": [3, 17, 40]}``). The indices are written sorted and
unique: the harness logs the k-th selected document (in dataset order) under ``doc_id =
indices[k]`` (lm_eval/evaluator.py), which is that document's own index only when the list is
sorted. ``ingest`` reads the ``samples_<task>_<timestamp>.jsonl`` files the harness writes under
``--output_path`` with ``--log_samples`` (one line per document and filter; correctness is one binary
metric; CoT length a recorded token count or the length of the generated text), through the same
parser as ``calibration.read_lm_eval_samples``, checks the whole output, then records every valid
answer the session does not have yet and names each line it could not record (file, line,
document, value; :class:`BatchAnswerError`). Answers already recorded are checked (correctness and
CoT length) and skipped, so re-ingesting a directory is harmless. ``next`` and ``ingest`` print, on
stderr, the predicted full-benchmark accuracy with its interval and the items used
(``CATSession.predicted_score()``), whether and why the test stopped, and the LLM's standing among
the bank's calibration LLM runs (``catengine.console.result_lines``).

The stopping rule is set when ``next`` creates the log: by default
``catengine.stopping.default_stopping`` (the predicted accuracy known to within a stated half-width,
or an item cap), or the stopping options of ``catengine evaluate``. A batch never runs past the
rule's item cap (``CATSession.next_items``): the last one is cut to what is left. A resumed log keeps
the configuration it records: selection, estimation, stopping or seed options given to a later
``next`` must build that same configuration, else ``next`` refuses (exit status 2) naming each
differing setting, as recorded and as given (``LogConfigMismatchError``).

**Two models compared** (``--paired``): a :class:`~catengine.PairedSession` drives the loop for two
models on the same documents, one document per round (each draw depends on the answers before it):

    catengine lm-eval next   --paired --bank BANK --log pair.jsonl --subject A --subject-b B > samples.json
    lm_eval --model ... (model A) --samples samples.json --log_samples --output_path OUT_A
    lm_eval --model ... (model B) --samples samples.json --log_samples --output_path OUT_B
    catengine lm-eval ingest --paired --log pair.jsonl OUT_A --output-b OUT_B
    ... repeat until ``next --paired`` exits with status 1 (decided, tied, or the item cap)

``ingest --paired`` records the proposed document once both outputs answer it, then every further
document the session draws that both outputs answer (outputs that already hold more documents, e.g.
whole-task runs, are replayed as far as they go: :func:`ingest_paired_samples`); it prints the
comparison (the difference with its confidence sequence and the decision, docs/comparisons.md).
``--max-items`` and ``--seed`` set the comparison's cap and draws when ``next --paired`` creates the
log; the other strategy options do not apply.

Item ids <-> documents: ``DocIds(template, task)``; the template has the fields ``{task}`` and
``{doc_id}`` (default ``"{task}/{doc_id}"``; for ids such as ``math500/17`` run with the harness
task ``hendrycks_math500`` use ``template="math500/{doc_id}", task="hendrycks_math500"``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from catengine.adapters._batch import BatchAnswerError, check_answer, format_cot, summary_of

__all__ = ["BatchAnswerError", "DocIds", "IngestReport", "PairedIngestReport", "ingest_paired_samples",
           "ingest_samples", "next_paired_samples", "next_samples", "sample_files"]


class DocIds:
    """Maps a bank's item ids to (harness task, document index) and back through a template."""

    def __init__(self, template: str = "{task}/{doc_id}", task: str | None = None):
        fields_ = set(re.findall(r"{(\w*)}", template))
        if "doc_id" not in fields_ or not fields_ <= {"task", "doc_id"}:
            raise ValueError(f"item id template {template!r} must contain {{doc_id}} and may contain {{task}}, nothing else")
        if "task" not in fields_ and not task:
            raise ValueError(f"item id template {template!r} has no {{task}}: name the harness task (task=... / --task)")
        self.template = template
        self.task = task
        parts = re.split(r"({task}|{doc_id})", template)
        pattern = ""
        for part in parts:
            if part == "{doc_id}":
                pattern += r"(?P<doc_id>\d+)"
            elif part == "{task}":
                pattern += re.escape(task) if task else r"(?P<task>.+?)"
            else:
                pattern += re.escape(part)
        self._regex = re.compile(f"^{pattern}$")

    def doc(self, item_id: str) -> tuple[str, int]:
        """(task, document index) of a bank item id; ValueError if the id does not fit the template."""
        m = self._regex.match(str(item_id))
        if m is None:
            raise ValueError(
                f"item {item_id!r} does not match the item id template {self.template!r}"
                + (f" with task {self.task!r}" if self.task else "")
                + ": pass the template (and task) that name this bank's items as harness documents"
            )
        task = self.task if self.task else m.group("task")
        return task, int(m.group("doc_id"))

    def item(self, task: str, doc_id: int) -> str:
        return self.template.format(task=task, doc_id=doc_id)


def next_samples(session, k: int, doc_ids: DocIds, *, force: bool = False) -> dict[str, list[int]]:
    """The session's next batch (``CATSession.next_items(k)``) as a harness ``--samples`` mapping
    task -> sorted document indices; ``{}`` once the session is finished (unless ``force``).
    A half-answered batch comes back as its unanswered rest."""
    if session.finished and not force:
        return {}
    out: dict[str, list[int]] = {}
    for item in session.next_items(k):
        task, doc = doc_ids.doc(item)
        out.setdefault(task, []).append(doc)
    return {task: sorted(set(docs)) for task, docs in out.items()}


def sample_files(output, task: str | None = None) -> list[Path]:
    """The harness's ``samples_<task>_<timestamp>.jsonl[.gz]`` files under ``output`` (a file or a
    directory, searched recursively), of ``task`` only if given, in path order."""
    from catengine.responses.readers.lm_eval_harness import task_from_filename  # noqa: PLC0415 (see _reader)

    root = Path(output)
    if root.is_file():
        files = [root]
    elif root.is_dir():
        files = sorted(p for pat in ("samples_*.jsonl", "samples_*.jsonl.gz") for p in root.rglob(pat))
    else:
        raise FileNotFoundError(f"{root}: no such file or directory (the harness's --output_path)")
    if task is not None:
        files = [p for p in files if task_from_filename(p) == task]
    if not files:
        raise FileNotFoundError(
            f"{root}: no lm-evaluation-harness samples files (samples_{task or '<task>'}_<timestamp>.jsonl); "
            "run the harness with --log_samples --output_path pointing here"
        )
    return files


def _reader():
    # The harness log parser lives in catengine/responses/readers/lm_eval_harness.py (shared with
    # calibration.read_lm_eval_samples); imported lazily, only when a log is ingested.
    from catengine.responses.readers.lm_eval_harness import read_lm_eval_cells

    return read_lm_eval_cells


@dataclass
class IngestReport:
    """What :func:`ingest_samples` did: items recorded, answers already in the session (skipped),
    answers to items the engine had not proposed, the files read, the items still pending, and the
    answers that could not be recorded (``problems``: one message each, naming file, line, document
    and value)."""

    recorded: list[str] = field(default_factory=list)
    already_recorded: int = 0
    unproposed: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"recorded": self.recorded, "already_recorded": self.already_recorded, "unproposed": self.unproposed,
                "files": self.files, "pending": self.pending, "problems": self.problems}


def _same_cot(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=1e-12)


def _cot_text(value) -> str:
    return "none" if value is None else format_cot(value)


def _answered_cells(cells, subject: str, with_cot: bool):
    """``(item, correct, CoT tokens or None, where, CoT field name)`` of every answered cell of
    ``subject`` in the harness reader's ``cells`` (tokens only when ``with_cot`` and recorded)."""
    data = cells.data
    if data is None:
        return
    correct = data.correct[0]
    cot = data.cot_length[0] if data.cot_length is not None else None
    for j in np.flatnonzero(correct >= 0):
        item = data.item_ids[j]
        origin = cells.origins.get((subject, item))
        where = f"{origin.where} (doc_id {origin.sample!r}): item {item!r}" if origin is not None else f"item {item!r}"
        tokens = float(cot[j]) if with_cot and cot is not None and not math.isnan(float(cot[j])) else None
        source = origin.cot_source if origin is not None else "none"
        field_name = source.split(":", 1)[1] if source.startswith("recorded:") else f"CoT length ({source})"
        yield item, int(correct[j]), tokens, where, field_name


def ingest_samples(session, output, doc_ids: DocIds, *, metric=None, filter_name=None, tokenizer=None,
                   cot_field: str | None = None, use_cot: bool = True) -> IngestReport:
    """Record the answers of the harness's ``--log_samples`` output into ``session``.

    ``metric`` / ``filter_name`` / ``tokenizer`` / ``cot_field``: as ``calibration.read_lm_eval_samples``
    (default: the only binary metric of each file; the filter must be named when a file has
    several). ``use_cot=False`` records no CoT lengths.

    The whole output is read and checked before anything is recorded: problems of a whole file
    (unreadable JSON, documents outside the bank, an ambiguous metric or filter) raise with nothing
    recorded. Then every valid answer is recorded, and the answers that cannot be (a metric value
    that is not 0/1, a token count that is not a number or outside the session's plausible range,
    an answer or CoT length that differs from the one the session already has) raise one
    :class:`~catengine.adapters._batch.BatchAnswerError` naming each one's file, line, document and
    value and listing what was recorded (``exc.report`` is the :class:`IngestReport`). An answer the
    session already has, with the same correctness and CoT length, is skipped, so re-ingesting a
    directory is harmless.
    """
    files = sample_files(output, doc_ids.task)
    cells = _reader()(
        {session.subject: files}, metric=metric, filter_name=filter_name, tokenizer=tokenizer, cot_field=cot_field,
        item_id=doc_ids.template,
        expected_items=list(session.items.item_ids),
    )
    report = IngestReport(files=[str(p) for p in files])
    problems = [str(p) for p in cells.problems]
    known = {r.item: r for r in session.history}
    pending = set(session.pending_items)
    lart = session.params.model.has_cot
    valid: list[tuple[str, int, float | None]] = []
    for item, y, tokens, where, field_name in _answered_cells(cells, session.subject, lart and use_cot):
        if item in known:
            rec = known[item]
            if rec.correct != y:
                problems.append(f"{where} has correct={y} in the harness output, but the session of "
                                f"{session.subject!r} already recorded correct={rec.correct} for it")
            elif lart and use_cot and not _same_cot(rec.cot_length, tokens):
                problems.append(f"{where} has {field_name} = {_cot_text(tokens)} in the harness output, but the session "
                                f"of {session.subject!r} already recorded CoT length {_cot_text(rec.cot_length)} "
                                "for it (a recorded answer is never changed; ingest with --no-cot / use_cot=False "
                                "to check correctness only)")
            else:
                report.already_recorded += 1
            continue
        try:
            y, tokens = check_answer(session, y, tokens)
        except ValueError as exc:
            problems.append(f"{where}: {field_name} = {_cot_text(tokens)} is not recorded: {exc}")
            continue
        valid.append((item, y, tokens))
    for item, y, tokens in valid:
        if item not in pending:
            report.unproposed.append(item)
        session.record(item, y, tokens)
        report.recorded.append(item)
    report.pending = session.pending_items
    report.problems = problems
    if problems:
        raise BatchAnswerError(
            f"{output}: " + summary_of(report.recorded, problems, report.pending, what="the harness output")
            + "\nFix those lines (or the session's limits) and ingest again: answers recorded now are checked and skipped.",
            problems=problems, recorded=report.recorded, pending=report.pending, report=report)
    return report


# ----------------------------------------------------------------------------- two models compared
def next_paired_samples(pair, doc_ids: DocIds, *, force: bool = False) -> dict[str, list[int]]:
    """The document a :class:`~catengine.PairedSession` proposes next, as a harness ``--samples``
    mapping ``{task: [index]}`` (the same until it is recorded); ``{}`` once the pair is finished
    (unless ``force``)."""
    if pair.finished and not force:
        return {}
    task, doc = doc_ids.doc(pair.next_item())
    return {task: [doc]}


@dataclass
class PairedIngestReport:
    """What :func:`ingest_paired_samples` did: the items recorded (both answers), answers already in
    the pair (checked and skipped), the files read per model, the item the pair waits for and which
    model's output lacks it, and the answers that could not be recorded (``problems``)."""

    recorded: list[str] = field(default_factory=list)
    already_recorded: int = 0
    files_a: list[str] = field(default_factory=list)
    files_b: list[str] = field(default_factory=list)
    pending: str | None = None
    missing: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"recorded": self.recorded, "already_recorded": self.already_recorded, "files_a": self.files_a,
                "files_b": self.files_b, "pending": self.pending, "missing": self.missing, "problems": self.problems}


def _side_answers(pair, side: int, output, doc_ids, *, metric, filter_name, tokenizer, cot_field, use_cot):
    """(files, {item: (correct, tokens, where, field name)}, problems) of one model's harness output."""
    subject = pair.subjects[side]
    files = sample_files(output, doc_ids.task)
    cells = _reader()({subject: files}, metric=metric, filter_name=filter_name, tokenizer=tokenizer,
                      cot_field=cot_field, item_id=doc_ids.template, expected_items=pair.item_ids)
    answers = {}
    lart = pair.params.model.has_cot
    for item, y, tokens, where, field_name in _answered_cells(cells, subject, lart and use_cot):
        answers[item] = (y, tokens, where, field_name)
    return [str(p) for p in files], answers, [f"model {'ab'[side]} ({subject}): {p}" for p in cells.problems]


def ingest_paired_samples(pair, output_a, output_b, doc_ids: DocIds, *, metric=None, filter_name=None,
                          tokenizer=None, cot_field: str | None = None, use_cot: bool = True) -> PairedIngestReport:
    """Record two models' harness ``--log_samples`` outputs into ``pair`` (a :class:`~catengine.PairedSession`).

    Both outputs are read and checked first (as :func:`ingest_samples` reads one). Then the pair's
    proposed item is recorded when both outputs answer it, and so on for every further item the pair
    draws, until it is finished or an output lacks the item drawn (``report.pending``, with the
    model(s) in ``report.missing``). Answers the pair already has are checked and skipped; an answer
    that differs from the recorded one, a line that cannot be used, or an answer to the item drawn
    that cannot be recorded (a token count out of range) raises one
    :class:`~catengine.adapters._batch.BatchAnswerError` naming each (``exc.report`` is the
    :class:`PairedIngestReport`), after every valid paired answer before it was recorded."""
    options = dict(metric=metric, filter_name=filter_name, tokenizer=tokenizer, cot_field=cot_field, use_cot=use_cot)
    files_a, answers_a, problems_a = _side_answers(pair, 0, output_a, doc_ids, **options)
    files_b, answers_b, problems_b = _side_answers(pair, 1, output_b, doc_ids, **options)
    report = PairedIngestReport(files_a=files_a, files_b=files_b)
    problems = problems_a + problems_b
    lart = pair.params.model.has_cot
    for step in pair.history:
        for side, answers in ((0, answers_a), (1, answers_b)):
            if step.item not in answers:
                continue
            y, tokens, where, field_name = answers[step.item]
            had_y = step.correct_a if side == 0 else step.correct_b
            had_cot = step.cot_length_a if side == 0 else step.cot_length_b
            who = f"model {'ab'[side]} ({pair.subjects[side]}): {where}"
            if had_y != y:
                problems.append(f"{who} has correct={y} in the harness output, but the pair already recorded "
                                f"correct={had_y} for it")
            elif lart and use_cot and not _same_cot(had_cot, tokens):
                problems.append(f"{who} has {field_name} = {_cot_text(tokens)} in the harness output, but the pair "
                                f"already recorded CoT length {_cot_text(had_cot)} for it (a recorded answer is never "
                                "changed; ingest with --no-cot / use_cot=False to check correctness only)")
            else:
                report.already_recorded += 1
    while not pair.finished:  # every paired answer the outputs hold, in the order the pair draws them
        item = pair.next_item()
        report.missing = [f"{'ab'[side]} ({pair.subjects[side]})" for side, answers in
                          enumerate((answers_a, answers_b)) if item not in answers]
        if report.missing:
            break
        checked = []
        for side, answers in ((0, answers_a), (1, answers_b)):
            y, tokens, where, field_name = answers[item]
            try:
                checked.append(check_answer(pair.sessions[side], y, tokens))
            except ValueError as exc:
                problems.append(f"model {'ab'[side]} ({pair.subjects[side]}): {where}: {field_name} = "
                                f"{_cot_text(tokens)} is not recorded: {exc}")
        if len(checked) < 2:
            break
        (y_a, t_a), (y_b, t_b) = checked
        pair.record(item, y_a, y_b, t_a, t_b)
        report.recorded.append(item)
    report.pending = None if pair.finished else pair.next_item()
    report.problems = problems
    if problems:
        raise BatchAnswerError(
            f"{output_a}, {output_b}: " + summary_of(report.recorded, problems, [report.pending] if report.pending else [],
                                                     what="the harness outputs")
            + "\nFix those lines and ingest again: answers recorded now are checked and skipped.",
            problems=problems, recorded=report.recorded, pending=[report.pending] if report.pending else [],
            report=report)
    return report


# ----------------------------------------------------------------------------- command line
