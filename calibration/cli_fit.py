"""``calibration fit --method cbmm``: calibrate a 2PL item bank with cBMM and write a new version.

    calibration fit --method cbmm --responses FILE --bank-id ID [--out item_banks/] [--wide]
                    [--sigma S] [--init svd|random] [--tol T] [--max-iter K]
                    [--acceleration squarem|none] [--seed N] [--no-progress]

``FILE``: a long table (``.csv``, ``.jsonl``/``.ndjson``, optionally ``.gz``; columns subject,
item, correct), a ResponseData netCDF file (``.nc``), or with ``--wide`` a wide accuracy CSV (first
column = subject id, header = item ids). The bank is written to ``OUT/ID/ID_v<N>.nc`` (a new
version, never overwriting) and the path is printed on stdout; a summary goes to stderr.

The ``calibration`` entry point (``calibration/cli.py``) calls :func:`add_arguments` / :func:`run`;
:func:`add_fit_parser` / :func:`run_fit` register the same command on any argparse subparsers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["add_arguments", "add_fit_parser", "run", "run_fit"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the cBMM fit options to ``parser`` (the ``fit`` subcommand; ``--method`` is added by the caller)."""
    parser.add_argument("--responses", required=True, metavar="FILE",
                        help="response file: long .csv/.jsonl (subject,item,correct), .nc, or a wide accuracy CSV with --wide")
    parser.add_argument("--wide", action="store_true", help="FILE is a wide accuracy CSV (rows = subjects, header = item ids)")
    parser.add_argument("--bank-id", required=True, metavar="ID", help="bank id; the bank is written to OUT/ID/")
    parser.add_argument("--out", default="item_banks", metavar="DIR", help="item bank root directory (default: item_banks)")
    parser.add_argument("--sigma", type=float, default=1.0, help="temperature of the logistic link (default 1)")
    parser.add_argument("--init", choices=("svd", "random"), default="svd", help="starting point (default svd)")
    parser.add_argument("--tol", type=float, default=1e-6, help="relative loss-change tolerance (default 1e-6)")
    parser.add_argument("--max-iter", type=int, default=1000, help="maximum MM sweeps (default 1000)")
    parser.add_argument("--acceleration", choices=("squarem", "none"), default="squarem",
                        help="SQUAREM acceleration or the paper's plain MM (default squarem)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the random start (--init random)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def add_fit_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``fit --method cbmm ...`` on an argparse ``subparsers`` object; returns the sub-parser."""
    fit = subparsers.add_parser("fit", help="calibrate a new item bank version with cBMM")
    fit.add_argument("--method", choices=("cbmm",), default="cbmm")
    add_arguments(fit)
    fit.set_defaults(func=run_fit)
    return fit


def run(args: argparse.Namespace) -> int:
    """Fit cBMM to ``args.responses``, write the bank as a new version and print its path."""
    from calibration.cbmm import CBMMCalibrator
    from calibration.io import load_responses
    from catengine import write_item_bank

    try:
        data = load_responses(args.responses, wide=args.wide)
        cal = CBMMCalibrator(
            sigma=args.sigma,
            init=args.init,
            tol=args.tol,
            max_iter=args.max_iter,
            acceleration=args.acceleration,
            rng=args.seed,
            progress=not args.no_progress,
        ).fit(data)
        bank = cal.to_item_bank(args.bank_id)
        path = write_item_bank(bank, Path(args.out) / args.bank_id)
    except (ValueError, TypeError, OSError) as exc:
        print(f"calibration fit: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"cBMM: {data.n_subjects} subjects x {data.n_items} items, {cal.n_iter_} sweeps, "
        f"loss {cal.loss_:.6g}, converged={cal.converged_}; {int(cal.perfect_items_.sum())} perfect item(s), "
        f"{int(cal.extreme_subjects_.sum())} extreme subject(s), {int(cal.non_discriminating_.sum())} "
        "non-discriminating item(s)",
        file=sys.stderr,
    )
    print(path)
    return 0


run_fit = run
