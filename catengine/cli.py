"""Command-line entry point ``catengine``: ``demo``, ``evaluate``, ``serve``, ``banks`` and ``lm-eval``."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

DEMO_BANK_ID = "math500_lart"  # a real shipped bank (LaRT on the MATH500 answers of 158 LLM runs)


def default_bank_directory() -> Path:
    """The default bank of ``demo``, ``evaluate`` and ``serve``: the shipped ``math500_lart``
    (found as package data or in the checkout, see ``catengine.itembank.shipped``), else
    ``item_banks/math500_lart`` under the cwd."""
    from catengine.itembank.shipped import shipped_bank_directory

    return shipped_bank_directory(DEMO_BANK_ID) or Path.cwd() / "item_banks" / DEMO_BANK_ID


# ----------------------------------------------------------------------------- shared options
# the names of catengine.selection.SELECTORS and the rule of default_selector_for (a test keeps both in
# step; the registry is not imported here, so that `--help` stays fast)
SELECTOR_HELP = (
    "mfi | pei | pwi | kl | random | randomised | lart-theta | lart-d | lart-a | lart-replication | score-factor-d | "
    "doubly-robust (default: the bank's own: score-factor-d when it carries score factors, else lart-theta for LaRT banks, "
    "pei for banks with item-parameter uncertainty, mfi otherwise; randomised instead when the bank's score check "
    "found that choice's predicted score worse than the mean of as many random items; doubly-robust mixes the "
    "default with known-probability draws for a doubly robust score)"
)

def _add_strategy_options(p: argparse.ArgumentParser, *, max_items: int | None = 50, target_sd: float | None = 0.3) -> None:
    g = p.add_argument_group("selection, estimation and stopping")
    g.add_argument("--selector", default=None, help=SELECTOR_HELP)
    g.add_argument("--estimator", default="map", choices=("map", "eap"), help="trait estimator (default map)")
    g.add_argument("--no-cot", action="store_true", help="LaRT banks: ignore CoT lengths when scoring (IRT-only)")
    g.add_argument("--sd-scale", type=float, default=1.0,
                   help="scale the posterior SDs (intervals, --target-sd, rivals) by this instead of the bank's "
                        "cross-fitted factor c(L), e.g. by the ratio a replay audit measured on real LLMs "
                        "(calibration audit --kind replay); default 1: the bank's c(L) when it stores one, else none")
    g.add_argument("--max-items", type=int, default=max_items,
                   help=f"stop after this many items (default {max_items}; 0 = the whole bank)")
    g.add_argument("--min-items", type=int, default=5, help="never stop on precision before this many items (default 5)")
    g.add_argument("--target-sd", type=float, default=target_sd,
                   help=f"stop when the posterior SD of theta is at most this (default {target_sd}; 0 = off)")
    g.add_argument("--min-information", type=float, default=None,
                   help="stop when no eligible item has point information above this")
    g.add_argument("--score-within", type=float, default=None, metavar="W",
                   help="stop when the predicted full-benchmark accuracy is known to within +-W (half the 95%% interval, "
                        "a proportion: 0.03 = 3 points); with --target-sd 0 it is the only precision rule")
    g.add_argument("--rivals", default=None,
                   help="comma-separated subject ids of the bank's calibration sample: stop once the order with each is decided")
    g.add_argument("--rival-probability", type=float, default=0.95, help="probability that decides an order (default 0.95)")
    g.add_argument("--randomesque", type=int, default=1, help="propose a random one of the k best items (default 1 = off)")
    g.add_argument("--content-field", default=None, help="item metadata field to balance (e.g. benchmark)")
    g.add_argument("--content-targets", default=None, help="group=proportion,... for --content-field")
    g.add_argument("--sympson-hetter", type=Path, default=None, help="Sympson-Hetter control file (JSON side file)")
    g.add_argument("--seed", type=int, default=None, help="seed of the engine's random draws")


#: the numeric strategy options whose command-line meaning differs from the library's (0 = off or the
#: whole bank) or whose library check would not name them: flag -> (attribute, test, a valid value)
_OPTION_RULES = {
    "--max-items": ("max_items", lambda v: v >= 0, "an integer >= 0 (0 = the whole bank)"),
    "--min-items": ("min_items", lambda v: v >= 0, "an integer >= 0"),
    "--target-sd": ("target_sd", lambda v: math.isfinite(v) and v >= 0, "a number >= 0 (0 = off)"),
    "--score-within": ("score_within", lambda v: math.isfinite(v) and v >= 0, "a number >= 0 (0 = off)"),
    "--min-information": ("min_information", lambda v: math.isfinite(v) and v >= 0, "a number >= 0"),
    "--randomesque": ("randomesque", lambda v: v >= 1, "an integer >= 1 (1 = off)"),
    "--seed": ("seed", lambda v: v >= 0, "an integer >= 0"),
}


def _check_strategy_options(args) -> None:
    """Each numeric strategy option, checked under its own flag name (a value of None = not given)."""
    for flag, (name, ok, what) in _OPTION_RULES.items():
        value = getattr(args, name, None)
        if value is not None and not ok(value):
            raise ValueError(f"{flag} must be {what}, got {value!r}")


def _strategies(args, bank) -> dict:
    from catengine.estimation import ESTIMATORS
    from catengine.selection import SELECTORS, ContentBalance, Randomesque, SympsonHetter, default_selector_for
    from catengine.stopping import (AllOf, AnyOf, InformationBelow, MaxItems, MinItems, RivalOrderDecided,
                                    ScoreIntervalBelow, StandardErrorBelow)

    _check_strategy_options(args)
    if args.selector is None:  # the session's own default for this bank
        from catengine.session.bank_log import item_table

        selector = default_selector_for(item_table(bank))
    elif args.selector not in SELECTORS:
        raise ValueError(f"unknown selector {args.selector!r}; choose from {', '.join(SELECTORS)}")
    else:
        selector = SELECTORS[args.selector]()
    estimator = ESTIMATORS[args.estimator](use_cot=not args.no_cot, sd_scale=args.sd_scale)
    precise = []
    if args.target_sd:
        precise.append(StandardErrorBelow(args.target_sd))
    if args.score_within:
        precise.append(ScoreIntervalBelow(args.score_within))
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
    if args.randomesque > 1:
        exposure.append(Randomesque(args.randomesque))
    return {"selector": selector, "estimator": estimator, "stopping": stopping, "exposure": tuple(exposure)}


def _open_bank(path):
    from catengine import open_item_bank

    return open_item_bank(path or default_bank_directory())


def _fmt(v, spec):
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


# ----------------------------------------------------------------------------- demo
def _cmd_demo(args) -> int:
    import numpy as np
    from scipy.stats import norm

    from catengine.demo import run_demo

    bank = _open_bank(args.bank)
    if bank.response_model != "lart":
        print(f"the demo needs a lart bank; {bank.source} is {bank.response_model}", file=sys.stderr)
        return 2
    from catengine.itembank.shipped import bank_card

    card = bank_card(bank)
    print(f"bank {bank.bank_id} v{bank.version}: {bank.n_items} items, response model {bank.response_model}, rho = {bank.params.rho:+.2f}")
    if card["benchmark"] and card["n_subjects"]:
        print(f"  {card['benchmark']}, calibrated by {bank.attrs['calibration_method']} on {card['n_subjects']} LLM runs "
              f"({card['calibration_date'] or bank.attrs['created_at'][:10]}); license {card['license']}")
    print(f"evaluating a simulated new LLM drawn from the bank's population (seed {args.seed}); "
          f"stop when SD(theta) <= {args.target_sd} or after {args.max_items} items\n")
    width = max(10, max(len(i) for i in bank.item_ids))
    print(f"{'step':>4}  {'item':<{width}} {'answer':<9} {'CoT tokens':>10}   {'theta':>7} {'SD':>6}   {'tau':>7} {'SD':>6}")

    def show(step):
        print(
            f"{step.step:>4}  {step.item_id:<{width}} {'correct' if step.correct else 'wrong':<9} "
            f"{step.cot_tokens:>10.0f}   {step.theta:>+7.3f} {step.theta_sd:>6.3f}   {step.tau:>+7.3f} {step.tau_sd:>6.3f}"
        )

    (true_theta, true_tau), steps, session = run_demo(
        bank, target_sd=args.target_sd, max_items=args.max_items, rng=args.seed, on_step=show, log=args.log,
    )
    last = steps[-1]
    lo, hi = session.estimate.interval(0.95)  # the bank's cross-fitted multiplier when it has one
    print(
        f"\nability theta = {last.theta:+.3f} +/- {last.theta_sd:.3f} (95% interval {lo:+.3f} .. {hi:+.3f}), "
        f"from {last.step} of {bank.n_items} items ({100 * last.step / bank.n_items:.0f}%)"
    )
    print(f"speed   tau   = {last.tau:+.3f} +/- {last.tau_sd:.3f}")
    print(f"ahead of {100 * norm.cdf(last.theta):.0f}% of the calibration population (standard normal ability scale)")
    subjects = bank.subjects
    if subjects is not None and subjects.sizes.get("subject", 0):
        thetas = subjects["theta"].values
        nearest = int(np.argmin(np.abs(thetas - last.theta)))
        print(f"  ranks above {int(np.sum(thetas < last.theta))} of the {thetas.size} calibration LLMs; nearest: "
              f"{subjects['subject'].values[nearest]} (theta {thetas[nearest]:+.3f})")
    score = session.predicted_score()
    benchmark = card.get("benchmark") or bank.bank_id
    text = (f"predicted {benchmark} accuracy over all {bank.n_items} items: {100 * score.accuracy:.1f}% "
            f"(95% interval {100 * score.low:.1f}% .. {100 * score.high:.1f}%)")
    if score.cot_total is not None:
        text += (f"; running it in full would take about {score.cot_total / 1e6:.2f}M CoT tokens "
                 f"({score.cot_total_low / 1e6:.2f}M .. {score.cot_total_high / 1e6:.2f}M)")
    print(text)
    if score.calibration:
        print(f"score interval: {score.calibration}")
    print(f"stopped: {session.stop_reason}")
    print(f"simulation truth: theta = {true_theta:+.3f}, tau = {true_tau:+.3f}")
    if session.estimate.interval_calibration:
        print(f"interval: {session.estimate.interval_calibration}")
    audit = card.get("replay_audit")
    if isinstance(audit, dict) and not card.get("interval_calibration"):
        figures = audit.get("selectors", {}).get(getattr(session.selector, "name", None))
        if figures:
            lengths = "/".join(str(v) for v in audit["test_length"])
            ratios = "/".join(f"{v:.1f}" for v in figures["sd_ratio"])
            print(f"note: on real LLMs this bank's adaptive intervals were {ratios}x too narrow after {lengths} items "
                  f"(replay audit in the bank card, `catengine banks`); widen them with `evaluate --sd-scale`")
    return 0


# ----------------------------------------------------------------------------- evaluate
def load_responses(path, subject: str | None = None, cot_path=None) -> dict[str, tuple[int, float | None]]:
    """One subject's answers: item id -> (correct, CoT tokens or None), read by the same readers as
    ``calibration fit`` (:func:`catengine.responses.load_subject_answers`).

    Formats: a long CSV / JSONL / JSON with columns ``item``, ``correct`` and optionally
    ``cot_tokens`` (or ``cot_length``) and ``subject``; a wide CSV (first column the row label,
    header the item ids, one row per subject, e.g. the LaRT data) with ``subject`` naming the row,
    plus an optional wide CoT file with the same rows and header in the same order; JSON (an
    object item -> correct or -> {"correct", "cot_tokens"}); a ResponseData netCDF file (``.nc``)
    with ``subject`` naming the row. Text files may be compressed (.gz, .bz2, .xz). Missing cells
    (empty, NA, NaN; -1 in netCDF) are left out. Every problem is a ResponseFileError (a ValueError)
    naming the file, line, column and value.
    """
    from catengine.responses import load_subject_answers

    return load_subject_answers(path, subject, cot_path)


def _cmd_evaluate(args) -> int:
    from catengine.session import CATSession

    bank = _open_bank(args.bank)
    responses = load_responses(args.responses, args.subject, args.cot)
    in_bank = set(bank.item_ids)
    known = [i for i in responses if i in in_bank]
    foreign = [i for i in responses if i not in in_bank]
    if foreign and (not known or not args.ignore_unknown_items):
        from catengine.itembank.ids import foreign_ids_message

        lead = (f"none of the {len(responses)} item ids in {args.responses} is in the bank" if not known
                else f"{args.responses}")
        hint = "" if not known else " (--ignore-unknown-items scores the others)"
        print(f"catengine evaluate: error: {lead}: {foreign_ids_message(bank.bank_id, bank.item_ids, foreign)}{hint}",
              file=sys.stderr)
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
    score = session.predicted_score(record=True)  # design-based whenever the draws allow it, else the model's
    design = score if score.method == "design" else None
    model = session.predicted_score(method="model") if design is not None else score
    session.close()
    lo, hi = est.interval(0.95)
    full_accuracy = sum(c for c, _ in (responses[i] for i in known)) / len(known)
    summary = {"subject": args.subject, "n_items": est.n_items, "theta": est.theta, "theta_sd": est.theta_sd,
               "theta_95": [lo, hi], "tau": est.tau, "tau_sd": est.tau_sd, "stop_reason": session.stop_reason,
               "skipped_unanswered": skipped, "ignored_unknown_items": len(foreign), "full_n_items": len(known),
               "full_theta": full.estimate.theta, "full_theta_sd": full.estimate.theta_sd, "score": score.to_dict(),
               "model_score": model.to_dict(), "design_score": None if design is None else design.to_dict(),
               "full_accuracy": full_accuracy,
               "interval_calibration": est.interval_calibration, "person_fit": session.person_fit().to_dict()}
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
        print(f"\npredicted full-benchmark score: {score}")
        if model is not score:
            print(f"          the model's prediction: {model}")
        if model.calibration:
            print(f"          model's interval: {model.calibration}")
        for label, c in score.by_category.items():
            print(f"  {score.category_field} {label}: {100 * c.accuracy:.1f}% ({100 * c.low:.1f}-{100 * c.high:.1f}%), "
                  f"{c.n_observed} of {c.n_items} items answered")
        print(f"observed accuracy on all {len(known)} answers in the file: {100 * full_accuracy:.1f}%")
        if skipped:
            print(f"({skipped} proposed item(s) had no answer in the file and were skipped)")
        if foreign:
            print(f"({len(foreign)} answer(s) to items not in the bank were ignored, first {foreign[0]!r})")
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


# ----------------------------------------------------------------------------- banks
def _card_lines(card: dict) -> list[str]:
    """A bank card as a few indented lines (``catengine banks``)."""
    path = Path(str(card["path"]))
    try:
        path = path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        pass
    lines = [f"  {path}"]
    if card.get("error"):
        return lines + [f"  unreadable: {card['error']}"]
    if card.get("description"):
        lines.append(f"  {card['description']}")
    source = card.get("source")
    if isinstance(source, dict):
        commit = str(source.get("commit", ""))[:12]
        lines.append(f"  source: {source.get('repository', source.get('dataset', ''))}"
                     + (f" @ {commit}" if commit else "") + (f"; paper: {source['paper']}" if source.get("paper") else ""))
    elif source:
        lines.append(f"  source: {source}")
    lines.append(f"  calibrated: {card.get('calibration_method') or 'n/a'} on {card.get('n_subjects')} subjects, "
                 f"{card.get('calibration_date') or str(card.get('created_at') or '')[:10]}")
    if card.get("item_id_scheme"):
        lines.append(f"  item ids: {card['item_id_scheme']}")
    audit = card.get("replay_audit")
    if isinstance(audit, dict):
        lengths = "/".join(str(v) for v in audit.get("test_length", []))
        for sel, f in audit.get("selectors", {}).items():
            lines.append(f"  replay audit, {sel} after {lengths} items: 95% coverage "
                         f"{'/'.join(f'{v:.2f}' for v in f['coverage'])} (promised {'/'.join(f'{v:.2f}' for v in f['promised'])}), "
                         f"SD ratio {'/'.join(f'{v:.1f}' for v in f['sd_ratio'])}")
    check = card.get("interval_calibration")
    if isinstance(check, dict):
        for sel, cur in check.get("curves", {}).items():
            lengths = "/".join(str(v) for v in cur.get("test_length", []))
            lines.append(f"  interval check ({check.get('folds', '?')} folds), {sel} after {lengths} items: model's 95% "
                         f"coverage {'/'.join(f'{v:.2f}' for v in cur.get('coverage_model', []))}, "
                         f"SD factor c(L) applied {'/'.join(f'{v:.2f}' for v in cur.get('c', []))}")
        for sel, cur in (check.get("score_curves") or {}).items():
            model, rand = cur.get("accuracy_mae"), cur.get("random_mean_mae")
            if model and rand and len(model) == len(rand):
                lengths = "/".join(str(v) for v in cur.get("test_length", []))
                ratios = "/".join("-" if r <= 0 else f"{m / r:.2f}" for m, r in zip(model, rand))
                lines.append(f"  score check, {sel} after {lengths} items: model-based accuracy MAE x random items' "
                             f"{ratios}")
        usual = check.get("selection")
        if usual:
            from catengine.scoring.calibration import ScoreCalibration

            scores = ScoreCalibration.from_record(check, "", "card")
            lines.append(f"  sessions default to randomised selection and the design-based score: the check found {usual}'s "
                         "model-based score worse than random items' at its longest length"
                         if scores is not None and scores.loses_to_random(usual) else f"  sessions default to {usual} selection")
    return lines


def _cmd_banks(args) -> int:
    from catengine.itembank.shipped import list_banks

    cards = list_banks(*args.directories, shipped=not args.no_shipped)
    if args.json:
        print(json.dumps(cards, indent=2, default=str))
        return 0
    if not cards:
        print("no item banks found" + (f" under {', '.join(map(str, args.directories))}" if args.directories else ""))
        return 0
    for card in cards:
        head = (f"{card['bank_id']} v{card['version']}  {card['response_model']}  {card['n_items']} items  "
                f"{card.get('benchmark') or '-'}  license {card.get('license') or 'not stated'}"
                + ("  (shipped)" if card.get("shipped") else ""))
        print(head)
        print("\n".join(_card_lines(card)) + "\n")
    return 0


# ----------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="catengine", description="Adaptive evaluation of LLMs against calibrated item banks.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="adaptive evaluation of a simulated new LLM against a real shipped bank (MATH500, LaRT)")
    demo.add_argument("--bank", type=Path, default=None, help="bank directory or file, or a shipped bank id (default: math500_lart; `catengine banks` lists them)")
    demo.add_argument("--seed", type=int, default=7, help="seed of the simulated LLM and its answers (default 7)")
    demo.add_argument("--target-sd", type=float, default=0.2,
                      help="stop when the posterior SD of theta is at most this, after at least 5 items (default 0.2)")
    demo.add_argument("--max-items", type=int, default=50, help="never administer more items than this (default 50)")
    demo.add_argument("--log", type=Path, default=None, help="append the session to this JSONL log")
    demo.set_defaults(func=_cmd_demo)

    ev = sub.add_parser("evaluate", help="replay a known response vector adaptively and print the trajectory")
    ev.add_argument("--bank", type=Path, default=None, help="bank directory or file, or a shipped bank id (default: math500_lart; `catengine banks` lists them)")
    ev.add_argument("--responses", type=Path, required=True,
                    help="answers: long CSV (item, correct[, cot_tokens][, subject]), wide CSV (rows = subjects), JSON or "
                         "JSONL, or a ResponseData .nc (with --subject naming the row); text files may be .gz/.bz2/.xz")
    ev.add_argument("--subject", default=None, help="subject id (row of a wide file, filter of a long file)")
    ev.add_argument("--cot", type=Path, default=None, help="wide CSV of CoT token counts matching a wide --responses file")
    ev.add_argument("--log", type=Path, default=None, help="append the session to this JSONL log")
    ev.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    ev.add_argument("--ignore-unknown-items", action="store_true",
                    help="skip answers to items that are not in the bank (default: an error naming them)")
    _add_strategy_options(ev)
    ev.set_defaults(func=_cmd_evaluate)

    from catengine.session.serve import PROTOCOL_HELP

    sv = sub.add_parser("serve", help="JSON-lines server on stdin/stdout for any evaluation harness",
                        description=PROTOCOL_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    sv.add_argument("--bank", type=Path, default=None, help="bank directory or file, or a shipped bank id (default: math500_lart; `catengine banks` lists them)")
    sv.add_argument("--log", type=Path, default=None,
                    help="JSONL session log; an existing log is resumed (its configuration wins over the options)")
    _add_strategy_options(sv)
    sv.set_defaults(func=_cmd_serve)

    bk = sub.add_parser("banks", help="list the shipped item banks and any under the given directories, with their cards")
    bk.add_argument("directories", nargs="*", type=Path, metavar="DIR",
                    help="also list the banks at or below these directories (latest version of each)")
    bk.add_argument("--json", action="store_true",
                    help="print a JSON list of cards (bank_id, version, path, benchmark, response_model, n_items, "
                         "n_subjects, license, source, calibration_method, calibration_date, replay_audit, ...)")
    bk.add_argument("--no-shipped", action="store_true", help="list only the banks under DIR")
    bk.set_defaults(func=_cmd_banks)

    from catengine.adapters.lm_eval import add_subcommand as add_lm_eval

    add_lm_eval(sub, add_strategy_options=_add_strategy_options, strategies=_strategies, open_bank=_open_bank)
    return parser


def main(argv=None) -> int:
    """The ``catengine`` command. Run as the console script (``argv`` None), warnings print as one
    line each (``catengine.console.plain_warnings``); called with ``argv`` (tests, scripts), as Python
    shows them."""
    from catengine.console import plain_warnings

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with plain_warnings("catengine", enabled=argv is None):
            return args.func(args)
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly (Python docs' recipe)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (ValueError, KeyError, OSError) as exc:  # OSError: missing, unreadable or unwritable files
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"catengine {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
