"""``calibration fit <method>``: one subcommand per registered method, its options generated from
the calibrator's declared settings (``SETTINGS`` / ``EXPORT_SETTINGS``, see ``calibration.base``).

``calibration fit --method <method> ...`` is the same command (the spelling the README and older
scripts use). Reading the responses and writing the bank happen here, once, for every method.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from catengine.console import add_progress_argument, progress_enabled
from calibration.methods import METHODS, get_method

_DEST = "setting_"  # argparse destination prefix of a method's own options
SAME_LLM_HELP = ("subject ids equal once every match of REGEX is removed (case folded) are runs of one LLM; the "
                 "held-out check and the replay audit hold them out together, e.g. '_(zero|one)_shot$'")
ITEMS_AS_ROWS_HELP = ("the matrix holds one row per item and one column per LLM (e.g. ChemBench's "
                      "binary_matrix_items_x_models.csv.gz): transpose it after reading")


def warn_if_items_look_like_rows(data, items_as_rows: bool) -> None:
    """A note on stderr when the rows read as LLMs outnumber the items many times over: LLM
    benchmarks have far more items than LLMs, so the file may hold one row per item."""
    if not items_as_rows and data.n_subjects >= 100 and data.n_subjects > 5 * data.n_items:
        print(f"note: the responses have {data.n_subjects} rows, read as LLMs, and {data.n_items} items; LLM benchmarks "
              "usually have far more items than LLMs. If each row is an item, pass --items-as-rows.", file=sys.stderr)


def add_common_arguments(fit: argparse.ArgumentParser, method) -> None:
    fit.add_argument("--responses", required=True, metavar="FILE",
                     help="long table (.csv/.jsonl: subject,item,correct[,cot_tokens]), ResponseData .nc, "
                          "or a wide accuracy CSV (with --wide or --cot)")
    fit.add_argument("--cot", metavar="FILE", help="wide CoT-length CSV matching a wide accuracy CSV")
    fit.add_argument("--wide", action="store_true", help="--responses is a wide accuracy CSV (rows LLMs, header item ids)")
    fit.add_argument("--items-as-rows", action="store_true", help=ITEMS_AS_ROWS_HELP)
    fit.add_argument("--same-llm-pattern", metavar="REGEX", help=SAME_LLM_HELP)
    fit.add_argument("--bank-id", required=True, metavar="ID", help="bank id; versions go to OUT/ID/ID_v<N>.nc")
    fit.add_argument("--out", default="item_banks", metavar="DIR", help="root directory of item banks (default item_banks)")
    own = f"{method.cli_seed}" if method.cli_seed is not None else "none: a fresh seed each run"
    fit.add_argument("--seed", type=int, default=None, help=f"random seed (default {own})")
    add_progress_argument(fit)
    fit.add_argument("--keep-responses", action=argparse.BooleanOptionalAction, default=True,
                     help="store the responses in the bank so that it can be recalibrated (default on)")
    fit.add_argument("--no-interval-check", dest="interval_check", action="store_false", default=True,
                     help="skip the cross-fitted interval and score check (faster; the bank records that it was "
                          "skipped and sessions use the model's own intervals; `calibration recalibrate` runs it)")
    fit.add_argument("--include-subjects", metavar="IDS|FILE",
                     help="calibrate on these LLMs only: comma-separated ids, or a file with one id per line")
    fit.add_argument("--exclude-subjects", metavar="IDS|FILE",
                     help="leave these LLMs out (e.g. to hold one out): comma-separated ids, or a file with one id per line")


def subject_id_list(value: str | None) -> list[str] | None:
    """``--include/--exclude-subjects``: a file of ids (one per line, # comments) or comma-separated ids."""
    if value is None:
        return None
    path = Path(value)
    if path.is_file():
        lines = path.read_text(encoding="utf-8").splitlines()
        ids = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    else:
        ids = [v.strip() for v in value.split(",") if v.strip()]
    if not ids:
        raise ValueError(f"no subject ids in {value!r}")
    return ids


def _announce_lineage(directory: Path, bank_id: str) -> None:
    """A fresh fit into a directory that already holds versions starts a new lineage: say so."""
    from catengine.itembank import list_versions

    versions = sorted(list_versions(directory)) if directory.is_dir() else []
    if versions:
        print(
            f"note: {directory} already holds v{versions[0]}..v{versions[-1]} of {bank_id!r}; this fit is written as a "
            "new lineage root (parent 0), not linked to them, so its theta scale is not comparable with theirs. "
            "To add LLMs to an existing bank and keep its scale, use `calibration recalibrate`.",
            file=sys.stderr,
        )


def add_method_arguments(parser: argparse.ArgumentParser, method) -> None:
    """The options of ``method`` (a registry entry) from its calibrator's declared settings."""
    cls = method.calibrator
    group = parser.add_argument_group(method.title)
    defaults = cls.default_settings()
    for name, setting in {**cls.SETTINGS, **cls.EXPORT_SETTINGS}.items():
        if setting.flag is None:
            continue
        dest = _DEST + name
        default = defaults.get(name, True if name in cls.EXPORT_SETTINGS else None)
        if setting.switch_value is not None:
            group.add_argument(setting.flag, dest=dest, action="store_const", const=setting.switch_value,
                               default=default, help=setting.help)
        elif isinstance(default, bool):
            group.add_argument(setting.flag, dest=dest, action="store_true", default=default, help=setting.help)
        else:
            kind = setting.type or type(default)
            # a setting with a fixed set of values shows them ({svd,random}); argparse hides them behind a metavar
            metavar = setting.metavar or (None if setting.choices else setting.flag.lstrip("-").replace("-", "_").upper())
            group.add_argument(setting.flag, dest=dest, type=kind, default=default, choices=setting.choices,
                               metavar=metavar, help=setting.help)


def _values(args, specs) -> dict:
    out = {}
    for name, setting in specs.items():
        if setting.flag is None:
            continue
        value = getattr(args, _DEST + name)
        out[name] = setting.from_cli(value) if setting.from_cli else value
    return out


def build_calibrator(args):
    """The calibrator that ``args`` (parsed ``calibration fit`` options) describe."""
    method = get_method(args.method)
    cls = method.calibrator
    kwargs = _values(args, cls.SETTINGS)
    names = set(cls._param_names())
    if "rng" in names:
        kwargs["rng"] = method.cli_seed if args.seed is None else args.seed
    if "progress" in names:
        kwargs["progress"] = args.progress
    return cls(**kwargs)


def export_options(args) -> dict:
    return _values(args, get_method(args.method).calibrator.EXPORT_SETTINGS)


def add_fit_parser(sub) -> None:
    """``fit`` with one subcommand per registered method."""
    fit = sub.add_parser(
        "fit",
        help="calibrate a new item bank version from a response file",
        description="Calibrate a new item bank version: calibration fit METHOD --responses FILE --bank-id ID "
                    "(also spelled calibration fit --method METHOD ...). "
                    "calibration fit METHOD --help lists that method's options.",
    )
    methods = fit.add_subparsers(dest="method", required=True, metavar="METHOD")
    for method in METHODS.values():
        command = methods.add_parser(method.name, aliases=list(method.aliases), help=method.summary,
                                     description=f"{method.summary} (writes a {method.response_model} bank)")
        add_common_arguments(command, method)
        add_method_arguments(command, method)
        command.set_defaults(func=run_fit)


def method_first(argv: list[str]) -> list[str]:
    """``fit --method X ...`` rewritten as ``fit X ...`` (the subcommand spelling)."""
    if not argv or argv[0] != "fit":
        return argv
    rest = argv[1:]
    for k, arg in enumerate(rest):
        if arg == "--method" and k + 1 < len(rest):
            return ["fit", rest[k + 1], *rest[:k], *rest[k + 2:]]
        if arg.startswith("--method="):
            return ["fit", arg.split("=", 1)[1], *rest[:k], *rest[k + 1:]]
    return argv


def run_fit(args) -> int:
    """Load the responses, fit with the chosen method, write a new bank version, print its path.
    Ctrl-C stops it with one line on stderr and exit status 130."""
    try:
        return _run_fit(args)
    except KeyboardInterrupt:
        print("\ncalibration fit: interrupted", file=sys.stderr)
        return 130


def _run_fit(args) -> int:
    from calibration.io import load_responses
    from catengine import write_item_bank

    method = get_method(args.method)
    args.progress = progress_enabled(args.progress)
    try:
        data = load_responses(args.responses, cot=args.cot, wide=args.wide, items_as_rows=args.items_as_rows)
        warn_if_items_look_like_rows(data, args.items_as_rows)
        if args.same_llm_pattern:
            data = data.grouped_by(args.same_llm_pattern)
        include, exclude = subject_id_list(args.include_subjects), subject_id_list(args.exclude_subjects)
        if include is not None or exclude is not None:
            n_before = data.n_subjects
            data = data.select_subjects(include=include, exclude=exclude)
            print(f"calibrating on {data.n_subjects} of {n_before} LLMs", file=sys.stderr)
        if method.needs_cot and not data.has_cot:
            raise ValueError(f"a {method.response_model} bank needs CoT lengths: pass --cot with a wide accuracy CSV, "
                             "or a file with cot_tokens")
        calibrator = build_calibrator(args)
        calibrator.validated_settings()  # a bad setting is not the data's fault: checked before the data are blamed
        try:
            calibrator.fit(data)
        except ValueError as exc:  # the data cannot be calibrated as they are: say which file
            raise ValueError(f"{Path(args.responses).name}: {exc}") from None
        check = run_data_check(data, calibrator)
        bank = calibrator.to_item_bank(args.bank_id, interval_check="auto" if args.interval_check else False,
                                       keep_responses=args.keep_responses, **export_options(args))
        if not args.interval_check:
            from calibration.recalibration import SKIPPED_ON_REQUEST

            bank = bank.replace_attrs(interval_calibration_skipped=f"{SKIPPED_ON_REQUEST} (calibration fit "
                                      "--no-interval-check): sessions use the model's own intervals")
        if check is not None:
            bank = bank.replace_attrs(data_check=check.to_json())
        _announce_lineage(Path(args.out) / args.bank_id, args.bank_id)
        path = write_item_bank(bank, Path(args.out) / args.bank_id)
    except (ValueError, TypeError, OSError) as exc:
        print(f"calibration fit: error: {exc}", file=sys.stderr)
        return 2
    print(calibrator.fit_summary(data), file=sys.stderr)
    print(_interval_summary(bank), file=sys.stderr)
    print(path)
    return 0


def run_data_check(data, calibrator):
    """The data check of the responses against the fitted items (``calibration.data_check``): its
    summary goes to stderr at once; a flag never stops the fit, and neither does a failed check."""
    import numpy as np

    from calibration.data_check import check_response_data

    try:
        check = check_response_data(data, params=getattr(calibrator, "item_params_", None),
                                    theta=getattr(calibrator, "theta_", None))
    except (ValueError, TypeError, ArithmeticError, np.linalg.LinAlgError) as exc:
        print(f"data check: skipped ({exc})", file=sys.stderr)
        return None
    print(check.summary(), file=sys.stderr)
    return check


def _interval_summary(bank) -> str:
    """One paragraph on the bank's held-out check (what sessions will apply)."""
    import json

    from calibration.heldout import describe

    text = bank.attrs.get("interval_calibration")
    if not text:
        return f"interval check: skipped ({bank.attrs.get('interval_calibration_skipped', 'not run')})"
    return describe(json.loads(text))
