"""Options of ``calibration fit --method saem`` (LaRT: accuracy + CoT length, by SAEM).

A LaRT bank needs CoT lengths: give a wide accuracy CSV with ``--cot`` (wide CoT CSV), or a
long table / netCDF file that carries ``cot_tokens``.
"""

from __future__ import annotations

import argparse


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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("SAEM (LaRT) options")
    g.add_argument("--max-iter", type=_positive_int, default=200, help="maximum SAEM iterations (default 200)")
    g.add_argument("--burnin", type=_nonneg_int, default=30, help="iterations with step size 1 (default 30)")
    g.add_argument("--tol", type=float, default=1e-3, help="stop when mean|da| + mean|db| < tol (default 1e-3)")
    g.add_argument("--cot-offset", type=float, default=1.0, help="model log(T + offset) (default 1)")
    g.add_argument("--censor-at", type=float, default=None,
                   help="generation cap in tokens: lengths >= cap are right-censored (Tobit); default off")
    g.add_argument("--prior", choices=("empirical-bayes", "none"), default="empirical-bayes",
                   help="Gaussian priors on a, b with data-set strength (default) or the --b-prior-sd rule")
    g.add_argument("--b-prior-sd", type=float, default=5.0,
                   help="with --prior none: SD of the weak N(0, sd^2) prior on intercepts b (0 = none; default 5)")
    g.add_argument("--sampler", choices=("ars", "sun"), default="ars", help="exact S-step sampler (default ars)")


def build(args):
    from calibration.methods.lart.calibrator import LaRTSAEMCalibrator

    return LaRTSAEMCalibrator(
        max_iter=args.max_iter, n_burnin=args.burnin, tol=args.tol, cot_offset=args.cot_offset,
        censor_at=args.censor_at, b_prior_sd=(args.b_prior_sd or None), prior=args.prior, sampler=args.sampler,
        rng=0 if args.seed is None else args.seed, progress=args.progress,
    )


def check(data) -> None:
    if not data.has_cot:
        raise ValueError("a LaRT bank needs CoT lengths: pass --cot with a wide accuracy CSV, or a file with cot_tokens")


def summary(cal, data) -> str:
    return (
        f"LaRT SAEM: {data.n_subjects} LLMs x {data.n_items} items, {cal.n_iter_} iterations, "
        f"converged={cal.converged_}, rho = {cal.rho_:+.3f}, {cal.elapsed_:.1f} s"
    )
