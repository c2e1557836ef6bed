"""Run an Inspect AI ``Task`` adaptively against an item bank (needs the ``[inspect]`` extra).

    from catengine import open_item_bank, CATSession
    from catengine.adapters.inspect import run_adaptive
    from catengine.adapters.examples.inspect_math500 import math500_task, simulated_llm   # offline example

    bank = open_item_bank("math500_lart")
    session = CATSession(bank, log="run.jsonl", subject="my-model")     # or CATSession.resume("run.jsonl")
    result = run_adaptive(math500_task(bank), session, model=simulated_llm(), k=20)   # or get_model("openai/...")
    print(result)    # predicted full-benchmark accuracy with its interval, items used, the stop, the standing
    result.estimate, result.predicted_score, result.stop_reason, result.eval_logs

Each round asks the session for the next batch (``CATSession.next_items(k)``), runs exactly those
samples through Inspect's own ``eval(task, model=..., sample_id=[...])`` (Inspect's solvers,
scorer, limits, retries and logs stay in charge; every round writes an ordinary Inspect log), and
records each sample's score and CoT length into the session; until the session's stopping rule is
met (a session created without ``stopping=`` uses ``catengine.stopping.default_stopping``: the
predicted accuracy known to within a stated half-width, or an item cap). A round never runs past
the rule's item cap (``CATSession.next_items``): the last one is cut to what is left. The session
log is durable, so an interrupted run resumes with ``CATSession.resume(log)``: only the unanswered
items of a half-answered batch are run again.

* Items <-> samples: by default bank item ``i`` is the sample whose id is ``i`` (string ids, or
  integer ids written as digits); pass ``sample_ids`` (a mapping or a function item id -> sample
  id) otherwise. Bank items the task has no sample for are excluded from the session (listed in
  :attr:`InspectRun.excluded`); if none match, a ValueError names the first of each side.
* Correctness: the task's scorer (``score`` names one when the task has several), its value
  through Inspect's ``value_to_float`` (``"C"`` / ``"I"``, booleans, 0 / 1); a value other than 0
  or 1 (partial credit) is an error naming the sample.
* CoT length (LaRT banks): the token usage of the sample's final model output, ``output_tokens``
  (``cot_tokens="reasoning"``: ``reasoning_tokens`` when the provider reports them; a function
  sample -> tokens for anything else; ``None``: no CoT lengths).
* If Inspect's eval of a round fails (e.g. the provider is down), the answers that came back are
  recorded and a CatEngineError is raised; the rest of the batch stays pending in the session (and
  its log), and the next ``run_adaptive`` (or a resumed session) runs only those items. A sample
  that errors in an eval that still succeeds (``fail_on_error`` tolerance) is excluded from the
  session (listed in :attr:`InspectRun.failed`).
* Each round is checked whole before any of it is recorded: every valid answer is recorded, and
  samples that cannot be (a token count outside the session's plausible range, e.g. 2e9 or -5; a
  partial-credit score) raise one :class:`BatchAnswerError` naming each sample, its value and the
  round's Inspect log; those items stay pending (the next call runs only them).
* Inspect's mock model (``mockllm/model``) counts tokens with tiktoken when an output reports no
  usage, which downloads tokenizer files; ``run_adaptive`` gives the mock a network-free count.

**Two models compared** (:func:`run_paired`): a :class:`~catengine.PairedSession` drives the task
for two Inspect models on the same samples, one item per round (each draw depends on the answers
before it), both models in one ``eval(task, model=[model_a, model_b], sample_id=[...])``, which runs
them at once and writes one Inspect log per model:

    from catengine import PairedSession
    from catengine.adapters.inspect import run_paired, task_items

    pair = PairedSession(bank, items=task_items(task, bank), log="pair.jsonl", subjects=("ft", "base"))
    result = run_paired(task, pair, model_a=get_model("openai/ft"), model_b=get_model("openai/base"))
    print(result)       # the difference with its confidence sequence, the decision, the stop

Items, scores and CoT lengths are read as above. Every item the pair compares needs a sample
(:func:`task_items` lists the bank items the task has). A round is recorded only when both models
answered: a failed eval or an errored sample raises a CatEngineError with nothing recorded, and the
item stays proposed in the pair's log (``PairedSession.resume(log)`` and ``run_paired`` again ask it
again). To use the bank's own prompts and grader instead of a task, give
``catengine.runner.run_pair`` two :class:`~catengine.clients.inspect_model.InspectModelClient`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from catengine.adapters._batch import BatchAnswerError, check_answer, format_cot, summary_of
from catengine.errors import CatEngineError

__all__ = ["BatchAnswerError", "InspectPairedRun", "InspectRun", "run_adaptive", "run_paired", "task_items"]

_GLOB = str.maketrans({"*": "[*]", "?": "[?]", "[": "[[]"})


@dataclass
class InspectRun:
    """The outcome of :func:`run_adaptive`: the session (its log holds every answer), the final
    estimate, the predicted score (if the session provides one), why the test stopped
    (``stop_reason``, the stopping rule's reason; None when ``max_rounds`` ended the run first), the
    Inspect log of each round. ``str(run)`` is the result as every entry point words it: the
    predicted full-benchmark accuracy with its interval and the items used, the stop, and the
    standing among the bank's calibration LLM runs (``catengine.console.result_lines``)."""

    session: object
    estimate: object
    predicted_score: object = None
    eval_logs: list[str] = field(default_factory=list)
    rounds: int = 0
    excluded: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    stop_reason: str | None = None

    def __str__(self) -> str:
        from catengine.console import calibration_size, result_lines, stop_statement

        if self.predicted_score is None:
            return f"{self.estimate}\n{stop_statement(self.stop_reason)}"
        return "\n".join(result_lines(self.predicted_score, self.stop_reason, calibration_size(self.session)))


def _key(sample_id) -> str:
    from inspect_ai.dataset._util import normalise_sample_id

    return normalise_sample_id(sample_id)


def _sample_map(task, item_ids, sample_ids) -> tuple[dict[str, object], dict[str, str]]:
    """(item id -> sample id, normalised sample id -> item id) for the bank items the task has."""
    dataset_ids = [s.id for s in task.dataset]
    if any(i is None for i in dataset_ids):
        raise ValueError(f"task {task.name!r} has samples without ids; give every Sample an id to map bank items to it")
    by_key = {_key(i): i for i in dataset_ids}
    forward: dict[str, object] = {}
    item_ids = list(item_ids)
    for item in item_ids:
        if sample_ids is None:
            wanted = item
        elif isinstance(sample_ids, Mapping):
            if item not in sample_ids:
                continue
            wanted = sample_ids[item]
        else:
            wanted = sample_ids(item)
        if wanted is not None and _key(wanted) in by_key:
            forward[item] = by_key[_key(wanted)]
    if not forward:
        raise ValueError(
            f"none of the bank's {len(item_ids)} items maps to a sample of task {task.name!r} "
            f"(bank items e.g. {item_ids[:3]}, task samples e.g. {dataset_ids[:3]}); "
            "pass sample_ids= (item id -> sample id)"
        )
    backward = {_key(s): item for item, s in forward.items()}
    return forward, backward


def _selector(sample_id, task_name: str):
    """The ``sample_id`` argument that selects exactly this sample (Inspect matches ids as fnmatch
    patterns and reads ``<task>:<id>`` as a task selector)."""
    if not isinstance(sample_id, str):
        return sample_id
    escaped = sample_id.translate(_GLOB)
    return f"{task_name}:{escaped}" if ":" in sample_id else escaped


def _score_name(sample, score: str | None) -> str:
    names = list(sample.scores or {})
    if score is not None:
        if score not in names:
            raise ValueError(f"sample {sample.id!r} has no score {score!r}; it has {names}")
        return score
    if len(names) != 1:
        raise ValueError(f"sample {sample.id!r} has scores {names}: name the one that means correct with score=")
    return names[0]


def _correct(sample, score: str | None) -> int:
    from inspect_ai.scorer import value_to_float

    name = _score_name(sample, score)
    value = sample.scores[name].value
    x = value_to_float()(value)
    if x not in (0.0, 1.0):
        raise ValueError(f"sample {sample.id!r}: score {name!r} = {value!r} is not binary (correct must be 0 or 1)")
    return int(x)


def _cot(sample, cot_tokens):
    """The sample's CoT length as reported (checked by the caller); None when unknown."""
    if cot_tokens is None:
        return None
    if callable(cot_tokens):
        return cot_tokens(sample)
    usage = getattr(sample.output, "usage", None) if sample.output is not None else None
    if usage is None:
        return None
    if cot_tokens == "reasoning" and usage.reasoning_tokens is not None:
        return usage.reasoning_tokens
    return usage.output_tokens


def _cot_label(cot_tokens) -> str:
    if callable(cot_tokens):
        return f"CoT length from {getattr(cot_tokens, '__name__', 'cot_tokens')}()"
    return "reasoning_tokens" if cot_tokens == "reasoning" else "output_tokens"


def _sample_answer(session, sample, score: str | None, cot_tokens, lart: bool, where: str):
    """``((correct, CoT length), None)``: a sample's answer as ``session`` records it (the CoT length
    only when ``lart``), or ``(None, the problem)`` prefixed with ``where`` when it cannot."""
    try:
        y = _correct(sample, score)
    except ValueError as exc:
        return None, f"{where}: {exc}"
    cot = _cot(sample, cot_tokens) if lart else None
    try:
        return check_answer(session, y, cot), None
    except ValueError as exc:
        return None, f"{where}: {_cot_label(cot_tokens)} = {format_cot(cot)} is not recorded: {exc}"


async def _offline_text_tokens(text: str) -> int:
    """A network-free token estimate (about 4 characters per token) for Inspect's mock model."""
    return max(1, math.ceil(len(text) / 4))


def _offline_safe(model, eval_kwargs):
    """Inspect's mock model (``mockllm/model``) fills in a missing token usage (``usage=None``, as in
    ``ModelOutput.from_content``) by counting the input with tiktoken, which downloads its tokenizer
    files on first use: an offline run fails. For that model only (and only when its token counter is
    Inspect's default), count with a network-free estimate instead. Any other model is left alone."""
    try:
        from inspect_ai.model import Model, get_model
        from inspect_ai.model._model import ModelAPI
        from inspect_ai.model._providers.mockllm import MockLLM
    except ImportError:  # pragma: no cover - a future inspect_ai that moved them: nothing to adapt
        return model
    if isinstance(model, str) and model.startswith("mockllm/") and not {"model_args", "model_base_url"} & set(eval_kwargs):
        model = get_model(model)
    api = getattr(model, "api", None) if isinstance(model, Model) else None
    if (isinstance(api, MockLLM) and type(api).count_text_tokens is ModelAPI.count_text_tokens
            and "count_text_tokens" not in vars(api)):
        api.count_text_tokens = _offline_text_tokens
    return model


def _one_epoch_eval(eval_kwargs: dict, records: str):
    """Inspect's ``eval`` (an ImportError naming the extra without inspect-ai), once ``eval_kwargs``
    ask for one epoch at most (``records``: what the caller records, for the refusal)."""
    try:
        from inspect_ai import eval as inspect_eval
    except ImportError as exc:  # pragma: no cover - exercised without the extra only
        raise ImportError("catengine.adapters.inspect needs inspect-ai: pip install 'irt-llm-eval[inspect]' "
                          "(from a clone: pip install -e '.[inspect]')") from exc
    if eval_kwargs.get("epochs") not in (None, 1):
        raise ValueError(f"{records}: run with epochs=1")
    return inspect_eval


def _predicted_score(session):
    ps = getattr(session, "predicted_score", None)
    if ps is None:
        return None
    return ps() if callable(ps) else ps


def run_adaptive(task, session, *, model, k: int = 10, sample_ids: Mapping | Callable | None = None,
                 score: str | None = None, cot_tokens: str | Callable | None = "output", log_dir: str | None = None,
                 max_rounds: int | None = None, **eval_kwargs) -> InspectRun:
    """Run ``task`` adaptively for ``session`` (a :class:`~catengine.CATSession`) until it is finished.

    ``model``: an Inspect model (``get_model(...)``) or model name; ``k``: items per round (a batch
    run in parallel by Inspect); ``log_dir``: Inspect's log directory (default: Inspect's, e.g.
    ``INSPECT_LOG_DIR``); ``max_rounds``: stop after this many rounds even if not finished;
    ``eval_kwargs`` go to ``inspect_ai.eval`` (e.g. ``max_connections``, ``temperature``). See the
    module docstring for the mapping of items, scores and CoT lengths.
    """
    inspect_eval = _one_epoch_eval(eval_kwargs, "run_adaptive records one answer per item")
    for reserved in ("sample_id", "limit", "tasks"):
        if reserved in eval_kwargs:
            raise ValueError(f"run_adaptive chooses the samples itself: do not pass {reserved}=")
    forward, backward = _sample_map(task, session.items.item_ids, sample_ids)
    model = _offline_safe(model, eval_kwargs)
    result = InspectRun(session=session, estimate=session.estimate)
    answered = set(session.administered)
    for item in session.items.item_ids:
        if item not in forward and item not in answered:
            session.exclude(item)
            result.excluded.append(item)
    lart = session.params.model.has_cot
    display = eval_kwargs.pop("display", "none")
    tags = list(eval_kwargs.pop("tags", None) or []) + ["catengine"]
    user_metadata = dict(eval_kwargs.pop("metadata", None) or {})
    while not session.finished and (max_rounds is None or result.rounds < max_rounds):
        batch = session.next_items(k)
        selectors = [_selector(forward[item], task.name) for item in batch]
        metadata = {**user_metadata, "catengine_subject": session.subject,
                    "catengine_bank": getattr(session.bank, "bank_id", ""), "catengine_items": batch}
        logs = inspect_eval(task, model=model, sample_id=selectors, log_dir=log_dir, display=display, tags=tags,
                            metadata=metadata, **eval_kwargs)
        log = logs[0]
        result.rounds += 1
        result.eval_logs.append(str(log.location))
        ok = log.status == "success"
        seen, errored, valid, problems = set(), [], [], []
        for sample in log.samples or []:  # the whole round is checked before any of it is recorded
            item = backward.get(_key(sample.id))
            if item is None or item not in batch:
                raise CatEngineError(f"Inspect returned sample {sample.id!r}, which is not in the batch {batch}")
            seen.add(item)
            if sample.error is not None:
                errored.append(item)
                if ok:  # the eval tolerated the failure (fail_on_error): no answer will come, exclude it
                    warnings.warn(f"sample {sample.id!r} (item {item!r}) failed in Inspect and is excluded: "
                                  f"{sample.error.message}", RuntimeWarning, stacklevel=2)
                    session.exclude(item)
                    result.failed.append(item)
                continue
            where = f"sample {sample.id!r} (item {item!r}) of Inspect log {log.location}"
            answer, problem = _sample_answer(session, sample, score, cot_tokens, lart, where)
            if problem is not None:
                problems.append(problem)
                continue
            valid.append((item, *answer))
        for item, y, cot in valid:  # every valid answer that came back, whatever else went wrong
            session.record(item, y, cot)
        recorded = [item for item, _, _ in valid]
        if not ok:  # answers that came back are recorded; the rest of the batch stays pending in the log
            message = log.error.message if log.error is not None else ""
            raise CatEngineError(
                f"Inspect eval of items {batch} ended with status {log.status!r} ({message}); "
                f"{len(recorded)} answer(s) recorded, "
                f"{session.pending_items} still pending: fix the cause and call run_adaptive again "
                "(or resume the session from its log)"
                + ("\n" + summary_of(recorded, problems, [], what="this round") if problems else "")
            )
        if problems:
            result.estimate = session.estimate
            raise BatchAnswerError(
                f"Inspect log {log.location}: " + summary_of(recorded, problems, session.pending_items, what="this round")
                + "\nThe items not recorded stay pending: fix the cause (e.g. session.max_cot_length, cot_tokens=, "
                "score=) and call run_adaptive again to run only those, or session.exclude() them.",
                problems=problems, recorded=recorded, pending=session.pending_items, report=result)
        missing = [item for item in batch if item not in seen]
        if missing:
            raise CatEngineError(f"Inspect's log {log.location} has no sample for items {missing} of the batch")
    result.estimate = session.estimate
    result.predicted_score = _predicted_score(session)
    result.stop_reason = session.stop_reason
    return result


# ----------------------------------------------------------------------------- two models compared
@dataclass
class InspectPairedRun:
    """The outcome of :func:`run_paired`: the paired session (its log holds every answer), the
    comparison, why it stopped (None when ``max_rounds`` ended the run first), the Inspect logs
    (two per round: model a's, then model b's). ``str(run)`` is the comparison as ``catengine
    compare`` prints it."""

    session: object
    comparison: object = None
    eval_logs: list[str] = field(default_factory=list)
    rounds: int = 0
    stop_reason: str | None = None

    def __str__(self) -> str:
        from catengine.paired.commands import comparison_lines

        return "\n".join(comparison_lines(self.comparison))


def task_items(task, bank, sample_ids: Mapping | Callable | None = None) -> list[str]:
    """The bank items the task has a sample for (bank order): the ``items=`` of a
    :class:`~catengine.PairedSession` that :func:`run_paired` drives."""
    forward, _ = _sample_map(task, bank.item_ids, sample_ids)
    return [item for item in bank.item_ids if item in forward]


def _model_label(model) -> str:
    return model if isinstance(model, str) else str(model)


def run_paired(task, pair, *, model_a, model_b, sample_ids: Mapping | Callable | None = None, score: str | None = None,
               cot_tokens: str | Callable | None = "output", log_dir: str | None = None,
               max_rounds: int | None = None, **eval_kwargs) -> InspectPairedRun:
    """Compare ``model_a`` and ``model_b`` on ``task`` through ``pair`` (a :class:`~catengine.PairedSession`)
    until it is finished: each round runs the item the pair drew for both models in one Inspect
    ``eval`` and records both answers. ``sample_ids``, ``score``, ``cot_tokens``, ``log_dir``,
    ``max_rounds`` and ``eval_kwargs`` as :func:`run_adaptive` (module docstring)."""
    inspect_eval = _one_epoch_eval(eval_kwargs, "run_paired records one answer per item and model")
    for reserved in ("sample_id", "limit", "tasks", "model"):
        if reserved in eval_kwargs:
            raise ValueError(f"run_paired chooses the samples and models itself: do not pass {reserved}=")
    if pair.method != "paired":
        raise ValueError("run_paired asks two models; this pair's side b is a calibration LLM of the bank, whose "
                         "answers are known")
    forward, backward = _sample_map(task, pair.item_ids, sample_ids)
    lacking = [item for item in pair.item_ids if item not in forward]
    if lacking:
        raise ValueError(f"task {task.name!r} has no sample for {len(lacking)} of the items the pair compares (first "
                         f"{lacking[0]!r}): create the PairedSession with items=task_items(task, bank)")
    models = [_offline_safe(model_a, eval_kwargs), _offline_safe(model_b, eval_kwargs)]
    result = InspectPairedRun(session=pair)
    lart = pair.params.model.has_cot
    display = eval_kwargs.pop("display", "none")
    tags = list(eval_kwargs.pop("tags", None) or []) + ["catengine", "catengine-paired"]
    user_metadata = dict(eval_kwargs.pop("metadata", None) or {})
    while not pair.finished and (max_rounds is None or result.rounds < max_rounds):
        item = pair.next_item()
        metadata = {**user_metadata, "catengine_pair": list(pair.subjects),
                    "catengine_bank": getattr(pair.bank, "bank_id", ""), "catengine_items": [item]}
        logs = inspect_eval(task, model=models, sample_id=[_selector(forward[item], task.name)], log_dir=log_dir,
                            display=display, tags=tags, metadata=metadata, **eval_kwargs)
        result.rounds += 1
        if len(logs) != 2:
            raise CatEngineError(f"Inspect returned {len(logs)} logs for the two models of item {item!r}")
        names = [_model_label(m) for m in models]
        if names[0] != names[1] and [log.eval.model for log in logs] == names[::-1]:
            logs = logs[::-1]  # one log per model, in the order given
        result.eval_logs.extend(str(log.location) for log in logs)
        answers, problems = [], []
        for side, (log, model, session) in enumerate(zip(logs, (model_a, model_b), pair.sessions)):
            who = f"model {'ab'[side]} ({_model_label(model)})"
            samples = [s for s in log.samples or [] if backward.get(_key(s.id)) == item]
            if log.status != "success" or not samples or samples[0].error is not None:
                message = (samples[0].error.message if samples and samples[0].error is not None else
                           log.error.message if log.error is not None else "no sample in the log")
                problems.append(f"{who}: Inspect eval of item {item!r} ended with status {log.status!r} ({message}); "
                                f"log {log.location}")
                continue
            sample = samples[0]
            where = f"{who}: sample {sample.id!r} (item {item!r}) of Inspect log {log.location}"
            answer, problem = _sample_answer(session, sample, score, cot_tokens, lart, where)
            if problem is not None:
                problems.append(problem)
            else:
                answers.append(answer)
        if problems:  # a paired answer needs both models: nothing is recorded, the item stays proposed
            raise CatEngineError("\n".join(problems) + f"\nnothing was recorded for item {item!r}; it stays proposed in "
                                 "the paired session (and its log): fix the cause and call run_paired again")
        (y_a, cot_a), (y_b, cot_b) = answers
        pair.record(item, y_a, y_b, cot_a, cot_b,
                    evidence={"inspect_logs": [str(log.location) for log in logs]})
    result.comparison = pair.comparison()
    result.stop_reason = pair.stop_reason
    return result
