"""Posterior-expected 4PL Fisher information (catengine.models.expected_information)."""

from __future__ import annotations

import numpy as np
import pytest

import naive_psn as naive
from catengine.models import logistic
from catengine.models.expected_information import (
    expected_information,
    expected_item_information,
    gauss_hermite_normal,
    information_from_draws,
)
from catengine.models.params import ItemParams


def _items(n=40, seed=0, sd_max=1.0):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.3, 3.0, n)
    b = rng.normal(0, 2, n)
    c = rng.uniform(0, 0.3, n)
    d = rng.uniform(0.7, 1.0, n)
    sd = rng.uniform(0, sd_max, n)
    return a, b, c, d, sd


def test_gauss_hermite_rule_integrates_normal_moments():
    x, w = gauss_hermite_normal(9)
    assert w.sum() == pytest.approx(1.0, rel=1e-14)
    assert (w * x**2).sum() == pytest.approx(1.0, rel=1e-13)
    assert (w * x**4).sum() == pytest.approx(3.0, rel=1e-13)  # exact up to degree 17
    with pytest.raises(ValueError):
        gauss_hermite_normal(0)


def test_zero_sd_is_point_information():
    a, b, c, d, _ = _items()
    p = ItemParams("4pl", a=a, b=b, c=c, d=d)
    th = np.linspace(-4, 4, 7)
    np.testing.assert_allclose(expected_information(th, a, b, c, d, np.zeros_like(a)), logistic.item_information(p, th), rtol=1e-13)


def test_quadrature_equals_large_monte_carlo_average():
    """Gauss-Hermite (9 nodes) == the paper's Monte-Carlo average over 400,000 draws of b."""
    a, b, c, d, sd = _items(n=30, seed=1, sd_max=1.0)
    th = np.array([-2.0, 0.0, 1.5])
    gh = expected_information(th, a, b, c, d, sd)
    n = 400_000
    mc = expected_information(th, a, b, c, d, sd, method="monte-carlo", n_draws=n, rng=3)
    # MC standard error per item: sd of I(b) / sqrt(n); I <= a^2/4 so SE <= a^2 / (4 sqrt n)
    se = a**2 / 4 / np.sqrt(n)
    assert np.all(np.abs(gh - mc) <= 5 * se)
    # and against independent per-item draws (not common random numbers)
    rng = np.random.default_rng(4)
    draws = b + sd * rng.standard_normal((100_000, b.size))
    np.testing.assert_allclose(information_from_draws(th, a, draws, c, d), gh, atol=5 * a.max() ** 2 / 4 / np.sqrt(100_000))


@pytest.mark.parametrize("sd", [0.1, 0.5, 1.0, 2.0, 4.0])
def test_quadrature_accuracy_table(sd):
    """Against adaptive quadrature: the nodes needed for 1% accuracy grow with the posterior SD.

    Measured max relative errors with 9 nodes: 1e-15 (sd .1), 8e-9 (.5), 9e-5 (1), 3.5e-2 (2),
    0.48 (4). The test pins the smallest node count that reaches 1e-2 at each SD (one node fewer
    does not), so a loss of accuracy shows up as a failure here.
    """
    a, b, c, d, _ = _items(n=25, seed=2)
    th = 0.4
    ref = np.array([naive.expected_information_quad(th, a[j], b[j], c[j], d[j], sd) for j in range(a.size)])
    nodes = {0.1: 2, 0.5: 3, 1.0: 5, 2.0: 12, 4.0: 41}[sd]

    def worst_relative_error(n):
        got = expected_information(th, a, b, c, d, np.full(a.size, sd), n_nodes=n)
        return float(np.max(np.abs(got - ref) / ref))

    assert worst_relative_error(nodes) < 1e-2 <= worst_relative_error(nodes - 1)


@pytest.mark.parametrize("sd", [0.3, 0.99, 1.0, 2.0, 4.0, 8.0, 20.0, 60.0])
def test_default_rule_is_accurate_for_any_sd(sd):
    """n_nodes=None: 9-node Gauss-Hermite below SD 1 (error < 1e-4), trapezoid in z above (~1e-8)."""
    a, b, c, d, _ = _items(n=15, seed=3)
    b = b.copy()
    b[0] = 150.0  # an item saturated far from every node of a narrow rule
    sds = np.full(a.size, sd)
    for th in (-0.7, 3.0):
        ref = np.array([naive.expected_information_quad(th, a[j], b[j], c[j], d[j], sd) for j in range(a.size)])
        got = expected_information(th, a, b, c, d, sds)
        # atol: information below 1e-12 is nil (the saturated item underflows; quad has epsabs 1e-14)
        np.testing.assert_allclose(got, ref, rtol=1e-4 if sd < 1 else 1e-7, atol=1e-12)


def test_expected_information_is_flatter_than_point():
    """Averaging over b spreads information: less at the peak, more in the saturated tails."""
    a, b, c, d = np.array([2.0]), np.array([0.0]), np.array([0.1]), np.array([0.95])
    th = np.array([-6.0, 0.0, 6.0])
    point = expected_information(th, a, b, c, d, np.zeros(1))[:, 0]
    post = expected_information(th, a, b, c, d, np.array([1.5]))[:, 0]
    assert post[1] < point[1]
    assert post[0] > point[0] and post[2] > point[2]


def test_item_params_wrapper_shapes_and_subsets():
    a, b, c, d, sd = _items(n=12, seed=5)
    p4 = ItemParams("4pl", a=a, b=b, c=c, d=d)
    out = expected_item_information(p4, sd, 0.3)
    assert out.shape == (12,)
    grid = np.zeros((2, 3))
    assert expected_item_information(p4, sd, grid).shape == (2, 3, 12)
    sub = expected_item_information(p4, sd, 0.3, items=[3, 7])
    np.testing.assert_allclose(sub, out[[3, 7]], rtol=1e-14)
    p2 = ItemParams("2pl", a=a, b=b)
    np.testing.assert_allclose(
        expected_item_information(p2, sd, 0.3), expected_information(0.3, a, b, np.zeros(12), np.ones(12), sd), rtol=1e-14
    )
    with pytest.raises(ValueError):
        expected_item_information(p4, sd[:5], 0.3)
    with pytest.raises(ValueError):
        expected_information(0.3, a, b, c, d, -sd)
    with pytest.raises(ValueError):
        expected_information(0.3, a, b, c, d, sd, method="simpson")
    with pytest.raises(ValueError):
        expected_information(0.3, a, b, d, c, sd)  # c >= d
    lart = ItemParams("lart", a=a, b=b, omega=a, phi=a, lam=a)
    with pytest.raises(ValueError):
        expected_item_information(lart, sd, 0.3)


def test_monte_carlo_reproducible():
    a, b, c, d, sd = _items(n=5, seed=6)
    x = expected_information(0.0, a, b, c, d, sd, method="monte-carlo", n_draws=1000, rng=7)
    y = expected_information(0.0, a, b, c, d, sd, method="monte-carlo", n_draws=1000, rng=7)
    np.testing.assert_array_equal(x, y)


def test_extreme_logits_are_finite():
    a = np.array([5.0, 5.0])
    b = np.array([400.0, -400.0])
    out = expected_information(np.array([-50.0, 50.0]), a, b, np.array([0.0, 0.2]), np.array([1.0, 0.9]), np.array([3.0, 0.0]))
    assert np.all(np.isfinite(out)) and np.all(out >= 0)
