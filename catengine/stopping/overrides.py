"""The default stopping rule with some of its parts replaced: what the command-line stopping
options (``--target-sd``, ``--score-within``, ``--rivals``, ``--min-items``, ``--max-items``,
``--min-information``) build, for any caller that takes the same settings."""

from __future__ import annotations


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
