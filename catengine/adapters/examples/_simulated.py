"""The simulated LLM both examples share: a fixed, reproducible answer (correct, CoT tokens) per item."""

from __future__ import annotations

import hashlib


def simulated_answer(item_id: str, skill: float = 0.6) -> tuple[int, int]:
    """(correct, CoT tokens) of a simulated LLM for ``item_id``: correct with probability about
    ``skill``, 80-1,200 tokens; the same item always gets the same answer (hash of the id)."""
    digest = hashlib.sha256(str(item_id).encode("utf-8")).digest()
    u = int.from_bytes(digest[:4], "big") / 2**32
    tokens = 80 + int.from_bytes(digest[4:6], "big") % 1121
    return int(u < skill), tokens
