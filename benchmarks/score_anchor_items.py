"""Fixed anchor items (tinyBenchmarks-style) against the default adaptive selection, for the
full-benchmark score on MATH500 with whole LLMs held out (issue 14, docs/score_prediction.md §5).

``python benchmarks/score_anchor_items.py [--seeds 14,1,2,3,4,5,6,7,15,16] [--restarts 10]``

tinyBenchmarks (Polo et al. 2024) chooses k "anchor" items once, from the calibration LLMs alone:
the items' correctness vectors over the training LLMs are clustered into k groups by k-means
(the best of ``--restarts`` k-means++ starts by within-cluster sum of squares), each group's
medoid-nearest item is its anchor, and a new LLM's accuracy is the mean of its anchor answers
weighted by the groups' sizes. For each seed, MATH500's 158 runs of 79 LLMs are split into 5 folds by
LLM (the split ``score_factor_choices.py`` uses). On each fold's training runs this builds the
anchors and fits two score factors (the default's model); every held-out run is then scored after
k = 10 / 25 / 50 items three ways:

* ``anchors, weighted mean``: tinyBenchmarks' anchor estimate;
* ``anchors, factor plug-in``: the same k anchor answers, the rest predicted by the score factors
  (``predict_accuracy_factors``, the plug-in at the posterior mode, as ``predicted_score()``);
* ``default``: k items chosen adaptively by D-optimal design in the factors, the same plug-in.

Printed: MAE divided by the exact expected MAE of the mean of k random items (per LLM), averaged
over the seeds with their range.
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
METHODS = ("anchors, weighted mean", "anchors, factor plug-in", "default")


def anchor_items(train_correct, k, restarts, rng):
    """(anchor item indices, weights summing to 1) from k-means over the items' correctness vectors."""
    from scipy.cluster.vq import kmeans2

    points = np.asarray(train_correct, dtype=float).T  # items x training runs
    best = None
    for _ in range(restarts):
        centres, labels = kmeans2(points, k, minit="++", seed=rng)
        spread = float(np.sum((points - centres[labels]) ** 2))
        if best is None or spread < best[0]:
            best = (spread, centres, labels)
    _, centres, labels = best
    anchors, sizes = [], []
    for c in range(k):
        members = np.flatnonzero(labels == c)
        if members.size:
            nearest = members[np.argmin(np.sum((points[members] - centres[c]) ** 2, axis=1))]
            anchors.append(int(nearest))
            sizes.append(members.size)
    return np.asarray(anchors, dtype=np.int64), np.asarray(sizes, dtype=float) / points.shape[0]


def main(argv=None) -> int:
    from score_factor_choices import fold_splits, print_method_table, record_seed_ratios, replay
    from score_prediction import load

    from calibration.heldout import fit_score_factors
    from catengine.models.score_factors import ScoreFactors
    from catengine.scoring import predict_accuracy_factors, random_mean_mae

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="14,1,2,3,4,5,6,7,15,16")
    ap.add_argument("--restarts", type=int, default=10, help="k-means++ starts per anchor set")
    ap.add_argument("--folds", type=int, default=5)
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    t0 = time.perf_counter()
    data = load("math500")
    Y = data.correct.astype(float)
    N, J = Y.shape
    ratio = {}  # (seed, k, method) -> MAE / random's
    for seed in seeds:
        rng = np.random.default_rng(2000 + seed)
        err = {(k, m): [] for k in LENGTHS for m in METHODS}
        base = {k: [] for k in LENGTHS}
        for test, train in fold_splits(data.llm_groups, N, args.folds, seed):
            fit = fit_score_factors(data.correct[train], 2)
            factors = ScoreFactors(fit.loadings, fit.intercepts)
            anchors = {k: anchor_items(Y[train], k, args.restarts, rng) for k in LENGTHS}
            for i in test:
                truth = float(Y[i].mean())
                adaptive = replay(factors, Y[i])
                for k in LENGTHS:
                    idx, weights = anchors[k]
                    base[k].append(random_mean_mae(truth, J, idx.size))
                    err[(k, METHODS[0])].append(abs(float(weights @ Y[i, idx]) - truth))
                    plug_in = predict_accuracy_factors(factors, idx, Y[i, idx], intervals=False, centre="mode")[0]
                    err[(k, METHODS[1])].append(abs(plug_in.mean / J - truth))
                    err[(k, METHODS[2])].append(abs(adaptive[(k, "mode")] - truth))
        record_seed_ratios(ratio, seed, err, base, METHODS)
    print_method_table(ratio, METHODS, seeds, LENGTHS, f"whole LLMs held out, {args.folds} folds", t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
