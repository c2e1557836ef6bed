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
    "doubly-robust (default: doubly-robust, every step a known-probability design draw; its adaptive rule, for "
    "a share below 1, is the bank's own: score-factor-d when it carries score factors, else lart-theta for LaRT "
    "banks, pei for banks with item-parameter uncertainty, mfi otherwise; randomised instead when the bank's score "
    "check found the model's predicted score worse than the mean of as many random items)"
)

#: the stopping options: none given = catengine.stopping.default_stopping(n) for a bank of n items
STOPPING_OPTIONS = ("target_sd", "score_within", "rivals", "min_items", "max_items", "min_information")


def default_stopping_parts(n_items: int):
    """(minimum items, precision rules, item cap) of ``catengine.stopping.default_stopping(n_items)``:
    the rules of its ``AnyOf`` branches other than ``MaxItems``, with their ``MinItems`` floors taken
    out (the largest floor is the minimum), and its item limit (None: it has none)."""
    from catengine.stopping import AllOf, AnyOf, MaxItems, MinItems, default_stopping
    from catengine.stopping.rules import item_limit

    rule = default_stopping(n_items)
    branches = rule.rules if isinstance(rule, AnyOf) else (rule,)
    floor, precision = 0, []
    for branch in branches:
        if isinstance(branch, MaxItems):
            continue
        parts = branch.rules if isinstance(branch, AllOf) else (branch,)
        floor = max([floor] + [p.n for p in parts if isinstance(p, MinItems)])
        rest = [p for p in parts if not isinstance(p, MinItems)]
        if rest:
            precision.append(rest[0] if len(rest) == 1 else AllOf(*rest))
    return floor, precision, item_limit(rule)


def stopping_with_overrides(n_items: int, *, target_sd: float | None = None, score_within: float | None = None,
                            rivals=None, min_items: int | None = None, max_items: int | None = None,
                            min_information: float | None = None):
    """``catengine.stopping.default_stopping(n_items)`` with the parts given here replacing its own
    (None = keep the default's part), as the command-line options set them:

    * ``target_sd`` (posterior SD of theta), ``score_within`` (half-width of the predicted accuracy's
      95% interval) and ``rivals`` (a ``RivalOrderDecided``): given together or alone, they replace
      the default's precision rule (the test stops on whichever is met first); 0 turns one off;
    * ``min_items``: the floor before a precision rule may stop the test;
    * ``max_items``: the item cap (0 = the whole bank; never more than the bank);
    * ``min_information``: also stop when no eligible item has information above it.

    With nothing given it is ``default_stopping(n_items)`` itself."""
    from catengine.stopping import (AllOf, AnyOf, InformationBelow, MaxItems, MinItems, ScoreIntervalBelow,
                                    StandardErrorBelow, default_stopping)

    given = (target_sd, score_within, rivals, min_items, max_items, min_information)
    if all(v is None for v in given):
        return default_stopping(n_items)
    floor, precision, cap = default_stopping_parts(n_items)
    if (target_sd, score_within, rivals) != (None, None, None):
        precision = [rule for rule in (StandardErrorBelow(target_sd) if target_sd else None,
                                       ScoreIntervalBelow(score_within) if score_within else None, rivals) if rule]
    if min_items is not None:
        floor = min_items
    if max_items is not None:
        cap = max_items or n_items
    rules = []
    if precision:
        rule = precision[0] if len(precision) == 1 else AnyOf(*precision)
        rules.append(AllOf(MinItems(floor), rule) if floor else rule)
    if min_information:
        rules.append(InformationBelow(min_information))
    rules.append(MaxItems(min(cap or n_items, n_items)))
    return rules[0] if len(rules) == 1 else AnyOf(*rules)


def _stopping_defaults_text() -> dict[str, str]:
    """Each stopping option's default, in words, from default_stopping (for a bank larger than its cap)."""
    from catengine.console import describe_stopping
    from catengine.stopping import ScoreIntervalBelow, StandardErrorBelow, default_stopping

    n = 10**6
    floor, precision, cap = default_stopping_parts(n)
    sd = next((r.target for r in precision if isinstance(r, StandardErrorBelow) and r.trait == "theta"), None)
    within = next((r.half_width for r in precision if isinstance(r, ScoreIntervalBelow)), None)
    return {"rule": describe_stopping(default_stopping(n)), "min_items": str(floor),
            "max_items": "the whole bank" if cap is None or cap >= n else f"{cap}, or the whole bank when it is smaller",
            "target_sd": "off" if sd is None else f"{sd:g}", "score_within": "off" if within is None else f"{within:g}"}


def _add_stopping_options(p) -> None:
    """--target-sd, --score-within, --min-items, --max-items: each replaces its part of default_stopping."""
    d = _stopping_defaults_text()
    p.add_argument("--score-within", type=float, default=None, metavar="W",
                   help="stop when the predicted full-benchmark accuracy is known to within +-W (half the 95%% "
                        f"interval, a proportion: 0.05 = 5 points) (default {d['score_within']}; 0 = off)")
    p.add_argument("--target-sd", type=float, default=None,
                   help=f"stop when the posterior SD of theta is at most this (default {d['target_sd']}; 0 = off); "
                        "given with --score-within, whichever is met first")
    p.add_argument("--min-items", type=int, default=None,
                   help=f"never stop on precision before this many items (default {d['min_items']})")
    p.add_argument("--max-items", type=int, default=None,
                   help=f"stop after this many items at the latest (default {d['max_items']}; 0 = the whole bank)")


def _stopping_description(*, rivals: bool = True) -> str:
    d = _stopping_defaults_text()
    precision = "--target-sd, --score-within and --rivals" if rivals else "--target-sd and --score-within"
    return (f"Without stopping options the test uses catengine.stopping.default_stopping: {d['rule']} (the cap "
            f"is never more than the bank). {precision} replace its precision rule (together: whichever is met "
            "first); --min-items and --max-items replace its item counts.")


def _add_strategy_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("selection, estimation and stopping", description=_stopping_description())
    g.add_argument("--selector", default=None, help=SELECTOR_HELP)
    g.add_argument("--estimator", default="map", choices=("map", "eap"), help="trait estimator (default map)")
    g.add_argument("--no-cot", action="store_true", help="LaRT banks: ignore CoT lengths when scoring (IRT-only)")
    g.add_argument("--sd-scale", type=float, default=1.0,
                   help="scale the posterior SDs (intervals, --target-sd, rivals) by this instead of the bank's "
                        "cross-fitted factor c(L), e.g. by the ratio a replay audit measured on real LLMs "
                        "(calibration audit --kind replay); default 1: the bank's c(L) when it stores one, else none")
    _add_stopping_options(g)
    g.add_argument("--min-information", type=float, default=None,
                   help="also stop when no eligible item has point information above this (default off)")
    g.add_argument("--rivals", default=None,
                   help="comma-separated subject ids of the bank's calibration sample: stop once the order with each "
                        "is decided (replaces the default precision rule; with --score-within or --target-sd, "
                        "whichever is met first)")
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
    "--score-within": ("score_within", lambda v: math.isfinite(v) and 0 <= v < 0.5,
                       "a proportion of the benchmark >= 0 and < 0.5 (0.05 = 5 points; 0 = off)"),
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

    _check_strategy_options(args)
    if args.selector is None:  # the session's own default for this bank
        from catengine.session.bank_log import item_table

        selector = default_selector_for(item_table(bank))
    elif args.selector not in SELECTORS:
        raise ValueError(f"unknown selector {args.selector!r}; choose from {', '.join(SELECTORS)}")
    else:
        selector = SELECTORS[args.selector]()
    estimator = ESTIMATORS[args.estimator](use_cot=not args.no_cot, sd_scale=args.sd_scale)
    stopping = _stopping(args, bank)
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


def _stopping(args, bank):
    """The stopping rule the command-line options ask for (``stopping_with_overrides``; an option
    that a command does not have counts as not given); the caller has checked the options
    (``_check_strategy_options``)."""
    from catengine.stopping import RivalOrderDecided

    rivals = getattr(args, "rivals", None)
    if rivals:
        rivals = RivalOrderDecided.from_bank(bank, [r.strip() for r in rivals.split(",") if r.strip()],
                                             probability=args.rival_probability)
    return stopping_with_overrides(bank.n_items, rivals=rivals or None,
                                   **{name: getattr(args, name, None) for name in STOPPING_OPTIONS if name != "rivals"})


def _open_bank(path):
    from catengine import open_item_bank

    return open_item_bank(path or default_bank_directory())


def _fmt(v, spec):
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


# ----------------------------------------------------------------------------- demo
def _cmd_demo(args) -> int:
    from catengine.console import calibration_size, describe_stopping, result_lines
    from catengine.demo import run_demo

    bank = _open_bank(args.bank)
    if bank.response_model != "lart":
        print(f"the demo needs a lart bank; {bank.source} is {bank.response_model}", file=sys.stderr)
        return 2
    from catengine.itembank.shipped import bank_card

    _check_strategy_options(args)
    stopping = _stopping(args, bank)
    card = bank_card(bank)
    print(f"bank {bank.bank_id} v{bank.version}: {bank.n_items} items, response model {bank.response_model}, rho = {bank.params.rho:+.2f}")
    if card["benchmark"] and card["n_subjects"]:
        print(f"  {card['benchmark']}, calibrated by {bank.attrs['calibration_method']} on {card['n_subjects']} LLM runs "
              f"({card['calibration_date'] or bank.attrs['created_at'][:10]}); license {card['license']}")
    print(f"evaluating a simulated new LLM drawn from the bank's population (seed {args.seed}); "
          f"{describe_stopping(stopping)}\n")
    width = max(10, max(len(i) for i in bank.item_ids))
    print(f"{'step':>4}  {'item':<{width}} {'answer':<9} {'CoT tokens':>10}   {'theta':>7} {'SD':>6}   {'tau':>7} {'SD':>6}")

    def show(step):
        print(
            f"{step.step:>4}  {step.item_id:<{width}} {'correct' if step.correct else 'wrong':<9} "
            f"{step.cot_tokens:>10.0f}   {step.theta:>+7.3f} {step.theta_sd:>6.3f}   {step.tau:>+7.3f} {step.tau_sd:>6.3f}"
        )

    (true_theta, true_tau), steps, session = run_demo(bank, stopping=stopping, rng=args.seed, on_step=show, log=args.log)
    last = steps[-1]
    lo, hi = session.estimate.interval(0.95)  # the bank's cross-fitted multiplier when it has one
    score = session.predicted_score()
    print()
    print("\n".join(result_lines(score, session.stop_reason, calibration_size(session))))
    if score.cot_total is not None:
        print(f"running all {bank.n_items} items would take about {score.cot_total / 1e6:.2f}M CoT tokens "
              f"({score.cot_total_low / 1e6:.2f}M .. {score.cot_total_high / 1e6:.2f}M)")
    if score.calibration:
        print(f"score interval: {score.calibration}")
    print(f"\nability theta = {last.theta:+.3f} +/- {last.theta_sd:.3f} (95% interval {lo:+.3f} .. {hi:+.3f}), "
          f"from {last.step} of {bank.n_items} items")
    print(f"speed   tau   = {last.tau:+.3f} +/- {last.tau_sd:.3f}")
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
    from catengine.console import calibration_size, describe_stopping, result_lines, standing_text
    from catengine.itembank.ids import map_item_ids
    from catengine.session import CATSession

    bank = _open_bank(args.bank)
    responses = load_responses(args.responses, args.subject, args.cot)
    # ids keyed by the benchmark's own positions (0 .. J-1) read with the bank's prefix: --item-prefix, or
    # automatically when --bank named the bank (against the default bank bare ids are an error naming it)
    ids = map_item_ids(responses, bank.item_ids, prefix=args.item_prefix, source=args.responses,
                       assumed=None if args.bank is not None else bank.bank_id)
    responses = ids.apply(responses)
    if ids.mapping:
        print(f"catengine evaluate: note: {ids.note(args.responses)}", file=sys.stderr)
    in_bank = set(bank.item_ids)
    known = [i for i in responses if i in in_bank]
    foreign = [i for i in responses if i not in in_bank]
    if foreign and (not known or not args.ignore_unknown_items):
        from catengine.itembank.ids import foreign_ids_message

        lead = (f"none of the {len(responses)} item ids in {args.responses} is in the bank" if not known
                else f"{args.responses}")
        if args.item_prefix:
            lead += f", as given or with --item-prefix {args.item_prefix!r}"
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
        print(f"selector {type(session.selector).__name__}, estimator {type(session.estimator).__name__}; "
              f"{describe_stopping(session.stopping)}\n")
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
    stop_reason = session.stop_reason
    if stop_reason == "no item left in the bank" and skipped:  # the file ran out, not the bank
        stop_reason = (f"every answer in the file is used ({len(known)} of the bank's {bank.n_items} items have "
                       "one; the others cannot be administered)")
    summary = {"subject": args.subject, "n_items": est.n_items, "theta": est.theta, "theta_sd": est.theta_sd,
               "theta_95": [lo, hi], "tau": est.tau, "tau_sd": est.tau_sd, "stop_reason": stop_reason,
               "skipped_unanswered": skipped, "ignored_unknown_items": len(foreign), "full_n_items": len(known),
               "full_theta": full.estimate.theta, "full_theta_sd": full.estimate.theta_sd, "score": score.to_dict(),
               "model_score": model.to_dict(), "design_score": None if design is None else design.to_dict(),
               "full_accuracy": full_accuracy,
               "interval_calibration": est.interval_calibration, "person_fit": session.person_fit().to_dict(),
               "standing": standing_text(score, calibration_size(session)),
               "stopping": describe_stopping(session.stopping)}
    if args.json:
        print(json.dumps({"summary": summary}))
        return 0
    print()
    print("\n".join(result_lines(score, stop_reason, calibration_size(session))))
    print(f"\nscore: {score}")
    if model is not score:
        print(f"       the model's prediction: {model}")
    if model.calibration:
        print(f"       model's interval: {model.calibration}")
    for label, c in score.by_category.items():
        print(f"  {score.category_field} {label}: {100 * c.accuracy:.1f}% ({100 * c.low:.1f}-{100 * c.high:.1f}%), "
              f"{c.n_observed} of {c.n_items} items answered")
    print(f"adaptive: theta = {est.theta:+.3f} +/- {est.theta_sd:.3f} (95% interval {lo:+.3f} .. {hi:+.3f}) "
          f"from {est.n_items} items")
    if est.tau is not None:
        print(f"          tau   = {est.tau:+.3f} +/- {est.tau_sd:.3f}")
    if est.interval_calibration:
        print(f"          interval: {est.interval_calibration}")
    print(f"          person fit: {session.person_fit().message}")
    print(f"all {len(known)} answers in the file: theta = {full.estimate.theta:+.3f} +/- {full.estimate.theta_sd:.3f}, "
          f"observed accuracy {100 * full_accuracy:.1f}%")
    if skipped:
        print(f"({skipped} proposed item(s) had no answer in the file and were skipped)")
    if foreign:
        print(f"({len(foreign)} answer(s) to items not in the bank were ignored, first {foreign[0]!r})")
    return 0


# ----------------------------------------------------------------------------- serve
def _cmd_serve(args) -> int:
    from catengine.console import describe_stopping
    from catengine.session import Engine, serve

    bank = _open_bank(args.bank)
    log = args.log
    if log is not None and log.exists() and log.stat().st_size > 0:
        engine = Engine.resume(log, bank)
        print(f"catengine serve: resumed {len(engine.sessions)} session(s) from {log} "
              "(the configuration is the one in the log)", file=sys.stderr)
    else:
        strategies = _strategies(args, bank)
        engine = Engine(bank, rng=args.seed, log=log, **strategies)
        print(f"catengine serve: bank {bank.bank_id} v{bank.version}, {bank.n_items} items; log {log or '(none)'}; "
              f"{describe_stopping(strategies['stopping'])}; one JSON request per line", file=sys.stderr)
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

    action = str(args.directories[0]) if args.directories else ""
    if action in ("show", "upgrade") and not Path(action).exists():
        if len(args.directories) != 2:
            raise ValueError(f"`catengine banks {action}` takes one bank (a shipped id, a bank directory or file)")
        return (_cmd_banks_show if action == "show" else _cmd_banks_upgrade)(args, str(args.directories[1]))
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


def _cmd_banks_show(args, name: str) -> int:
    """``catengine banks show NAME [--item ID ...] [--content FILE]``: the card, the protocol and items."""
    from catengine import open_item_bank
    from catengine.itembank.describe import content_json, item_lines, protocol_lines
    from catengine.itembank.shipped import bank_card

    bank = open_item_bank(name, content=args.content)
    items = list(args.item or [])
    for item in items:
        bank.index_of(item)  # a KeyError naming the id and the bank
    if args.json:
        print(content_json(bank, items) if bank.has_content else json.dumps(bank_card(bank), indent=2, default=str))
        return 0
    print(f"{bank.bank_id} v{bank.version}  {bank.response_model}  {bank.n_items} items  "
          f"{bank.attrs.get('benchmark') or '-'}  license {bank.attrs.get('license') or 'not stated'}")
    print("\n".join(_card_lines(bank_card(bank))))
    if args.content:
        print(f"  questions attached from {args.content}: {bank.n_items}/{bank.n_items} texts match the bank's sha256")
    print("\n".join(protocol_lines(bank)))
    for item in items:
        print()
        print("\n".join(item_lines(bank, item)))
    return 0


def _cmd_banks_upgrade(args, name: str) -> int:
    """``catengine banks upgrade BANK [--out DIR]``: the latest version again, checksummed, as a new version."""
    from catengine.itembank import upgrade_item_bank

    path = upgrade_item_bank(name, args.out)
    print(f"wrote {path} (the current schema, with its content checksum; earlier versions are unchanged)")
    return 0


# ----------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="catengine", description="Adaptive evaluation of LLMs against calibrated item banks.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="adaptive evaluation of a simulated new LLM against a real shipped bank (MATH500, LaRT)")
    demo.add_argument("--bank", type=Path, default=None, help="bank directory or file, or a shipped bank id (default: math500_lart; `catengine banks` lists them)")
    demo.add_argument("--seed", type=int, default=7, help="seed of the simulated LLM and its answers (default 7)")
    _add_stopping_options(demo.add_argument_group("stopping", description=_stopping_description(rivals=False)))
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
    ev.add_argument("--item-prefix", default=None, metavar="PREFIX",
                    help="add PREFIX to the file's item ids that are not the bank's (e.g. math500/ for a file keyed "
                         "0..499, as the benchmark's own data is); without it, when --bank names the bank, its single id "
                         "prefix is added when every id then is one of the bank's and the file names no other "
                         "benchmark (a note says so)")
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

    bk = sub.add_parser("banks", help="list the shipped item banks and any under the given directories, with their cards; "
                                      "`banks show BANK` prints one bank's protocol and items, `banks upgrade BANK` "
                                      "writes its latest version again with a content checksum",
                        usage="catengine banks [DIR ...] [--json] [--no-shipped]\n"
                              "       catengine banks show BANK [--item ID ...] [--content FILE] [--json]\n"
                              "       catengine banks upgrade BANK [--out DIR]")
    bk.add_argument("directories", nargs="*", type=Path, metavar="DIR",
                    help="also list the banks at or below these directories (latest version of each)")
    bk.add_argument("--item", action="append", metavar="ID", help="with `show`: print this item (repeatable)")
    bk.add_argument("--content", type=Path, default=None, metavar="FILE",
                    help="with `show`: attach the question texts from this JSON-lines file (banks that ship only "
                         "their hashes, e.g. amc23_lart), each verified against the bank")
    bk.add_argument("--out", type=Path, default=None, metavar="DIR",
                    help="with `upgrade`: write the new version here (default: the bank's own directory)")
    bk.add_argument("--json", action="store_true",
                    help="print a JSON list of cards (bank_id, version, path, benchmark, response_model, n_items, "
                         "n_subjects, license, source, calibration_method, calibration_date, replay_audit, ...)")
    bk.add_argument("--no-shipped", action="store_true", help="list only the banks under DIR")
    bk.set_defaults(func=_cmd_banks)

    from catengine.adapters.lm_eval import add_subcommand as add_lm_eval
    from catengine.runner.commands import add_subcommands as add_run

    add_run(sub, add_strategy_options=_add_strategy_options, strategies=_strategies, open_bank=_open_bank)
    add_lm_eval(sub, add_strategy_options=_add_strategy_options, strategies=_strategies, open_bank=_open_bank)
    from catengine.paired.commands import add_subcommands as add_paired
    add_paired(sub, open_bank=_open_bank)
    return parser


def _without_dask() -> None:
    """Keep xarray from importing dask in this process: no command makes dask arrays, and xarray
    imports an installed dask (with its widgets and templating, ~0.2 s) to test every variable it
    decodes. Effective only before xarray is imported (it records then whether dask is there)."""
    if "xarray" not in sys.modules and "dask" not in sys.modules:
        sys.modules["dask"] = None  # importlib.util.find_spec("dask") is None: xarray sees no dask


def main(argv=None) -> int:
    """The ``catengine`` command. Run as the console script (``argv`` None), warnings print as one
    line each (``catengine.console.plain_warnings``) and dask stays unimported (``_without_dask``);
    called with ``argv`` (tests, scripts), as Python shows them, and the process is left as it is."""
    from catengine.console import plain_warnings

    if argv is None:
        _without_dask()
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
