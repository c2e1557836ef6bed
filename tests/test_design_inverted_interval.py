"""The design estimate's test-inverted interval (``catengine.scoring.design.design_estimate`` with
``hypotheses``, docs/math.md §7.8) and the sums behind it, against independent forms: the Wilson
score interval in closed form, a brute-force grid of the values the test does not reject, and
``model_variance_terms`` on the full rows with the hypothesised probabilities in place of the
model's."""

import math

import numpy as np
import pytest
from scipy.special import ndtri

from catengine.scoring import (
    answered_hypothesis_sums,
    design_estimate,
    hypothesis_sums,
    hypothesis_variances,
    model_variance_terms,
)
from catengine.scoring.design import DISPERSION_DRAWS, draw_sums

Z95 = float(ndtri(0.975))


def wilson(p_hat, n, z=Z95):
    centre = (p_hat + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p_hat * (1 - p_hat) / n + z * z / (4 * n * n))
    return centre - half, centre + half


@pytest.mark.parametrize("p_hat, n", [(0.5, 10), (0.9, 10), (1.0, 12), (0.05, 40), (0.7, 200)])
def test_binomial_hypotheses_give_the_wilson_interval(p_hat, n):
    """With the variance of a proportion under each hypothesis, a(1 - a) / n, and draws that show no
    more spread than that (the dispersion stays at the model's, 1), the interval is Wilson's."""
    grid = np.linspace(0.0, 1.0, 20001)
    terms = p_hat + 1e-6 * np.tile([1.0, -1.0], 5)  # mean p_hat, a spread far below a(1 - a) / n
    e = design_estimate(terms, n_items=1000, bounds=(0.0, 1.0), hypotheses=(grid, grid * (1 - grid) / n))
    assert (e.low, e.high) == pytest.approx(wilson(p_hat, n), abs=2e-7)
    assert e.mean == pytest.approx(p_hat)
    assert e.se == pytest.approx(math.sqrt(p_hat * (1 - p_hat) / n), abs=1e-6)


def brute_force(mean, se2, n_e, values, variances, lo, hi, m=DISPERSION_DRAWS):
    at = np.interp(mean, values, variances)
    scale = max(1.0, (m + (n_e - 1) * se2 / at) / (m + n_e - 1))
    a = np.linspace(lo, hi, 400001)
    ok = (mean - a) ** 2 <= Z95**2 * scale * np.interp(a, values, variances)
    return a[ok].min(), a[ok].max(), scale


@pytest.mark.parametrize("seed", range(6))
def test_interval_is_the_hull_of_the_values_not_rejected(seed):
    """Any variance curve (here bumpy and far from binomial), weighted draws whose spread may exceed
    the hypotheses' (the dispersion then widens the interval), a range narrower than the
    hypotheses': the ends are those of the values a with (A^ - a)^2 <= z^2 c V(a) on a fine grid."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 30))
    d = rng.normal(rng.uniform(0.2, 0.8), rng.uniform(0.01, 0.5), n)
    w = rng.uniform(0.5, 2.0, n)
    w /= w.sum()
    values = np.sort(rng.uniform(-0.2, 1.2, 60))
    variances = rng.uniform(0.001, 0.03, 60) * (1 + np.sin(7 * values) ** 2)
    lo, hi = float(rng.uniform(-0.1, 0.2)), float(rng.uniform(0.8, 1.1))
    e = design_estimate(d, n_items=100, bounds=(lo, hi), hypotheses=(values, variances), weights=w)
    mean = float(d @ w)
    se2 = float(np.sum(w * w * (d - mean) ** 2) / (1 - np.sum(w * w)))
    low, high, scale = brute_force(mean, se2, 1 / np.sum(w * w), values, variances, lo, hi)
    assert e.low == pytest.approx(low, abs=1e-5) and e.high == pytest.approx(high, abs=1e-5)
    assert e.se == pytest.approx(math.sqrt(scale * np.interp(mean, values, variances)))
    assert e.mean == pytest.approx(min(max(mean, lo), hi))


def test_draws_more_spread_than_the_hypotheses_widen_the_interval_and_less_do_not_narrow_it():
    """c = max(1, (d + (n_e - 1) r) / (d + n_e - 1)), r = se^2 / V(A^): draws that agree more than
    the hypotheses say leave Wilson's interval; more spread draws widen it by that factor."""
    grid = np.linspace(0, 1, 1001)
    var = grid * (1 - grid) / 20
    base = dict(n_items=100, bounds=(0.0, 1.0), hypotheses=(grid, var))
    calm = design_estimate(0.6 + 1e-4 * np.tile([1.0, -1.0], 10), **base)
    assert (calm.low, calm.high) == pytest.approx(wilson(0.6, 20), abs=1e-6)
    wild = design_estimate(0.6 + 0.6 * np.tile([1.0, -1.0], 10), **base)
    ratio = (0.36 / 19) / (0.6 * 0.4 / 20)  # se^2 = sum (d - A^)^2 / (n (n - 1)) over the hypothesis at A^
    scale = (DISPERSION_DRAWS + 19 * ratio) / (DISPERSION_DRAWS + 19)
    assert wild.se**2 == pytest.approx(scale * 0.6 * 0.4 / 20, rel=1e-9)
    lo, hi, _ = brute_force(0.6, 0.36 / 19, 20, grid, var, 0.0, 1.0)
    assert (wild.low, wild.high) == pytest.approx((lo, hi), abs=1e-5)
    assert wild.high - wild.low > 1.1 * (calm.high - calm.low)


def test_hypotheses_without_variance_at_the_estimate_take_the_draws_spread():
    """At an estimate where every hypothesised answer is certain (V(A^) = 0) the draws' se^2, pooled
    as the dispersion would be, adds to V(a)."""
    grid = np.linspace(0, 1, 1001)
    d = 1.0 - 0.02 * np.tile([1.0, -1.0], 6)
    e = design_estimate(d, n_items=100, bounds=(0.0, 1.0), hypotheses=(grid, grid * (1 - grid) / 12))
    se2 = np.sum((d - 1.0) ** 2) / (12 * 11)
    extra = 11 * se2 / (DISPERSION_DRAWS + 11)
    a = np.linspace(0, 1, 400001)
    ok = (1.0 - a) ** 2 <= Z95**2 * (a * (1 - a) / 12 + extra)
    assert e.low == pytest.approx(a[ok].min(), abs=1e-5) and e.high == 1.0
    assert e.se == pytest.approx(math.sqrt(extra))


def test_an_estimate_outside_the_range_whose_nearest_value_is_rejected_reports_that_value():
    grid = np.linspace(0, 1, 101)
    e = design_estimate(np.full(5, 0.95) + 1e-5 * np.arange(5), n_items=100, bounds=(0.2, 0.5),
                        hypotheses=(grid, np.full(101, 1e-4)))
    assert e.low == e.high == e.mean == 0.5


def test_bad_hypotheses_are_refused():
    d = np.array([0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="increasing"):
        design_estimate(d, n_items=10, hypotheses=(np.array([0.3, 0.1]), np.array([0.1, 0.1])))
    with pytest.raises(ValueError, match="not both"):
        design_estimate(d, n_items=10, hypotheses=(np.array([0.1, 0.3]), np.array([0.1, 0.1])),
                        model_variances=np.ones(3))
    with pytest.raises(ValueError, match="increasing"):
        design_estimate(d, n_items=10, hypotheses=(np.array([0.1, 0.3]), np.array([0.1, -0.1])))


def random_rows(seed, n=7, J=60, G=3):
    rng = np.random.default_rng(seed)
    f = rng.uniform(0.02, 0.98, (n, J))
    pi = rng.dirichlet(np.ones(J), n)
    pi[:, :3] = 0.0  # items the design cannot draw
    order = rng.permutation(J)[:n]
    remaining = np.ones((n, J), dtype=bool)
    for t in range(n):
        remaining[t, order[:t]] = False
    codes = rng.integers(0, G, J)
    member = np.zeros((J, 1 + G))
    member[:, 0] = 1.0
    member[np.arange(J), 1 + codes] = 1.0
    family = rng.uniform(0.0, 1.0, (5, J))
    lam = rng.uniform(0.0, 1.0, n)
    return f, pi, remaining, codes, member, family, lam, order, rng


@pytest.mark.parametrize("seed", range(4))
def test_hypothesis_sums_give_model_variance_terms_under_each_hypothesis(seed):
    f, pi, remaining, codes, member, family, lam, order, _ = random_rows(seed)
    G = member.shape[1] - 1
    sums = [draw_sums(f[t], pi[t], remaining[t], int(order[t]), codes=codes, n_groups=G, family=family)
            for t in range(f.shape[0])]
    got = hypothesis_variances(np.array([s.hypotheses for s in sums]), np.array([s.square for s in sums]),
                               np.array([s.predicted for s in sums]), member.sum(axis=0), weight=lam)
    for k, p in enumerate(family):
        want = model_variance_terms(f, pi, remaining, member=member, weight=lam, means=p)
        np.testing.assert_allclose(got[:, k], want, rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(hypothesis_sums(family, f[0], pi[0], remaining[0], codes=codes, n_groups=G),
                               sums[0].hypotheses, rtol=1e-12)


def test_model_variance_terms_at_the_models_own_probabilities_are_the_default():
    f, pi, remaining, codes, member, family, lam, order, _ = random_rows(9)
    np.testing.assert_allclose(model_variance_terms(f[:1], pi[:1], remaining[:1], member=member, weight=lam[:1],
                                                    means=f[0]),
                               model_variance_terms(f[:1], pi[:1], remaining[:1], member=member, weight=lam[:1]),
                               rtol=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_answered_items_enter_the_hypotheses_at_their_outcomes(seed):
    """The sums with the answered items' outcomes in place of the hypothesised probabilities, by the
    change of :func:`answered_hypothesis_sums`, equal :func:`hypothesis_sums` of the substituted rows."""
    f, pi, remaining, codes, member, family, lam, order, rng = random_rows(seed)
    G = member.shape[1] - 1
    outcomes = rng.integers(0, 2, order.size).astype(float)
    base = np.array([hypothesis_sums(family, f[t], pi[t], remaining[t], codes=codes, n_groups=G)
                     for t in range(f.shape[0])])
    drawable = remaining & (pi > 0)
    inverse = np.where(drawable, 1 / np.where(drawable, pi, 1), 0.0)
    change = answered_hypothesis_sums(family[:, order] - outcomes[None, :], inverse[:, order], f[:, order],
                                      remaining[:, order], member[order])
    substituted = family.copy()
    substituted[:, order] = outcomes[None, :]
    want = np.array([hypothesis_sums(substituted, f[t], pi[t], remaining[t], codes=codes, n_groups=G)
                     for t in range(f.shape[0])])
    np.testing.assert_allclose(base - change, want, rtol=1e-10, atol=1e-12)
