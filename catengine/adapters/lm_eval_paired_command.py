"""``catengine lm-eval next | ingest --paired``: two models compared on the same documents
(:class:`~catengine.PairedSession`), through the harness's files; and what both lm-eval commands
share to print a result and to tell a paired log from a single one."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from catengine.adapters._batch import BatchAnswerError
from catengine.adapters.lm_eval import DocIds, ingest_paired_samples, next_paired_samples


def print_result(prog: str, head: str, lines) -> None:
    import sys

    print(f"{prog}: {head}", file=sys.stderr)
    for line in lines:
        print(f"  {line}", file=sys.stderr)


def is_paired_log(path: Path) -> bool:
    """True when ``path`` holds a paired-session log (its header line says so)."""
    import json

    from catengine.paired.session import PAIRED_LOG_FORMAT

    if not (path.exists() and path.stat().st_size > 0):
        return False
    with open(path, "rb") as fh:
        try:
            return json.loads(fh.readline()).get("format") == PAIRED_LOG_FORMAT
        except (ValueError, AttributeError):
            return False


def check_log_kind(args) -> None:
    paired = is_paired_log(args.log)
    if paired and not args.paired:
        raise ValueError(f"{args.log} is a paired-session log (two models compared): add --paired")
    if args.paired and args.log.exists() and args.log.stat().st_size > 0 and not paired:
        raise ValueError(f"{args.log} is the session log of one model, not a paired-session log: drop --paired, or "
                         "give a new --log")


#: the strategy options a paired session takes (its item cap and the seed of its draws)
_PAIRED_OPTIONS = ("max_items", "seed")


def _paired_session(args, open_bank, given: dict[str, str]):
    """The paired session of ``--log``: resumed (the options given must match what it records), or
    new (created by ``next --paired``)."""
    from catengine.paired import PairedSession, PairedStopping
    from catengine.session import LogConfigMismatchError
    from catengine.session.log import rng_state_to_json

    unused = [flag for dest, flag in given.items() if dest not in _PAIRED_OPTIONS]
    if unused:
        raise ValueError(f"{', '.join(unused)}: only --max-items and --seed apply with --paired (the comparison "
                         "draws its items itself and stops once decided, tied or at the cap)")
    if args.log.exists() and args.log.stat().st_size > 0:
        pair = PairedSession.resume(args.log, None if args.bank is None else open_bank(args.bank))
        differences = []
        if "max_items" in given and pair.stopping.max_items != (args.max_items or pair.bank.n_items):
            differences.append(f"item cap ({given['max_items']}): recorded: {pair.stopping.max_items}; given: "
                               f"{args.max_items}")
        if "seed" in given:
            from catengine.paired.session import read_paired_log

            header, _ = read_paired_log(args.log)
            if rng_state_to_json(np.random.default_rng(args.seed)) != header.get("rng"):
                differences.append(f"seed ({given['seed']}): recorded: another seed; given: {args.seed}")
        if differences:
            pair.close()
            raise LogConfigMismatchError(
                f"{args.log} is resumed with the configuration it records, which differs from the options given:\n  "
                + "\n  ".join(differences) + "\nOmit these options, or start a new log with another --log.")
        return pair, False
    bank = open_bank(args.bank)
    stopping = None if args.max_items is None else PairedStopping(max_items=args.max_items or bank.n_items)
    return PairedSession(bank, subjects=(args.subject or "a", getattr(args, "subject_b", None) or "b"),
                         stopping=stopping, rng=args.seed, log=args.log), True


def _comparison_summary(pair) -> tuple[dict, list[str]]:
    from catengine.paired.commands import comparison_lines

    c = pair.comparison()
    return {"comparison": c.to_dict(), "finished": pair.finished, "reason": pair.stop_reason}, comparison_lines(c)


def next_paired_command(args, open_bank, given) -> int:
    import json
    import sys

    if args.k is not None:
        raise ValueError("--k does not apply with --paired: a paired session proposes one document per round")
    if args.subject_b is not None and args.log.exists() and args.log.stat().st_size > 0:
        raise ValueError("--subject-b names model b when `next --paired` creates the log; this log exists")
    doc_ids = DocIds(args.item_id, args.task)
    pair, created = _paired_session(args, open_bank, given)
    with pair:
        if created:
            print(f"catengine lm-eval next: new paired-session log {args.log}; {pair.subjects[0]} vs "
                  f"{pair.subjects[1]}, stop once decided or tied, else after "
                  f"{pair.stopping.cap(pair.n_bank_items)} items", file=sys.stderr)
        samples = next_paired_samples(pair, doc_ids, force=args.force)
        summary, lines = _comparison_summary(pair)
        if not samples:
            print_result("catengine lm-eval next", f"finished after {pair.n_items} paired answers", lines)
            print(json.dumps(summary), file=sys.stderr)
            return 1
        print(f"catengine lm-eval next: 1 document for both models to run; so far: {lines[0]}", file=sys.stderr)
        print(json.dumps(samples))
        return 0


def ingest_paired_command(args, open_bank) -> int:
    import json

    if args.output_b is None:
        raise ValueError("ingest --paired needs model b's output: --output-b OUTPUT")
    if not (args.log.exists() and args.log.stat().st_size > 0):
        raise FileNotFoundError(f"{args.log}: no paired-session log yet; 'catengine lm-eval next --paired' creates it")
    doc_ids = DocIds(args.item_id, args.task)
    pair, _ = _paired_session(args, open_bank, {})
    with pair:
        try:
            report = ingest_paired_samples(pair, args.output, args.output_b, doc_ids, metric=args.metric,
                                           filter_name=args.filter, use_cot=not args.no_cot)
        except BatchAnswerError as exc:  # the valid answers are recorded: say so on stdout too, then fail
            print(json.dumps({**exc.report.to_dict(), **_comparison_summary(pair)[0]}))
            raise
        summary, lines = _comparison_summary(pair)
        print(json.dumps({**report.to_dict(), **summary}))
        head = f"{len(report.recorded)} paired answer(s) recorded, {pair.n_items} in all"
        if report.missing:
            head += f"; item {report.pending!r} is not in the output of model {' and '.join(report.missing)}"
        print_result("catengine lm-eval ingest", head, lines)
        return 0
