"""How well could score factors do if the model were right? (issue 14, docs/score_prediction.md §2)

``python benchmarks/score_factor_simulation.py [--k 25] [--dims 2] [--folds 5] [--seed 14 | --seeds 14,1,2]``

For each of 5 folds of MATH500's 158 runs of 79 LLMs (both runs of an LLM in one fold;
``--ungrouped`` splits runs), a d-factor model is fitted on the other folds
(``fit_score_factors``) and taken as the truth: the training LLMs' answers are redrawn from it at
their fitted traits, and each held-out LLM's 500 answers at the mode of its factor posterior given
all its real answers. The model is then refitted on the redrawn training matrix, as a calibration
would, and every held-out LLM is tested for k items by D-optimal selection in the factors with the
accuracy predicted by ``predict_accuracy_factors`` (no score check: the model is right by
construction). Four runs separate the two uses of the estimated parameters:

* ``true / true``        items chosen and scored with the true parameters;
* ``estimated / true``   chosen with the refitted ones, scored with the true ones;
* ``true / estimated``   chosen with the true ones, scored with the refitted ones;
* ``estimated / estimated`` both refitted: what a real calibration gives when the model is right.

Printed: MAE of the predicted accuracy against the redrawn full-benchmark accuracy, its ratio to the
mean of k random items of the same redrawn answers (its exact expectation,
``catengine.scoring.random_mean_mae``), and the RMS of
(error / predicted SD).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _paths import lart_files  # noqa: E402


def session(select, score, y, k):
    """k items chosen D-optimally by ``select`` (as ``ScoreFactorDOptimal`` does); the prediction of
    ``score`` from their answers (mean and SD of the accuracy)."""
    from catengine.scoring import predict_accuracy_factors

    J = y.size
    chosen: list[int] = []
    eligible = np.ones(J, dtype=bool)
    mode = None
    for _ in range(k):
        idx = np.asarray(chosen, dtype=np.int64)
        mode, cov = select.posterior(idx, y[idx], start=mode)
        j = int(select.best_d_optimal(mode, cov, eligible, 1)[0][0])
        chosen.append(j)
        eligible[j] = False
    idx = np.asarray(chosen, dtype=np.int64)
    pred = predict_accuracy_factors(score, idx, y[idx], intervals=False)[0]
    return pred.mean / J, pred.sd / J


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=25)
    ap.add_argument("--dims", type=int, default=2)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--seeds", default=None, help="comma-separated seeds, one fold partition (and redraw) each; "
                    "prints each and their average (overrides --seed)")
    ap.add_argument("--ungrouped", action="store_true", help="split runs, not LLMs (a run's sibling may calibrate its bank)")
    args = ap.parse_args(argv)
    seeds = [int(v) for v in args.seeds.split(",")] if args.seeds else [args.seed]
    ratios = {}
    for seed in seeds:
        ratios[seed] = simulate(args, seed)
    if len(seeds) > 1:
        print(f"\naverage xrand over seeds {seeds} (range):")
        for r in RUNS:
            v = np.array([ratios[s][r] for s in seeds])
            print(f"{r:24s} {v.mean():.3f} ({v.min():.2f}-{v.max():.2f})")
    return 0


RUNS = ("true / true", "estimated / true", "true / estimated", "estimated / estimated")


def simulate(args, seed: int) -> dict:
    """One partition (fold split and redraw by ``seed``): print its table, return {run: MAE / random's}."""
    from scipy.special import expit

    from catengine.scoring import random_mean_mae

    from calibration import load_responses
    from calibration.heldout import fit_score_factors, llm_folds, with_llm_groups
    from catengine.models.score_factors import ScoreFactors

    t0 = time.perf_counter()
    data = load_responses(lart_files("math500")[0])
    if not args.ungrouped:
        data = with_llm_groups(data)[0]  # both prompt runs of an LLM in one fold, as the library's checks split
    Y = data.correct
    N, J = Y.shape
    fold_rows = llm_folds(data.llm_groups, args.folds, seed)
    g = np.random.default_rng([seed, 1])
    runs = RUNS
    err = {r: [] for r in runs}
    z = {r: [] for r in runs}
    rand = []
    for f in range(args.folds):
        test, train = fold_rows[f], np.setdiff1d(np.arange(N), fold_rows[f])
        fit = fit_score_factors(Y[train], args.dims)
        true = ScoreFactors(fit.loadings, fit.intercepts)
        traits = np.array([true.posterior(np.arange(J), Y[i].astype(float))[0] for i in test])
        y_train = (g.random((train.size, J)) < expit(fit.traits @ fit.loadings.T + fit.intercepts)).astype(np.int8)
        y_test = (g.random((test.size, J)) < true.probabilities(traits)).astype(float)
        refit = fit_score_factors(y_train, args.dims)
        est = ScoreFactors(refit.loadings, refit.intercepts)
        models = {"true": true, "estimated": est}
        for y in y_test:
            truth = y.mean()
            for r in runs:
                sel, sco = r.split(" / ")
                acc, sd = session(models[sel], models[sco], y, args.k)
                err[r].append(acc - truth)
                z[r].append((acc - truth) / sd)
            rand.append(random_mean_mae(truth, J, args.k))
        print(f"fold {f + 1}/{args.folds}: {train.size} LLMs redrawn and refitted, {test.size} tested", flush=True)
    base = float(np.mean(rand))
    print(f"\nMATH500-shaped simulation, {args.dims} factors, k = {args.k}, {N} held-out LLMs, "
          f"{time.perf_counter() - t0:.0f} s; random mean MAE {base:.4f}")
    print(f"{'chosen / scored with':24s} {'MAE':>7s} {'xrand':>6s} {'RMS z':>6s}")
    out = {}
    for r in runs:
        e = np.asarray(err[r])
        out[r] = float(np.mean(np.abs(e)) / base)
        print(f"{r:24s} {np.mean(np.abs(e)):7.4f} {out[r]:6.2f} {np.sqrt(np.mean(np.square(z[r]))):6.2f}")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
