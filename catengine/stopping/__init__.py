"""Stopping rules (role :class:`StoppingRule`; registry ``STOPPING_RULES`` name -> class).

``max-items`` :class:`MaxItems`, ``min-items`` :class:`MinItems`, ``se-below``
:class:`StandardErrorBelow`, ``information-below`` :class:`InformationBelow` (no informative item
left), ``rival-order`` :class:`RivalOrderDecided`, ``any-of`` :class:`AnyOf`, ``all-of``
:class:`AllOf`.
"""

from catengine.stopping.rules import (
    AllOf,
    AnyOf,
    InformationBelow,
    MaxItems,
    MinItems,
    RivalOrderDecided,
    StandardErrorBelow,
    StoppingRule,
    StopState,
    default_stopping,
)

NoInformativeItemLeft = InformationBelow

STOPPING_RULES = {
    cls.name: cls
    for cls in (MaxItems, MinItems, StandardErrorBelow, InformationBelow, RivalOrderDecided, AnyOf, AllOf)
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
    "StandardErrorBelow",
    "StopState",
    "StoppingRule",
    "default_stopping",
]
