"""Audit throughput: the local process pool vs Dask with 1 and 2 workers, and a study's wall time.

    python benchmarks/audit_scaling.py                          # cbmm, N = 100, 12 records on the demo bank
    python benchmarks/audit_scaling.py --reps 24 --subjects 400
    python benchmarks/audit_scaling.py --study studies/seed003_design.toml            # + its estimated wall time
    python benchmarks/audit_scaling.py --study studies/seed003_design.toml --costs-from runs/seed003_design
    python benchmarks/audit_scaling.py --skip-throughput --check-methods   # all methods: 1 process == Dask

Part 1 runs the same recovery audit (same seed, so the same records) on each backend and prints
records/s side by side:

* ``in-process``   -- ``n_workers=1`` with one numba thread (what a worker computes with), after
                      a warm-up audit (numba compiled): the baseline;
* ``pool x2``      -- the library's process pool with 2 workers, as a user runs it (it starts
                      its processes, which compile, on every call);
* ``dask x1/x2``   -- a LocalCluster of 1 / 2 worker processes: *cold* (cluster start, the
                      workers' compile, the run) and *warm* (the same audit again on that cluster).

The Dask overhead per record is measured twice: as (warm dask x1 - in-process) / records on the
workload, and directly, as the time per record of 200 empty records (a task that returns a tiny
record at once) streamed through a 1-worker cluster into an in-memory store: what a task costs to
ship, schedule and stream back on top of its computation. Every run is checked to give the
identical Dataset (runtimes aside).

Part 2 (``--study``) estimates the study's wall time on W workers from a per-record cost per
(bank, method, N) cell: measured here (``--study-reps`` records of each cell, in this process,
first ability and missingness level), or read from the ``wall_s`` of the records of an existing
(partial) run of the study (``--costs-from DIR``). wall(W) = max(total / W + overhead x records / W,
the most expensive record). Timings are wall-clock: the load average is printed; quote it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMING = ["runtime_s", "cpu_s", "wall_s"]


def _strip(ds):
    return ds.drop_vars([v for v in TIMING if v in ds]).drop_attrs()


def _timed(fn):
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def _empty_record(payload):
    import xarray as xr

    return xr.Dataset({"x": ((), float(payload))})


def _empty_overhead(client, n: int = 200) -> float:
    """Seconds per record of n empty records through Dask into a MemoryStore."""
    from calibration.audit.runner import run_tasks
    from calibration.audit.store import MemoryStore

    layout = {"kind": "empty", "cell_dims": {}, "record_dims": {}, "replications": n}
    run_tasks([({"replication": r}, r) for r in range(8)], _empty_record, MemoryStore(layout, {}), scheduler=client,
              progress=False)  # warm-up
    t, _ = _timed(lambda: run_tasks([({"replication": r}, r) for r in range(n)], _empty_record,
                                    MemoryStore(layout, {}), scheduler=client, progress=False))
    return t / n


def throughput(args) -> dict:
    import logging

    import xarray as xr
    from distributed import Client, LocalCluster

    from calibration.audit import recovery_audit

    sizes = [int(n) for n in args.subjects.split(",")]

    def audit(seed=args.seed, **kw):
        return recovery_audit(args.bank, sizes, method=args.method, replications=args.reps, rng=seed,
                              progress=False, **kw)

    import numba

    n = args.reps * len(sizes)
    rows = []
    threads = numba.get_num_threads()
    numba.set_num_threads(1)  # the workers' setting: the baseline computes what a worker computes
    recovery_audit(args.bank, sizes[:1], method=args.method, replications=1, rng=999, n_workers=1, progress=False)
    t_serial, reference = _timed(lambda: audit(n_workers=1))
    numba.set_num_threads(threads)
    rows.append(("in-process (1 core)", None, t_serial))
    t_pool, ds = _timed(lambda: audit(n_workers=2))
    xr.testing.assert_identical(_strip(ds), _strip(reference))
    rows.append(("pool x2 (as run: start + compile + run)", t_pool, None))
    warm = {}
    for workers in (1, 2):
        t0 = time.perf_counter()
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                          silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
            t_start = time.perf_counter() - t0
            ds = audit(scheduler=client)
            t_cold = time.perf_counter() - t0
            xr.testing.assert_identical(_strip(ds), _strip(reference))
            t_warm, ds = _timed(lambda: audit(scheduler=client))
            xr.testing.assert_identical(_strip(ds), _strip(reference))
            if workers == 1:
                empty = _empty_overhead(client)
        warm[workers] = t_warm
        rows.append((f"dask x{workers} (cluster start {t_start:.1f} s)", t_cold, t_warm))
    print(f"\n{n} records: {args.method}, N = {args.subjects}, bank {Path(args.bank).name}; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'backend':44s} {'cold s':>8s} {'cold rec/s':>10s} {'warm s':>8s} {'warm rec/s':>10s} {'vs in-process':>13s}")
    for name, cold, hot in rows:
        c = f"{cold:8.1f} {n / cold:10.2f}" if cold else f"{'':8s} {'':10s}"
        h = f"{hot:8.1f} {n / hot:10.2f} {t_serial / hot:12.2f}x" if hot else f"{'':8s} {'':10s} {t_serial / cold:12.2f}x"
        print(f"{name:44s} {c} {h}")
    overhead = (warm[1] - t_serial) / n
    print(f"Dask overhead per record (warm x1 - in-process) / records: {overhead * 1e3:.0f} ms "
          f"({overhead / (t_serial / n):.1%} of a record's {t_serial / n:.2f} s); 2-worker speed-up over 1 worker "
          f"(warm): {warm[1] / warm[2]:.2f}x")
    print(f"Dask overhead per record, measured directly (200 empty records, 1 worker): {empty * 1e3:.1f} ms")
    print("all backends gave the identical Dataset (runtimes aside)")
    return {"overhead_s": empty, "serial_s_per_record": t_serial / n}


def check_methods_identical() -> None:
    """Every method (cbmm, saem, saem-irt, psn) on a 40-item LaRT bank: one process with numba's
    default threads vs a 2-worker LocalCluster give the identical Dataset (runtimes aside)."""
    import logging

    import xarray as xr
    from distributed import Client, LocalCluster

    from calibration.audit import recovery_audit
    from calibration.simulate import draw_item_params
    from catengine import ItemBank

    q = draw_item_params("lart", 40, rng=2, rho=-0.5)
    bank = ItemBank.from_params("lart", [f"i{k:02d}" for k in range(40)], bank_id="check", rho=q.rho, cot_offset=1.0,
                                a=q.a, b=q.b, omega=q.omega + 5.0, phi=q.phi, lam=q.lam)
    kw = dict(n_subjects=[60, 150], method=["cbmm", "saem", "saem-irt", "psn"], replications=1, rng=3, progress=False,
              method_options={"saem": {"max_iter": 60}, "saem-irt": {"max_iter": 60}})
    one = recovery_audit(bank, n_workers=1, **kw)
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None, silence_logs=logging.ERROR) as cluster, \
            Client(cluster) as client:
        on_dask = recovery_audit(bank, scheduler=client, **kw)
    xr.testing.assert_identical(_strip(on_dask), _strip(one))
    print(f"identical: {', '.join(kw['method'])} in one process (numba threads by default) and on 2 Dask workers "
          f"({int(one['failed'].sum())} failed records)")


def _cell_costs_measured(study, reps: int) -> dict:
    """{(bank, method, N): seconds per record} measured here (first ability, first missingness)."""
    from calibration.audit import recovery_task
    from calibration.audit.study import study_tasks

    _, _, tasks, _ = study_tasks(study, 2026)
    first_ability, first_missing = study.abilities[0], study.missingness[0]
    costs: dict = {}
    for key, payload in tasks:
        cell = (key["bank"], key["method"], key["n_subjects"])
        if key["ability"] != first_ability or key["missingness"] != first_missing or key["replication"] >= reps:
            continue
        t, record = _timed(lambda: recovery_task(payload))
        costs.setdefault(cell, []).append(t)
        state = "failed: " + str(record["error"].values)[:60] if int(record["failed"]) else "ok"
        print(f"  measured {cell}: {t:.1f} s ({state})", flush=True)
    return {cell: sum(v) / len(v) for cell, v in costs.items()}


def _cell_costs_from_run(directory) -> dict:
    from calibration.audit import load_results

    ds = load_results(directory)
    costs = {}
    wall = ds["wall_s"]
    for bank in ds["bank"].values:
        for method in ds["method"].values:
            for n in ds["n_subjects"].values:
                values = wall.sel({"bank": bank, "method": method, "n_subjects": n}).values
                values = values[values == values]
                if values.size:
                    costs[(str(bank), str(method), int(n))] = float(values.mean())
    return costs


def study_estimate(args, overhead_s: float) -> None:
    from calibration.audit.study import load_study, study_tasks

    study = load_study(args.study)
    _, _, tasks, _ = study_tasks(study, 0)
    print(f"\nstudy {study.name!r}: {len(tasks)} records")
    if args.costs_from:
        costs = _cell_costs_from_run(args.costs_from)
        print(f"per-record costs: mean wall_s of the records in {args.costs_from}")
    else:
        print(f"per-record costs: measured here, {args.study_reps} record(s) per (bank, method, N) cell")
        costs = _cell_costs_measured(study, args.study_reps)
    total, missing = 0.0, set()
    by_cell: dict = {}
    for key, _ in tasks:
        cell = (key["bank"], key["method"], key["n_subjects"])
        if cell not in costs:
            missing.add(cell)
            continue
        total += costs[cell]
        by_cell[cell] = by_cell.get(cell, 0) + 1
    if missing:
        print(f"no cost for {len(missing)} cell(s) {sorted(missing)[:4]}...: left out of the estimate")
    print(f"{'bank':24s} {'method':9s} {'N':>5s} {'s/record':>9s} {'records':>8s} {'cell total h':>12s}")
    for cell in sorted(by_cell, key=lambda c: (c[0], c[1], c[2])):
        print(f"{cell[0]:24s} {cell[1]:9s} {cell[2]:5d} {costs[cell]:9.2f} {by_cell[cell]:8d} "
              f"{costs[cell] * by_cell[cell] / 3600:12.2f}")
    longest = max(costs[c] for c in by_cell)
    records = sum(by_cell.values())
    print(f"total computation {total / 3600:.2f} h for {records} records (+ Dask overhead {overhead_s * 1e3:.1f} ms/record)")
    print(f"{'workers':>8s} {'estimated wall':>15s}")
    for w in [int(v) for v in args.workers_grid.split(",")]:
        wall = max((total + overhead_s * records) / w, longest)
        print(f"{w:8d} {_hms(wall):>15s}")
    print("(assumes one core per worker and cores as fast as this machine's under its present load)")


def _hms(seconds: float) -> str:
    h, rem = divmod(int(round(seconds)), 3600)
    m, s = divmod(rem, 60)
    return f"{h:d}:{m:02d}:{s:02d}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bank", default=str(ROOT / "item_banks" / "demo_math500_lart"))
    parser.add_argument("--method", default="cbmm")
    parser.add_argument("--subjects", default="100")
    parser.add_argument("--reps", type=int, default=12, help="records of the throughput workload (default 12)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--study", default=None, metavar="CONFIG.toml", help="also estimate this study's wall time")
    parser.add_argument("--study-reps", type=int, default=1, help="records measured per study cell (default 1)")
    parser.add_argument("--costs-from", default=None, metavar="DIR", help="per-record costs from an existing study run")
    parser.add_argument("--workers-grid", default="1,2,4,8,16,32,64,128")
    parser.add_argument("--skip-throughput", action="store_true",
                        help="study estimate only (Dask overhead taken as --overhead-ms)")
    parser.add_argument("--overhead-ms", type=float, default=0.0)
    parser.add_argument("--check-methods", action="store_true",
                        help="also check that every method gives identical records in one process and on Dask")
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()}; {os.cpu_count()} CPUs; python {sys.version.split()[0]}")
    overhead = args.overhead_ms / 1e3
    if not args.skip_throughput:
        overhead = throughput(args)["overhead_s"]
    if args.check_methods:
        check_methods_identical()
    if args.study:
        study_estimate(args, overhead)
    return 0


if __name__ == "__main__":
    sys.exit(main())
