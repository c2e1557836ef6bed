"""Stopping rules (role :class:`StoppingRule`; registry ``STOPPING_RULES`` name -> class).

``max-items`` :class:`MaxItems`, ``min-items`` :class:`MinItems`, ``se-below``
:class:`StandardErrorBelow`, ``information-below`` :class:`InformationBelow` (no informative item
left), ``rival-order`` :class:`RivalOrderDecided`, ``score-within`` :class:`ScoreIntervalBelow` (the
predicted full-benchmark accuracy is known to within a half-width), ``any-of`` :class:`AnyOf`,
``all-of`` :class:`AllOf`.
"""

from catengine.stopping.rules import (
    AllOf,
    AnyOf,
    InformationBelow,
    MaxItems,
    MinItems,
    RivalOrderDecided,
    ScoreIntervalBelow,
    StandardErrorBelow,
    StoppingRule,
    StopState,
    default_stopping,
)

from catengine.stopping.overrides import default_stopping_parts, stopping_with_overrides

NoInformativeItemLeft = InformationBelow

STOPPING_RULES = {
    cls.name: cls
    for cls in (MaxItems, MinItems, StandardErrorBelow, InformationBelow, RivalOrderDecided, ScoreIntervalBelow, AnyOf,
                AllOf)
}

__all__ = [
    "AllOf",
    "AnyOf",
    "InformationBelow",
    "MaxItems",
    "MinItems",
    "NoInformativeItemLeft",
    "RivalOrderDecided",
    "STOPPING_RULES",
    "ScoreIntervalBelow",
    "StandardErrorBelow",
    "StopState",
    "StoppingRule",
    "default_stopping",
    "default_stopping_parts",
    "stopping_with_overrides",
]
