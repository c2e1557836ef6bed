"""Simulators: moments of the generated data against the generating parameters, missingness,
sparsity, ability families, reproducibility and argument validation.

Tolerances are stated as multiples of the Monte-Carlo standard error; the seeds are fixed, so the
tests are deterministic, and 4-4.5 SE bounds keep them valid for other seeds too (a false alarm
has probability < 1e-4 per check).
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.polynomial.hermite_e import hermegauss
from scipy import special, stats

from calibration.data import ResponseData
from calibration.simulate import (
    SimulationTruth,
    draw_abilities,
    draw_item_params,
    simulate_dataset,
    simulate_responses,
)
from catengine.models.params import ItemParams
from naive_models import probability_by_name


def _gh_mean_probability(params: ItemParams, n_nodes: int = 60) -> np.ndarray:
    """E_theta[P_j(theta)] for theta ~ N(0, 1) by Gauss-Hermite (probabilists') quadrature."""
    x, w = hermegauss(n_nodes)
    w = w / np.sqrt(2 * np.pi)
    return w @ probability_by_name(params, x)


# ------------------------------------------------------------------------------------ correctness moments
@pytest.mark.parametrize("model", ["lart", "2pl", "4pl"])
def test_item_mean_accuracy_matches_quadrature(model):
    n = 6000
    params = draw_item_params(model, 15, rng=10)
    theta = np.random.default_rng(11).standard_normal(n)
    data = simulate_responses(params, theta, rng=12)
    expected = _gh_mean_probability(params)
    observed = data.correct.mean(axis=0)
    se = np.sqrt(expected * (1 - expected) / n)  # binomial SE (theta varies too: still Bernoulli(E P))
    assert np.all(np.abs(observed - expected) < 4 * se), np.abs(observed - expected) / se
    if model == "lart":  # closed form for the probit: E Phi(a theta + b) = Phi(b / sqrt(1 + a^2))
        np.testing.assert_allclose(expected, special.ndtr(params.b / np.sqrt(1 + params.a**2)), atol=1e-10)


def test_lart_log_cot_moments_match_omega_and_variance():
    # omega on the token scale (omega_mean = 10) so that clipping exp(.) - 1 at 0 is negligible
    n, j = 6000, 20
    data, truth = simulate_dataset("lart", n, j, rng=3, omega_mean=10.0)
    p = truth.params
    assert truth.zero_clipped.mean() < 1e-3
    y = np.log(data.cot_length + 1.0)
    var = p.phi**2 + p.lam**2  # Var(omega - phi tau + lam eps) with Var(tau) = 1
    se_mean = np.sqrt(var / n)
    se_var = var * np.sqrt(2.0 / (n - 1))
    assert np.all(np.abs(y.mean(axis=0) - p.omega) < 4.5 * se_mean)
    assert np.all(np.abs(y.var(axis=0, ddof=1) - var) < 4.5 * se_var)
    # given tau, the residual is N(0, lam^2): checks that the drawn tau is the one used
    resid = y - (p.omega - p.phi * truth.tau[:, None])
    assert np.all(np.abs(resid.mean(axis=0)) < 4.5 * p.lam / np.sqrt(n))
    assert np.all(np.abs(resid.std(axis=0, ddof=1) / p.lam - 1) < 4.5 * np.sqrt(0.5 / n))


def test_lart_offset_zero_is_exactly_lognormal_on_paper_design():
    n = 4000
    data, truth = simulate_dataset("lart", n, 10, rng=4, cot_offset=0.0)
    p = truth.params
    assert not truth.zero_clipped.any() and (data.cot_length > 0).all()
    y = np.log(data.cot_length)
    var = p.phi**2 + p.lam**2
    assert np.all(np.abs(y.mean(axis=0) - p.omega) < 4.5 * np.sqrt(var / n))


def test_lart_clipping_at_zero_on_paper_design():
    # paper design (omega ~ N(0, 1)) with offset 1: about half the cells have exp(.) - 1 < 0
    data, truth = simulate_dataset("lart", 500, 10, rng=5)
    assert 0.2 < truth.zero_clipped.mean() < 0.8
    np.testing.assert_array_equal(data.cot_length == 0.0, truth.zero_clipped)


def test_corr_theta_tau_matches_rho():
    n = 20000
    for rho in (-0.8, 0.3):
        _, truth = simulate_dataset("lart", n, 3, rng=6, rho=rho)
        r = np.corrcoef(truth.theta, truth.tau)[0, 1]
        assert abs(r - rho) < 4 * (1 - rho**2) / np.sqrt(n)
        assert abs(truth.tau.std() - 1) < 0.03
        assert truth.params.rho == rho


def test_cot_cap_right_censors():
    cap = 2000.0
    data, truth = simulate_dataset("lart", 400, 30, rng=7, omega_mean=6.5, cot_cap=cap, missing="mcar",
                                   missing_rate=0.1)
    cot = data.cot_length
    observed = ~np.isnan(cot)
    assert np.nanmax(cot) == cap
    np.testing.assert_array_equal(truth.censored, observed & (cot == cap))
    assert 0.02 < truth.censored[observed].mean() < 0.5
    # without the cap the same seed gives the same uncensored values, larger where censored
    free = simulate_dataset("lart", 400, 30, rng=7, omega_mean=6.5, missing="mcar", missing_rate=0.1)[0]
    assert np.all(free.cot_length[truth.censored] > cap)
    np.testing.assert_array_equal(free.cot_length[observed & ~truth.censored], cot[observed & ~truth.censored])


# ------------------------------------------------------------------------------------ missingness
def test_mcar_hits_rate_exactly():
    data, _ = simulate_dataset("2pl", 120, 50, rng=8, missing="mcar", missing_rate=0.37)
    assert data.missing_rate() == round(0.37 * 120 * 50) / (120 * 50)


def test_mar_hits_rate_and_follows_the_gradient():
    n, j, rate = 300, 100, 0.25
    data, _ = simulate_dataset("lart", n, j, rng=9, missing="mar", missing_rate=rate)
    miss = ~data.observed
    assert abs(miss.mean() - rate) < 4 * np.sqrt(rate * (1 - rate) / (n * j))
    np.testing.assert_array_equal(miss, np.isnan(data.cot_length))  # a missing cell loses both
    # missing probability grows with (i/(N-1) + j/(J-1))/2: bottom-right block > top-left block
    assert miss[n // 2:, j // 2:].mean() > miss[: n // 2, : j // 2].mean() + 0.1
    # the expected rate is exact: alpha solved by brentq
    from calibration.simulate import _mar_probabilities

    prob = _mar_probabilities(n, j, rate)
    assert abs(prob.mean() - rate) < 1e-9
    # and its form is sigmoid(alpha + 2 (S_ij - mean S)): logit(p) - 2 (S - mean S) is one constant
    s = (np.arange(n)[:, None] / (n - 1) + np.arange(j)[None, :] / (j - 1)) / 2
    alpha = special.logit(prob) - 2 * (s - s.mean())
    assert np.ptp(alpha) < 1e-9


@pytest.mark.parametrize("model", ["2pl", "lart"])
def test_mnar_removes_only_incorrect_answers_in_gated_columns(model):
    n, j, rate = 200, 80, 0.2
    full, _ = simulate_dataset(model, n, j, rng=13)
    data, _ = simulate_dataset(model, n, j, rng=13, missing="mnar", missing_rate=rate)
    miss = ~data.observed
    # same seed: the complete data agree wherever observed (missingness is drawn last)
    np.testing.assert_array_equal(data.correct[~miss], full.correct[~miss])
    assert np.all(full.correct[miss] == 0)  # only incorrect answers are removed
    gated = miss.any(axis=0)
    incorrect = full.correct == 0
    # a gated column loses every incorrect answer; other columns are untouched
    np.testing.assert_array_equal(miss[:, gated], incorrect[:, gated])
    assert not miss[:, ~gated].any()
    assert 0 < gated.sum() < j
    assert abs(miss.mean() - rate) <= 1 / (2 * j) + 1e-12  # documented bound


def test_mnar_unreachable_rate_raises():
    with pytest.raises(ValueError, match=r"mnar.*missing_rate=0.9 is not reachable"):
        simulate_dataset("2pl", 50, 10, rng=0, missing="mnar", missing_rate=0.9)


@pytest.mark.parametrize("mechanism", ["mcar", "mar", "mnar"])
def test_no_all_missing_rows(mechanism):
    rate = 0.45 if mechanism == "mnar" else 0.9
    params = ItemParams("2pl", a=np.ones(3), b=np.full(3, -3.0))  # mostly incorrect, so mnar can reach the rate
    theta = np.zeros(400)
    data = simulate_responses(params, theta, rng=1, missing=mechanism, missing_rate=rate)
    assert data.observed.any(axis=1).all()
    assert data.missing_rate() > 0.3


# ------------------------------------------------------------------------------------ item parameters
def test_paper_design_ranges():
    j = 4000
    lart = draw_item_params("lart", j, rng=1)
    assert lart.response_model == "lart" and lart.rho == -0.8
    assert lart.a.min() >= 0.5 and lart.a.max() <= 1.0
    assert lart.phi.min() >= 0.5 and lart.phi.max() <= 1.5
    assert lart.lam.min() >= 0.5 and lart.lam.max() <= 2.0
    assert abs(lart.b.std() - 0.5) < 0.03 and abs(lart.omega.std() - 1.0) < 0.05
    assert abs(lart.omega.mean()) < 0.08
    four = draw_item_params("4pl", j, rng=2)
    assert four.c.min() >= 0 and four.c.max() <= 0.25 and four.d.min() >= 0.85 and four.d.max() <= 1
    two = draw_item_params("2pl", j, rng=3)
    assert two.c is None and two.omega is None and two.rho == 0.0
    assert abs(draw_item_params("lart", j, rng=1, omega_mean=6.5).omega.mean() - 6.5) < 0.08


@pytest.mark.parametrize("model", ["lart", "2pl", "4pl"])
def test_sparsity_sets_exact_share_of_zero_slopes(model):
    p = draw_item_params(model, 40, rng=4, sparsity=0.3)
    assert np.sum(p.a == 0.0) == 12
    assert np.all(p.a[p.a != 0] >= 0.5)
    assert np.sum(draw_item_params(model, 40, rng=4).a == 0) == 0
    zeros_other_seed = np.flatnonzero(draw_item_params(model, 40, rng=5, sparsity=0.3).a == 0)
    assert not np.array_equal(np.flatnonzero(p.a == 0), zeros_other_seed)  # chosen at random


# ------------------------------------------------------------------------------------ abilities
@pytest.mark.parametrize(
    "family, kwargs",
    [
        ("normal", {}),
        ("skew-normal", {"skew": 5.0}),
        ("skew-normal", {"skew": -5.0}),
        ("bimodal", {"separation": 4.0}),
        ("bimodal", {"separation": 3.0, "weight": 0.3}),
        ("student-t", {"df": 10.0}),
        ("empirical", {"sample": stats.expon.rvs(size=300, random_state=1), "jitter": 0.2}),
    ],
)
def test_ability_families_are_standardised(family, kwargs):
    n = 40000
    x = draw_abilities(n, family, rng=2, **kwargs)
    assert x.shape == (n,)
    # population standardisation: mean 0, SD 1 up to sampling noise (SE of mean 0.005, of SD < 0.01)
    assert abs(x.mean()) < 0.03
    assert abs(x.std() - 1) < 0.04


def test_skew_normal_direction():
    right = draw_abilities(20000, "skew-normal", rng=3, skew=5.0)
    left = draw_abilities(20000, "skew-normal", rng=3, skew=-5.0)
    # theoretical skewness at alpha = 5 is about 0.85
    assert stats.skew(right) > 0.6
    assert stats.skew(left) < -0.6


def test_bimodal_has_two_modes():
    x = draw_abilities(40000, "bimodal", rng=4, separation=4.0)
    mode = 2.0 / np.sqrt(5.0)  # +-separation/2 over the population SD sqrt(1 + 4/4)
    near = lambda c: np.mean(np.abs(x - c) < 0.1)  # noqa: E731
    assert near(0.0) < 0.8 * near(mode) and near(0.0) < 0.8 * near(-mode)


def test_student_t_heavy_tail_is_iqr_standardised():
    x = draw_abilities(40000, "student-t", rng=5, df=1.0)
    iqr = np.subtract(*np.percentile(x, [75, 25]))
    assert abs(iqr - 2 * stats.norm.ppf(0.75)) < 0.05
    assert abs(np.median(x)) < 0.03


def test_empirical_resamples_the_sample():
    sample = np.array([-1.0, 0.0, 0.5, 4.0])
    raw = draw_abilities(1000, "empirical", rng=6, sample=sample, standardize=False)
    assert set(np.unique(raw)) <= set(sample)
    std = draw_abilities(1000, "empirical", rng=6, sample=sample)
    np.testing.assert_allclose(std, (raw - sample.mean()) / sample.std())


def test_sample_standardisation_is_exact_and_population_is_not():
    x = draw_abilities(50, "skew-normal", rng=7, standardize="sample")
    assert abs(x.mean()) < 1e-12 and abs(x.std(ddof=1) - 1) < 1e-12
    y = draw_abilities(50, "skew-normal", rng=7)
    assert abs(y.mean()) > 1e-6  # population standardisation keeps the sampling noise


# ------------------------------------------------------------------------------------ reproducibility
def test_reproducible_with_seed_and_different_with_another():
    kw = dict(rng=21, ability="skew-normal", missing="mar", missing_rate=0.1, cot_cap=50.0, omega_mean=3.0)
    d1, t1 = simulate_dataset("lart", 60, 20, **kw)
    d2, t2 = simulate_dataset("lart", 60, 20, **kw)
    assert d1.sha256() == d2.sha256()
    np.testing.assert_array_equal(t1.theta, t2.theta)
    np.testing.assert_array_equal(t1.tau, t2.tau)
    np.testing.assert_array_equal(t1.params.omega, t2.params.omega)
    kw["rng"] = 22
    d3, t3 = simulate_dataset("lart", 60, 20, **kw)
    assert d3.sha256() != d1.sha256()
    assert not np.array_equal(t3.theta, t1.theta)
    # a Generator is advanced in place: two calls with one generator differ
    gen = np.random.default_rng(0)
    assert not np.array_equal(draw_abilities(5, rng=gen), draw_abilities(5, rng=gen))
    np.testing.assert_array_equal(draw_abilities(5, rng=3), draw_abilities(5, rng=np.random.default_rng(3)))


def test_simulation_truth_and_given_abilities():
    theta = np.linspace(-2, 2, 30)
    data, truth = simulate_dataset("4pl", 30, 8, rng=1, ability=theta)
    assert isinstance(data, ResponseData) and isinstance(truth, SimulationTruth)
    np.testing.assert_array_equal(truth.theta, theta)
    assert truth.tau is None and truth.censored is None and not data.has_cot
    assert not truth.theta.flags.writeable
    tau = np.zeros(30)
    d = simulate_responses(draw_item_params("lart", 5, rng=1), theta, tau=tau, rng=2,
                           subject_ids=[f"llm{k}" for k in range(30)])
    assert d.subject_ids[0] == "llm0" and d.has_cot


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: draw_abilities(10, "lognormal"), "unknown ability family 'lognormal'"),
        (lambda: draw_abilities(0), "n must be a positive integer"),
        (lambda: draw_abilities(10, "empirical"), "needs sample="),
        (lambda: draw_abilities(10, "normal", sample=[1, 2]), "only used by family='empirical'"),
        (lambda: draw_abilities(10, "bimodal", weight=1.2), "weight"),
        (lambda: draw_abilities(10, standardize="robust"), "standardize"),
        (lambda: draw_item_params("3pl", 5), "unknown response_model '3pl'"),
        (lambda: draw_item_params("2pl", 5, design="other"), "unknown design 'other'"),
        (lambda: draw_item_params("2pl", 5, sparsity=1.5), "sparsity"),
        (lambda: simulate_dataset("2pl", 10, 5, missing_rate=0.2), "needs a mechanism"),
        (lambda: simulate_dataset("2pl", 10, 5, missing="random", missing_rate=0.2), "unknown missingness"),
        (lambda: simulate_dataset("2pl", 10, 5, missing="mcar", missing_rate=1.0), "missing_rate must lie"),
        (lambda: simulate_dataset("2pl", 10, 5, cot_cap=100), "cot_cap is only used by the lart"),
        (lambda: simulate_dataset("lart", 10, 5, cot_cap=-1), "cot_cap"),
        (lambda: simulate_dataset("lart", 10, 5, cot_offset=-1), "cot_offset"),
        (lambda: simulate_responses(draw_item_params("2pl", 3), [0.0], tau=[0.0]), "tau is only used"),
        (lambda: simulate_responses(draw_item_params("lart", 3), [0.0, np.nan]), "theta is not finite"),
        (lambda: simulate_responses(draw_item_params("lart", 3), [0.0, 1.0], tau=[1.0]), "tau has 1 entries"),
    ],
)
def test_bad_arguments_raise(call, message):
    with pytest.raises(ValueError, match=message):
        call()
