"""Honest intervals on real LLMs (issue 13 measurements): nested replay audits of default-path banks.

Every figure comes from ``calibration.audit.replay_audit`` with its defaults (``bank="default"``:
each fold's bank is ``Calibrator().fit(train).to_item_bank(id)``, whose own cross-fitted interval
check runs on the training folds only; no ``sd_scale``). Sections::

    python benchmarks/honest_intervals.py run NAME SEED [--out DIR]   one audit (resumable store)
    python benchmarks/honest_intervals.py table [--out DIR]           the table of all runs in DIR
    python benchmarks/honest_intervals.py markdown [--out DIR]        the same as a markdown table

NAME: math500-saem, math500-cbmm, amc23-saem, chembench-cbmm, chembench-psn, psn-irt-cbmm,
psn-irt-psn (leave one LLM out), sim2pl-cbmm (simulated 2PL: 125 LLMs x 500 items, 5 folds, so
100 calibration LLMs per fold).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _paths import CHEMBENCH, PSN_IRT, exit_without_psn, lart_files  # noqa: E402


def _data(name: str):
    from calibration import ResponseData
    from calibration.io import load_responses

    # the LaRT data: a zero-shot and a one-shot run per LLM; replay_audit and every check it runs
    # find the run suffixes and hold both runs of an LLM out together (calibration.heldout.with_llm_groups)
    if name.startswith("math500"):
        accuracy, cot = lart_files("math500")
        return load_responses(accuracy, cot=cot, wide=True)
    if name.startswith("amc23"):
        accuracy, cot = lart_files("amc23")
        return load_responses(accuracy, cot=cot, wide=True)
    if name.startswith("chembench"):
        return load_responses(CHEMBENCH / "responses_models_x_items.csv.gz", wide=True)
    if name.startswith("psn-irt"):
        Y = np.loadtxt(exit_without_psn(PSN_IRT / "percent_0.7.csv.gz"), delimiter=",").astype(np.int8)
        return ResponseData.from_arrays(Y)
    if name.startswith("sim2pl"):
        g = np.random.default_rng(2026)
        theta = g.normal(0, 1, 125)
        a, b = g.uniform(0.8, 2.0, 500), g.normal(0, 1, 500)
        z = a * theta[:, None] + b
        return ResponseData.from_arrays((g.random(z.shape) < 1 / (1 + np.exp(-z))).astype(np.int8))
    raise ValueError(f"unknown run {name!r}")


def run(name: str, seed: int, out: Path, workers: int) -> None:
    from calibration.audit import replay_audit

    data = _data(name)
    method = name.split("-")[-1]
    folds = data.n_subjects if name.startswith("psn-irt") else (4 if name.startswith("math500") or name.startswith("amc23") else 5)
    lengths = (5, 10, 20) if name.startswith("amc23") else (10, 25, 50)
    t0 = time.perf_counter()
    ds = replay_audit(data, method=method, folds=folds, test_lengths=lengths, selector=("default", "mfi", "random"),
                      rng=seed, out=out / f"{name}_s{seed}", n_workers=workers, progress=False)
    m = ds.where(ds.failed == 0).mean("replication")
    record = {"name": name, "seed": seed, "folds": folds, "n_llms": data.n_subjects, "n_items": data.n_items,
              "seconds": round(time.perf_counter() - t0, 1), "failed": int(ds.failed.sum()),
              "errors": sorted({str(e) for e in ds.error.values.ravel() if str(e)})[:3],
              "metrics": {v: m[v].round(4).values.tolist() for v in ("coverage", "nominal_coverage", "sd_ratio", "kendall_tau", "mean_abs_diff")},
              "selector": [str(s) for s in m.selector.values], "scoring": [str(s) for s in m.scoring.values],
              "test_length": [int(L) for L in m.test_length.values]}
    (out / f"{name}_s{seed}.json").write_text(json.dumps(record, indent=1))
    print(json.dumps(record))


def markdown(out: Path) -> None:
    """The README's table: one row per (run, selector, scoring), means over the seeds found."""
    runs: dict = {}
    for path in sorted(out.glob("*_s*.json")):
        r = json.loads(path.read_text())
        runs.setdefault(r["name"], []).append(r)
    print("| data, bank (LLMs; folds; seeds) | selection | scoring | coverage after L items (L) | RMS ratio | tau | mean abs diff |")
    print("|---|---|---|---|---|---|---|")
    for name, rs in runs.items():
        r0 = rs[0]
        mean = {k: np.nanmean([r["metrics"][k] for r in rs], axis=0) for k in r0["metrics"]}
        Ls = "/".join(str(L) for L in r0["test_length"])
        for si, sel in enumerate(r0["selector"]):
            for ci, sc in enumerate(r0["scoring"]):
                f = lambda k, p=2: " / ".join(f"{v:.{p}f}" for v in mean[k][si][ci])  # noqa: E731
                print(f"| {name} ({r0['n_llms']}; {r0['folds']}; {len(rs)}) | {sel} | {sc} | {f('coverage')} ({Ls}) | "
                      f"{f('sd_ratio')} | {f('kendall_tau', 3)} | {f('mean_abs_diff', 3)} |")


def table(out: Path) -> None:
    runs: dict = {}
    for path in sorted(out.glob("*_s*.json")):
        r = json.loads(path.read_text())
        runs.setdefault(r["name"], []).append(r)
    for name, rs in runs.items():
        print(f"\n## {name}: {len(rs)} seed(s) {[r['seed'] for r in rs]}, {rs[0]['n_llms']} LLMs x {rs[0]['n_items']} items, "
              f"{rs[0]['folds']} folds, {np.mean([r['seconds'] for r in rs]):.0f} s per seed, failed folds {sum(r['failed'] for r in rs)}")
        r0 = rs[0]
        mean = {k: np.nanmean([r["metrics"][k] for r in rs], axis=0) for k in r0["metrics"]}
        Ls = r0["test_length"]
        for si, sel in enumerate(r0["selector"]):
            for ci, sc in enumerate(r0["scoring"]):
                cov = " / ".join(f"{v:.2f}" for v in mean["coverage"][si][ci])
                rat = " / ".join(f"{v:.2f}" for v in mean["sd_ratio"][si][ci])
                tau = " / ".join(f"{v:.3f}" for v in mean["kendall_tau"][si][ci])
                mad = " / ".join(f"{v:.3f}" for v in mean["mean_abs_diff"][si][ci])
                print(f"{sel:<8} {sc:<5} L={Ls}: coverage {cov} | RMS ratio {rat} | tau {tau} | mean|diff| {mad}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("run", "table", "markdown"))
    p.add_argument("name", nargs="?")
    p.add_argument("seed", nargs="?", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path("/tmp/honest_intervals"))
    p.add_argument("--workers", type=int, default=1)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.what == "run":
        run(args.name, args.seed, args.out, args.workers)
    elif args.what == "markdown":
        markdown(args.out)
    else:
        table(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
