"""Recovery-audit metric definitions (calibration.audit.metrics)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import xarray as xr
from scipy import stats

from calibration.audit import summarize
from calibration.audit import metrics as M

# ============================================================================ metric definitions
class TestMetrics:
    def test_kendall_tau_b_without_ties(self):
        # pairs of (1,2,3,4) vs (1,3,2,4): 6 pairs, only (2,3) discordant -> (5 - 1) / 6
        assert M.kendall_tau_b([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
        assert M.kendall_tau_b([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)

    def test_kendall_tau_b_with_ties(self):
        # x = (1,1,2,3), y = (1,2,2,3): C = 4, D = 0, one pair tied in x only, one tied in y only:
        # tau_b = 4 / sqrt((6 - 1)(6 - 1)) = 0.8 (tau_a would be 4/6)
        assert M.kendall_tau_b([1, 1, 2, 3], [1, 2, 2, 3]) == pytest.approx(0.8)

    def test_kendall_tau_b_degenerate(self):
        assert math.isnan(M.kendall_tau_b([1, 1, 1], [1, 2, 3]))
        assert math.isnan(M.kendall_tau_b([1.0], [2.0]))
        # a non-finite pair is dropped: the rest is (1,2,3) vs (1,2,3)
        assert M.kendall_tau_b([1, 2, np.nan, 3], [1, 2, 5, 3]) == pytest.approx(1.0)

    def test_aggregate_score_and_item_mean_error(self):
        p = np.array([[0.2, 0.4], [0.6, 0.8]])
        q = np.array([[0.2, 0.6], [0.6, 0.8]])
        # subject means: true (0.3, 0.7), fitted (0.4, 0.7) -> mean |diff| = (0.1 + 0) / 2
        assert M.aggregate_score_error(p, q) == pytest.approx(0.05)
        # item means: true (0.4, 0.6), fitted (0.4, 0.7) -> (0 + 0.1) / 2
        assert M.item_mean_error(p, q) == pytest.approx(0.05)
        # errors that cancel within a subject are not errors of its score
        r = np.array([[0.3, 0.3], [0.7, 0.7]])
        assert M.aggregate_score_error(p, r) == pytest.approx(0.0)
        assert M.item_mean_error(p, r) == pytest.approx(0.1)

    def test_pearson_and_rmse(self):
        # dx = (-1, 0, 1), dy = (-7/3, -1/3, 8/3): sxy = 5, sxx = 2, syy = 114/9 -> r = 15 / sqrt(228)
        assert M.pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(15 / math.sqrt(228))
        assert math.isnan(M.pearson([1, 1, 1], [1, 2, 3]))
        assert M.rmse([1, 2], [0, 0]) == pytest.approx(math.sqrt(2.5))
        assert M.rmse([1, np.nan], [0, 0]) == pytest.approx(1.0)

    def test_insufficient_coverage(self):
        theta = [0.0, 1.0]
        d = [0.1, -0.15, 0.2, 0.9, 1.3, np.nan]
        # subject 0: 0.1, -0.15, 0.2 within 0.2 (3 items); subject 1: only 0.9 (1 item)
        assert M.insufficient_coverage(theta, d, max_items=1) == pytest.approx(0.5)
        assert M.insufficient_coverage(theta, d, max_items=3) == pytest.approx(1.0)
        assert M.insufficient_coverage(theta, d, max_items=0) == pytest.approx(0.0)
        # the default (<= 5 items within 0.2): both are insufficient
        assert M.insufficient_coverage(theta, d) == pytest.approx(1.0)

    def test_insufficient_coverage_matches_a_loop(self):
        rng = np.random.default_rng(0)
        theta, d = rng.normal(size=50), rng.normal(size=300)
        loop = np.mean([np.sum(np.abs(d - t) <= 0.2) <= 5 for t in theta])
        assert M.insufficient_coverage(theta, d) == pytest.approx(loop)

    def test_marginal_reliability(self):
        # error variances 1/1 and 1/4: mean 0.625 -> 1 / 1.625
        assert M.marginal_reliability([1.0, 4.0]) == pytest.approx(1 / 1.625)
        assert M.marginal_reliability([0.0, 4.0]) == 0.0

    def test_skewness_g1(self):
        # x = (0, 0, 3): m2 = 2, m3 = 2, g1 = 2 / 2^1.5, G1 = sqrt(3 * 2) / 1 * g1 = sqrt(3)
        assert M.skewness_g1([0, 0, 3]) == pytest.approx(math.sqrt(3))
        x = np.random.default_rng(1).gamma(2.0, size=40)
        assert M.skewness_g1(x) == pytest.approx(stats.skew(x, bias=False))
        assert math.isnan(M.skewness_g1([1, 2]))
        assert math.isnan(M.skewness_g1([2, 2, 2, 2]))

    def test_linking_keeps_the_linear_predictor(self):
        rng = np.random.default_rng(3)
        theta = rng.normal(size=30)
        theta_hat = 0.5 * theta - 1.0
        A, B = M.mean_sigma_link(theta, theta_hat)
        assert A * theta_hat + B == pytest.approx(theta)
        a_hat, b_hat = rng.uniform(0.5, 2, 5), rng.normal(size=5)
        a_s, b_s = M.link_items(a_hat, b_hat, A, B)
        z_hat = np.outer(theta_hat, a_hat) + b_hat
        assert np.outer(A * theta_hat + B, a_s) + b_s == pytest.approx(z_hat)

    def test_mc_standard_error(self):
        # sd(1,2,3,4; ddof 1) = sqrt(5/3); / sqrt(4)
        assert M.mc_standard_error([1, 2, 3, 4]) == pytest.approx(math.sqrt(5 / 3) / 2)
        assert M.mc_standard_error([1, np.nan, 3]) == pytest.approx(1.0)
        assert math.isnan(M.mc_standard_error([1.0]))

    def test_summarize(self):
        ds = xr.Dataset(
            {"x": (("replication", "method"), [[1.0, 10.0], [3.0, np.nan], [2.0, 14.0]]),
             "failed": (("replication", "method"), [[0, 0], [0, 1], [0, 0]])},
            coords={"replication": [0, 1, 2], "method": ["a", "b"]},
        )
        s = summarize(ds)
        assert s["x"].sel({"method": "a", "statistic": "mean"}) == pytest.approx(2.0)
        assert s["x"].sel({"method": "a", "statistic": "mcse"}) == pytest.approx(1 / math.sqrt(3))
        assert s["x"].sel({"method": "b", "statistic": "mean"}) == pytest.approx(12.0)
        assert s["x"].sel({"method": "b", "statistic": "n"}) == 2
        assert s["failed"].sel({"method": "b", "statistic": "mean"}) == pytest.approx(1 / 3)

    def test_input_validation(self):
        with pytest.raises(ValueError, match="same length"):
            M.pearson([1, 2], [1, 2, 3])
        with pytest.raises(ValueError, match="same shape"):
            M.aggregate_score_error(np.zeros((2, 2)), np.zeros((2, 3)))
        with pytest.raises(ValueError, match=">= 0"):
            M.marginal_reliability([-1.0])
