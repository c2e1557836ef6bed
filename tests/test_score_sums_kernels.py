"""The compiled score sums (``catengine.scoring._kernels.factor_node_sums`` / ``expected_logistic``)
against plain numpy: the score-factor prediction of the unanswered items and the expected response
of every item under a normal trait posterior."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit

from catengine.models.expected_information import gauss_hermite_normal
from catengine.models.params import ItemParams
from catengine.models.score_factors import ScoreFactors, product_nodes
from catengine.scoring.model_based import (
    SCORE_FACTOR_NODES, _group_totals, expected_probabilities, predict_accuracy_factors,
)


def _reference_factor_prediction(factors, observed, correct, codes, n_groups, residual_sd, centre, intervals):
    """The prediction from (nodes, items) arrays of probabilities, as numpy computes it."""
    J = factors.n_items
    unknown = np.ones(J, dtype=bool)
    unknown[observed] = False
    mode, cov = factors.posterior(observed, correct)
    nodes, w = product_nodes(mode, cov, SCORE_FACTOR_NODES[factors.dims])
    p = expit(nodes @ factors.loadings.T + factors.intercepts[None, :])
    cond_mean, cond_var = p * unknown, p * (1.0 - p) * unknown
    common = np.broadcast_to(unknown * float(residual_sd), cond_mean.shape) if residual_sd > 0 else None
    point = expit(factors.loadings @ mode + factors.intercepts) * unknown if centre == "mode" else None
    codes_ = np.zeros(J, np.int64) if codes is None else codes
    return _group_totals(w, cond_mean, cond_var, observed, np.asarray(correct, float), unknown, codes_, n_groups, 0.95,
                         1.0, common, 1.0, "normal" if intervals else False, point)


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("with_groups", [False, True])
@pytest.mark.parametrize("centre", ["mode", "mean"])
def test_factor_prediction_matches_numpy(dims, with_groups, centre):
    rng = np.random.default_rng(10 * dims + with_groups)
    J = 203
    loadings = rng.normal(size=(J, dims)) * 1.5
    intercepts = rng.normal(size=J) * 3.0
    intercepts[:5] = [40.0, -40.0, 25.0, -30.0, 0.0]  # saturated items
    factors = ScoreFactors(loadings, intercepts)
    observed = np.sort(rng.choice(J, size=37, replace=False))
    correct = rng.integers(0, 2, observed.size).astype(float)
    codes = rng.integers(0, 4, J) if with_groups else None
    n_groups = 4 if with_groups else 0
    for residual_sd in (0.0, 0.07):
        for intervals in (True, False):
            got = predict_accuracy_factors(factors, observed, correct, codes=codes, n_groups=n_groups,
                                           residual_sd=residual_sd, centre=centre, intervals=intervals)
            want = _reference_factor_prediction(factors, observed, correct, codes, n_groups, residual_sd, centre, intervals)
            assert len(got) == len(want) == 1 + n_groups
            for g, r in zip(got, want):
                assert (g.n_observed, g.n_items) == (r.n_observed, r.n_items)
                np.testing.assert_allclose([g.mean, g.sd], [r.mean, r.sd], rtol=1e-12, atol=1e-11)
                np.testing.assert_allclose([g.low, g.high], [r.low, r.high], rtol=1e-12, atol=1e-11, equal_nan=True)


def test_factor_prediction_with_every_item_answered_is_the_known_total():
    rng = np.random.default_rng(3)
    J = 40
    factors = ScoreFactors(rng.normal(size=(J, 2)), rng.normal(size=J))
    correct = rng.integers(0, 2, J).astype(float)
    (g,) = predict_accuracy_factors(factors, np.arange(J), correct)
    total = correct.sum()
    assert g.mean == total  # clipped to the attainable range, which is the known total alone
    # the SD is the spread over the K = n^2 product nodes of a prediction equal to the total at each:
    # |total - sum_k w_k total|, the rounding of a K-term dot product (K ulps) and of the weights' sum
    # (the product of two n-node sums: 2 n ulps), so within (K + 2 n) ulps of the total, whatever
    # order the CPU's dot product adds in (exactly 0 on some machines, 5e-15 on others)
    n = SCORE_FACTOR_NODES[2]
    assert 0.0 <= g.sd <= (n * n + 2 * n) * np.finfo(float).eps * total


@pytest.mark.parametrize("model", ["2pl", "4pl"])
def test_expected_probabilities_match_the_quadrature_in_numpy(model):
    rng = np.random.default_rng(7)
    J = 311
    a, b = rng.uniform(0.2, 3.0, J), rng.normal(size=J) * 4.0
    b[:3] = [60.0, -60.0, 0.0]
    extra = {"c": rng.uniform(0, 0.3, J), "d": rng.uniform(0.7, 1.0, J)} if model == "4pl" else {}
    params = ItemParams(model, a=a, b=b, **extra)
    for theta, sd, n in ((0.3, 0.8, 21), (-2.0, 0.05, 9), (3.5, 2.0, 41)):
        x, w = gauss_hermite_normal(n)
        s = expit((theta + sd * x)[:, None] * a[None, :] + b[None, :])
        want = w @ (s if model == "2pl" else extra["c"] + (extra["d"] - extra["c"]) * s)
        np.testing.assert_allclose(expected_probabilities(params, theta, sd, n), want, rtol=1e-13, atol=1e-15)


def test_draw_one_is_numpy_choice_on_the_same_stream():
    """The randomised selector's single draw takes the item numpy's choice takes, from the same stream."""
    from catengine.selection.randomised import draw_one

    rng = np.random.default_rng(5)
    for trial in range(300):
        J = int(rng.integers(1, 60))
        pi = rng.random(J) * (rng.random(J) < 0.7)
        if pi.sum() == 0:
            pi[0] = 1.0
        pi /= pi.sum()
        seed = int(rng.integers(2**31))
        want = np.random.default_rng(seed).choice(J, size=1, replace=False, p=pi)
        got = draw_one(pi, np.random.default_rng(seed))
        assert got.dtype == np.int64 and got.shape == (1,)
        np.testing.assert_array_equal(got, want)
        assert pi[got[0]] > 0


def test_hypergeometric_pmf_and_random_mae_match_scipy():
    from scipy.stats import hypergeom

    from catengine.scoring.random_items import hypergeometric_pmf, random_mean_mae

    for J, C, k in ((500, 0, 10), (500, 500, 25), (500, 137, 50), (40, 33, 40), (40, 1, 5), (2854, 1500, 100)):
        lo, hi = max(0, k - (J - C)), min(k, C)
        x = np.arange(lo, hi + 1)
        np.testing.assert_allclose(hypergeometric_pmf(x, J, C, k), hypergeom.pmf(x, J, C, k), rtol=1e-10, atol=1e-300)
        a = C / J
        xs = np.arange(k + 1)
        want = float(np.sum(hypergeom.pmf(xs, J, C, k) * np.abs(xs / k - a)))
        assert random_mean_mae(a, J, k) == pytest.approx(want, rel=1e-10, abs=1e-15)


def test_expected_probit_probabilities_are_the_closed_form_of_the_quadrature():
    """LaRT items: E Phi(a X + b), X ~ Normal(m, s^2), in closed form, against 200-point Gauss-Hermite."""
    from scipy.special import ndtr

    rng = np.random.default_rng(9)
    J = 257
    a, b = rng.uniform(0.2, 3.0, J), rng.normal(size=J) * 3.0
    params = ItemParams("lart", a=a, b=b, omega=np.zeros(J), phi=np.ones(J), lam=np.ones(J), rho=-0.5)
    x, w = gauss_hermite_normal(200)
    for m, sd in ((0.0, 1.0), (2.5, 0.1), (-1.0, 0.6)):
        want = w @ ndtr((m + sd * x)[:, None] * a[None, :] + b[None, :])
        np.testing.assert_allclose(expected_probabilities(params, m, sd, 21), want, rtol=1e-9, atol=1e-13)
