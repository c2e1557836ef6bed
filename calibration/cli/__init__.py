"""Command-line entry point ``calibration``.

``calibration fit --method {cbmm,saem,psn} --responses FILE --bank-id ID --out DIR [options]``
calibrates a new item bank version; ``simulate`` draws response files from a bank; ``audit``
runs recovery audits (``calibration/cli/audit.py``);
``recalibrate``, ``diff`` and ``log`` maintain a bank's versions (``calibration/cli/recalibrate.py``).

Each fitting method lives in ``calibration/cli/fit_<method>.py`` exposing ``add_arguments(parser)`` (its own
options only), ``build(args) -> calibrator``, ``summary(calibrator, data) -> str`` and optionally
``check(data)`` / ``to_bank(calibrator, args)``; reading the data and writing the bank happen here, once. Only the chosen
method's options are added, so methods never collide on option names.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import import_module
from pathlib import Path

FIT_METHODS = {
    "cbmm": "calibration.cli.fit_cbmm",
    "saem": "calibration.cli.fit_saem",
    "psn": "calibration.cli.fit_psn",
}


def _peek_method(argv: list[str]) -> str | None:
    for k, arg in enumerate(argv):
        if arg == "--method" and k + 1 < len(argv):
            return argv[k + 1]
        if arg.startswith("--method="):
            return arg.split("=", 1)[1]
    return None


def _add_fit_common(fit: argparse.ArgumentParser) -> None:
    fit.add_argument("--responses", required=True, metavar="FILE",
                     help="long table (.csv/.jsonl: subject,item,correct[,cot_tokens]), ResponseData .nc, "
                          "or a wide accuracy CSV (with --wide or --cot)")
    fit.add_argument("--cot", metavar="FILE", help="wide CoT-length CSV matching a wide accuracy CSV")
    fit.add_argument("--wide", action="store_true", help="--responses is a wide accuracy CSV (rows LLMs, header item ids)")
    fit.add_argument("--bank-id", required=True, metavar="ID", help="bank id; versions go to OUT/ID/ID_v<N>.nc")
    fit.add_argument("--out", default="item_banks", metavar="DIR", help="root directory of item banks (default item_banks)")
    fit.add_argument("--seed", type=int, default=None, help="random seed (default: the method's own)")
    fit.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True, help="progress bar (default on)")
    fit.add_argument("--keep-responses", action=argparse.BooleanOptionalAction, default=True,
                     help="store the responses in the bank so that it can be recalibrated (default on)")


def run_fit(args) -> int:
    """Load the responses, fit with the chosen method, write a new bank version, print its path."""
    from calibration.io import load_responses
    from catengine import write_item_bank

    module = import_module(FIT_METHODS[args.method])
    try:
        data = load_responses(args.responses, cot=args.cot, wide=args.wide)
        if hasattr(module, "check"):
            module.check(data)
        calibrator = module.build(args).fit(data)
        bank = module.to_bank(calibrator, args) if hasattr(module, "to_bank") else calibrator.to_item_bank(args.bank_id)
        if args.keep_responses:
            bank = bank.with_group("responses", data.to_dataset())
        path = write_item_bank(bank, Path(args.out) / args.bank_id)
    except (ValueError, TypeError, OSError) as exc:
        print(f"calibration fit: error: {exc}", file=sys.stderr)
        return 2
    print(module.summary(calibrator, data), file=sys.stderr)
    print(_interval_summary(bank), file=sys.stderr)
    print(path)
    return 0


def _interval_summary(bank) -> str:
    """One paragraph on the bank's cross-fitted interval check (what sessions will apply)."""
    import json

    from calibration.interval_calibration import describe

    text = bank.attrs.get("interval_calibration")
    if not text:
        return f"interval check: skipped ({bank.attrs.get('interval_calibration_skipped', 'not run')})"
    return describe(json.loads(text))


def build_parser(method: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="calibration", description="Offline calibration of LLM item banks.")
    sub = parser.add_subparsers(dest="command", required=True)
    fit = sub.add_parser(
        "fit",
        help="calibrate a new item bank version from a response file",
        description="Calibrate a new item bank version. Pass --method first to see that method's options with --help.",
    )
    fit.add_argument("--method", choices=sorted(FIT_METHODS), required=True)
    _add_fit_common(fit)
    if method in FIT_METHODS:
        import_module(FIT_METHODS[method]).add_arguments(fit)
    fit.set_defaults(func=run_fit)

    from calibration.cli import audit as cli_audit, simulate as cli_simulate
    from calibration.cli import recalibrate as recal

    for name, help_text, add, run in (
        ("audit", "recovery audit of a bank: simulate from it, refit, measure how well parameters and rankings come back",
         cli_audit.add_arguments, cli_audit.run),
        ("simulate", "write a response file of simulated LLMs drawn from a bank's parameters",
         cli_simulate.add_arguments, cli_simulate.run),
        ("recalibrate", "refit a bank with new responses, link the scale to the previous version, write the next version",
         recal.add_recalibrate_arguments, recal.run_recalibrate),
        ("diff", "compare two versions of a bank", recal.add_diff_arguments, recal.run_diff),
        ("log", "list the versions of a bank (lineage)", recal.add_log_arguments, recal.run_log),
    ):
        command = sub.add_parser(name, help=help_text, description=help_text)
        add(command)
        command.set_defaults(func=run)
    return parser


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(_peek_method(argv)).parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly (Python docs' recipe)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
