"""``calibration study CONFIG.toml``: a factorial recovery study (banks x missingness x methods x
sample sizes x ability distributions x replications) described by a TOML file.

    calibration study studies/seed003_design.toml [--out DIR] [--workers 2]
                      [--scheduler local|tcp://HOST:PORT|SCHEDULER_FILE] [--dry-run]
                      [--no-report] [--[no-]progress]

Writes ``DIR/records/*.nc`` and ``DIR/audit.json`` (as ``calibration audit``), the combined Dataset
``DIR/study_results.nc``, its summary ``DIR/study_summary.nc`` and the report
``DIR/study_report.{png,html}``; prints the summary table. Interrupt and rerun to resume.
``--dry-run`` prints the grid and the number of records without running anything.
The file's format: :mod:`calibration.audit.study`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from catengine.console import add_progress_argument

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", metavar="CONFIG.toml", help="study file (format: calibration.audit.study)")
    parser.add_argument("--out", default=None, metavar="DIR", help="output directory (default: the file's 'out')")
    parser.add_argument("--workers", type=int, default=2,
                        help="worker processes of the local pool or of --scheduler local (default 2; 1 = this process)")
    parser.add_argument("--scheduler", default=None, metavar="local|ADDRESS|FILE",
                        help="run on Dask: 'local', tcp://host:port or a scheduler file (default: the local process pool)")
    parser.add_argument("--dry-run", action="store_true", help="print the grid and its number of records, run nothing")
    parser.add_argument("--no-report", action="store_true", help="skip the PNG/HTML report")
    add_progress_argument(parser)


def describe_grid(study) -> str:
    lines = [f"study {study.name!r}: {study.n_records()} records",
             f"  banks       {', '.join(str(b) for b in study.banks)}",
             f"  missingness {', '.join(study.missingness)}",
             f"  methods     {', '.join(study.methods)}",
             f"  n_subjects  {', '.join(map(str, study.n_subjects))}",
             f"  abilities   {', '.join(study.abilities)}",
             f"  replications {study.replications}, seed {study.seed}"]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from calibration import audit
    from calibration.audit import RecordsLostError, StoreMismatchError, load_study, run_study
    from calibration.cli.audit import _write_dataset, show_progress

    try:
        study = load_study(args.config)
        if args.dry_run:
            print(describe_grid(study))
            return 0
        out = Path(args.out) if args.out is not None else study.out
        if out is None:
            raise ValueError(f"{args.config}: give --out (or out = ... in the file)")
        ds = run_study(study, out, n_workers=args.workers, scheduler=args.scheduler, progress=show_progress(args))
    except KeyboardInterrupt:
        print("\ncalibration study: interrupted; the finished records are kept. Run the same command again to resume.",
              file=sys.stderr)
        return 130
    except (ValueError, TypeError, OSError, ImportError, StoreMismatchError, RecordsLostError) as exc:
        print(f"calibration study: error: {exc}", file=sys.stderr)
        return 2
    summary = audit.summarize(ds)
    _write_dataset(ds, out / "study_results.nc")
    _write_dataset(summary, out / "study_summary.nc")
    print(audit.summary_table(ds, summary=summary).to_string(index=False))
    n_failed = int((ds["failed"] == 1).sum())
    print(f"\n{int(ds['done'].sum())} records, {n_failed} failed; results: {out / 'study_results.nc'}", file=sys.stderr)
    if not args.no_report:
        paths = audit.render_report(ds, out, summary=summary, name="study_report",
                                    title=f"study {study.name}: {study.replications} replications per cell")
        print(f"report: {paths['html']} and {paths['png']}", file=sys.stderr)
    return 0
