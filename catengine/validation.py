"""Checks of scalar settings shared by the engine's strategies and the calibrators.

The predicates :func:`is_integer` / :func:`is_number` are the one place where "an int (or numpy
integer) that is not a bool" is spelled out; the checkers raise ValueError naming the setting and
the offending value and return the value normalised (int / float).
"""

from __future__ import annotations

import math

import numpy as np

_INTEGER_TYPES = (int, np.integer)
_NUMBER_TYPES = (int, float, np.integer, np.floating)


def is_integer(value) -> bool:
    """``value`` is a Python or numpy integer, and not a bool."""
    return isinstance(value, _INTEGER_TYPES) and not isinstance(value, (bool, np.bool_))


def is_number(value) -> bool:
    """``value`` is a Python or numpy int or float, and not a bool (NaN and infinities included)."""
    return isinstance(value, _NUMBER_TYPES) and not isinstance(value, (bool, np.bool_))


def integer_at_least(value, name: str, low: int = 1) -> int:
    """``value`` as an int if it is an integer (not a bool) >= ``low``."""
    if not is_integer(value) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def positive_finite(value, name: str) -> float:
    """``value`` as a float if it is a finite number (not a bool) > 0."""
    if not is_number(value) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def finite_at_least(value, name: str, low: float = 0.0) -> float:
    """``value`` as a float if it is a finite number (not a bool) >= ``low``."""
    if not is_number(value) or not (math.isfinite(value) and value >= low):
        raise ValueError(f"{name} must be a finite number >= {low:g}, got {value!r}")
    return float(value)


def in_unit_interval(value, name: str, *, closed_high: bool = False) -> float:
    """``value`` as a float if it is a number in [0, 1) (or [0, 1] with ``closed_high``)."""
    if not is_number(value) or not (0.0 <= value < 1.0 or (closed_high and value == 1.0)):
        raise ValueError(f"{name} must lie in [0, 1{']' if closed_high else ')'}, got {value!r}")
    return float(value)


def one_of(value, name: str, choices) -> object:
    """``value`` unchanged if it is one of ``choices``."""
    if value not in tuple(choices):
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def boolean(value, name: str) -> bool:
    """``value`` as a bool if it is a bool, a numpy bool or the integer 0 or 1."""
    if not (isinstance(value, (bool, np.bool_)) or (is_integer(value) and value in (0, 1))):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def seed_like(value, name: str = "rng"):
    """``value`` unchanged if it is None, an integer seed >= 0 or a ``numpy.random.Generator``."""
    if value is None or isinstance(value, np.random.Generator) or (is_integer(value) and value >= 0):
        return value
    raise TypeError(f"{name} must be a numpy Generator, an int seed >= 0 or None, got {value!r}")
