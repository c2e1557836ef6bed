"""The score benchmarks' random-items baseline: the exact expected MAE of the mean of k random items
(benchmarks/score_prediction.py), checked against an enumeration of every k-item subset."""

import importlib.util
import itertools
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _score_prediction():
    spec = importlib.util.spec_from_file_location("score_prediction", ROOT / "benchmarks" / "score_prediction.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("answers", [[1, 0, 0, 1, 1, 0, 1, 1, 0], [0] * 9, [1, 1, 1, 1, 1, 1, 1, 1, 0]])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_expected_random_mae_is_the_average_over_every_subset(answers, k):
    y = np.array(answers, dtype=float)
    truth = y.mean()
    brute = np.mean([abs(y[list(c)].mean() - truth) for c in itertools.combinations(range(y.size), k)])
    assert _score_prediction().expected_random_mae(truth, y.size, k) == pytest.approx(brute, abs=1e-12)
