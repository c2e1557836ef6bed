"""What every shipped bank version gives for one fixed answer pattern: the items an adaptive replay
proposes, its trait estimate and its scores (``python tests/shipped_bank_scores.py OUT.json``
records them; ``tests/test_shipped_bank_versions.py`` compares the code with the record, which was
taken before the response models became objects, so every bank file written before a change keeps
opening and scoring as it did)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
N_ITEMS = 8


def shipped_bank_files() -> list[Path]:
    return sorted((ROOT / "item_banks").glob("*/*_v*.nc"))


def pattern(bank) -> dict:
    """A fixed answer pattern: each item's answer and CoT length from a hash of its id."""
    out = {}
    for item in bank.item_ids:
        h = int(hashlib.sha256(item.encode()).hexdigest()[:8], 16)
        out[item] = (int(h % 3 != 0), float(300 + h % 4000))
    return out


def figures(path: Path) -> dict:
    import warnings

    import catengine
    from catengine import MaxItems, open_item_bank

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bank = open_item_bank(path)
        result = catengine.replay(bank, pattern(bank), seed=0, stopping=MaxItems(N_ITEMS))
    est, score, model = result.estimate, result.score, result.model_score
    return {"items": [s.item for s in result.steps], "theta": est.theta, "theta_sd": est.theta_sd,
            "tau": est.tau, "score": [score.accuracy, score.low, score.high], "method": score.method,
            "model_score": [model.accuracy, model.low, model.high], "full_theta": result.full.theta}


if __name__ == "__main__":
    record = {str(p.relative_to(ROOT)): figures(p) for p in shipped_bank_files()}
    Path(sys.argv[1]).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"{len(record)} bank files")
