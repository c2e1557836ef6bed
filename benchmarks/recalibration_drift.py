"""False drift alarms when a bank is recalibrated with one more LLM (issue 13, item 6).

    python benchmarks/recalibration_drift.py                      # ChemBench, every LLM held out once
    python benchmarks/recalibration_drift.py --held-out 3 --prior none --correction bh

For each held-out LLM L of ChemBench (22 LLMs x 2,854 items): fit a cBMM bank on the other 21
LLMs (defaults, responses kept), then ``calibration.recalibration`` it with L's answers merged in
(Stocking-Lord linking, default drift test). Nothing about the items changed, so every flagged
item is a false alarm; the script prints the share of common items flagged per run and overall,
and, side by side, the share the plain threshold rule (|da| or |db| > 0.5, no SEs) would flag on the same
pair of banks.
"""

from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from calibration.data import ResponseData
from calibration.methods.cbmm.calibrator import CBMMCalibrator
from calibration.recalibration import RecalibrationConfig, recalibrate
from catengine import open_item_bank, write_item_bank

from _paths import CHEMBENCH

DATA = CHEMBENCH / "responses_models_x_items.csv.gz"


def load_chembench(path=DATA) -> ResponseData:
    df = pd.read_csv(path, index_col=0)
    return ResponseData.from_arrays(df.values.astype(float), subject_ids=[str(s) for s in df.index],
                                    item_ids=[f"q{c}" for c in df.columns])


def one_run(data: ResponseData, held: int, prior, correction: str, workdir: Path, variance: str) -> tuple[int, int, int]:
    keep = [s for k, s in enumerate(data.subject_ids) if k != held]
    base = data.subset(subjects=keep)
    bank = CBMMCalibrator(prior=prior, progress=False).fit(base).to_item_bank("chem").with_group("responses", base.to_dataset())
    write_item_bank(bank, workdir / "chem")
    new = data.subset(subjects=[data.subject_ids[held]])
    new_path = new.to_netcdf(workdir / f"new{held}.nc")
    config = RecalibrationConfig(bank=workdir / "chem", responses=[new_path], drift_correction=correction, drift_variance=variance,
                                 settings={"prior": prior} if not isinstance(prior, str) or prior != "empirical-bayes" else {})
    result = recalibrate(config)
    old, new_bank = open_item_bank(workdir / "chem", version=1), open_item_bank(workdir / "chem", version=2)
    common = len(result.diff.drifted_items), result.diff.n_common
    # the plain threshold rule on the same pair of banks
    a_o, b_o = old.params.a, old.params.b
    idx = np.array([new_bank.index_of(i) for i in old.item_ids])
    a_n, b_n = new_bank.params.a[idx], new_bank.params.b[idx]
    old_rule = int(((np.abs(a_n - a_o) > 0.5) | (np.abs(b_n - b_o) > 0.5) | (np.sign(a_o) * np.sign(a_n) < 0)).sum())
    return common[0], common[1], old_rule


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--held-out", type=int, nargs="*", default=None, help="LLM rows to hold out (default: all 22)")
    p.add_argument("--prior", default="empirical-bayes", help="cBMM prior of both fits (empirical-bayes or none)")
    p.add_argument("--correction", default="holm", choices=("holm", "bh"))
    p.add_argument("--variance", default="independent", choices=("independent", "nested"))
    args = p.parse_args(argv)
    data = load_chembench()
    rows = range(data.n_subjects) if args.held_out is None else args.held_out
    flagged = common = old_rule = 0
    print(f"ChemBench {data.n_subjects} x {data.n_items}; cBMM prior={args.prior}; drift test correction={args.correction}, variance={args.variance}")
    for held in rows:
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            f, c, o = one_run(data, held, args.prior, args.correction, Path(tmp), args.variance)
        flagged, common, old_rule = flagged + f, common + c, old_rule + o
        print(f"  + {data.subject_ids[held]:<32s} flagged {f:4d} / {c} ({f / c:.2%});  old |d|>0.5 rule {o:4d} ({o / c:.2%})")
    print(f"overall: flagged {flagged} / {common} = {flagged / common:.3%} of common items; old rule {old_rule / common:.2%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
