"""Command-line entry point ``calibration``.

``calibration fit {cbmm,saem,psn} --responses FILE --bank-id ID --out DIR [options]`` (also spelled
``calibration fit --method {cbmm,saem,psn} ...``) calibrates a new item bank version; one subcommand
per method of the registry ``calibration.methods.METHODS``, its options generated from the
calibrator's declared settings (``calibration/cli/fit.py``). ``simulate`` draws response files
from a bank; ``audit`` runs recovery audits (``calibration/cli/audit.py``); ``study`` a factorial
grid of them from a TOML file (``calibration/cli/study.py``); ``recalibrate``, ``diff`` and ``log``
maintain a bank's versions (``calibration/cli/recalibrate.py``).
"""

from __future__ import annotations

import argparse
import os
import sys

from calibration.cli.fit import add_fit_parser, method_first


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="calibration", description="Offline calibration of LLM item banks.")
    sub = parser.add_subparsers(dest="command", required=True)
    add_fit_parser(sub)

    from calibration.cli import audit as cli_audit, simulate as cli_simulate, study as cli_study
    from calibration.cli import recalibrate as recal

    for name, help_text, add, run in (
        ("audit", "audit a bank or a calibration method: recovery (simulate, refit, compare), short-form, CAT, or replay "
                  "(real LLMs' answers through adaptive tests, cross-fitted)",
         cli_audit.add_arguments, cli_audit.run),
        ("study", "run a factorial recovery study (banks x missingness x methods x sample sizes x abilities) from a TOML file",
         cli_study.add_arguments, cli_study.run),
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
    """The ``calibration`` command. Run as the console script (``argv`` None), warnings print as one
    line each (``catengine.console.plain_warnings``); called with ``argv`` (tests, scripts), as Python
    shows them."""
    from catengine.console import plain_warnings

    as_command = argv is None
    argv = method_first(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(argv)
    try:
        with plain_warnings("calibration", enabled=as_command):
            return args.func(args)
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly (Python docs' recipe)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
