"""``catengine lm-eval next | ingest``: an adaptive test inside lm-evaluation-harness, driven
through its ``--samples`` and ``--log_samples`` files (the library side is
:mod:`catengine.adapters.lm_eval`; the paired commands are in
:mod:`catengine.adapters.lm_eval_paired_command`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from catengine.adapters import lm_eval
from catengine.adapters._batch import BatchAnswerError
from catengine.adapters.lm_eval import DocIds, ingest_samples, next_samples
from catengine.adapters.lm_eval_paired_command import (check_log_kind, ingest_paired_command, next_paired_command,
                                                       print_result)


def add_subcommand(sub, *, add_strategy_options, strategies, open_bank) -> None:
    """Register ``catengine lm-eval next | ingest`` (called by ``catengine.cli``)."""
    import argparse

    lm = sub.add_parser("lm-eval", help="adaptive test inside lm-evaluation-harness through --samples / --log_samples files",
                        description=lm_eval.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    lsub = lm.add_subparsers(dest="lm_eval_command", required=True)

    def common(p):
        p.add_argument("--log", type=Path, required=True, help="the session log (created by the first 'next', then resumed)")
        p.add_argument("--bank", type=Path, default=None, help="bank directory or file (default: the one named in the log; for a new log, math500_lart)")
        p.add_argument("--subject", default=None,
                       help="subject id of the model under test (default 'model'; with --paired, model a's label, "
                            "default 'a')")
        p.add_argument("--paired", action="store_true",
                       help="compare two models on the same documents with a paired session (one document per round; "
                            "see the description)")
        p.add_argument("--task", default=None, help="harness task name (needed if the item id template has no {task})")
        p.add_argument("--item-id", default="{task}/{doc_id}",
                       help="how bank item ids name harness documents (default '{task}/{doc_id}')")

    nx = lsub.add_parser("next", help="print the next batch as a --samples JSON mapping; exit status 1 once finished",
                         description="Print the next batch as a --samples JSON mapping; exit status 1 once finished. "
                                     "The selection, estimation and stopping options and --seed apply when the log is "
                                     "created; a resumed log keeps the configuration it records, and options given "
                                     "then must build that same configuration (else exit status 2, naming each "
                                     "differing setting as recorded and as given).")
    common(nx)
    nx.add_argument("--k", type=int, default=None,
                    help="batch size (default 20; a batch never runs past the stopping rule's item cap; not with "
                         "--paired, which proposes one document per round)")
    nx.add_argument("--subject-b", default=None, help="with --paired: model b's label (default 'b')")
    nx.add_argument("--force", action="store_true", help="propose items even if the stopping rule is met")
    known = {id(action) for action in nx._actions}
    add_strategy_options(nx)
    tracked = [action for action in nx._actions if id(action) not in known]
    for action in tracked:  # tells an option given on the command line from its default (see _given_options)
        action.default = _NotGiven(action.default)
    nx.set_defaults(func=lambda args: _cmd_next(args, strategies, open_bank, tracked))

    ing = lsub.add_parser("ingest", help="record the answers in the harness's --log_samples output")
    common(ing)
    ing.add_argument("output", type=Path, help="the harness's --output_path (searched for samples_<task>_*.jsonl)")
    ing.add_argument("--metric", default=None, help="correctness metric (default: the only binary one, e.g. exact_match)")
    ing.add_argument("--filter", default=None, help="filter whose lines to use when a task has several (e.g. strict-match)")
    ing.add_argument("--no-cot", action="store_true", help="record no CoT lengths")
    ing.add_argument("--output-b", type=Path, default=None, metavar="OUTPUT",
                     help="with --paired: model b's --output_path (OUTPUT is model a's)")
    ing.set_defaults(func=lambda args: _cmd_ingest(args, open_bank))


class _NotGiven:
    """The default of a strategy option of ``next``, marking it as not given on the command line."""

    def __init__(self, default):
        self.default = default

    def __repr__(self) -> str:
        return repr(self.default)

    def __str__(self) -> str:
        return str(self.default)


def _given_options(args, tracked) -> dict[str, str]:
    """The strategy options given on the command line, dest -> how they were written (``--max-items
    30``); the others get their defaults back in ``args``."""
    given = {}
    for action in tracked:
        value = getattr(args, action.dest, None)
        if isinstance(value, _NotGiven):
            default = value.default
            if isinstance(default, str) and callable(action.type):
                default = action.type(default)
            setattr(args, action.dest, default)
        elif action.option_strings:
            flag = max(action.option_strings, key=len)
            given[action.dest] = flag if action.nargs == 0 else f"{flag} {value}"
    return given


#: which strategy options set which part of the configuration a log records
_PARTS = {
    "selector": ("selector",),
    "estimator": ("estimator", "no_cot", "sd_scale"),
    "stopping": ("score_within", "target_sd", "min_items", "max_items", "min_information", "rivals",
                 "rival_probability"),
    "exposure": ("randomesque", "content_field", "content_targets", "sympson_hetter"),
}


def _configuration_differences(engine, log, args, given: dict[str, str], strategies) -> list[str]:
    """Each setting of the resumed ``engine``'s recorded configuration that the options ``given``
    would set otherwise, as 'setting (options): recorded: ...; given: ...'."""
    import json

    from catengine.session import to_config
    from catengine.session.session import strategy_words

    if not given:
        return []
    recorded = engine.config()
    wanted = strategies(args, engine.bank)
    out = []

    def differ(setting, dests, old, new):
        options = " ".join(given[d] for d in dests if d in given)
        out.append(f"{setting} ({options}): recorded: {old}; given: {new}")

    for part, dests in _PARTS.items():
        if not any(d in given for d in dests):
            continue
        if part == "estimator":
            old, new = recorded["estimator"], to_config(wanted["estimator"])
            if "estimator" in given and old.get("type") != new.get("type"):
                differ("estimator", ["estimator"], old.get("type"), new.get("type"))
            if "no_cot" in given and old.get("use_cot", True) != new.get("use_cot", True):
                differ("CoT lengths in scoring", ["no_cot"], "used" if old.get("use_cot", True) else "ignored",
                       "used" if new.get("use_cot", True) else "ignored")
            if "sd_scale" in given and old.get("sd_scale") != new.get("sd_scale"):
                differ("SD scale", ["sd_scale"], old.get("sd_scale"), new.get("sd_scale"))
            continue
        new = ([to_config(c) for c in wanted["exposure"]] if part == "exposure" else to_config(wanted[part]))
        if new != recorded[part]:
            differ({"stopping": "stopping rule", "exposure": "exposure controls"}.get(part, part), dests,
                   strategy_words(part, recorded[part]), strategy_words(part, new))
    if "seed" in given:
        with open(log, encoding="utf-8") as fh:
            entropy = json.loads(fh.readline()).get("seed_entropy")
        if entropy != int(np.random.SeedSequence(args.seed).entropy):
            differ("seed", ["seed"], "none recorded" if entropy is None else f"seed entropy {entropy}", args.seed)
    return out


def _engine(args, strategies, open_bank, *, create: bool):
    from catengine.session import Engine

    log = args.log
    if log.exists() and log.stat().st_size > 0:  # resume: the bank named in the log unless --bank is given
        return Engine.resume(log, None if args.bank is None else open_bank(args.bank))
    if not create:
        raise FileNotFoundError(f"{log}: no session log yet; 'catengine lm-eval next' creates it")
    bank = open_bank(args.bank)
    return Engine(bank, rng=args.seed, log=log, **strategies(args, bank))


def _summary_and_result_lines(session) -> tuple[dict, list[str]]:
    """The session's state as JSON (predicted score, standing, theta, stop reason) and the result lines
    every entry point prints (``catengine.console.result_lines``)."""
    from catengine.console import calibration_size, result_lines, standing_text

    est = session.estimate
    lo, hi = est.interval(0.95)
    score = session.predicted_score()
    out = {"subject": session.subject, "n_items": est.n_items,
           "predicted_score": str(score), "accuracy": score.accuracy, "accuracy_95": [score.low, score.high],
           "standing": standing_text(score, calibration_size(session)),
           "theta": est.theta, "theta_sd": est.theta_sd,
           "theta_95": [lo, hi], "finished": session.finished, "reason": session.stop_reason}
    if est.tau is not None:
        out["tau"], out["tau_sd"] = est.tau, est.tau_sd
    out["score"] = score.to_dict()
    return out, result_lines(score, session.stop_reason, calibration_size(session))


def _cmd_next(args, strategies, open_bank, tracked=()) -> int:
    import json
    import sys

    from catengine.console import describe_stopping
    from catengine.session import LogConfigMismatchError

    given = _given_options(args, tracked)
    check_log_kind(args)
    if args.paired:
        return next_paired_command(args, open_bank, given)
    if args.subject_b is not None:
        raise ValueError("--subject-b applies with --paired")
    args.subject = args.subject or "model"
    args.k = 20 if args.k is None else args.k
    if args.k < 1:
        raise ValueError(f"--k (the batch size) must be an integer >= 1, got {args.k}")
    doc_ids = DocIds(args.item_id, args.task)
    created = not (args.log.exists() and args.log.stat().st_size > 0)
    engine = _engine(args, strategies, open_bank, create=True)
    try:
        differences = [] if created else _configuration_differences(engine, args.log, args, given, strategies)
        if differences:
            raise LogConfigMismatchError(
                f"{args.log} is resumed with the configuration it records, which differs from the options given:\n  "
                + "\n  ".join(differences)
                + "\nOmit these options to go on with the log's configuration, or start a new log with another "
                  "--log to use them.")
        session = engine.start(args.subject)
        if created:
            print(f"catengine lm-eval next: new session log {args.log}; {describe_stopping(session.stopping)}",
                  file=sys.stderr)
        samples = next_samples(session, args.k, doc_ids, force=args.force)
        summary, lines = _summary_and_result_lines(session)
        if not samples:
            print_result("catengine lm-eval next", f"finished after {session.n_items} answers", lines)
            print(json.dumps(summary), file=sys.stderr)
            return 1
        n = sum(len(v) for v in samples.values())
        print(f"catengine lm-eval next: {n} document(s) to run; so far: {lines[0]}", file=sys.stderr)
        print(json.dumps(samples))
        return 0
    finally:
        engine.close()


def _cmd_ingest(args, open_bank) -> int:
    import json

    check_log_kind(args)
    if args.paired:
        return ingest_paired_command(args, open_bank)
    if args.output_b is not None:
        raise ValueError("--output-b applies with --paired")
    args.subject = args.subject or "model"
    doc_ids = DocIds(args.item_id, args.task)
    engine = _engine(args, None, open_bank, create=False)
    try:
        session = engine.session(args.subject)
        try:
            report = ingest_samples(session, args.output, doc_ids, metric=args.metric, filter_name=args.filter,
                                    use_cot=not args.no_cot)
        except BatchAnswerError as exc:  # the valid answers are recorded: say so on stdout too, then fail
            print(json.dumps({**exc.report.to_dict(), "estimate": _summary_and_result_lines(session)[0]}))
            raise
        summary, lines = _summary_and_result_lines(session)
        print(json.dumps({**report.to_dict(), "estimate": summary}))
        print_result("catengine lm-eval ingest", f"{len(report.recorded)} answer(s) recorded, {session.n_items} in all",
                      lines)
        return 0
    finally:
        engine.close()
