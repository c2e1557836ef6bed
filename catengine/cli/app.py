"""The ``catengine`` parser and entry point: each command's options, and :func:`main`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from catengine.cli.banks import run_banks_command
from catengine.cli.demo import run_demo_command
from catengine.cli.evaluate import run_evaluate_command
from catengine.cli.options import add_stopping_options, add_strategy_options, open_bank, stopping_description, strategies
from catengine.cli.serve import run_serve_command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="catengine", description="Adaptive evaluation of LLMs against calibrated item banks.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="adaptive evaluation of a simulated new LLM against a real shipped bank (MATH500, LaRT)")
    demo.add_argument("--bank", type=Path, default=None, help="bank directory or file, or a shipped bank id (default: math500_lart; `catengine banks` lists them)")
    demo.add_argument("--seed", type=int, default=7, help="seed of the simulated LLM and its answers (default 7)")
    add_stopping_options(demo.add_argument_group("stopping", description=stopping_description(rivals=False)))
    demo.add_argument("--log", type=Path, default=None, help="append the session to this JSONL log")
    demo.set_defaults(func=run_demo_command)

    ev = sub.add_parser("evaluate", help="replay a known response vector adaptively and print the trajectory")
    ev.add_argument("--bank", type=Path, default=None, help="bank directory or file, or a shipped bank id (default: math500_lart; `catengine banks` lists them)")
    ev.add_argument("--responses", type=Path, required=True,
                    help="answers: long CSV (item, correct[, cot_tokens][, subject]), wide CSV (rows = subjects), JSON or "
                         "JSONL, or a ResponseData .nc (with --subject naming the row); text files may be .gz/.bz2/.xz")
    ev.add_argument("--subject", default=None, help="subject id (row of a wide file, filter of a long file)")
    ev.add_argument("--cot", type=Path, default=None, help="wide CSV of CoT token counts matching a wide --responses file")
    ev.add_argument("--log", type=Path, default=None, help="append the session to this JSONL log")
    ev.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    ev.add_argument("--ignore-unknown-items", action="store_true",
                    help="skip answers to items that are not in the bank (default: an error naming them)")
    ev.add_argument("--item-prefix", default=None, metavar="PREFIX",
                    help="add PREFIX to the file's item ids that are not the bank's (e.g. math500/ for a file keyed "
                         "0..499, as the benchmark's own data is); without it, when --bank names the bank, its single id "
                         "prefix is added when every id then is one of the bank's and the file names no other "
                         "benchmark (a note says so)")
    add_strategy_options(ev)
    ev.set_defaults(func=run_evaluate_command)

    from catengine.session.serve import PROTOCOL_HELP

    sv = sub.add_parser("serve", help="JSON-lines server on stdin/stdout for any evaluation harness",
                        description=PROTOCOL_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    sv.add_argument("--bank", type=Path, default=None, help="bank directory or file, or a shipped bank id (default: math500_lart; `catengine banks` lists them)")
    sv.add_argument("--log", type=Path, default=None,
                    help="JSONL session log; an existing log is resumed (its configuration wins over the options)")
    add_strategy_options(sv)
    sv.set_defaults(func=run_serve_command)

    bk = sub.add_parser("banks", help="list the shipped item banks and any under the given directories, with their cards; "
                                      "`banks show BANK` prints one bank's protocol and items, `banks upgrade BANK` "
                                      "writes its latest version again with a content checksum",
                        usage="catengine banks [DIR ...] [--json] [--no-shipped]\n"
                              "       catengine banks show BANK [--item ID ...] [--content FILE] [--json]\n"
                              "       catengine banks upgrade BANK [--out DIR]")
    bk.add_argument("directories", nargs="*", type=Path, metavar="DIR",
                    help="also list the banks at or below these directories (latest version of each)")
    bk.add_argument("--item", action="append", metavar="ID", help="with `show`: print this item (repeatable)")
    bk.add_argument("--content", type=Path, default=None, metavar="FILE",
                    help="with `show`: attach the question texts from this JSON-lines file (banks that ship only "
                         "their hashes, e.g. amc23_lart), each verified against the bank")
    bk.add_argument("--out", type=Path, default=None, metavar="DIR",
                    help="with `upgrade`: write the new version here (default: the bank's own directory)")
    bk.add_argument("--json", action="store_true",
                    help="print a JSON list of cards (bank_id, version, path, benchmark, response_model, n_items, "
                         "n_subjects, license, source, calibration_method, calibration_date, replay_audit, ...)")
    bk.add_argument("--no-shipped", action="store_true", help="list only the banks under DIR")
    bk.set_defaults(func=run_banks_command)

    from catengine.adapters.lm_eval_command import add_subcommand as add_lm_eval
    from catengine.runner.commands import add_subcommands as add_run

    add_run(sub, add_strategy_options=add_strategy_options, strategies=strategies, open_bank=open_bank)
    add_lm_eval(sub, add_strategy_options=add_strategy_options, strategies=strategies, open_bank=open_bank)
    from catengine.paired.commands import add_subcommands as add_paired
    add_paired(sub, open_bank=open_bank)
    return parser


def _without_dask() -> None:
    """Keep xarray from importing dask in this process: no command makes dask arrays, and xarray
    imports an installed dask (with its widgets and templating, ~0.2 s) to test every variable it
    decodes. Effective only before xarray is imported (it records then whether dask is there)."""
    if "xarray" not in sys.modules and "dask" not in sys.modules:
        sys.modules["dask"] = None  # importlib.util.find_spec("dask") is None: xarray sees no dask


def main(argv=None) -> int:
    """The ``catengine`` command. Run as the console script (``argv`` None), warnings print as one
    line each (``catengine.console.plain_warnings``) and dask stays unimported (``_without_dask``);
    called with ``argv`` (tests, scripts), as Python shows them, and the process is left as it is."""
    from catengine.console import plain_warnings

    if argv is None:
        _without_dask()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with plain_warnings("catengine", enabled=argv is None):
            return args.func(args)
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly (Python docs' recipe)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (ValueError, KeyError, OSError) as exc:  # OSError: missing, unreadable or unwritable files
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"catengine {args.command}: error: {message}", file=sys.stderr)
        return 2
