"""``calibration recalibrate``, ``calibration diff`` and ``calibration log``.

    calibration recalibrate --bank DIR --responses FILE [FILE ...] [--cot FILE ...] [--wide]
                            [--method cbmm|saem|psn] [--replace] [--linking stocking-lord|mean-sigma]
                            [--config recalibration.toml]
    calibration diff DIR V1 V2
    calibration log DIR
"""

from __future__ import annotations

import argparse
import sys

from calibration.cli.fit import ITEMS_AS_ROWS_HELP, SAME_LLM_HELP
from catengine.console import add_progress_argument, progress_enabled
from calibration.linking import LINKING_METHODS
from calibration.methods import all_method_names


def add_recalibrate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML file with a [recalibration] table (command-line options override it)")
    parser.add_argument("--bank", help="bank directory (its latest version is the reference)")
    parser.add_argument("--responses", nargs="+", help="new response file(s): long .csv/.jsonl, .nc, or wide CSVs with --wide")
    parser.add_argument("--cot", nargs="+", help="wide CoT-length CSV(s), one per --responses file")
    parser.add_argument("--wide", action="store_true", default=None, help="the response files are wide accuracy CSVs")
    parser.add_argument("--items-as-rows", action="store_true", default=None, help="new responses: " + ITEMS_AS_ROWS_HELP)
    parser.add_argument("--same-llm-pattern", metavar="REGEX", help="new responses: " + SAME_LLM_HELP)
    parser.add_argument("--method", choices=all_method_names(), help="calibration method (default: the bank's own)")
    parser.add_argument("--replace", action="store_true", default=None, help="fit the new data alone instead of merging it with the stored responses")
    parser.add_argument("--linking", choices=LINKING_METHODS, help="scale linking (default stocking-lord)")
    parser.add_argument("--on-conflict", choices=("error", "new"), help="a cell answered differently in stored and new data: fail (default) or take the new value")
    parser.add_argument("--drift-threshold", type=float, help="banks without item SEs: flag items whose a or b moved by more than this (default 0.5)")
    parser.add_argument("--drift-alpha", type=float, help="banks with item SEs: level of the drift test (default 0.05)")
    parser.add_argument("--drift-correction", choices=("holm", "bh"), help="multiple-testing correction of the drift test (default holm)")
    parser.add_argument("--seed", type=int, help="random seed of the refit (default 0)")
    parser.add_argument("--no-interval-check", dest="interval_check", action="store_false", default=None,
                        help="skip the cross-fitted interval and score check of the new version (faster; the bank "
                             "records that it was skipped and sessions use the model's own intervals)")
    add_progress_argument(parser)


def run_recalibrate(args) -> int:
    from calibration.recalibration import RecalibrationConfig, recalibrate

    overrides = {
        "bank": args.bank,
        "responses": args.responses,
        "cot": args.cot,
        "wide": args.wide,
        "items_as_rows": args.items_as_rows,
        "same_llm_pattern": args.same_llm_pattern,
        "mode": "replace" if args.replace else None,
        "method": args.method,
        "linking": args.linking,
        "on_conflict": args.on_conflict,
        "drift_threshold": args.drift_threshold,
        "drift_alpha": args.drift_alpha,
        "drift_correction": args.drift_correction,
        "seed": args.seed,
        "interval_check": args.interval_check,
    }
    try:
        if args.config:
            config = RecalibrationConfig.from_toml(args.config, **overrides)
        else:
            missing = [name for name in ("bank", "responses") if not overrides[name]]
            if missing:
                print(f"calibration recalibrate: error: give --{missing[0]} (or --config FILE)", file=sys.stderr)
                return 2
            config = RecalibrationConfig(**{k: v for k, v in overrides.items() if v is not None})
        result = recalibrate(config, progress=progress_enabled(args.progress))
    except (ValueError, OSError, KeyError) as exc:
        print(f"calibration recalibrate: error: {exc}", file=sys.stderr)
        return 2
    print(result.message)
    if result.diff is not None:
        print(result.diff.format())
    return 0


def add_diff_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bank", help="bank directory")
    parser.add_argument("v1", type=int, help="older version")
    parser.add_argument("v2", type=int, help="newer version")
    parser.add_argument("--drift-threshold", type=float, default=0.5, help="banks without item SEs: flag |da| or |db| above this (default 0.5)")
    parser.add_argument("--drift-alpha", type=float, default=0.05, help="banks with item SEs: level of the drift test (default 0.05)")
    parser.add_argument("--drift-correction", choices=("holm", "bh"), default="holm",
                        help="multiple-testing correction of the drift tests over the common items: holm (family-wise "
                             "error) or bh (false discovery rate; default holm)")
    parser.add_argument("--theta-threshold", type=float, default=0.5,
                        help="list the calibration subjects whose theta moved by more than this (default 0.5)")


def run_diff(args) -> int:
    from calibration.recalibration import diff_banks
    from catengine import open_item_bank

    try:
        old, new = open_item_bank(args.bank, version=args.v1), open_item_bank(args.bank, version=args.v2)
    except (ValueError, OSError) as exc:
        print(f"calibration diff: error: {exc}", file=sys.stderr)
        return 2
    print(diff_banks(old, new, drift_threshold=args.drift_threshold, theta_threshold=args.theta_threshold,
                     drift_alpha=args.drift_alpha, drift_correction=args.drift_correction).format())
    return 0


def add_log_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bank", help="bank directory")


def run_log(args) -> int:
    from calibration.recalibration import bank_lineage

    rows = bank_lineage(args.bank)
    if not rows:
        print(f"calibration log: error: {args.bank} holds no bank versions", file=sys.stderr)
        return 2
    print(f"{'version':>7} {'parent':>6}  {'origin':<13} {'written (UTC)':<25} {'method':<11} {'model':<5} {'items':>6} "
          f"{'subjects':>8}  {'responses':<12}  linking")
    for r in rows:
        parent = r["parent"] if r["parent"] else "-"
        print(
            f"{r['version']:>7} {parent:>6}  {r['origin']:<13} {r['written_at']:<25} {r['method']:<11} {r['response_model']:<5} "
            f"{r['n_items']:>6} {r['n_subjects']:>8}  {r['responses_sha256']:<12}  {r['linking']}"
        )
    roots = [r["version"] for r in rows if not r["parent"]]
    if len(roots) > 1:
        print(f"note: {len(roots)} lineage roots (v{', v'.join(map(str, roots))}): fresh fits written into the same "
              "directory are not linked to each other, so their theta scales are not comparable")
    return 0
