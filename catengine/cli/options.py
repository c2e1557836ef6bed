"""Options shared by the ``catengine`` commands: the bank, and the selection, estimation and
stopping settings (``--selector``, ``--estimator``, ``--target-sd``, ``--score-within``, ...),
turned into the strategy objects a session takes."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

DEMO_BANK_ID = "math500_lart"  # a real shipped bank (LaRT on the MATH500 answers of 158 LLM runs)


def default_bank_directory() -> Path:
    """The default bank of ``demo``, ``evaluate`` and ``serve``: the shipped ``math500_lart``
    (found as package data or in the checkout, see ``catengine.itembank.shipped``), else
    ``item_banks/math500_lart`` under the cwd."""
    from catengine.itembank.shipped import shipped_bank_directory

    return shipped_bank_directory(DEMO_BANK_ID) or Path.cwd() / "item_banks" / DEMO_BANK_ID


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


def _stopping_defaults_text() -> dict[str, str]:
    """Each stopping option's default, in words, from default_stopping (for a bank larger than its cap)."""
    from catengine.console import describe_stopping
    from catengine.stopping import ScoreIntervalBelow, StandardErrorBelow, default_stopping

    n = 10**6
    from catengine.stopping import default_stopping_parts

    floor, precision, cap = default_stopping_parts(n)
    sd = next((r.target for r in precision if isinstance(r, StandardErrorBelow) and r.trait == "theta"), None)
    within = next((r.half_width for r in precision if isinstance(r, ScoreIntervalBelow)), None)
    return {"rule": describe_stopping(default_stopping(n)), "min_items": str(floor),
            "max_items": "the whole bank" if cap is None or cap >= n else f"{cap}, or the whole bank when it is smaller",
            "target_sd": "off" if sd is None else f"{sd:g}", "score_within": "off" if within is None else f"{within:g}"}


def add_stopping_options(p) -> None:
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


def stopping_description(*, rivals: bool = True) -> str:
    d = _stopping_defaults_text()
    precision = "--target-sd, --score-within and --rivals" if rivals else "--target-sd and --score-within"
    return (f"Without stopping options the test uses catengine.stopping.default_stopping: {d['rule']} (the cap "
            f"is never more than the bank). {precision} replace its precision rule (together: whichever is met "
            "first); --min-items and --max-items replace its item counts.")


def add_strategy_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("selection, estimation and stopping", description=stopping_description())
    g.add_argument("--selector", default=None, help=SELECTOR_HELP)
    g.add_argument("--estimator", default="map", choices=("map", "eap"), help="trait estimator (default map)")
    g.add_argument("--no-cot", action="store_true", help="LaRT banks: ignore CoT lengths when scoring (IRT-only)")
    g.add_argument("--sd-scale", type=float, default=1.0,
                   help="scale the posterior SDs (intervals, --target-sd, rivals) by this instead of the bank's "
                        "cross-fitted factor c(L), e.g. by the ratio a replay audit measured on real LLMs "
                        "(calibration audit --kind replay); default 1: the bank's c(L) when it stores one, else none")
    add_stopping_options(g)
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


def check_strategy_options(args) -> None:
    """Each numeric strategy option, checked under its own flag name (a value of None = not given)."""
    for flag, (name, ok, what) in _OPTION_RULES.items():
        value = getattr(args, name, None)
        if value is not None and not ok(value):
            raise ValueError(f"{flag} must be {what}, got {value!r}")


def strategies(args, bank) -> dict:
    from catengine.estimation import ESTIMATORS
    from catengine.selection import SELECTORS, ContentBalance, Randomesque, SympsonHetter, default_selector_for

    check_strategy_options(args)
    if args.selector is None:  # the session's own default for this bank
        from catengine.session.bank_log import item_table

        selector = default_selector_for(item_table(bank))
    elif args.selector not in SELECTORS:
        raise ValueError(f"unknown selector {args.selector!r}; choose from {', '.join(SELECTORS)}")
    else:
        selector = SELECTORS[args.selector]()
    estimator = ESTIMATORS[args.estimator](use_cot=not args.no_cot, sd_scale=args.sd_scale)
    stopping = stopping_from_options(args, bank)
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


def stopping_from_options(args, bank):
    """The stopping rule the command-line options ask for (``stopping_with_overrides``; an option
    that a command does not have counts as not given); the caller has checked the options
    (``check_strategy_options``)."""
    from catengine.stopping import RivalOrderDecided

    rivals = getattr(args, "rivals", None)
    if rivals:
        rivals = RivalOrderDecided.from_bank(bank, [r.strip() for r in rivals.split(",") if r.strip()],
                                             probability=args.rival_probability)
    from catengine.stopping import stopping_with_overrides

    return stopping_with_overrides(bank.n_items, rivals=rivals or None,
                                   **{name: getattr(args, name, None) for name in STOPPING_OPTIONS if name != "rivals"})


def open_bank(path):
    from catengine import open_item_bank

    return open_item_bank(path or default_bank_directory())


def format_value(v, spec):
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)
