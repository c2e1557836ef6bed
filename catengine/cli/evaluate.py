"""``catengine evaluate``: an answers file replayed adaptively (:func:`catengine.replay`),
with the trajectory and the score printed."""

from __future__ import annotations

import json
import sys

from catengine.cli.options import format_value, open_bank, strategies


def _read_answers(args, bank):
    """The file's answers keyed by the bank's ids (bare positions mapped as ``--item-prefix`` or the
    named bank says), and the ids it answers that are not the bank's; prints a note on a mapping."""
    from catengine.itembank.ids import map_item_ids
    from catengine.responses import load_subject_answers

    answers = load_subject_answers(args.responses, args.subject, args.cot)
    # ids keyed by the benchmark's own positions (0 .. J-1) read with the bank's prefix: --item-prefix, or
    # automatically when --bank named the bank (against the default bank bare ids are an error naming it)
    ids = map_item_ids(answers, bank.item_ids, prefix=args.item_prefix, source=args.responses,
                       assumed=None if args.bank is not None else bank.bank_id)
    answers = ids.apply(answers)
    if ids.mapping:
        print(f"catengine evaluate: note: {ids.note(args.responses)}", file=sys.stderr)
    in_bank = set(bank.item_ids)
    return answers, [i for i in answers if i not in in_bank]


def _refuse_foreign(args, bank, answers, foreign) -> bool:
    """Print why answers to items outside the bank stop the command; False when they do not."""
    from catengine.itembank.ids import foreign_ids_message

    n_known = len(answers) - len(foreign)
    if not foreign or (n_known and args.ignore_unknown_items):
        return False
    lead = f"none of the {len(answers)} item ids in {args.responses} is in the bank" if not n_known else f"{args.responses}"
    if args.item_prefix:
        lead += f", as given or with --item-prefix {args.item_prefix!r}"
    hint = "" if not n_known else " (--ignore-unknown-items scores the others)"
    print(f"catengine evaluate: error: {lead}: {foreign_ids_message(bank.bank_id, bank.item_ids, foreign)}{hint}",
          file=sys.stderr)
    return True


def _print_head(args, bank, chosen, n_known: int) -> None:
    from catengine.console import describe_stopping

    print(f"bank {bank.bank_id} v{bank.version} ({bank.response_model}, {bank.n_items} items); "
          f"subject {args.subject or '-'}: {n_known} answered items available")
    print(f"selector {type(chosen['selector']).__name__}, estimator {type(chosen['estimator']).__name__}; "
          f"{describe_stopping(chosen['stopping'])}\n")
    head = f"{'step':>4}  {'item':<14} {'answer':<7} {'criterion':>10}   {'theta':>7} {'SD':>6}"
    print(head + (f"   {'tau':>7} {'SD':>6}" if bank.params.model.has_cot else ""))


def _step_printer(args, lart: bool):
    def show(step) -> None:
        if args.json:
            print(json.dumps(step.to_dict()))
            return
        est = step.estimate
        line = (f"{step.step:>4}  {step.item:<14} {step.correct:<7} {format_value(step.criterion, '>10.4f'):>10}   "
                f"{est.theta:>+7.3f} {est.theta_sd:>6.3f}")
        print(line + (f"   {est.tau:>+7.3f} {est.tau_sd:>6.3f}" if lart else ""))

    return show


def _print_result(result) -> None:
    from catengine.console import calibration_size, result_lines

    score, model, est, session = result.score, result.model_score, result.estimate, result.session
    print()
    print("\n".join(result_lines(score, result.stop_reason, calibration_size(session))))
    print(f"\nscore: {score}")
    if model is not score:
        print(f"       the model's prediction: {model}")
    if model.calibration:
        print(f"       model's interval: {model.calibration}")
    for label, c in score.by_category.items():
        print(f"  {score.category_field} {label}: {100 * c.accuracy:.1f}% ({100 * c.low:.1f}-{100 * c.high:.1f}%), "
              f"{c.n_observed} of {c.n_items} items answered")
    lo, hi = est.interval(0.95)
    print(f"adaptive: theta = {est.theta:+.3f} +/- {est.theta_sd:.3f} (95% interval {lo:+.3f} .. {hi:+.3f}) "
          f"from {est.n_items} items")
    if est.tau is not None:
        print(f"          tau   = {est.tau:+.3f} +/- {est.tau_sd:.3f}")
    if est.interval_calibration:
        print(f"          interval: {est.interval_calibration}")
    print(f"          person fit: {session.person_fit().message}")
    print(f"all {result.n_available} answers in the file: theta = {result.full.theta:+.3f} +/- "
          f"{result.full.theta_sd:.3f}, observed accuracy {100 * result.full_accuracy:.1f}%")
    if result.skipped:
        print(f"({len(result.skipped)} of the bank's items have no answer in the file: left out of the test, "
              f"the score is the accuracy over the other {result.n_available})")
    if result.ignored:
        print(f"({len(result.ignored)} answer(s) to items not in the bank were ignored, first {result.ignored[0]!r})")


def run_evaluate_command(args) -> int:
    from catengine.pattern_replay import replay

    bank = open_bank(args.bank)
    answers, foreign = _read_answers(args, bank)
    if _refuse_foreign(args, bank, answers, foreign):
        return 2
    chosen = strategies(args, bank)
    if not args.json:
        _print_head(args, bank, chosen, len(answers) - len(foreign))
    result = replay(bank, answers, **chosen, seed=args.seed, subject=args.subject or "subject", log=args.log,
                    ignore_unknown_items=True, on_step=_step_printer(args, bank.params.model.has_cot))
    if args.json:
        print(json.dumps({"summary": result.summary(args.subject)}))
    else:
        _print_result(result)
    return 0
