"""How much data the held-out check needs and how it splits it: the defaults and the minimum sizes
that every part of the check (folds, strength-ordered sides, curves) reads."""

from __future__ import annotations

__all__ = ["DEFAULT_FOLDS", "DEFAULT_LENGTHS", "MIN_FOLDS", "MIN_HELD_OUT", "MIN_SUBJECTS"]

DEFAULT_FOLDS = 5
MIN_FOLDS = 2  # fewer folds possible (fewer than 4 LLMs): no check (the bank says so)
DEFAULT_LENGTHS = (5, 10, 15, 20, 30, 40, 50, 75, 100)
MIN_SUBJECTS = 8  # fewer calibration LLMs: no check (the bank says so)
MIN_HELD_OUT = 4  # a length is tabulated only with at least this many held-out LLMs
