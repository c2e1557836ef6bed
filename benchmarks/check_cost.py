"""The cost of the default held-out check on MATH500, and what its shortcuts do to its figures.

    python benchmarks/check_cost.py                       # cBMM and LaRT SAEM, check seeds 0 1 2
    python benchmarks/check_cost.py --methods cbmm --seeds 4

Every ``to_item_bank`` with ``interval_check="auto"`` runs the held-out check of
``calibration/heldout/``. Its default refits start from the full fit
(``RefitBank``: item parameters, prior, traits, score factors; SAEM with a 5-iteration burn-in
and a twice looser tolerance) and scores random-selection tests at the tabulated lengths only.
The reference is the same check with cold refits (a plain ``fit`` per fold) and random tests
replayed step by step in sessions (``with_held_out_check(..., cold_start=True)``).

For each check seed (the fold split, the refits' and the replays' random streams) both checks run
on the same full fit, alternating, and the table prints per selector and test length the mean
over seeds of the default and the reference c(L), residual SD per unanswered item delta(L) and
(LaRT) CoT log-SD s(L), the Monte-Carlo error of a mean (SD over the reference seeds /
sqrt(seeds)) and the difference in units of the error of a difference (sqrt(2) x that). Times:
the fit (minimum of 3), each check's minimum over the seeds, and their ratios, all in this run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np
from _paths import lart_files

from calibration import ResponseData
from calibration.heldout import with_held_out_check
from calibration.methods.cbmm.calibrator import CBMMCalibrator
from calibration.methods.lart.calibrator import LaRTSAEMCalibrator

METHODS = {"cbmm": CBMMCalibrator, "saem": LaRTSAEMCalibrator}


def _record(cal, bank, seed: int, cold: bool):
    cal.rng = seed  # the check's seed (calibration.heldout.check._seed_of); the fit is done
    t = time.perf_counter()
    out = with_held_out_check(cal, bank, True, cold_start=cold)
    return json.loads(out.attrs["interval_calibration"]), time.perf_counter() - t


def _table(name, records):
    """Rows per (selector, figure, length): mean default, mean reference, MC error, z of the difference."""
    ref0 = records["reference"][0]
    print(f"  {'selector':14s} {'figure':11s} {'L':>4s} {'default':>8s} {'reference':>9s} {'MC err':>7s} {'z':>6s}")
    worst = 0.0
    for sel, cur in ref0["curves"].items():
        for fig, where in (("c", "curves"), ("residual_sd", "score_curves"), ("cot_log_sd", "score_curves")):
            vals = {}
            for kind in ("default", "reference"):
                rows = [r[where].get(sel, {}).get(fig) for r in records[kind]]
                if any(v is None for v in rows):
                    break
                vals[kind] = np.array(rows, dtype=float)
            if len(vals) < 2:
                continue
            n = vals["reference"].shape[0]
            err = vals["reference"].std(axis=0, ddof=1) / np.sqrt(n) if n > 1 else np.full(vals["reference"].shape[1], np.nan)
            for t, L in enumerate(cur["test_length"]):
                d, r = vals["default"][:, t].mean(), vals["reference"][:, t].mean()
                z = (d - r) / (np.sqrt(2) * err[t]) if err[t] > 0 else 0.0
                worst = max(worst, abs(z))
                print(f"  {sel:14s} {fig:11s} {L:4d} {d:8.4f} {r:9.4f} {err[t]:7.4f} {z:+6.2f}")
    print(f"  {name}: largest |z| {worst:.2f} (|z| < 2 for all but about 1 in 20 rows when the two agree)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", nargs="+", default=["cbmm", "saem"], choices=sorted(METHODS))
    ap.add_argument("--seeds", type=int, default=3, help="check seeds (default 3)")
    args = ap.parse_args(argv)
    print(f"# machine: {os.cpu_count()} logical CPUs; load average {os.getloadavg()[0]:.1f} at start")
    warnings.simplefilter("ignore")
    data = ResponseData.from_wide_csv(*lart_files("math500"))
    for name in args.methods:
        cls = METHODS[name]
        cls(progress=False, rng=0).fit(data).to_item_bank("warm-up", interval_check=True)  # numba compiles
        fits = []
        for _ in range(3):
            t = time.perf_counter()
            cal = cls(progress=False, rng=0).fit(data)
            fits.append(time.perf_counter() - t)
        t_fit = min(fits)
        bank = cal.to_item_bank("bench", interval_check=False)
        records, times = {"default": [], "reference": []}, {"default": [], "reference": []}
        for seed in range(args.seeds):
            for kind in ("default", "reference"):
                rec, dt = _record(cal, bank, seed, kind == "reference")
                records[kind].append(rec)
                times[kind].append(dt)
        t_def, t_ref = min(times["default"]), min(times["reference"])
        print(f"== {name} on MATH500 {data.n_subjects} x {data.n_items}: {args.seeds} check seeds ==")
        print(f"  fit (min of 3)            : {t_fit:7.2f} s")
        print(f"  default check (min)       : {t_def:7.2f} s = {t_def / t_fit:6.1f}x the fit")
        print(f"  reference check (min)     : {t_ref:7.2f} s = {t_ref / t_fit:6.1f}x the fit; "
              f"default / reference {t_def / t_ref:.2f}")
        _table(name, records)
    print(f"# load average {os.getloadavg()[0]:.1f} at end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
