"""Comparisons of LLMs on a bank: :class:`PairedSession` (two LLMs asked the same items, a
confidence sequence for the full-benchmark difference, valid at any stop) and the leaderboard of
several sessions with simultaneous error control (``catengine rank``). docs/comparisons.md."""

from catengine.paired.confidence import BettingConfidenceSequence, EmpiricalBernsteinConfidenceSequence
from catengine.paired.session import (DECISIONS, DEFAULT_MAX_ITEMS, Comparison, PairedSession, PairedStep,
                                      PairedStopping, read_paired_log)

__all__ = ["BettingConfidenceSequence", "Comparison", "DECISIONS", "DEFAULT_MAX_ITEMS",
           "EmpiricalBernsteinConfidenceSequence", "PairedSession", "PairedStep", "PairedStopping", "read_paired_log"]
