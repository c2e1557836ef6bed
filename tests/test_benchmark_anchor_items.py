"""The tinyBenchmarks-style anchor items of ``benchmarks/score_anchor_items.py``: on items that fall
into exact duplicate groups, k-means with k = the number of groups must recover the groups, so the
anchors are one item per group and the weights the groups' shares of the benchmark, and the anchor
estimate is then exactly the full-benchmark accuracy."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from score_anchor_items import anchor_items  # noqa: E402


def test_anchors_recover_duplicate_item_groups_and_their_shares():
    rng = np.random.default_rng(3)
    patterns = rng.integers(0, 2, size=(4, 30))  # 4 distinct correctness vectors over 30 training LLMs
    while len({tuple(p) for p in patterns}) < 4:
        patterns = rng.integers(0, 2, size=(4, 30))
    sizes = np.array([5, 1, 9, 3])
    group = np.repeat(np.arange(4), sizes)
    rng.shuffle(group)
    train = patterns[group].T  # 30 LLMs x 18 items
    anchors, weights = anchor_items(train, 4, restarts=10, rng=np.random.default_rng(0))
    assert sorted(group[anchors]) == [0, 1, 2, 3]
    assert weights.sum() == pytest.approx(1.0)
    for a, w in zip(anchors, weights):
        assert w == pytest.approx(sizes[group[a]] / group.size)
    new_llm = rng.integers(0, 2, size=4)[group]  # answers alike within a group
    assert float(weights @ new_llm[anchors]) == pytest.approx(new_llm.mean())
