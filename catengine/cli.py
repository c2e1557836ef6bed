"""Command-line entry point ``catengine``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEMO_BANK_ID = "demo_math500_lart"


def default_bank_directory() -> Path:
    """The shipped demo bank: ``item_banks/demo_math500_lart`` beside the package, else under the cwd."""
    here = Path(__file__).resolve().parents[1] / "item_banks" / DEMO_BANK_ID
    return here if here.is_dir() else Path.cwd() / "item_banks" / DEMO_BANK_ID


def _cmd_demo(args) -> int:
    from scipy.stats import norm

    from catengine import open_item_bank
    from catengine.demo import run_demo

    bank = open_item_bank(args.bank or default_bank_directory())
    if bank.response_model != "lart":
        print(f"the demo needs a lart bank; {bank.source} is {bank.response_model}", file=sys.stderr)
        return 2
    print(f"bank {bank.bank_id} v{bank.version}: {bank.n_items} items, response model {bank.response_model}, rho = {bank.params.rho:+.2f}")
    print(f"evaluating a simulated new LLM (seed {args.seed}); stop when SD(theta) <= {args.target_sd} or after {args.max_items} items\n")
    print(f"{'step':>4}  {'item':<10} {'answer':<9} {'CoT tokens':>10}   {'theta':>7} {'SD':>6}   {'tau':>7} {'SD':>6}")

    def show(step):
        print(
            f"{step.step:>4}  {bank.item_ids[step.item]:<10} {'correct' if step.correct else 'wrong':<9} "
            f"{step.cot_tokens:>10.0f}   {step.theta:>+7.3f} {step.theta_sd:>6.3f}   {step.tau:>+7.3f} {step.tau_sd:>6.3f}"
        )

    (true_theta, true_tau), steps = run_demo(
        bank.params, cot_offset=bank.cot_offset, target_sd=args.target_sd, max_items=args.max_items,
        rng=args.seed, on_step=show,
    )
    last = steps[-1]
    lo, hi = last.theta - 1.96 * last.theta_sd, last.theta + 1.96 * last.theta_sd
    print(
        f"\nability theta = {last.theta:+.3f} +/- {last.theta_sd:.3f} (95% interval {lo:+.3f} .. {hi:+.3f}), "
        f"from {last.step} of {bank.n_items} items ({100 * last.step / bank.n_items:.0f}%)"
    )
    print(f"speed   tau   = {last.tau:+.3f} +/- {last.tau_sd:.3f}")
    print(f"ahead of {100 * norm.cdf(last.theta):.0f}% of the calibration population (standard normal ability scale)")
    print(f"simulation truth: theta = {true_theta:+.3f}, tau = {true_tau:+.3f}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="catengine", description="Adaptive evaluation of LLMs against calibrated item banks.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="adaptive evaluation of a simulated new LLM against the shipped demo bank")
    demo.add_argument("--bank", type=Path, default=None, help="bank directory or file (default: the shipped demo bank)")
    demo.add_argument("--seed", type=int, default=7, help="seed of the simulated LLM and its answers")
    demo.add_argument("--target-sd", type=float, default=0.2, help="stop when the posterior SD of theta is at most this")
    demo.add_argument("--max-items", type=int, default=50, help="never administer more items than this")
    demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
