"""Strategy objects <-> JSON-able configs, through the name -> class registries.

A strategy (frozen dataclass with a registry ``name``) becomes ``{"type": name, field: value, ...}``;
nested strategies (composite stopping rules, priors) nest; tuples become lists.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from catengine.estimation import ESTIMATORS, TraitPrior
from catengine.selection import EXPOSURE_CONTROLS, SELECTORS
from catengine.stopping import STOPPING_RULES

REGISTRY: dict[str, type] = {"prior": TraitPrior, **ESTIMATORS, **SELECTORS, **EXPOSURE_CONTROLS, **STOPPING_RULES}
_POSITIONAL = {"any-of", "all-of"}


def _type_name(obj) -> str:
    if isinstance(obj, TraitPrior):
        return "prior"
    name = getattr(type(obj), "name", "")
    if not name or REGISTRY.get(name) is not type(obj):
        raise TypeError(f"{type(obj).__name__} is not a registered strategy; registered: {sorted(REGISTRY)}")
    return name


def _encode(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_config(value)
    if isinstance(value, (tuple, list)):
        return [_encode(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"non-finite value {value} cannot be written to a config")
    return value


def to_config(obj) -> dict:
    """JSON-able description of a strategy object."""
    cfg = {"type": _type_name(obj)}
    for f in dataclasses.fields(obj):
        cfg[f.name] = _encode(getattr(obj, f.name))
    return cfg


def _decode(value):
    if isinstance(value, dict) and "type" in value:
        return from_config(value)
    if isinstance(value, list):
        return tuple(_decode(v) for v in value)
    return value


def from_config(cfg):
    """Strategy object from :func:`to_config` output (validated by the class itself)."""
    if isinstance(cfg, str):
        cfg = {"type": cfg}
    if not isinstance(cfg, dict) or "type" not in cfg:
        raise ValueError(f"a strategy config is a dict with a 'type' key, got {cfg!r}")
    name = cfg["type"]
    cls = REGISTRY.get(name)
    if cls is None:
        raise ValueError(f"unknown strategy type {name!r}; known: {sorted(REGISTRY)}")
    kwargs = {k: _decode(v) for k, v in cfg.items() if k != "type"}
    if name in _POSITIONAL:
        return cls(*kwargs.get("rules", ()))
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ValueError(f"bad settings for {name!r}: {exc}") from None
