"""What does batching cost? Items needed to reach the same posterior SD with k = 1, 5, 20 per batch.

    python benchmarks/batch_selection.py                      # LaRT (SAEM) bank of MATH500, 2 folds
    python benchmarks/batch_selection.py --method cbmm        # 2PL bank (cBMM) of the same data
    python benchmarks/batch_selection.py --method cbmm --selector pwi  # posterior-weighted information
    python benchmarks/batch_selection.py --folds 3 --targets 0.3 0.2 0.1

Real data: the LaRT paper's MATH500 runs (``data/lart``, 500 items x the real LLMs,
correctness + CoT length). The LLMs are split into ``--folds`` groups; for each fold a bank is
calibrated on the other folds (cross-fitting: no LLM is scored by a bank that saw it) and every
held-out LLM is replayed adaptively from its *recorded* answers (and CoT lengths), once per batch
size k, with the default selector of the bank (LaRT: theta-targeted precision; 2PL: maximum Fisher
information) and ``CATSession.next_items(k)``. Answers of a batch are recorded in reverse order
(a harness returns them in any order).

For each SD target the script prints, per k, the mean number of items at which the test could
stop: ``at batch end`` checks SD <= target only when a batch is complete (what a harness running
the batch in parallel can do), ``any item`` at every answer (the cost of the batch's joint
selection alone, without the rounding up to whole batches), their ratios to k = 1, the share of
LLMs that reached the target within the ``--max-items`` budget and the mean |theta - theta_full|
at the stop (theta_full: every recorded answer scored with the same bank).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _paths import LART as DATA  # noqa: E402


def _load(data_dir: Path):
    from calibration.data import ResponseData

    return ResponseData.from_wide_csv(data_dir / "accuracy_math500.csv.gz", data_dir / "cot_length_math500.csv.gz")


def _fit_bank(method: str, data, seed: int, bank_id: str):
    if method == "saem":
        from calibration import LaRTSAEMCalibrator

        cal = LaRTSAEMCalibrator(rng=seed, b_prior_sd=5.0, progress=False).fit(data)
    else:
        from calibration import CBMMCalibrator

        cal = CBMMCalibrator(progress=False).fit(data)
    return cal.to_item_bank(bank_id), f"{cal.n_iter_} iterations, converged={cal.converged_}"


def _replay(bank, data, row: int, k: int, max_items: int, use_cot: bool, selector=None):
    """(items answered, SD after each, theta after each, batch-end flags) of one LLM's adaptive test."""
    from catengine.session import CATSession
    from catengine.stopping import MaxItems

    s = CATSession(bank, stopping=MaxItems(max_items), rng=0, selector=selector)
    index = {item: j for j, item in enumerate(data.item_ids)}
    for j in np.flatnonzero(data.correct[row] < 0):
        s.exclude(data.item_ids[j])
    sds, thetas, ends = [], [], []
    while not s.finished:
        batch = s.next_items(min(k, max_items - s.n_items))
        for n, item in enumerate(reversed(batch)):
            j = index[item]
            cot = float(data.cot_length[row, j]) if use_cot and data.cot_length is not None else None
            if cot is not None and math.isnan(cot):
                cot = None
            est = s.record(item, int(data.correct[row, j]), cot)
            sds.append(est.theta_sd)
            thetas.append(est.theta)
            ends.append(n == len(batch) - 1)
    return np.array(sds), np.array(thetas), np.array(ends)


def _full_estimate(bank, data, row: int, use_cot: bool) -> float:
    from catengine.session import CATSession

    s = CATSession(bank)
    for j in np.flatnonzero(data.correct[row] >= 0):
        cot = float(data.cot_length[row, j]) if use_cot and data.cot_length is not None else None
        s.record(data.item_ids[j], int(data.correct[row, j]), None if cot is None or math.isnan(cot) else cot)
    return s.estimate.theta


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA, help="folder with accuracy_math500.csv.gz and cot_length_math500.csv.gz")
    ap.add_argument("--method", choices=("saem", "cbmm"), default="saem")
    ap.add_argument("--folds", type=int, default=2)
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 5, 20])
    ap.add_argument("--targets", type=float, nargs="+", default=[0.3, 0.2, 0.15, 0.1])
    ap.add_argument("--max-items", type=int, default=150)
    ap.add_argument("--selector", default=None, help="selector name (default: the bank's default)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if not (args.data / "accuracy_math500.csv.gz").exists():
        print(f"no MATH500 data under {args.data}", file=sys.stderr)
        return 2
    from catengine.selection import SELECTORS

    selector = SELECTORS[args.selector]() if args.selector else None
    data = _load(args.data)
    use_cot = args.method == "saem"
    perm = np.random.default_rng(args.seed).permutation(data.n_subjects)
    folds = [np.sort(perm[f::args.folds]) for f in range(args.folds)]
    print(f"MATH500: {data.n_subjects} LLMs x {data.n_items} items; {args.method} banks cross-fitted over {args.folds} folds; "
          f"selector {args.selector or 'default'}; k = {args.ks}; budget {args.max_items} items; load average {os.getloadavg()[0]:.1f}")
    # per k: list over LLMs of (sds, thetas, ends); theta_full per LLM
    runs = {k: [] for k in args.ks}
    full = []
    t0 = time.perf_counter()
    for f, test in enumerate(folds):
        train = np.setdiff1d(np.arange(data.n_subjects), test)
        t_fit = time.perf_counter()
        bank, how = _fit_bank(args.method, data.subset(subjects=train), args.seed + f, f"math500_fold{f}")
        print(f"  fold {f}: bank fitted on {train.size} LLMs in {time.perf_counter() - t_fit:.1f} s ({how}); "
              f"replaying {test.size} LLMs")
        for row in test:
            full.append(_full_estimate(bank, data, int(row), use_cot))
            for k in args.ks:
                runs[k].append(_replay(bank, data, int(row), k, args.max_items, use_cot, selector))
    full = np.array(full)
    print(f"replays done in {time.perf_counter() - t0:.1f} s\n")
    print("means over the LLMs that reached the SD target within the budget for every k (share: 'LLMs')")
    header = (f"{'SD target':>9} {'k':>3} | {'items (batch end)':>17} {'ratio':>6} | {'items (any item)':>16} {'ratio':>6} | "
              f"{'LLMs':>5} | {'|th - th_full|':>14}")
    print(header)
    print("-" * len(header))
    for target in args.targets:
        stops = {}
        for k in args.ks:
            end, any_, err = [], [], []
            for (sds, thetas, ends), th_full in zip(runs[k], full):
                ok_end = np.flatnonzero((sds <= target) & ends)
                ok_any = np.flatnonzero(sds <= target)
                end.append(ok_end[0] + 1 if ok_end.size else -1)
                any_.append(ok_any[0] + 1 if ok_any.size else -1)
                err.append(abs(thetas[ok_end[0]] - th_full) if ok_end.size else math.nan)
            stops[k] = (np.array(end), np.array(any_), np.array(err))
        common = np.all([stops[k][0] > 0 for k in args.ks], axis=0)
        base = None
        for k in args.ks:
            end, any_, err = (v[common] for v in stops[k])
            me, ma = float(np.mean(end)), float(np.mean(any_))
            base = base or (me, ma)
            print(f"{target:>9.2f} {k:>3} | {me:>17.1f} {me / base[0]:>6.2f} | {ma:>16.1f} {ma / base[1]:>6.2f} | "
                  f"{np.mean(common):>5.0%} | {np.mean(err):>14.3f}")
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
