"""Checks of scalar settings shared by the engine's strategies (and the calibrators), each raising
ValueError that names the setting and the offending value."""

from __future__ import annotations

import math

import numpy as np


def integer_at_least(value, name: str, low: int = 1) -> int:
    """``value`` as an int if it is an integer (not a bool) >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def positive_finite(value, name: str) -> float:
    """``value`` as a float if it is a finite number (not a bool) > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not (
        math.isfinite(value) and value > 0
    ):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)
