"""``catengine demo``: a simulated new LLM evaluated adaptively against a real shipped bank."""

from __future__ import annotations

import sys

from catengine.cli.options import check_strategy_options, open_bank, stopping_from_options


def run_demo_command(args) -> int:
    from catengine.console import calibration_size, describe_stopping, result_lines
    from catengine.demo import run_demo

    bank = open_bank(args.bank)
    if not bank.params.model.has_cot:
        print(f"the demo needs a lart bank; {bank.source} is {bank.response_model}", file=sys.stderr)
        return 2
    from catengine.itembank.shipped import bank_card

    check_strategy_options(args)
    stopping = stopping_from_options(args, bank)
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
