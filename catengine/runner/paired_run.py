"""Put a bank's questions to two LLMs and compare them: :func:`run_pair` (``catengine run --model A
--compare-with B``).

A :class:`~catengine.paired.PairedSession` draws one item at a time (each draw depends on the
answers before it, so a comparison has no batches); both LLMs are asked it at once, on two worker
threads, each reply is graded by the bank protocol's grader on its thread, and both answers are
recorded in one log line with their evidence (replies, token counts, grades) and, on LaRT banks,
each reply's completion tokens as its CoT length. The run stops on the session's rule (decided,
tied, or the item cap), when an endpoint fails for good (the message names the endpoint, the model
and the item), or when a budget runs out.

Durability: the paired session's log is the record (``PairedSession.resume`` replays it: the same
draws, answers and interval). Each paired answer is one line, written with one system call once
both replies are graded; a run killed at any moment resumes from its log with the same call:
nothing recorded is asked again, and only the item in flight is. When one endpoint fails while the
other has answered, that reply is kept in the log (a ``note`` of kind ``"reply"``) and is not asked
again on resume. The log's single-writer lock keeps a second runner off it, and a resumed run
refuses options that differ from the ones its log recorded (models, endpoints, output cap, sampling,
grader), naming them.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from catengine.clients.base import EndpointError
from catengine.clients.budget import BudgetExceeded
from catengine.runner.run import (RunConfigurationError, RunOutcome, RunProgress, _ask_and_grade, _check_resume,
                                  _cot_length, _evidence, inline_reasoning_of, protocol_grader)

__all__ = ["PairedProgress", "PairedRunResult", "paired_run_settings", "run_pair"]

#: paired-run settings that must agree between a log and the options of the run that resumes it
PAIRED_RESUME_KEYS = ("bank_id", "bank_version", "model_a", "endpoint_a", "model_b", "endpoint_b", "max_tokens",
                      "sampling", "grader", "grader_version", "include_flagged", "inline_reasoning_a",
                      "inline_reasoning_b")
SIDES = ("a", "b")


@dataclass
class PairedProgress:
    """What a comparison has spent: paired answers recorded, and each model's
    :class:`~catengine.runner.RunProgress` (answers, correct, tokens, requests, truncated replies)
    over every answer in the log (those recorded before a resume included)."""

    items: int = 0
    a: RunProgress = field(default_factory=RunProgress)
    b: RunProgress = field(default_factory=RunProgress)
    seconds: float = 0.0

    def side(self, side: str) -> RunProgress:
        return self.a if side == "a" else self.b

    def to_dict(self) -> dict:
        out = {"items": self.items, "seconds": self.seconds}
        for side in SIDES:
            p = self.side(side)
            out[side] = {"correct": p.correct, "completion_tokens": p.completion_tokens,
                         "prompt_tokens": p.prompt_tokens, "requests": p.requests, "truncated": p.truncated}
        return out


@dataclass
class PairedRunResult(RunOutcome):
    """The outcome of :func:`run_pair`: the paired session (closed), its comparison, why the run
    ended, what each model spent."""

    progress: PairedProgress
    comparison: object = None


def paired_run_settings(bank, client_a, client_b, grader, *, max_tokens, sampling, include_flagged) -> dict:
    """The settings a comparison records in its log (and checks on resume)."""
    return {"kind": "paired-run", "bank_id": bank.bank_id, "bank_version": bank.version,
            "model_a": client_a.model, "endpoint_a": client_a.endpoint,
            "model_b": client_b.model, "endpoint_b": client_b.endpoint, "max_tokens": max_tokens,
            "sampling": dict(sampling or {}), "grader": grader.name, "grader_version": grader.version,
            "include_flagged": bool(include_flagged), "inline_reasoning_a": inline_reasoning_of(client_a),
            "inline_reasoning_b": inline_reasoning_of(client_b)}


def _subjects(client_a, client_b) -> tuple[str, str]:
    a, b = str(client_a.model), str(client_b.model)
    if a != b:
        return a, b
    if client_a.endpoint != client_b.endpoint:
        return f"{a} at {client_a.endpoint}", f"{b} at {client_b.endpoint}"
    return f"{a} (a)", f"{b} (b)"


def _read_log_notes(log: Path):
    """(the run's settings note or None, kept replies {item: {side: note}}, record events) of a paired log."""
    from catengine.paired.session import read_paired_log

    _, events = read_paired_log(log)
    settings, kept, records = None, {}, []
    for event in events:
        if event.get("event") == "note" and event.get("kind") == "paired-run" and settings is None:
            settings = event
        elif event.get("event") == "note" and event.get("kind") == "reply":
            kept.setdefault(event.get("item"), {})[event.get("side")] = event
        elif event.get("event") == "record":
            records.append(event)
    return settings, kept, records


def _check_design(session, stopping, margin, alpha, log) -> None:
    """A resumed comparison keeps the design its log records: options given now must be the same."""
    from catengine.paired.session import _stopping

    differ = []
    if stopping is not None and _stopping(stopping) != session.stopping:
        differ.append(f"stopping: log {session.stopping}, options {_stopping(stopping)}")
    if margin is not None and float(margin) != session.margin:
        differ.append(f"margin: log {session.margin!r}, options {float(margin)!r}")
    if alpha is not None and float(alpha) != session.alpha:
        differ.append(f"alpha: log {session.alpha!r}, options {float(alpha)!r}")
    if differ:
        raise RunConfigurationError(f"{log} records a comparison with another design ({'; '.join(differ)}); resume it "
                                    "without these options, or give a new --log file")


def open_paired_session(bank, client_a, client_b, grader, *, log, subjects=None, stopping=None, margin=None,
                        alpha=None, seed=None, max_tokens=None, sampling=None, include_flagged=False, fsync=False):
    """The paired session of a comparison: resumed from ``log`` when it holds one (its settings checked
    against these), else new over the bank's items (those whose calibration grading is known to be
    wrong left out unless ``include_flagged``; the items compared are recorded in the log). Returns
    (session, resumed, kept replies {item: {side: note}}, recorded answers' events)."""
    from catengine.paired import PairedSession

    settings = paired_run_settings(bank, client_a, client_b, grader, max_tokens=max_tokens, sampling=sampling,
                                   include_flagged=include_flagged)
    if log is not None and Path(log).exists() and Path(log).stat().st_size > 0:
        recorded, kept, records = _read_log_notes(Path(log))
        if recorded is not None:
            _check_resume(recorded, settings, Path(log), PAIRED_RESUME_KEYS, "a comparison")
        session = PairedSession.resume(log, bank, fsync=fsync)
        try:
            _check_design(session, stopping, margin, alpha, log)
            if recorded is None:
                if session.n_items:
                    raise RunConfigurationError(f"{log} holds paired answers but not the settings of a comparison run "
                                                "(not written by `catengine run --compare-with`); give a new --log file")
                session.note(settings)  # a run killed before it noted its settings
        except BaseException:
            session.close()
            raise
        return session, True, kept, records
    flagged = {c.item for c in bank.contents() if c.grading_note}
    items = None if include_flagged or not flagged else [i for i in bank.item_ids if i not in flagged]
    options = {k: v for k, v in (("stopping", stopping), ("margin", margin), ("alpha", alpha)) if v is not None}
    session = PairedSession(bank, subjects=subjects or _subjects(client_a, client_b), items=items, rng=seed, log=log,
                            fsync=fsync, **options)
    session.note(settings)
    return session, False, {}, []


def _count(progress: RunProgress, evidence: dict, correct: int) -> None:
    """One recorded answer: counted with what its reply spent."""
    progress.items += 1
    progress.correct += int(correct)
    _spend(progress, evidence)


def _spend(progress: RunProgress, evidence: dict) -> None:
    progress.requests += int(evidence.get("attempts") or 0)
    progress.completion_tokens += int(evidence.get("completion_tokens") or 0)
    progress.prompt_tokens += int(evidence.get("prompt_tokens") or 0)
    progress.truncated += int(evidence.get("finish_reason") == "length")


def run_pair(bank, client_a, client_b, *, grader=None, log=None, subjects=None, max_tokens=None, sampling=None,
             stopping=None, margin=None, alpha=None, seed=None, include_flagged: bool = False, on_answer=None,
             fsync: bool = False) -> PairedRunResult:
    """Compare ``client_a``'s and ``client_b``'s LLMs on ``bank`` with a :class:`~catengine.PairedSession`
    until its stopping rule is met (decided, tied, or the item cap).

    Each step asks both clients the item the session drew, at once; ``grader`` defaults to the bank
    protocol's, ``max_tokens`` to the calibration LLMs' output cap; ``stopping`` (a ``PairedStopping``
    or an item cap), ``margin`` (a tie's half-width, a proportion), ``alpha`` and ``seed`` (the
    design's draws) set up a new comparison (a resumed one keeps its log's, and refuses different
    ones); ``subjects``: the two labels (default: the model names); ``include_flagged`` also compares
    on items whose calibration grading is known to be wrong. A budget given to the clients (one
    shared :class:`~catengine.clients.Budget` caps both) stops the run before a request it refuses;
    ``on_answer(progress, session)`` is called after each paired answer. Resumes ``log`` when it
    exists (the module docstring).
    """
    if not bank.has_content:
        raise ValueError(f"bank {bank.bank_id!r} holds no item content (questions, answers, protocol): it cannot be "
                         "put to an LLM; compare answers collected elsewhere with `catengine compare`")
    grader = grader if grader is not None else protocol_grader(bank.protocol)
    if max_tokens is None:
        runs = bank.protocol.get("calibration_runs")
        max_tokens = runs.get("max_output_tokens") if isinstance(runs, dict) else None
    missing = [c.item for c in bank.contents() if c.question is None]
    if missing:
        raise ValueError(f"bank {bank.bank_id!r} holds no question text for {len(missing)} item(s) (first "
                         f"{missing[0]!r}), only their sha256: attach a copy of the questions (--content FILE)")
    session, resumed, kept, records = open_paired_session(
        bank, client_a, client_b, grader, log=log, subjects=subjects, stopping=stopping, margin=margin, alpha=alpha,
        seed=seed, max_tokens=max_tokens, sampling=sampling, include_flagged=include_flagged, fsync=fsync)
    progress = PairedProgress(items=session.n_items)
    for event in records:
        evidence = event.get("evidence") or {}
        for side in SIDES:
            _count(progress.side(side), evidence.get(side) or {}, event[f"correct_{side}"])
    flagged = [] if include_flagged else [c.item for c in bank.contents() if c.grading_note]
    result = PairedRunResult(session=session, comparison=None, stop_reason="", progress=progress,
                             resumed_items=session.n_items if resumed else 0, excluded_flagged=flagged)
    clients = {"a": client_a, "b": client_b}
    started = time.perf_counter()
    failure = None
    try:
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="catengine-pair") as pool:
            while not session.finished:
                item = session.next_item()
                content, prompt = bank.content(item), bank.prompt(item)
                answers = {side: (note["correct"], note.get("cot_length"), note["evidence"], True)
                           for side, note in kept.pop(item, {}).items() if side in SIDES}
                futures = {side: pool.submit(_ask_and_grade, clients[side], grader, content, prompt, max_tokens)
                           for side in SIDES if side not in answers}
                failures = []
                for side, future in futures.items():  # both requests run at once; wait for both
                    try:
                        completion, grade = future.result()
                    except (EndpointError, BudgetExceeded) as exc:
                        failures.append((side, exc))
                        continue
                    answers[side] = (int(grade.correct), _cot_length(bank, completion),
                                     _evidence(completion, grade, grader), False)
                if failures:
                    for side, (correct, cot, evidence, was_kept) in answers.items():
                        if not was_kept:  # the reply that came back is kept: a resume does not ask it again
                            session.note({"kind": "reply", "item": item, "side": side, "correct": correct,
                                          "cot_length": cot, "evidence": evidence})
                            _spend(progress.side(side), evidence)
                    failure = (item, failures)
                    raise failures[0][1]
                (ya, ta, ea, _), (yb, tb, eb, _) = answers["a"], answers["b"]
                session.record(item, ya, yb, ta, tb, evidence={"a": ea, "b": eb})
                progress.items += 1
                for side, (y, _, evidence, _) in answers.items():
                    _count(progress.side(side), evidence, y)
                progress.seconds = time.perf_counter() - started
                if on_answer is not None:
                    on_answer(progress, session)
        result.stop_reason = session.stop_reason or ""
    except EndpointError as error:
        item, failures = failure if failure is not None else (None, [(None, error)])
        errors = "; ".join((f"model {side} ({clients[side].model}) at {exc}" if side else str(exc))
                           for side, exc in failures if isinstance(exc, EndpointError))
        result.error = (errors + (f" (while asking item {item!r})" if item else "")
                        + f"; {progress.items} paired answer(s) recorded; the same command resumes the comparison")
        result.stop_reason = "an endpoint failed"
    except BudgetExceeded as exc:
        result.error = (f"{exc}; {progress.items} paired answer(s) recorded; the same command with a larger budget "
                        "resumes the comparison")
        result.stop_reason = "budget exhausted"
    finally:
        progress.seconds = time.perf_counter() - started
        try:
            result.comparison = session.comparison()
        finally:
            session.close()
    return result
