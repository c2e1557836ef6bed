"""``calibration audit``: recovery, short-form and CAT audits of an item bank from the command line.

    calibration audit --bank PATH --out DIR [--kind recovery|short-form|cat]
    calibration audit --kind replay --responses FILE --out DIR [--method saem] [--folds 4]
                      [--selectors mfi,random --test-lengths 10,25,50 --scoring lart,irt]
                      [--subjects 30,100,400] [--method cbmm,saem] [--ability normal,skew-normal:skew=8]
                      [--reps 20] [--seed N] [--workers 2] [--missing mcar --missing-rate 0.5]
                      [--sizes 10%,20%,100 --heldout 1000]                       (short-form)
                      [--selectors mfi,random --test-lengths 5,10,20,40 --simulees 200
                       --scoring lart,irt --true-bank PATH]                     (cat)
                      [--scheduler local|tcp://HOST:PORT|SCHEDULER_FILE]          (Dask)
                      [--no-report] [--[no-]progress]

Results go to ``DIR/records/*.nc`` (one netCDF per replication and cell) with the manifest
``DIR/audit.json``; the combined Dataset to ``DIR/<kind>_results.nc``, the summary (means with
Monte-Carlo SEs) to ``DIR/<kind>_summary.nc`` and the one-page report to
``DIR/<kind>_report.{png,html}``. Interrupt with Ctrl-C and run the same command again to resume
(the seed is kept in the manifest). The summary table is printed on stdout.

``calibration/cli.py`` registers :func:`add_arguments` / :func:`run` as the ``audit`` subcommand.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from catengine.console import add_progress_argument, progress_enabled

from calibration.cli.fit import ITEMS_AS_ROWS_HELP, SAME_LLM_HELP, warn_if_items_look_like_rows

__all__ = ["add_arguments", "run"]


def _csv(text: str) -> list[str]:
    return [part.strip() for part in str(text).split(",") if part.strip()]


def _ints(text: str) -> list[int]:
    try:
        return [int(v) for v in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the audit options to ``parser`` (the ``audit`` subcommand)."""
    parser.add_argument("--bank", metavar="PATH", help="item bank file (.nc) or bank directory (latest version); all kinds but replay")
    parser.add_argument("--responses", metavar="FILE", help="replay: real response file (as for calibration fit)")
    parser.add_argument("--cot", metavar="FILE", help="replay: CoT lengths of a wide accuracy file (as for calibration fit)")
    parser.add_argument("--wide", action="store_true", help="replay: the responses file is a wide LLM x item matrix")
    parser.add_argument("--items-as-rows", action="store_true", help="replay: " + ITEMS_AS_ROWS_HELP)
    parser.add_argument("--same-llm-pattern", metavar="REGEX", help="replay: " + SAME_LLM_HELP)
    parser.add_argument("--folds", type=int, default=4, help="replay: LLM folds, each held out once (default 4)")
    parser.add_argument("--sd-scale", type=float, default=1.0,
                        help="replay: multiply the engine's posterior SDs by this (check a widening factor; default 1)")
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory (records, results, report); reused to resume")
    parser.add_argument("--kind", choices=("recovery", "short-form", "cat", "replay"), default="recovery",
                        help="which audit (default recovery); replay: real LLMs' answers through adaptive tests")
    parser.add_argument("--subjects", type=_ints, default=[30, 100, 400], metavar="N,N,...",
                        help="calibration sample sizes (recovery, short-form; default 30,100,400)")
    parser.add_argument("--method", type=_csv, default=["cbmm"], metavar="M,M,...",
                        help="calibration methods: cbmm, saem, saem-irt, psn (short-form also: truth; replay: one of cbmm, "
                             "saem, psn); default cbmm")
    parser.add_argument("--ability", type=_csv, default=["normal"], metavar="SPEC,...",
                        help="ability distributions, e.g. normal, skew-normal:skew=8, bimodal:separation=4, bank (not replay; "
                             "default normal)")
    parser.add_argument("--reps", type=int, default=20, metavar="R", help="replications per cell (not replay; default 20)")
    parser.add_argument("--seed", type=int, default=None, help="root seed (default: fresh, stored in the manifest for resuming)")
    parser.add_argument("--workers", type=int, default=2,
                        help="worker processes of the local pool or of --scheduler local (default 2; 1 = run in this process)")
    parser.add_argument("--scheduler", default=None, metavar="local|ADDRESS|FILE",
                        help="run on Dask (needs the [distributed] extra): 'local' starts a LocalCluster of --workers "
                             "processes; tcp://host:port or a scheduler file connects to a running cluster "
                             "(default: the local process pool)")
    parser.add_argument("--missing", choices=("mcar", "mar", "mnar"), default=None, help="missingness of simulated data (recovery)")
    parser.add_argument("--missing-rate", type=float, default=0.0, help="share of missing cells (recovery)")
    parser.add_argument("--sizes", type=_csv, default=["10%", "20%", "100"], metavar="S,S,...",
                        help="short-form sizes: counts or percentages (default 10%%,20%%,100)")
    parser.add_argument("--heldout", type=int, default=1000, help="held-out simulated LLMs per replication (short-form; default 1000)")
    parser.add_argument("--selectors", type=_csv, default=["mfi", "random"], metavar="S,S,...",
                        help="CAT item selectors: registered names (mfi, pei, random, score-factor-d, ...; see catengine "
                             "evaluate --help) or 'default', the bank's own default selector (default mfi,random)")
    parser.add_argument("--test-lengths", type=_ints, default=None, metavar="L,L,...",
                        help="test lengths to evaluate (default 5,10,20,40 for cat, 10,25,50 for replay)")
    parser.add_argument("--simulees", type=int, default=200, help="simulated LLMs per CAT replication (default 200)")
    parser.add_argument("--scoring", type=_csv, default=None, metavar="lart,irt",
                        help="CAT scoring: lart (with CoT) and/or irt (default: both for a LaRT bank)")
    parser.add_argument("--true-bank", default=None, metavar="PATH", help="CAT: bank that generates the answers (default --bank)")
    parser.add_argument("--no-report", action="store_true", help="skip the PNG/HTML report")
    add_progress_argument(parser)


def show_progress(args) -> bool:
    """Progress bars as ``--progress / --no-progress`` say (by default where they can be seen)."""
    return progress_enabled(args.progress)


def _write_dataset(ds, path: Path) -> None:
    from catengine.atomic import atomic_output

    with atomic_output(path) as tmp:
        ds.to_netcdf(tmp, engine="netcdf4")


def run(args: argparse.Namespace) -> int:
    """Run the audit described by ``args``; print the summary table; return the exit status."""
    from calibration import audit
    from calibration.audit import RecordsLostError, StoreMismatchError

    out = Path(args.out)
    progress = show_progress(args)
    common = dict(replications=args.reps, rng=args.seed, out=out, n_workers=args.workers,
                  progress=progress, scheduler=args.scheduler)
    try:
        wants_responses = args.kind == "replay"
        if (args.responses is not None) != wants_responses or (args.bank is not None) == wants_responses:
            raise ValueError("--kind replay takes --responses (and no --bank); the other kinds take --bank")
        if args.kind == "replay":
            from calibration.io import load_responses

            if len(args.method) != 1:
                raise ValueError("the replay audit takes one --method")
            data = load_responses(args.responses, cot=args.cot, wide=args.wide, items_as_rows=args.items_as_rows)
            warn_if_items_look_like_rows(data, args.items_as_rows)
            if args.same_llm_pattern:
                data = data.grouped_by(args.same_llm_pattern)
            ds = audit.replay_audit(data, method=args.method[0], folds=args.folds, test_lengths=args.test_lengths or [10, 25, 50],
                                    selector=args.selectors, scoring=args.scoring, sd_scale=args.sd_scale, rng=args.seed, out=out,
                                    n_workers=args.workers, progress=progress, scheduler=args.scheduler)
        elif args.kind == "recovery":
            ds = audit.recovery_audit(args.bank, args.subjects, ability=args.ability, method=args.method,
                                      missing=args.missing, missing_rate=args.missing_rate, **common)
        elif args.kind == "short-form":
            sizes = [int(s) if s.isdigit() else s for s in args.sizes]
            ds = audit.short_form_audit(args.bank, args.subjects, method=args.method, ability=args.ability,
                                        sizes=sizes, n_heldout=args.heldout, **common)
        else:
            if len(args.ability) != 1:
                raise ValueError("the CAT audit takes one --ability distribution")
            ds = audit.cat_audit(args.bank, true_bank=args.true_bank, n_simulees=args.simulees,
                                 test_lengths=args.test_lengths or [5, 10, 20, 40], selector=args.selectors, scoring=args.scoring,
                                 ability=args.ability[0], **common)
    except KeyboardInterrupt:
        print(f"\ncalibration audit: interrupted; the finished replications are in {out}. "
              "Run the same command again to resume.", file=sys.stderr)
        return 130
    except (ValueError, TypeError, OSError, ImportError, StoreMismatchError, RecordsLostError) as exc:
        print(f"calibration audit: error: {exc}", file=sys.stderr)
        return 2
    stem = args.kind.replace("-", "_")
    summary = audit.summarize(ds)
    _write_dataset(ds, out / f"{stem}_results.nc")
    _write_dataset(summary, out / f"{stem}_summary.nc")
    table = audit.summary_table(ds, summary=summary)
    print(table.to_string(index=False))
    n_failed = int((ds["failed"] == 1).sum()) if "failed" in ds else 0
    print(f"\n{int(ds['done'].sum())} records, {n_failed} failed; results: {out / f'{stem}_results.nc'}", file=sys.stderr)
    if not args.no_report:
        paths = audit.render_report(ds, out, summary=summary)
        print(f"report: {paths['html']} and {paths['png']}", file=sys.stderr)
    return 0


def main(argv=None) -> int:
    """Standalone entry (``python -m calibration.cli.audit ...``); ``calibration audit`` is the usual one."""
    parser = argparse.ArgumentParser(prog="calibration audit", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
