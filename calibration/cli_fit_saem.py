"""``calibration fit --method saem``: calibrate a LaRT bank by SAEM from wide CSV files.

    calibration fit --method saem --responses accuracy.csv --cot cot_length.csv \\
        --bank-id math500 [--out item_banks] [--max-iter 200] [--burnin 30] [--tol 1e-3] ...

Reads the LaRT wide format (``ResponseData.from_wide_csv``: first column = LLM id, header = item
ids, the two files in the same row/column order), fits
:class:`calibration.lart_saem.LaRTSAEMCalibrator`, writes a new bank version to
``OUT/ID/ID_v<N>.nc`` with ``catengine.write_item_bank`` (never overwriting; same layout as
``--method cbmm``) and prints the written path on stdout; a summary goes to stderr. ``--cot`` is
required (a LaRT bank needs CoT lengths; the IRT-only mode produces no LaRT bank).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

__all__ = ["add_saem_arguments", "run_saem_fit", "add_arguments", "run"]


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _nonneg_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text}")
    return value


def add_saem_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the SAEM fit options to the ``calibration fit`` parser."""
    g = parser.add_argument_group("SAEM (LaRT) options")
    g.add_argument("--responses", required=True, help="wide accuracy CSV (rows = LLMs, header = item ids)")
    g.add_argument("--cot", required=True, help="wide CoT-length CSV (tokens), same rows and header")
    g.add_argument("--bank-id", required=True, help="bank id (no spaces or path separators)")
    g.add_argument("--out", default="item_banks", metavar="DIR",
                   help="item bank root directory; the bank is written to OUT/ID/ (default: item_banks)")
    g.add_argument("--max-iter", type=_positive_int, default=200, help="maximum SAEM iterations (default 200)")
    g.add_argument("--burnin", type=_nonneg_int, default=30, help="iterations with step size 1 (default 30)")
    g.add_argument("--tol", type=float, default=1e-3, help="stop when mean|da| + mean|db| < tol (default 1e-3)")
    g.add_argument("--cot-offset", type=float, default=1.0, help="model log(T + offset) (default 1)")
    g.add_argument("--censor-at", type=float, default=None,
                   help="generation cap in tokens: lengths >= cap are right-censored (Tobit); default off")
    g.add_argument("--b-prior-sd", type=float, default=5.0,
                   help="SD of the weak N(0, sd^2) prior on intercepts b (0 = none; default 5)")
    g.add_argument("--sampler", choices=("ars", "sun"), default="ars", help="exact S-step sampler (default ars)")
    g.add_argument("--seed", type=int, default=None, help="random seed (default: fresh entropy)")
    g.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run_saem_fit(args) -> int:
    """Fit, write the bank, print its path; returns 0, or 2 on bad input (message on stderr).

    A ConvergenceWarning (max_iter reached) is reported on stderr; the bank is still written.
    """
    from calibration.base import ConvergenceWarning
    from calibration.data import ResponseData
    from calibration.lart_saem import LaRTSAEMCalibrator
    from catengine import write_item_bank

    try:
        data = ResponseData.from_wide_csv(args.responses, args.cot)
        cal = LaRTSAEMCalibrator(
            max_iter=args.max_iter,
            n_burnin=args.burnin,
            tol=args.tol,
            cot_offset=args.cot_offset,
            censor_at=args.censor_at,
            b_prior_sd=(None if not args.b_prior_sd else args.b_prior_sd),
            sampler=args.sampler,
            rng=args.seed,
            progress=not args.no_progress,
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            cal.fit(data)
        bank = cal.to_item_bank(args.bank_id)
        path = write_item_bank(bank, Path(args.out) / args.bank_id)
    except (ValueError, TypeError, OSError) as exc:
        print(f"calibration fit: error: {exc}", file=sys.stderr)
        return 2
    for w in caught:
        if issubclass(w.category, ConvergenceWarning):
            print(f"warning: {w.message}", file=sys.stderr)
    print(
        f"LaRT SAEM: {data.n_subjects} LLMs x {data.n_items} items, {cal.n_iter_} iterations, "
        f"converged={cal.converged_}, rho = {cal.rho_:+.3f}, {cal.elapsed_:.1f} s",
        file=sys.stderr,
    )
    print(path)
    return 0


# the names calibration/cli.py looks up
add_arguments = add_saem_arguments
run = run_saem_fit
