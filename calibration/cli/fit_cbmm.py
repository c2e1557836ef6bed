"""Options of ``calibration fit --method cbmm`` (2PL by constrained block majorization-minimization)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cBMM options")
    group.add_argument("--sigma", type=float, default=1.0, help="temperature of the logistic link (default 1)")
    group.add_argument("--init", choices=("svd", "random"), default="svd", help="starting point (default svd)")
    group.add_argument("--tol", type=float, default=1e-6, help="relative loss-change tolerance (default 1e-6)")
    group.add_argument("--max-iter", type=int, default=1000, help="maximum MM sweeps (default 1000)")
    group.add_argument("--acceleration", choices=("squarem", "none"), default="squarem",
                       help="SQUAREM acceleration or the paper's plain MM (default squarem)")
    group.add_argument("--prior", choices=("empirical-bayes", "none"), default="empirical-bayes",
                       help="Gaussian priors on a, b, theta with data-set strength (default) or the paper's plain joint ML "
                       "(docs/calibration_priors.md)")


def build(args):
    from calibration.methods.cbmm.calibrator import CBMMCalibrator

    return CBMMCalibrator(sigma=args.sigma, init=args.init, tol=args.tol, max_iter=args.max_iter,
                          acceleration=args.acceleration, prior=args.prior, rng=args.seed, progress=args.progress)


def summary(cal, data) -> str:
    return (
        f"cBMM: {data.n_subjects} subjects x {data.n_items} items, {cal.n_iter_} sweeps, loss {cal.loss_:.6g}, "
        f"converged={cal.converged_}; {int(cal.perfect_items_.sum())} perfect item(s), "
        f"{int(cal.diagnostics_.runaway_slope.sum())} runaway slope(s), "
        f"{int(cal.extreme_subjects_.sum())} extreme subject(s), {int(cal.non_discriminating_.sum())} "
        "non-discriminating item(s)"
    )
