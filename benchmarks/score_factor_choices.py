"""The score-factor fit's loading prior and the prediction's centre, on real LLMs over several LLM
fold partitions (issue 14, docs/score_prediction.md §2).

``python benchmarks/score_factor_choices.py [--slope-variances 16,4,2] [--seeds 14,1,2,3,4,5] [--dims 2] [--train-llms 16,32,48]``

For each seed, MATH500's 158 runs of 79 LLMs are split into 5 folds (the split ``score_prediction.py``
uses for that seed: both prompt runs of an LLM in one fold; ``--ungrouped`` splits runs). Score factors with d factors are fitted on the other folds by
``fit_score_factors`` with each loading prior variance, and every held-out LLM's recorded answers
are replayed for 50 items chosen by D-optimal design in the factors (``ScoreFactors.best_d_optimal``,
as ``ScoreFactorDOptimal`` chooses). After 10 / 25 / 50 items the full-benchmark accuracy is
predicted by ``predict_accuracy_factors`` with ``centre="mode"`` (the plug-in, the default) and
``centre="mean"`` (the posterior mean). Printed: MAE divided by the exact expected MAE of the mean
of k random items (hypergeometric, per LLM), per seed and averaged over seeds. No interval check or
trait model is involved, so it runs in about 15 s per seed and prior.

``--train-llms n1,n2,...`` draws a learning curve instead of comparing priors: each fold's factors
are fitted on the runs of n randomly chosen training LLMs only (all of them for the largest
value the folds allow), with the first loading prior variance, and the same held-out LLMs are
replayed, so the rows show how the error falls as the calibration sample grows.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

LENGTHS = (10, 25, 50)
CENTRES = ("mode", "mean")


def mean_and_range(values) -> str:
    """'average (min-max)' of per-partition ratios, for the tables these benchmarks print."""
    r = np.asarray(values, dtype=float)
    return f"{r.mean():.3f} ({r.min():.3f}-{r.max():.3f})"


def fold_splits(groups, n: int, folds: int, seed: int) -> list:
    """[(held-out rows, training rows)] of each fold of ``llm_folds``'s split of ``n`` runs into ``folds``
    folds of whole LLMs (``groups``) for ``seed``."""
    from calibration.heldout import llm_folds

    fold_rows = llm_folds(groups, folds, seed)
    return [(fold_rows[f], np.setdiff1d(np.arange(n), fold_rows[f])) for f in range(folds)]


def record_seed_ratios(ratio, seed, err, base, methods):
    """``ratio[(seed, k, method)]`` = MAE / random-mean's MAE from one seed's errors ``err[(k, method)]``
    and yardsticks ``base[k]``; prints the seed's k = 25 ratios to stderr (progress)."""
    for (k, m), e in err.items():
        ratio[(seed, k, m)] = float(np.mean(e) / np.mean(base[k]))
    print(f"seed {seed}: " + "  ".join(f"{m} {ratio[(seed, 25, m)]:.3f}" for m in methods) + "  (k=25)",
          file=sys.stderr, flush=True)


def print_ratio_heading(setting: str, seeds, t0: float, against: str = "") -> None:
    """The heading of a table of MAE / random-mean's MAE ratios on MATH500: the ``setting``, the seeds,
    what the ratios are measured ``against`` (if anything) and the seconds since ``t0``."""
    print(f"\nMATH500, {setting}, seeds {seeds}: MAE / random-mean's MAE{against} (average over seeds; range), "
          f"{time.perf_counter() - t0:.0f} s")


def print_method_table(ratio, methods, seeds, lengths, setting: str, t0: float, reference="default"):
    """Print :func:`print_ratio_heading`, then ``ratio[(seed, k, method)]`` as one row per method
    (average over seeds with the range, one column per k), then on how many seeds each other method
    beat ``reference`` at k = 25."""
    print_ratio_heading(setting, seeds, t0)
    width = max(len("prediction"), *(len(m) for m in methods))
    print(f"{'prediction':>{width}} " + " ".join(f"{'k=' + str(k):>20}" for k in lengths))
    for m in methods:
        print(f"{m:>{width}} " + " ".join(f"{mean_and_range([ratio[(s, k, m)] for s in seeds]):>20}" for k in lengths))
    for m in methods:
        if m != reference:
            wins = sum(ratio[(s, 25, m)] < ratio[(s, 25, reference)] for s in seeds)
            print(f"{m} beats the {reference} at k=25 on {wins} of {len(seeds)} partitions")


def replay(factors, y):
    """{(k, centre): predicted accuracy} for one LLM's answers ``y`` (J,)."""
    from catengine.scoring import predict_accuracy_factors

    J = y.size
    chosen: list[int] = []
    eligible = np.ones(J, dtype=bool)
    mode = None
    out = {}
    for step in range(1, max(LENGTHS) + 1):
        idx = np.asarray(chosen, dtype=np.int64)
        mode, cov = factors.posterior(idx, y[idx], start=mode)
        j = int(factors.best_d_optimal(mode, cov, eligible, 1)[0][0])
        chosen.append(j)
        eligible[j] = False
        if step in LENGTHS:
            idx = np.asarray(chosen, dtype=np.int64)
            for centre in CENTRES:
                pred = predict_accuracy_factors(factors, idx, y[idx], intervals=False, centre=centre)[0]
                out[(step, centre)] = pred.mean / J
    return out


def main(argv=None) -> int:
    from catengine.scoring import random_mean_mae
    from score_prediction import load

    from calibration.heldout import fit_score_factors
    from catengine.models.score_factors import ScoreFactors

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slope-variances", default="16,4,2")
    ap.add_argument("--seeds", default="14,1,2,3,4,5")
    ap.add_argument("--dims", type=int, default=2)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--ungrouped", action="store_true", help="split runs, not LLMs (a run's sibling may calibrate its bank)")
    ap.add_argument("--train-llms", default=None,
                    help="comma-separated numbers of training LLMs to subsample (a learning curve; 0 = all)")
    args = ap.parse_args(argv)
    if args.train_llms is not None:
        return learning_curve(args)
    variances = [float(v) for v in args.slope_variances.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    t0 = time.perf_counter()
    data = load("math500", not args.ungrouped)
    Y = data.correct.astype(float)
    N, J = Y.shape
    ratio = {}  # (variance, seed, k, centre) -> MAE / random's
    for seed in seeds:
        splits = fold_splits(data.llm_groups, N, args.folds, seed)  # both prompt runs of an LLM in one fold
        for v in variances:
            err = {(k, c): [] for k in LENGTHS for c in CENTRES}
            base = {k: [] for k in LENGTHS}
            for test, train in splits:
                fit = fit_score_factors(data.correct[train], args.dims, slope_variance=v)
                factors = ScoreFactors(fit.loadings, fit.intercepts)
                for i in test:
                    truth = float(Y[i].mean())
                    for key, est in replay(factors, Y[i]).items():
                        err[key].append(abs(est - truth))
                    for k in LENGTHS:
                        base[k].append(random_mean_mae(truth, J, k))
            for (k, c), e in err.items():
                ratio[(v, seed, k, c)] = float(np.mean(e) / np.mean(base[k]))
            print(f"seed {seed}, slope variance {v:g}: " + "  ".join(
                f"k={k} mode {ratio[(v, seed, k, 'mode')]:.3f} mean {ratio[(v, seed, k, 'mean')]:.3f}" for k in LENGTHS),
                file=sys.stderr, flush=True)
    print_ratio_heading(f"d = {args.dims}, {args.folds} folds", seeds, t0)
    print(f"{'slope var':>9} {'centre':>6} " + " ".join(f"{'k=' + str(k):>20}" for k in LENGTHS))
    for v in variances:
        for c in CENTRES:
            cells = [mean_and_range([ratio[(v, s, k, c)] for s in seeds]) for k in LENGTHS]
            print(f"{v:>9g} {c:>6} " + " ".join(f"{x:>20}" for x in cells))
    if len(variances) > 1:
        first = variances[0]
        for v in variances[1:]:
            wins = sum(ratio[(v, s, 25, "mode")] < ratio[(first, s, 25, "mode")] for s in seeds)
            print(f"slope variance {v:g} beats {first:g} at k=25 (plug-in) on {wins} of {len(seeds)} partitions")
    wins = sum(ratio[(v, s, k, "mode")] < ratio[(v, s, k, "mean")] for v in variances for s in seeds for k in LENGTHS)
    print(f"the plug-in beats the posterior mean in {wins} of {len(variances) * len(seeds) * len(LENGTHS)} cells")
    return 0


def learning_curve(args) -> int:
    """MAE / random's after 10 / 25 / 50 items against the number of calibration LLMs."""
    from catengine.scoring import random_mean_mae
    from score_prediction import load

    from calibration.heldout import fit_score_factors, llm_folds
    from catengine.models.score_factors import ScoreFactors

    sizes = [int(n) for n in args.train_llms.split(",")]
    variance = float(args.slope_variances.split(",")[0])
    seeds = [int(s) for s in args.seeds.split(",")]
    t0 = time.perf_counter()
    data = load("math500", not args.ungrouped)
    Y = data.correct.astype(float)
    groups = np.asarray(data.llm_groups)
    N, J = Y.shape
    ratio = {}  # (size, seed, k) -> MAE / random's
    used = {}  # size -> numbers of training LLMs actually used
    for seed in seeds:
        rng = np.random.default_rng(1000 + seed)
        fold_rows = llm_folds(groups, args.folds, seed)
        err = {(n, k): [] for n in sizes for k in LENGTHS}
        base = {k: [] for k in LENGTHS}
        for f in range(args.folds):
            test = fold_rows[f]
            train_groups = np.unique(groups[np.setdiff1d(np.arange(N), test)])
            order = rng.permutation(train_groups)
            for i in test:
                for k in LENGTHS:
                    base[k].append(random_mean_mae(float(Y[i].mean()), J, k))
            for n in sizes:
                keep = order if n <= 0 or n >= order.size else order[:n]
                used.setdefault(n, set()).add(int(keep.size))
                train = np.flatnonzero(np.isin(groups, keep))
                fit = fit_score_factors(data.correct[train], args.dims, slope_variance=variance)
                factors = ScoreFactors(fit.loadings, fit.intercepts)
                for i in test:
                    truth = float(Y[i].mean())
                    for (k, centre), est in replay(factors, Y[i]).items():
                        if centre == "mode":
                            err[(n, k)].append(abs(est - truth))
        for (n, k), e in err.items():
            ratio[(n, seed, k)] = float(np.mean(e) / np.mean(base[k]))
        print(f"seed {seed}: " + "  ".join(f"{n} LLMs {ratio[(n, seed, 25)]:.3f}" for n in sizes) + "  (k=25)",
              file=sys.stderr, flush=True)
    print_ratio_heading(f"d = {args.dims}, slope variance {variance:g}, {args.folds} folds", seeds, t0,
                        " against the calibration LLMs per fold bank")
    print(f"{'train LLMs':>10} " + " ".join(f"{'k=' + str(k):>20}" for k in LENGTHS))
    for n in sizes:
        cells = [mean_and_range([ratio[(n, s, k)] for s in seeds]) for k in LENGTHS]
        label = "-".join(str(u) for u in sorted(used[n])) if len(used[n]) > 1 else str(next(iter(used[n])))
        print(f"{label:>10} " + " ".join(f"{x:>20}" for x in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
