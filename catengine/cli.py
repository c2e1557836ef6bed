"""Command-line entry point ``catengine``: ``demo``, ``evaluate`` and ``serve``."""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
from pathlib import Path

DEMO_BANK_ID = "demo_math500_lart"


def default_bank_directory() -> Path:
    """The shipped demo bank: ``item_banks/demo_math500_lart`` beside the package, else under the cwd."""
    here = Path(__file__).resolve().parents[1] / "item_banks" / DEMO_BANK_ID
    return here if here.is_dir() else Path.cwd() / "item_banks" / DEMO_BANK_ID


# ----------------------------------------------------------------------------- shared options
def _add_strategy_options(p: argparse.ArgumentParser, *, max_items: int | None = 50, target_sd: float | None = 0.3) -> None:
    g = p.add_argument_group("selection, estimation and stopping")
    g.add_argument("--selector", default=None,
                   help="mfi | pei | pwi | kl | random | lart-theta | lart-d | lart-a | lart-replication "
                        "(default: lart-theta for LaRT banks, mfi otherwise)")
    g.add_argument("--estimator", default="map", choices=("map", "eap"), help="trait estimator (default map)")
    g.add_argument("--no-cot", action="store_true", help="LaRT banks: ignore CoT lengths when scoring (IRT-only)")
    g.add_argument("--sd-scale", type=float, default=1.0,
                   help="multiply the posterior SDs (intervals, --target-sd, rivals) by this, e.g. the ratio a replay "
                        "audit measured on real LLMs (calibration audit --kind replay); default 1")
    g.add_argument("--max-items", type=int, default=max_items, help=f"stop after this many items (default {max_items})")
    g.add_argument("--min-items", type=int, default=5, help="never stop on precision before this many items (default 5)")
    g.add_argument("--target-sd", type=float, default=target_sd,
                   help=f"stop when the posterior SD of theta is at most this (default {target_sd}; 0 = off)")
    g.add_argument("--min-information", type=float, default=None,
                   help="stop when no eligible item has point information above this")
    g.add_argument("--rivals", default=None,
                   help="comma-separated subject ids of the bank's calibration sample: stop once the order with each is decided")
    g.add_argument("--rival-probability", type=float, default=0.95, help="probability that decides an order (default 0.95)")
    g.add_argument("--randomesque", type=int, default=1, help="propose a random one of the k best items (default 1 = off)")
    g.add_argument("--content-field", default=None, help="item metadata field to balance (e.g. benchmark)")
    g.add_argument("--content-targets", default=None, help="group=proportion,... for --content-field")
    g.add_argument("--sympson-hetter", type=Path, default=None, help="Sympson-Hetter control file (JSON side file)")
    g.add_argument("--seed", type=int, default=None, help="seed of the engine's random draws")


def _strategies(args, bank) -> dict:
    from catengine.estimation import ESTIMATORS
    from catengine.selection import SELECTORS, ContentBalance, Randomesque, SympsonHetter, default_selector
    from catengine.stopping import AllOf, AnyOf, InformationBelow, MaxItems, MinItems, RivalOrderDecided, StandardErrorBelow

    if args.selector is None:
        selector = default_selector(bank.response_model)
    elif args.selector not in SELECTORS:
        raise ValueError(f"unknown selector {args.selector!r}; choose from {', '.join(SELECTORS)}")
    else:
        selector = SELECTORS[args.selector]()
    estimator = ESTIMATORS[args.estimator](use_cot=not args.no_cot, sd_scale=args.sd_scale)
    precise = []
    if args.target_sd:
        precise.append(StandardErrorBelow(args.target_sd))
    if args.rivals:
        precise.append(RivalOrderDecided.from_bank(bank, [r.strip() for r in args.rivals.split(",") if r.strip()],
                                                    probability=args.rival_probability))
    rules = []
    if precise:
        rule = precise[0] if len(precise) == 1 else AnyOf(*precise)
        rules.append(AllOf(MinItems(args.min_items), rule) if args.min_items else rule)
    if args.min_information:
        rules.append(InformationBelow(args.min_information))
    rules.append(MaxItems(min(args.max_items or bank.n_items, bank.n_items)))
    stopping = rules[0] if len(rules) == 1 else AnyOf(*rules)
    exposure = []
    if args.content_field:
        if not args.content_targets:
            raise ValueError("--content-field needs --content-targets group=proportion,...")
        targets = {}
        for part in args.content_targets.split(","):
            if "=" not in part:
                raise ValueError(f"--content-targets entries look like group=proportion, got {part!r}")
            g, p = part.rsplit("=", 1)
            targets[g.strip()] = float(p)
        exposure.append(ContentBalance(field=args.content_field, targets=targets))
    if args.sympson_hetter:
        exposure.append(SympsonHetter.load(args.sympson_hetter, item_ids=bank.item_ids, bank_id=bank.bank_id))
    if args.randomesque and args.randomesque > 1:
        exposure.append(Randomesque(args.randomesque))
    return {"selector": selector, "estimator": estimator, "stopping": stopping, "exposure": tuple(exposure)}


def _open_bank(path):
    from catengine import open_item_bank

    return open_item_bank(path or default_bank_directory())


def _fmt(v, spec):
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


# ----------------------------------------------------------------------------- demo
def _cmd_demo(args) -> int:
    from scipy.stats import norm

    from catengine.demo import run_demo

    bank = _open_bank(args.bank)
    if bank.response_model != "lart":
        print(f"the demo needs a lart bank; {bank.source} is {bank.response_model}", file=sys.stderr)
        return 2
    print(f"bank {bank.bank_id} v{bank.version}: {bank.n_items} items, response model {bank.response_model}, rho = {bank.params.rho:+.2f}")
    print(f"evaluating a simulated new LLM (seed {args.seed}); stop when SD(theta) <= {args.target_sd} or after {args.max_items} items\n")
    print(f"{'step':>4}  {'item':<10} {'answer':<9} {'CoT tokens':>10}   {'theta':>7} {'SD':>6}   {'tau':>7} {'SD':>6}")

    def show(step):
        print(
            f"{step.step:>4}  {step.item_id:<10} {'correct' if step.correct else 'wrong':<9} "
            f"{step.cot_tokens:>10.0f}   {step.theta:>+7.3f} {step.theta_sd:>6.3f}   {step.tau:>+7.3f} {step.tau_sd:>6.3f}"
        )

    (true_theta, true_tau), steps, session = run_demo(
        bank, target_sd=args.target_sd, max_items=args.max_items, rng=args.seed, on_step=show, log=args.log,
    )
    last = steps[-1]
    lo, hi = last.theta - 1.96 * last.theta_sd, last.theta + 1.96 * last.theta_sd
    print(
        f"\nability theta = {last.theta:+.3f} +/- {last.theta_sd:.3f} (95% interval {lo:+.3f} .. {hi:+.3f}), "
        f"from {last.step} of {bank.n_items} items ({100 * last.step / bank.n_items:.0f}%)"
    )
    print(f"speed   tau   = {last.tau:+.3f} +/- {last.tau_sd:.3f}")
    print(f"ahead of {100 * norm.cdf(last.theta):.0f}% of the calibration population (standard normal ability scale)")
    print(f"stopped: {session.stop_reason}")
    print(f"simulation truth: theta = {true_theta:+.3f}, tau = {true_tau:+.3f}")
    return 0


# ----------------------------------------------------------------------------- evaluate
_MISSING = {"", "na", "nan", "n/a", "null", "none"}


def _cell(text):
    text = str(text).strip()
    return None if text.lower() in _MISSING else text


def _number(text, what):
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not a number") from None


def _load_netcdf_row(path: Path, subject: str | None) -> dict[str, tuple[int, float | None]]:
    import xarray as xr

    with xr.open_dataset(path, engine="netcdf4", mask_and_scale=False) as ds:
        if "correct" not in ds or set(ds["correct"].dims) != {"subject", "item"}:
            raise ValueError(f"{path}: not a response file (needs 'correct' on dims subject x item)")
        subjects = [str(s) for s in ds["subject"].values]
        if subject is None:
            raise ValueError(f"{path} holds {len(subjects)} subjects: name one with --subject (e.g. {subjects[0]!r})")
        if subject not in subjects:
            raise ValueError(f"{path} has no subject {subject!r}; it has {', '.join(subjects[:5])}{' ...' if len(subjects) > 5 else ''}")
        row = ds.sel(subject=subject).load()
    items = [str(i) for i in row["item"].values]
    correct = row["correct"].values
    cot = row["cot_length"].values if "cot_length" in row else None
    return {
        item: (int(c), None if cot is None or cot[k] != cot[k] else float(cot[k]))
        for k, (item, c) in enumerate(zip(items, correct))
        if c in (0, 1)
    }


def load_responses(path, subject: str | None = None, cot_path=None) -> dict[str, tuple[int, float | None]]:
    """One subject's answers: item id -> (correct, CoT tokens or None).

    Formats: a long CSV with columns ``item``, ``correct`` and optionally ``cot_tokens`` (or
    ``cot_length``) and ``subject``; a wide CSV (first column the row label, header the item ids,
    one row per subject, e.g. the LaRT data) with ``subject`` naming the row, plus an optional wide
    CoT file of the same shape; JSON (an object item -> correct or -> {"correct", "cot_tokens"}) or
    JSON lines with the long-format keys; a ResponseData netCDF file (``.nc``, as written by
    ``calibration simulate`` or ``ResponseData.to_netcdf``) with ``subject`` naming the row.
    Missing cells (empty, NA, NaN; -1 in netCDF) are left out.
    """
    path = Path(path)
    if path.suffix.lower() == ".nc":
        return _load_netcdf_row(path, subject)
    out: dict[str, tuple[int, float | None]] = {}

    def put(item, correct, cot):
        if correct is None:
            return
        c = _number(correct, f"correct of item {item!r}") if isinstance(correct, str) else correct
        if c not in (0, 1):
            raise ValueError(f"{path}: correct of item {item!r} must be 0 or 1, got {correct!r}")
        t = None if cot is None else (_number(cot, f"CoT of item {item!r}") if isinstance(cot, str) else float(cot))
        out[str(item)] = (int(c), t)

    if path.suffix.lower() in (".json", ".jsonl"):
        text = path.read_text(encoding="utf-8")
        try:
            doc = json.loads(text)
            rows = doc if isinstance(doc, list) else None
        except json.JSONDecodeError:
            doc = None
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        if isinstance(doc, dict):
            for item, v in doc.items():
                if isinstance(v, dict):
                    put(item, v.get("correct"), v.get("cot_tokens", v.get("cot_length")))
                else:
                    put(item, v, None)
        else:
            for r in rows:
                if subject is not None and "subject" in r and str(r["subject"]) != subject:
                    continue
                put(r["item"], r.get("correct"), r.get("cot_tokens", r.get("cot_length")))
        return out
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        raise ValueError(f"{path} is empty")
    header = [h.strip() for h in rows[0]]
    if "item" in header and "correct" in header:
        col = {h: k for k, h in enumerate(header)}
        cot_col = col.get("cot_tokens", col.get("cot_length"))
        for r in rows[1:]:
            if not r:
                continue
            if subject is not None and "subject" in col and r[col["subject"]].strip() != subject:
                continue
            put(r[col["item"]].strip(), _cell(r[col["correct"]]), None if cot_col is None else _cell(r[cot_col]))
        return out
    if subject is None:
        raise ValueError(f"{path} is a wide subject x item file: name the row with --subject")
    items = header[1:]
    row = next((r for r in rows[1:] if r and r[0].strip() == subject), None)
    if row is None:
        raise ValueError(f"{path} has no row {subject!r}; rows include {[r[0] for r in rows[1:6]]}")
    cots = [None] * len(items)
    if cot_path is not None:
        with open(cot_path, newline="", encoding="utf-8") as fh:
            crow = next((r for r in csv.reader(fh) if r and r[0].strip() == subject), None)
        if crow is None:
            raise ValueError(f"{cot_path} has no row {subject!r}")
        cots = [_cell(v) for v in crow[1:]]
    for item, v, t in zip(items, row[1:], cots):
        put(item, _cell(v), t)
    return out


def _cmd_evaluate(args) -> int:
    from catengine.session import CATSession

    bank = _open_bank(args.bank)
    responses = load_responses(args.responses, args.subject, args.cot)
    in_bank = set(bank.item_ids)
    known = [i for i in responses if i in in_bank]
    if not known:
        print(f"none of the {len(responses)} item ids in {args.responses} is in bank {bank.bank_id} "
              f"(bank ids look like {bank.item_ids[:3]})", file=sys.stderr)
        return 2
    strategies = _strategies(args, bank)
    session = CATSession(bank, rng=args.seed, subject=args.subject or "subject", log=args.log, **strategies)
    lart = bank.response_model == "lart"
    if not args.json:
        print(f"bank {bank.bank_id} v{bank.version} ({bank.response_model}, {bank.n_items} items); "
              f"subject {args.subject or '-'}: {len(known)} answered items available")
        print(f"selector {type(session.selector).__name__}, estimator {type(session.estimator).__name__}\n")
        head = f"{'step':>4}  {'item':<14} {'answer':<7} {'criterion':>10}   {'theta':>7} {'SD':>6}"
        print(head + (f"   {'tau':>7} {'SD':>6}" if lart else ""))
    skipped = 0
    while not session.finished:
        item = session.next_item()
        if item not in responses:
            session.exclude(item)
            skipped += 1
            continue
        correct, cot = responses[item]
        est = session.record(item, correct, cot if lart else None)
        rec = session.history[-1]
        if args.json:
            print(json.dumps({"step": rec.step, "item": item, "correct": correct, "cot_length": cot,
                              "criterion": None if math.isnan(rec.criterion) else rec.criterion,
                              "theta": est.theta, "theta_sd": est.theta_sd, "tau": est.tau, "tau_sd": est.tau_sd}))
        else:
            line = (f"{rec.step:>4}  {item:<14} {correct:<7} {_fmt(rec.criterion, '>10.4f'):>10}   "
                    f"{est.theta:>+7.3f} {est.theta_sd:>6.3f}")
            print(line + (f"   {est.tau:>+7.3f} {est.tau_sd:>6.3f}" if lart else ""))
    est = session.estimate
    # the reference: the same estimator on every available answer
    full = CATSession(bank, estimator=session.estimator, stopping=session.stopping)
    for item in known:
        c, t = responses[item]
        full.record(item, c, t if lart else None)
    session.close()
    lo, hi = est.interval(0.95)
    summary = {"subject": args.subject, "n_items": est.n_items, "theta": est.theta, "theta_sd": est.theta_sd,
               "theta_95": [lo, hi], "tau": est.tau, "tau_sd": est.tau_sd, "stop_reason": session.stop_reason,
               "skipped_unanswered": skipped, "full_n_items": len(known), "full_theta": full.estimate.theta,
               "full_theta_sd": full.estimate.theta_sd, "interval_calibration": est.interval_calibration,
               "person_fit": session.person_fit().to_dict()}
    if args.json:
        print(json.dumps({"summary": summary}))
    else:
        print(f"\nadaptive: theta = {est.theta:+.3f} +/- {est.theta_sd:.3f} (95% interval {lo:+.3f} .. {hi:+.3f}) "
              f"from {est.n_items} items; stopped: {session.stop_reason}")
        if est.tau is not None:
            print(f"          tau   = {est.tau:+.3f} +/- {est.tau_sd:.3f}")
        if est.interval_calibration:
            print(f"          interval: {est.interval_calibration}")
        print(f"          person fit: {session.person_fit().message}")
        print(f"all {len(known)} answers: theta = {full.estimate.theta:+.3f} +/- {full.estimate.theta_sd:.3f}")
        if skipped:
            print(f"({skipped} proposed item(s) had no answer in the file and were skipped)")
    return 0


# ----------------------------------------------------------------------------- serve
def _cmd_serve(args) -> int:
    from catengine.session import Engine, serve

    bank = _open_bank(args.bank)
    log = args.log
    if log is not None and log.exists() and log.stat().st_size > 0:
        engine = Engine.resume(log, bank)
        print(f"catengine serve: resumed {len(engine.sessions)} session(s) from {log} "
              "(the configuration is the one in the log)", file=sys.stderr)
    else:
        engine = Engine(bank, rng=args.seed, log=log, **_strategies(args, bank))
        print(f"catengine serve: bank {bank.bank_id} v{bank.version}, {bank.n_items} items; log {log or '(none)'}; "
              "one JSON request per line", file=sys.stderr)
    sys.stderr.flush()
    return serve(engine, sys.stdin, sys.stdout)


# ----------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="catengine", description="Adaptive evaluation of LLMs against calibrated item banks.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="adaptive evaluation of a simulated new LLM against the shipped demo bank")
    demo.add_argument("--bank", type=Path, default=None, help="bank directory or file (default: the shipped demo bank)")
    demo.add_argument("--seed", type=int, default=7, help="seed of the simulated LLM and its answers")
    demo.add_argument("--target-sd", type=float, default=0.2, help="stop when the posterior SD of theta is at most this")
    demo.add_argument("--max-items", type=int, default=50, help="never administer more items than this")
    demo.add_argument("--log", type=Path, default=None, help="append the session to this JSONL log")
    demo.set_defaults(func=_cmd_demo)

    ev = sub.add_parser("evaluate", help="replay a known response vector adaptively and print the trajectory")
    ev.add_argument("--bank", type=Path, default=None, help="bank directory or file (default: the shipped demo bank)")
    ev.add_argument("--responses", type=Path, required=True,
                    help="answers: long CSV (item, correct[, cot_tokens][, subject]), wide CSV (rows = subjects), JSON or JSONL")
    ev.add_argument("--subject", default=None, help="subject id (row of a wide file, filter of a long file)")
    ev.add_argument("--cot", type=Path, default=None, help="wide CSV of CoT token counts matching a wide --responses file")
    ev.add_argument("--log", type=Path, default=None, help="append the session to this JSONL log")
    ev.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    _add_strategy_options(ev)
    ev.set_defaults(func=_cmd_evaluate)

    sv = sub.add_parser("serve", help="JSON-lines server on stdin/stdout for any evaluation harness")
    sv.add_argument("--bank", type=Path, default=None, help="bank directory or file (default: the shipped demo bank)")
    sv.add_argument("--log", type=Path, default=None,
                    help="JSONL session log; an existing log is resumed (its configuration wins over the options)")
    _add_strategy_options(sv)
    sv.set_defaults(func=_cmd_serve)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly (Python docs' recipe)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (ValueError, KeyError, FileNotFoundError, FileExistsError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"catengine {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
