"""Recovery audit of the shipped demo bank: 2 methods x 3 sample sizes x 10 replications (issue 7).

    python benchmarks/audit_demo_bank.py                       # cbmm + saem, N = 30/100/400, 10 reps, 2 workers
    python benchmarks/audit_demo_bank.py --reps 3 --workers 1  # quicker look
    python benchmarks/audit_demo_bank.py --out /tmp/audit_demo --resume-check

Runs ``calibration.audit.recovery_audit`` on ``item_banks/demo_math500_lart`` (500 LaRT items)
with the calibrators' default settings, prints the total wall time against the issue's budget of
5 minutes, the mean fit runtime of every cell (stored in the Dataset as ``runtime_s``), and the
summary table (means with Monte-Carlo SEs). The total includes starting the worker processes
and, on a first run, numba compiling its kernels in them (compiled code is cached on disk).

``--resume-check`` deletes a third of the records afterwards, reruns, and checks that the final
Dataset is identical (runtimes aside). Timings are wall-clock; state the machine's load when
quoting them (``os.getloadavg`` is printed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

BUDGET_S = 300.0
ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bank", default=str(ROOT / "item_banks" / "demo_math500_lart"))
    parser.add_argument("--methods", default="cbmm,saem")
    parser.add_argument("--subjects", default="30,100,400")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--out", default=None, help="output directory (default: a fresh temporary one)")
    parser.add_argument("--resume-check", action="store_true")
    parser.add_argument("--report", action="store_true", help="also render the PNG/HTML report into --out")
    args = parser.parse_args(argv)

    import xarray as xr

    from calibration.audit import recovery_audit, render_report, summary_table

    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="audit_demo_"))
    if args.out and out.exists():
        shutil.rmtree(out)
    methods = [m for m in args.methods.split(",") if m]
    sizes = [int(n) for n in args.subjects.split(",") if n]
    print(f"load average before: {os.getloadavg()}; {os.cpu_count()} CPUs; output {out}")
    t0 = time.perf_counter()
    ds = recovery_audit(args.bank, sizes, method=methods, replications=args.reps, rng=args.seed, out=out,
                        n_workers=args.workers, progress=True)
    wall = time.perf_counter() - t0
    n_records = int(ds["done"].sum())
    print(f"\n{len(methods)} methods x {len(sizes)} sizes x {args.reps} replications = {n_records} records "
          f"in {wall:.1f} s wall with {args.workers} worker(s) (budget {BUDGET_S:.0f} s: "
          f"{'OK' if wall <= BUDGET_S else 'OVER'}); load average after: {os.getloadavg()}")
    print(f"failed records: {int((ds['failed'] == 1).sum())}")
    cell = ds["runtime_s"].mean("replication").squeeze("ability", drop=True)
    total = ds["runtime_s"].sum("replication").squeeze("ability", drop=True)
    cpu = ds["cpu_s"].sum("replication").squeeze("ability", drop=True)
    # note: a dimension called "method" must be selected with a dict (DataArray.sel has a method= argument)
    print("\nfit runtime per cell (mean wall / total wall / total CPU) [s]:")
    for m in ds["method"].values:
        row = "  ".join(
            f"N={n}: {float(cell.sel({'method': m, 'n_subjects': n})):6.2f} / "
            f"{float(total.sel({'method': m, 'n_subjects': n})):6.1f} / {float(cpu.sel({'method': m, 'n_subjects': n})):6.1f}"
            for n in ds["n_subjects"].values)
        print(f"  {m:6s} {row}")
    cpu_total = float(ds["cpu_s"].sum())
    print(f"total fit CPU {cpu_total:.1f} s: about {cpu_total / max(args.workers, 1):.0f} s of wall time on "
          f"{max(args.workers, 1)} idle core(s), plus worker start-up")
    print()
    print(summary_table(ds).to_string(index=False))
    if args.report:
        print(render_report(ds, out))
    if args.resume_check:
        records = sorted((out / "records").glob("*.nc"))
        for path in records[::3]:
            path.unlink()
        t1 = time.perf_counter()
        again = recovery_audit(args.bank, sizes, method=methods, replications=args.reps, rng=args.seed, out=out,
                               n_workers=args.workers, progress=False)
        drop = ["runtime_s", "cpu_s", "wall_s"]
        xr.testing.assert_identical(ds.drop_vars(drop), again.drop_vars(drop))
        print(f"\nresume check: deleted {len(records[::3])} of {len(records)} records, reran in "
              f"{time.perf_counter() - t1:.1f} s, final Dataset identical (runtimes aside)")
    if not args.out:
        shutil.rmtree(out, ignore_errors=True)
    return 0 if wall <= BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
