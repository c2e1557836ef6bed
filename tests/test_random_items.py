"""The random-items yardstick: the exact expected MAE of the mean of k random items
(``catengine.scoring.random_mean_mae``, used by the bank's score check and the score benchmarks),
checked against an enumeration of every k-item subset."""

import itertools

import numpy as np
import pytest

from catengine.scoring import random_mean_mae


@pytest.mark.parametrize("answers", [[1, 0, 0, 1, 1, 0, 1, 1, 0], [0] * 9, [1, 1, 1, 1, 1, 1, 1, 1, 0]])
@pytest.mark.parametrize("k", [1, 3, 5, 9])
def test_random_mean_mae_is_the_average_over_every_subset(answers, k):
    y = np.array(answers, dtype=float)
    truth = y.mean()
    brute = np.mean([abs(y[list(c)].mean() - truth) for c in itertools.combinations(range(y.size), k)])
    assert random_mean_mae(truth, y.size, k) == pytest.approx(brute, abs=1e-12)


def test_random_mean_mae_refuses_impossible_arguments():
    with pytest.raises(ValueError, match="k must be in 1..n_items=9"):
        random_mean_mae(0.5, 9, 10)
    with pytest.raises(ValueError, match="accuracy must be in"):
        random_mean_mae(1.2, 9, 3)
