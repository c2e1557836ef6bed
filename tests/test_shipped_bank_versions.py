"""Every bank file shipped before a change still opens and scores as it did: each version of each
shipped bank replays one fixed answer pattern (``tests/shipped_bank_scores.py``) to the same items,
estimates and scores as recorded in ``tests/fixtures/shipped_bank_scores.json`` (the items, traits and
default scores taken with the code as it was before response models became objects; the model's
prediction, which a replay reports beside a design-based default score, with the code that reports
it). Items must match exactly; numbers to 1e-9 (the record's code and today's may round the same
sums in another order)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from shipped_bank_scores import ROOT, figures, shipped_bank_files

RECORD = json.loads((Path(__file__).parent / "fixtures" / "shipped_bank_scores.json").read_text())


def test_the_record_covers_every_shipped_bank_file():
    assert sorted(RECORD) == [str(p.relative_to(ROOT)) for p in shipped_bank_files()]
    assert len(RECORD) >= 50


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


@pytest.mark.parametrize("name", sorted(RECORD))
def test_a_shipped_bank_version_scores_as_recorded(name):
    now, then = figures(ROOT / name), RECORD[name]
    assert now["items"] == then["items"] and now["method"] == then["method"]
    for key in ("theta", "theta_sd", "tau", "full_theta"):
        assert _close(now[key], then[key]), (key, now[key], then[key])
    for key in ("score", "model_score"):
        assert all(_close(x, y) for x, y in zip(now[key], then[key])), (key, now[key], then[key])
