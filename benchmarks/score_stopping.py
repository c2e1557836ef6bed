"""How many items does it take to know an LLM's full-benchmark score to within +-w? The
``ScoreIntervalBelow`` stopping rule on real LLMs, cross-fitted (docs/score_prediction.md §4).

``python benchmarks/score_stopping.py [math500|amc23|chembench] [--widths 0.05,0.03,0.02] [--seed 14] [--method cbmm]``

The benchmark's LLMs are split into 5 folds (both runs of an LLM in one fold, as every check
here splits them). A bank is calibrated on the other folds by the default path (cBMM unless
``--method saem``; its own interval and score checks, score factors when it has >= 40 runs), and
every held-out run's recorded answers are replayed by a default session that stops at
``AnyOf(AllOf(MinItems(5), ScoreIntervalBelow(w)), MaxItems(J))``. Printed per w: the items used
(median, quartiles, share of the bank), how often the final 95% interval held the run's true
full-benchmark accuracy, the mean half-width reported, the MAE, and the MAE divided by the exact
expected MAE of the mean of as many random items as that session used.
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


def run_session(bank, y, cot, width, rng):
    """Replay one LLM's answers until the rule stops; (items used, final score estimate)."""
    from catengine import CATSession
    from catengine.stopping import AllOf, AnyOf, MaxItems, MinItems, ScoreIntervalBelow

    stopping = AnyOf(AllOf(MinItems(5), ScoreIntervalBelow(width)), MaxItems(bank.n_items))
    s = CATSession(bank, stopping=stopping, rng=rng)
    index = bank.index_of
    while not s.finished:
        item = s.next_item()
        j = index(item)
        s.record(item, int(y[j]), None if cot is None else float(cot[j]))
    return s.n_items, s.predicted_score(by=False)


def main(argv=None) -> int:
    from score_prediction import calibrate, load

    from calibration.heldout import llm_folds
    from catengine.scoring import random_mean_mae

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("benchmark", nargs="?", default="math500", choices=("math500", "amc23", "chembench"))
    ap.add_argument("--widths", default="0.05,0.03,0.02")
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--method", default="cbmm", choices=("cbmm", "saem"))
    args = ap.parse_args(argv)
    widths = [float(w) for w in args.widths.split(",")]
    t0 = time.perf_counter()
    if args.benchmark == "amc23":
        import calibration
        from calibration.heldout import with_llm_groups
        from _paths import lart_files

        accuracy, cot = lart_files("amc23")
        data = with_llm_groups(calibration.load_responses(accuracy, cot=cot))[0]
    else:
        data = load(args.benchmark)
    N, J = data.shape
    use_cot = args.method == "saem" and data.has_cot
    fold_rows = llm_folds(data.llm_groups, args.folds, args.seed)
    rows = {w: [] for w in widths}
    for f, test in enumerate(fold_rows):
        train = data.subset(subjects=np.setdiff1d(np.arange(N), test))
        bank = calibrate(args.benchmark, train, args.seed + f, args.method)
        print(f"fold {f}: bank from {train.n_subjects} runs, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        for i in test:
            y = data.correct[i].astype(float)
            cot = data.cot_length[i] if use_cot else None
            truth = float(y.mean())
            for k, w in enumerate(widths):
                n, score = run_session(bank, y, cot, w, np.random.default_rng([args.seed, int(i), k]))
                rows[w].append((n, score.low <= truth <= score.high, 0.5 * (score.high - score.low),
                                abs(score.accuracy - truth), random_mean_mae(truth, J, n) if n < J else 0.0))
    print(f"\n{args.benchmark}: {N} runs of {int(data.llm_groups.max()) + 1} LLMs, {J} items, {args.folds} folds by LLM "
          f"(seed {args.seed}), {args.method} banks; default sessions stopping at ScoreIntervalBelow(w) after >= 5 items, "
          f"{time.perf_counter() - t0:.0f} s")
    print(f"{'w':>6} {'items: median (IQR)':>22} {'share':>6} {'covered':>8} {'half-width':>10} {'MAE':>7} {'xrand':>6} {'ran to J':>8}")
    for w in widths:
        r = np.array(rows[w], dtype=float)
        n = r[:, 0]
        q1, med, q3 = np.percentile(n, [25, 50, 75])
        ratio = r[:, 3].mean() / r[:, 4].mean() if r[:, 4].mean() > 0 else float("nan")
        print(f"{w:>6g} {f'{med:.0f} ({q1:.0f}-{q3:.0f})':>22} {med / J:>6.1%} {r[:, 1].mean():>8.3f} {r[:, 2].mean():>10.3f} "
              f"{r[:, 3].mean():>7.4f} {ratio:>6.2f} {int((n >= J).sum()):>8d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
