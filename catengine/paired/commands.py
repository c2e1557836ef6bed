"""``catengine compare`` (two LLMs' known answers replayed through a :class:`PairedSession`, or one
LLM against a calibration LLM of the bank) and ``catengine rank`` (a leaderboard of session logs);
thin commands over :mod:`catengine.paired`."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

COMPARE_DESCRIPTION = """\
Is LLM a better than LLM b on the whole benchmark? Both LLMs' recorded answers are replayed
through a paired session: each step draws one item with a known probability (favouring items
whose answers the two LLMs' trait estimates leave most uncertain), both answers to it are
recorded, and the difference of the full-benchmark accuracies gets an interval that holds at any
stop (a confidence sequence). The session stops once it is decided (the interval excludes 0), tied
(the interval lies within +-margin) or at the item cap. Only items both files answer are compared.
With --against, side b is a calibration LLM of the bank, whose answers the bank stores: only one
--responses file is needed, and side b's accuracy is known exactly.
"""

RANK_DESCRIPTION = """\
Rank LLMs on one bank from their session logs (catengine run / evaluate / serve, CATSession or
Engine logs; several subjects per log are fine). Each LLM's accuracy is its session's default
predicted score with its 95% interval; pairs whose difference cannot be told from zero with the
familywise error alpha over all pairs (Bonferroni, or Holm) are shown as ties, with each LLM's
range of possible ranks. The logs are read, not changed.
"""


def add_subcommands(sub, *, open_bank) -> None:
    """Register ``catengine compare`` and ``catengine rank`` (called by ``catengine.cli``)."""
    cp = sub.add_parser("compare", help="is LLM a better than LLM b? paired replay of their answers, with an "
                                        "interval valid at any stop", description=COMPARE_DESCRIPTION,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    cp.add_argument("--bank", default=None, help="a shipped bank id, bank directory or file (default math500_lart)")
    cp.add_argument("--responses", type=Path, nargs="+", default=None, metavar="FILE",
                    help="the answers of a and b (two files, or one with --against); any format `catengine evaluate` "
                         "reads; a file with several subjects needs --subject-a / --subject-b")
    cp.add_argument("--subject-a", default=None, help="subject of a in its file (default: its only one)")
    cp.add_argument("--subject-b", default=None, help="subject of b in its file (default: its only one)")
    cp.add_argument("--cot-a", type=Path, default=None, help="wide CSV of a's CoT token counts (LaRT banks)")
    cp.add_argument("--cot-b", type=Path, default=None, help="wide CSV of b's CoT token counts (LaRT banks)")
    cp.add_argument("--against", default=None, metavar="SUBJECT",
                    help="compare against this calibration LLM of the bank (its stored answers) instead of a second file")
    cp.add_argument("--item-prefix", default=None, metavar="PREFIX",
                    help="add PREFIX to the files' item ids that are not the bank's (e.g. math500/)")
    cp.add_argument("--margin", type=float, default=1.0,
                    help="a tie: the interval lies within +-this many points (default 1)")
    cp.add_argument("--alpha", type=float, default=0.05, help="error of the confidence sequence (default 0.05)")
    cp.add_argument("--max-items", type=int, default=None,
                    help="stop after this many items at the latest (default 500, or every item compared when fewer)")
    cp.add_argument("--no-early-stop", action="store_true", help="go on to --max-items even when decided or tied")
    cp.add_argument("--seed", type=int, default=None, help="seed of the design's draws (default: fresh entropy)")
    cp.add_argument("--log", type=Path, default=None, help="write the paired session's log here (JSON lines)")
    cp.add_argument("--names", nargs=2, default=None, metavar=("A", "B"), help="labels of the two LLMs")
    cp.add_argument("--json", action="store_true", help="print the comparison as one JSON object")
    cp.add_argument("--serve", action="store_true",
                    help="instead of replaying files, serve the paired session as JSON lines on stdin / stdout for a "
                         "harness that asks both LLMs itself (ops next, record, comparison, quit; "
                         "catengine.paired.serve); with --log, an existing log is resumed")
    cp.set_defaults(func=lambda args: _cmd_compare(args, open_bank))

    rk = sub.add_parser("rank", help="leaderboard of session logs on one bank: accuracies with intervals, ties, "
                                     "simultaneous error control over the pairs", description=RANK_DESCRIPTION,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    rk.add_argument("logs", nargs="+", type=Path, metavar="LOG", help="session logs")
    rk.add_argument("--bank", default=None, help="the bank they ran on (default: the one the first log names)")
    rk.add_argument("--alpha", type=float, default=0.05, help="familywise error over all pairs (default 0.05)")
    rk.add_argument("--correction", choices=("bonferroni", "holm"), default="bonferroni",
                    help="error control over the pairs (default bonferroni)")
    rk.add_argument("--json", action="store_true", help="print the leaderboard as one JSON object")
    rk.set_defaults(func=lambda args: _cmd_rank(args, open_bank))


def _answers(path, subject, cot, bank, prefix):
    from catengine.itembank.ids import foreign_ids_message, map_item_ids
    from catengine.responses import load_subject_answers

    answers = load_subject_answers(path, subject, cot)
    ids = map_item_ids(answers, bank.item_ids, prefix=prefix, source=path)
    answers = ids.apply(answers)
    foreign = [i for i in answers if i not in set(bank.item_ids)]
    if foreign:
        raise ValueError(f"{path}: {foreign_ids_message(bank.bank_id, bank.item_ids, foreign)}")
    return answers


def _serve(args, bank, options) -> int:
    from catengine.paired import PairedSession
    from catengine.paired.serve import serve_pair

    log = options.pop("log")
    if log is not None and Path(log).is_file() and Path(log).stat().st_size > 0:
        session = PairedSession.resume(log, bank)
        print(f"catengine compare --serve: resumed {log} after {session.n_items} paired answers", file=sys.stderr)
    elif args.against is not None:
        session = PairedSession.against_calibration(bank, args.against, name=(args.names or ["a"])[0], log=log,
                                                    **options)
    else:
        session = PairedSession(bank, subjects=tuple(args.names or ("a", "b")), log=log, **options)
    print(f"catengine compare --serve: bank {bank.bank_id} v{bank.version}, {session.n_bank_items} items, "
          f"{session.subjects[0]} vs {session.subjects[1]}", file=sys.stderr)
    with session:
        return serve_pair(session, sys.stdin, sys.stdout)


def _cmd_compare(args, open_bank) -> int:
    from catengine.paired import PairedSession, PairedStopping

    bank = open_bank(args.bank)
    if args.serve:
        stopping = PairedStopping(max_items=args.max_items, on_decision=not args.no_early_stop,
                                  on_tie=not args.no_early_stop)
        return _serve(args, bank, dict(stopping=stopping, margin=args.margin / 100.0, alpha=args.alpha, rng=args.seed,
                                       log=args.log))
    if not args.responses:
        raise ValueError("give the answers with --responses (or serve a harness with --serve)")
    n_files = len(args.responses)
    if args.against is None and n_files != 2:
        raise ValueError(f"give two --responses files (a and b), or one with --against SUBJECT; got {n_files}")
    if args.against is not None and n_files != 1:
        raise ValueError(f"with --against, give one --responses file (a); got {n_files}")
    stopping = PairedStopping(max_items=args.max_items, on_decision=not args.no_early_stop,
                              on_tie=not args.no_early_stop)
    options = dict(stopping=stopping, margin=args.margin / 100.0, alpha=args.alpha, rng=args.seed, log=args.log)
    a = _answers(args.responses[0], args.subject_a, args.cot_a, bank, args.item_prefix)
    name_a = (args.names or [None])[0] or args.subject_a or Path(args.responses[0]).name.split(".")[0]
    if args.against is not None:
        session = PairedSession.against_calibration(bank, args.against, name=name_a,
                                                    items=[i for i in bank.item_ids if i in a], **options)
        b = None
    else:
        b = _answers(args.responses[1], args.subject_b, args.cot_b, bank, args.item_prefix)
        name_b = (args.names or [None, None])[1] or args.subject_b or Path(args.responses[1]).name.split(".")[0]
        if name_b == name_a:
            name_a, name_b = name_a + " (a)", name_b + " (b)"
        common = [i for i in bank.item_ids if i in a and i in b]
        if not common:
            raise ValueError("the two files answer no item of the bank in common")
        session = PairedSession(bank, subjects=(name_a, name_b), items=common if len(common) < bank.n_items else None,
                                **options)
    with session, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # per-answer CoT notes of the trait sessions: the result says what matters
        while not session.finished:
            item = session.next_item()
            ya, ta = a[item]
            if b is None:
                session.record(item, ya, cot_length_a=ta)
            else:
                yb, tb = b[item]
                session.record(item, ya, yb, ta, tb)
        result = session.comparison()
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    print("\n".join(comparison_lines(result)))
    if session.n_bank_items < bank.n_items:
        print(f"  compared on the {session.n_bank_items} of {bank.n_items} items both sides answer", file=sys.stderr)
    return 0


def comparison_lines(result) -> list[str]:
    """A :class:`~catengine.paired.Comparison` as ``catengine compare`` and ``catengine run
    --compare-with`` print it: the difference with its interval and the decision, the stop, the
    model's predictions and, on LaRT banks, the predicted CoT totals."""
    lines = [result.summary(),
             f"  stopped: {result.stop_reason or 'not yet'}; method: {result.method}, {result.interval}; control "
             f"variate weight {result.kappa:.2f}",
             f"  model's predictions: {result.subject_a} {100 * result.accuracy_a:.1f}%, {result.subject_b} "
             f"{100 * result.accuracy_b:.1f}%{' (exact)' if result.method == 'against-known' else ''}"]
    if result.cot_total_a is not None and result.cot_total_b is not None:
        lines.append(f"  CoT tokens over the {result.n_bank_items} items (model): {result.subject_a} "
                     f"{result.cot_total_a:,.0f}, {result.subject_b} {result.cot_total_b:,.0f}, difference "
                     f"{result.cot_difference:+,.0f}"
                     + (f"; from the draws alone {result.cot_difference_design:+,.0f} (SD {result.cot_difference_sd:,.0f})"
                        if result.cot_difference_design is not None and result.cot_difference_sd is not None else ""))
    return lines


def _cmd_rank(args, open_bank) -> int:
    from catengine.paired.leaderboard import leaderboard_from_logs

    bank = open_bank(args.bank) if args.bank is not None else None
    board = leaderboard_from_logs(args.logs, bank, alpha=args.alpha, correction=args.correction)
    if args.json:
        print(json.dumps(board.to_dict(), indent=2))
        return 0
    print("\n".join(board.lines()))
    return 0
