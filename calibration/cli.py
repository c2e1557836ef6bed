"""Command-line entry point ``calibration``.

``calibration fit --method {cbmm,saem,psn} --responses FILE --bank-id ID --out DIR [options]``
calibrates a new item bank version; ``recalibrate``, ``diff`` and ``log`` maintain a bank's
versions (see ``calibration/cli_recalibrate.py``). Each fitting method lives in its own module exposing
``add_arguments(parser)`` (its own options) and ``run(args) -> int``; only the chosen method's
options are added, so methods never collide on option names.
"""

from __future__ import annotations

import argparse
import sys
from importlib import import_module

FIT_METHODS = {
    "cbmm": "calibration.cli_fit",
    "saem": "calibration.cli_fit_saem",
    "psn": "calibration.cli_fit_psn",
}


def _peek_method(argv: list[str]) -> str | None:
    for k, arg in enumerate(argv):
        if arg == "--method" and k + 1 < len(argv):
            return argv[k + 1]
        if arg.startswith("--method="):
            return arg.split("=", 1)[1]
    return None


def build_parser(method: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="calibration", description="Offline calibration of LLM item banks.")
    sub = parser.add_subparsers(dest="command", required=True)
    fit = sub.add_parser(
        "fit",
        help="calibrate a new item bank version from a response file",
        description="Calibrate a new item bank version. Pass --method first to see that method's options with --help.",
    )
    fit.add_argument("--method", choices=sorted(FIT_METHODS), required=True)
    if method in FIT_METHODS:
        module = import_module(FIT_METHODS[method])
        module.add_arguments(fit)
        fit.set_defaults(func=module.run)

    from calibration import cli_recalibrate as recal

    for name, help_text, add, run in (
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
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
