"""Put a bank's questions to an LLM adaptively: ask, grade, record, stop on the score.

:func:`run_model` drives one :class:`~catengine.CATSession`: it takes the session's next batch of
items (``next_items(concurrency)``), sends their prompts (the bank's protocol) to a
:class:`~catengine.clients.ModelClient` on worker threads, grades each reply on the same thread
(graders are pure and thread-safe: the math grader runs math-verify without its ``signal``-based
timeouts, docs/grading.md) and records it, in the calling thread, with its evidence (the reply, its
token counts, the grade) in one log line. It stops when the
session's stopping rule is met, when the endpoint fails for good, or when a budget runs out.

Durability: the session log is the record. Each answer is one line, written with one system call
once it is graded; a run killed at any moment resumes from its log with the same call: nothing
recorded is asked again, and only the items that were in flight (proposed, not yet recorded) are
asked again. ``fsync=True`` also syncs every line to disk (against a power loss, at a few
milliseconds per answer).
The log's single-writer lock keeps a second runner off it. A resumed run refuses options that
differ from the ones its log recorded (model, endpoint, output cap, sampling, grader), naming them.
"""

from __future__ import annotations

import math
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from catengine.clients.base import Completion, EndpointError
from catengine.clients.budget import BudgetExceeded
from catengine.errors import CatEngineError

#: run settings that must agree between a log and the options of the run that resumes it
RESUME_KEYS = ("bank_id", "bank_version", "model", "endpoint", "max_tokens", "sampling", "grader", "grader_version",
               "include_flagged", "inline_reasoning")


class RunConfigurationError(CatEngineError, ValueError):
    """A resumed run's options differ from the ones its log recorded."""


@dataclass
class RunProgress:
    """What a run has spent so far (updated after every recorded answer)."""

    items: int = 0
    correct: int = 0
    completion_tokens: int = 0
    prompt_tokens: int = 0
    requests: int = 0
    truncated: int = 0
    seconds: float = 0.0


@dataclass
class RunOutcome:
    """What a run of one model (:class:`RunResult`) and a comparison of two
    (:class:`~catengine.runner.PairedRunResult`) both report: the session (closed), why the run ended,
    what it spent, the answers recorded before a resume, the error that ended it early (None when
    the stopping rule did), the items whose calibration grading is known to be wrong, left out."""

    session: object
    stop_reason: str
    progress: object
    resumed_items: int = 0
    error: str | None = None
    excluded_flagged: list[str] = field(default_factory=list)

    @property
    def completed(self) -> bool:
        """True when the run ended on its stopping rule (not an endpoint failure or a budget)."""
        return self.error is None


@dataclass
class RunResult(RunOutcome):
    """The outcome of :func:`run_model`: the session (closed), why the run ended, what it spent."""

    progress: RunProgress

    @property
    def score(self):
        return self.session.predicted_score()


def protocol_grader(protocol: dict, name: str | None = None):
    """The grader a bank's protocol names (or the registered grader ``name``), at the protocol's version
    when it names that grader (a version the registered grader does not serve is refused: its verdicts
    could differ; ``Grader.grades_version``)."""
    from catengine.grading import GraderError, get_grader

    wanted = protocol.get("grader", {}) if isinstance(protocol, dict) else {}
    grader = get_grader(name or wanted.get("name"))
    version = wanted.get("version")
    if (name is None or name == wanted.get("name")) and not grader.grades_version(version):
        raise GraderError(f"the bank's protocol names grader {grader.name!r} version {version}, this library has version "
                          f"{grader.version}: its verdicts could differ from the calibration's")
    return grader


def run_settings(bank, client, grader, *, max_tokens, sampling, include_flagged) -> dict:
    """The settings a run records in its log (and checks on resume)."""
    return {"kind": "run", "bank_id": bank.bank_id, "bank_version": bank.version, "model": client.model,
            "endpoint": client.endpoint, "max_tokens": max_tokens, "sampling": dict(sampling or {}),
            "grader": grader.name, "grader_version": grader.version, "include_flagged": bool(include_flagged),
            "inline_reasoning": inline_reasoning_of(client)}


def inline_reasoning_of(client) -> str:
    """How ``client`` reads reasoning inline in a reply (``catengine.inline_reasoning.split_inline_reasoning``):
    its ``inline_reasoning``, or "off" for a client that has no such setting (its text as it stands)."""
    return str(getattr(client, "inline_reasoning", "off"))


def _recorded_settings(log: Path) -> dict | None:
    from catengine.session.log import read_log

    for event in read_log(log).events:
        if event.get("event") == "note" and event.get("kind") == "run":
            return event
    return None


def _check_resume(recorded: dict, settings: dict, log: Path, keys=RESUME_KEYS, what: str = "a run") -> None:
    """Refuse to resume ``log`` (which records ``what``) with ``settings`` that differ in ``keys``."""
    differ = [f"{key}: log {recorded.get(key)!r}, options {settings[key]!r}" for key in keys
              if recorded.get(key) != settings[key]]
    if differ:
        raise RunConfigurationError(f"{log} records {what} with other settings ({'; '.join(differ)}); resume it with "
                                    "the same options, or give a new --log file")


def open_run_session(bank, client, grader, *, log, subject, selector=None, stopping=None, seed=None,
                     max_tokens=None, sampling=None, include_flagged=False, fsync=False):
    """The session of a run: resumed from ``log`` when it holds one (its settings checked against these),
    else new (its settings noted in the log). Items whose calibration grading is known to be wrong are
    excluded unless ``include_flagged``; a run killed before it noted its settings or finished those
    exclusions completes them on resume. Returns (session, resumed)."""
    from catengine.session import CATSession

    settings = run_settings(bank, client, grader, max_tokens=max_tokens, sampling=sampling,
                            include_flagged=include_flagged)
    if log is not None and Path(log).exists() and Path(log).stat().st_size > 0:
        recorded = _recorded_settings(Path(log))
        if recorded is not None:
            _check_resume(recorded, settings, Path(log))
        session = CATSession.resume(log, bank, fsync=fsync)
        if recorded is None:
            if session.n_items:
                session.close()
                raise RunConfigurationError(f"{log} holds answers but not the settings of a run (not written by "
                                            "`catengine run`); give a new --log file")
            session.note(settings)  # a run killed before it noted its settings
        resumed = True
    else:
        strategies = {k: v for k, v in (("selector", selector), ("stopping", stopping)) if v is not None}
        session = CATSession(bank, subject=subject, rng=seed, log=log, fsync=fsync, **strategies)
        session.note(settings)
        resumed = False
    if not include_flagged:
        answered = set(session.administered)
        for content in bank.contents():
            if content.grading_note and content.item not in answered:
                session.exclude(content.item)  # idempotent: an item already excluded is left as it is
    return session, resumed


def _ask_and_grade(client, grader, content, prompt: str, max_tokens):
    """One item on a worker thread: the reply and its grade (graders are pure and thread-safe)."""
    completion = client.complete(prompt, max_tokens=max_tokens)
    return completion, grader.grade(completion.text, content)


def _evidence(completion: Completion, grade, grader) -> dict:
    return {**completion.as_record(), "grader": grader.name, "grader_version": grader.version,
            "extracted": grade.extracted, "reason": grade.reason}


def _cot_length(bank, completion: Completion):
    """The CoT length to record: the reply's completion tokens (reasoning included) on a LaRT bank."""
    if not bank.params.model.has_cot:
        return None
    return None if completion.completion_tokens is None else float(completion.completion_tokens)


def run_model(bank, client, *, grader=None, log=None, subject=None, concurrency: int = 4, max_tokens=None,
              sampling=None, selector=None, stopping=None, seed=None, include_flagged: bool = False,
              on_answer=None, fsync: bool = False) -> RunResult:
    """Run ``client``'s LLM adaptively on ``bank`` until the session's stopping rule is met.

    ``grader`` defaults to the bank protocol's; ``max_tokens`` to the output cap the calibration LLMs
    ran with (the protocol's ``calibration_runs.max_output_tokens``); ``concurrency`` items are asked
    at once (a jointly chosen batch); ``include_flagged`` also administers items whose calibration
    grading is known to be wrong (left out by default: their parameters describe that grading); a
    budget (``catengine.clients.Budget``) given to the client caps requests, tokens or spend: the run
    stops before a request it refuses; ``on_answer(progress,
    session)`` is called after each recorded answer (a progress bar). Resumes ``log`` when it exists.
    """
    if not bank.has_content:
        raise ValueError(f"bank {bank.bank_id!r} holds no item content (questions, answers, protocol): it cannot be "
                         "put to an LLM; score answers collected elsewhere with `catengine evaluate`")
    if not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"concurrency must be an int >= 1, got {concurrency!r}")
    grader = grader if grader is not None else protocol_grader(bank.protocol)
    if max_tokens is None:
        max_tokens = (bank.protocol.get("calibration_runs") or {}).get("max_output_tokens") \
            if isinstance(bank.protocol.get("calibration_runs"), dict) else None
    missing = [c.item for c in bank.contents() if c.question is None]
    if missing:
        raise ValueError(f"bank {bank.bank_id!r} holds no question text for {len(missing)} item(s) (first "
                         f"{missing[0]!r}), only their sha256: attach a copy of the questions (--content FILE)")
    session, resumed = open_run_session(bank, client, grader, log=log, subject=subject or client.model,
                                        selector=selector, stopping=stopping, seed=seed, max_tokens=max_tokens,
                                        sampling=sampling, include_flagged=include_flagged, fsync=fsync)
    progress = RunProgress(items=session.n_items)
    for rec in session.history:
        progress.correct += rec.correct
    result = RunResult(session=session, stop_reason="", progress=progress, resumed_items=session.n_items if resumed else 0,
                       excluded_flagged=[] if include_flagged else [c.item for c in bank.contents() if c.grading_note])
    started = time.perf_counter()
    failed_item = None
    warm_up = getattr(grader, "warm_up", None)
    if callable(warm_up):  # primes the grader while the first requests are in flight
        threading.Thread(target=warm_up, name="catengine-grader-warm-up", daemon=True).start()
    try:
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="catengine-run") as pool:
            while not session.finished:
                batch = session.next_items(concurrency)
                futures = {}
                for item in batch:
                    futures[pool.submit(_ask_and_grade, client, grader, bank.content(item), bank.prompt(item),
                                        max_tokens)] = item
                pending = set(futures)
                try:
                    while pending:
                        done, pending = wait(pending, return_when=FIRST_COMPLETED)
                        for future in done:
                            item = futures[future]
                            failed_item = item
                            completion, grade = future.result()  # EndpointError: the endpoint gave up
                            failed_item = None
                            session.record(item, int(grade.correct), _cot_length(bank, completion),
                                           evidence=_evidence(completion, grade, grader))
                            progress.items += 1
                            progress.correct += int(grade.correct)
                            progress.requests += completion.attempts
                            progress.completion_tokens += completion.completion_tokens or 0
                            progress.prompt_tokens += completion.prompt_tokens or 0
                            progress.truncated += int(completion.truncated)
                            progress.seconds = time.perf_counter() - started
                            if on_answer is not None:
                                on_answer(progress, session)
                except BaseException:
                    for future in pending:
                        future.cancel()
                    raise
        result.stop_reason = session.stop_reason or ""
    except EndpointError as exc:
        result.error = (f"{exc}" + (f" (while asking item {failed_item!r})" if failed_item else "")
                        + f"; {progress.items} answer(s) recorded, {progress.completion_tokens} completion tokens spent; "
                        "the same command resumes the run")
        result.stop_reason = "the endpoint failed"
    except BudgetExceeded as exc:
        result.error = f"{exc}; {progress.items} answer(s) recorded; the same command with a larger budget resumes the run"
        result.stop_reason = "budget exhausted"
    finally:
        progress.seconds = time.perf_counter() - started
        session.close()
    return result


def full_run_cost(bank, result: RunResult, score) -> dict:
    """What asking every item the score covers (``score.n_items``: the bank's, less those the run
    left out) would have cost at this run's rate: items and completion tokens (for a LaRT bank,
    ``score``'s predicted CoT total over them), and this run's shares of them."""
    p = result.progress
    n_items = int(score.n_items) if score.n_items else bank.n_items
    tokens = p.completion_tokens / p.items * n_items if p.items else math.nan
    if score.cot_total is not None and math.isfinite(score.cot_total):
        tokens = float(score.cot_total)
    return {"items": n_items, "completion_tokens": tokens, "share_of_items": p.items / n_items,
            "share_of_tokens": p.completion_tokens / tokens if tokens and math.isfinite(tokens) else math.nan}
