"""Honest intervals (docs/math.md §7.3-7.5): the uncertainty-aware trait SD against numerical integration
over item parameters, posterior-expected information over (a, b) against 2-D quadrature, lz against
its definition, the stored interval calibration in sessions, and the default calibration path."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from catengine import ItemBank
from catengine.estimation import EAPEstimator, MAPEstimator, ResponseState, TraitPrior
from catengine.estimation.interval_calibration import IntervalCalibration
from catengine.estimation.person_fit import LZ_THRESHOLD, person_fit
from catengine.models.information import prob_correct
from catengine.models.item_covariance import ItemCovariance
from catengine.models.params import ItemParams
from catengine.selection import MaxFisherInformation, RandomSelection
from catengine.selection import _kernels as SK
from catengine.session import CATSession
from catengine.stopping import MaxItems
from score_checks import model_item_params


def _params(model, a, b, c=None, d=None):
    if model == "2pl":
        return ItemParams("2pl", a=a, b=b)
    if model == "4pl":
        return ItemParams("4pl", a=a, b=b, c=c, d=d)
    J = len(a)
    return ItemParams("lart", a=a, b=b, omega=np.zeros(J), phi=np.ones(J), lam=np.ones(J), rho=0.3)


# ----------------------------------------------------------------------------- 6.3: trait SD
@pytest.mark.parametrize("model", ["2pl", "4pl", "lart"])
def test_uncertainty_aware_sd_matches_integration_over_item_parameters(model):
    """The item term of the Cheng-Yuan variance, (1/H^2) sum_j G_j' Cov_j G_j, is the variance of the
    posterior mode over Gaussian item parameters (a_j, b_j): Var_xi[theta^(xi)], here by a 5^6-node
    Gauss-Hermite tensor over 3 items' (a, b), each node scored by the engine with the items fixed.
    It is a first-order (delta-method) result: the agreement must be within 10% at small item SDs
    and improve as they shrink. (The law of total variance adds E_xi[1/H(xi)] - 1/H, also of order
    Cov, which the correction neglects; it is reported by this test's numbers, not asserted.)"""
    a = np.array([1.2, 0.8, 1.5])
    b = -2.0 * a + np.array([0.3, -0.2, 0.1])  # hard items, answered mostly right: theta^ near 2, where
    c, d = np.array([0.1, 0.05, 0.0]), np.array([0.95, 1.0, 0.9])  # a slope error moves theta^ most
    y = [1, 1, 0]
    sd_a, sd_b, rho = np.array([0.2, 0.15, 0.25]), np.array([0.2, 0.25, 0.15]), np.array([0.4, -0.3, 0.2])
    est = MAPEstimator(prior=TraitPrior(theta_sd=1.5), tol=1e-12)

    def score(aa, bb, covariance=None):
        st = ResponseState(_params(model, aa, bb, c, d), covariance)
        for j in range(3):
            st.add(j, y[j])
        return est.estimate(st.params, st)

    fixed = score(a, b)
    x, w = np.polynomial.hermite_e.hermegauss(5)
    w = w / w.sum()
    z = np.stack([g.ravel() for g in np.meshgrid(*([x] * 6), indexing="ij")], axis=1)
    wts = np.prod(np.stack([g.ravel() for g in np.meshgrid(*([w] * 6), indexing="ij")], axis=1), axis=1)
    errors = []
    for scale in (0.5, 0.25):
        cov = ItemCovariance((scale * sd_a) ** 2, (scale * sd_b) ** 2, rho * scale**2 * sd_a * sd_b)
        delta = score(a, b, cov)
        assert delta.theta_sd_fixed_items == pytest.approx(fixed.theta_sd, rel=1e-12)
        L = [np.linalg.cholesky([[cov.a_var[j], cov.ab_cov[j]], [cov.ab_cov[j], cov.b_var[j]]]) for j in range(3)]
        thetas, variances = np.empty(z.shape[0]), np.empty(z.shape[0])
        for k in range(z.shape[0]):
            aa, bb = a.copy(), b.copy()
            for j in range(3):
                da, db = L[j] @ z[k, 2 * j: 2 * j + 2]
                aa[j] += da
                bb[j] += db
            e = score(aa, bb)
            thetas[k], variances[k] = e.theta, e.theta_sd**2
        mean = np.dot(wts, thetas)
        extra_ref = np.dot(wts, (thetas - mean) ** 2)
        extra = delta.theta_sd**2 - fixed.theta_sd**2
        assert extra_ref > 0.002 * fixed.theta_sd**2  # the item term is not negligible here
        errors.append(abs(extra / extra_ref - 1.0))
    print(model, errors, np.dot(wts, variances) / fixed.theta_sd**2 - 1.0)
    assert errors[1] < 0.1
    assert errors[1] < 0.7 * errors[0] or errors[1] < 0.02


def test_uncertainty_aware_sd_lart_tau_follows_theta_and_eap_widens():
    a, b = np.array([1.0, 1.3]), np.array([0.2, -0.4])
    p = ItemParams("lart", a=a, b=b, omega=np.array([1.0, 0.5]), phi=np.array([1.2, 0.8]), lam=np.array([0.7, 0.9]), rho=-0.6)
    cov = ItemCovariance(np.array([0.04, 0.02]), np.array([0.03, 0.05]), np.array([0.01, -0.01]))
    out = {}
    for key, cv in (("fixed", None), ("unc", cov)):
        st = ResponseState(p, cv)
        st.add(0, 1, 0.7)
        st.add(1, 0, 1.4)
        out[key] = MAPEstimator().estimate(p, st)
        out[key + "_eap"] = EAPEstimator().estimate(p, st)
    f, u = out["fixed"], out["unc"]
    extra = u.theta_sd**2 - f.theta_sd**2
    assert extra > 0 and u.theta == f.theta
    beta = (u.theta_tau_cov - f.theta_tau_cov) / extra  # tau = alpha + beta theta carries the extra term
    assert u.tau_sd**2 - f.tau_sd**2 == pytest.approx(beta * beta * extra, rel=1e-9)
    assert out["unc_eap"].theta_sd > out["fixed_eap"].theta_sd


# ----------------------------------------------------------------------------- 6.4: selection
def _gh_expected(model, theta, ma, mb, va, vb, cab, c, d):
    """The kernels' rule choice, spelled out: 9 Gauss-Hermite nodes, 5 where sd(z) < NARROW_SZ."""
    s2 = theta * theta * va + 2 * theta * cab + vb
    n = SK.NARROW_NODES if s2 < SK.NARROW_SZ**2 else 9
    x, w = np.polynomial.hermite_e.hermegauss(n)
    return SK.expected_info_ab(model, theta, ma, mb, va, vb, cab, c, d, x, w / w.sum())


def test_short_rule_is_accurate_where_it_is_used():
    """5 nodes vs 9 nodes where sd(z) < NARROW_SZ: within 4e-5 of the item's peak information."""
    rng = np.random.default_rng(0)
    x9, w9 = np.polynomial.hermite_e.hermegauss(9)
    x5, w5 = np.polynomial.hermite_e.hermegauss(SK.NARROW_NODES)
    worst = 0.0
    for _ in range(3000):
        model = int(rng.integers(3))
        theta, ma, mb = rng.uniform(-4, 4), rng.uniform(0.3, 2.5), rng.uniform(-5, 5)
        sa, sb, r = rng.uniform(0, 0.4), rng.uniform(0, 0.6), rng.uniform(-0.9, 0.9)
        va, vb, cab = sa * sa, sb * sb, r * sa * sb
        if theta * theta * va + 2 * theta * cab + vb >= SK.NARROW_SZ**2:
            continue
        c, d = (0.1, 0.9) if model == 1 else (0.0, 1.0)
        full = SK.expected_info_ab(model, theta, ma, mb, va, vb, cab, c, d, x9, w9 / w9.sum())
        short = SK.expected_info_ab(model, theta, ma, mb, va, vb, cab, c, d, x5, w5 / w5.sum())
        worst = max(worst, abs(full - short) / ((ma * ma + va) * 2 / np.pi))
    assert worst < 4e-5

@pytest.mark.parametrize("model", [0, 1, 2])
def test_expected_information_over_a_and_b_matches_2d_quadrature(model):
    nodes, weights = np.polynomial.hermite_e.hermegauss(9)
    weights = weights / weights.sum()
    gx, gw = np.polynomial.hermite_e.hermegauss(60)
    gw = gw / gw.sum()
    for theta, ma, mb, sa, sb, r in [(0.3, 1.2, -0.2, 0.2, 0.3, 0.5), (-1.5, 0.8, 0.4, 0.15, 0.25, -0.4), (0.0, 1.5, 0.0, 0.3, 0.0, 0.0)]:
        c, d = (0.1, 0.9) if model == 1 else (0.0, 1.0)
        va, vb, cab = sa * sa, sb * sb, r * sa * sb
        got = SK.expected_info_ab(model, theta, ma, mb, va, vb, cab, c, d, nodes, weights)
        # brute force: a 60 x 60 tensor rule over (a, b) = mean + Cholesky z
        Lc = np.linalg.cholesky(np.array([[va, cab], [cab, vb]]) + 1e-300 * np.eye(2)) if vb > 0 else np.array([[sa, 0.0], [0.0, 0.0]])
        ref = 0.0
        for z1, w1 in zip(gx, gw):
            for z2, w2 in zip(gx, gw):
                aa = ma + Lc[0, 0] * z1
                bb = mb + Lc[1, 0] * z1 + Lc[1, 1] * z2
                ref += w1 * w2 * aa * aa * SK.unit_info(model, aa * theta + bb, c, d)
        assert got == pytest.approx(ref, rel=2e-4)


def test_posterior_expected_selection_is_the_brute_force_argmax_and_default():
    rng = np.random.default_rng(3)
    J = 300
    a, b = rng.uniform(0.5, 2.0, J), rng.normal(0, 1.5, J)
    a_sd, b_sd = rng.uniform(0.0, 0.6, J), rng.uniform(0.05, 0.5, J)
    corr = rng.uniform(-0.8, 0.8, J)
    bank = ItemBank.from_params("2pl", [f"i{k}" for k in range(J)], bank_id="unc", a=a, b=b, a_sd=a_sd, b_sd=b_sd,
                                ab_cov=corr * a_sd * b_sd)
    s = CATSession(bank, rng=1)
    assert s.selector.name == "doubly-robust" and s.selector.adaptive_for(s.items).name == "pei"
    s = CATSession(bank, selector=s.selector.adaptive_for(s.items), rng=1)
    for _ in range(8):
        item = s.next_item()
        theta = s.estimate.theta
        scores = np.array([_gh_expected(0, theta, a[j], b[j], a_sd[j] ** 2, b_sd[j] ** 2, corr[j] * a_sd[j] * b_sd[j],
                                        0.0, 1.0) for j in range(J)])
        scores[[bank.index_of(i) for i in s.administered]] = -1
        assert bank.index_of(item) == int(np.argmax(scores))
        s.record(item, int(rng.random() < 0.5))
    # an item with a large slope SD is worth more than its point information (E[a^2] = a^2 + var a)
    assert s.estimate.theta_sd_fixed_items < s.estimate.theta_sd


# ----------------------------------------------------------------------------- person fit
@pytest.mark.parametrize("model", ["2pl", "4pl", "lart"])
def test_lz_matches_its_definition(model):
    rng = np.random.default_rng(5)
    J = 40
    a, b = rng.uniform(0.5, 2.0, J), rng.normal(0, 1, J)
    p = _params(model, a, b, rng.uniform(0, 0.2, J), rng.uniform(0.85, 1.0, J))
    y = (rng.random(J) < 0.5).astype(int)
    st = ResponseState(p)
    order = rng.permutation(J)
    for j in order:
        st.add(int(j), int(y[j]))
    theta = 0.37
    P = prob_correct(p, theta)[order]
    yy = y[order]
    l0 = np.sum(yy * np.log(P) + (1 - yy) * np.log(1 - P))
    e = np.sum(P * np.log(P) + (1 - P) * np.log(1 - P))
    v = np.sum(P * (1 - P) * np.log(P / (1 - P)) ** 2)
    fit = person_fit(p, st, theta)
    assert fit.lz == pytest.approx((l0 - e) / math.sqrt(v), rel=1e-9)
    assert fit.n_items == J


def test_lz_flags_a_reversed_responder_not_a_fitting_one():
    rng = np.random.default_rng(11)
    J = 400
    a, b = rng.uniform(0.8, 2.0, J), rng.normal(0, 1.5, J)
    bank = ItemBank.from_params("2pl", [f"i{k}" for k in range(J)], bank_id="pf", a=a, b=b)
    p_true = prob_correct(bank.params, 0.0)
    fitting = (rng.random(J) < p_true).astype(int)
    reversed_ = (b < 0).astype(int)  # right on the hard items, wrong on the easy ones
    flags = []
    for answers in (fitting, reversed_):
        s = CATSession(bank, selector=RandomSelection(), stopping=MaxItems(40), rng=0)  # items of every difficulty
        while not s.finished:
            item = s.next_item()
            s.record(item, int(answers[bank.index_of(item)]))
        flags.append(s.person_fit())
    assert not flags[0].flagged and flags[1].flagged and flags[1].lz < LZ_THRESHOLD
    assert "does not fit" in flags[1].message
    ds = s.to_dataset()
    assert ds.attrs["person_fit_lz"] == pytest.approx(flags[1].lz)


# ----------------------------------------------------------------------------- 6.5: stored calibration
def _calibration_json(c=(2.0, 1.5), lengths=(5, 20), name="mfi"):
    return json.dumps({"version": 1, "folds": 4, "n_subjects": 40, "calibration_method": "cbmm", "selection": name,
                       "curves": {name: {"test_length": list(lengths), "c": list(c)},
                                  "random": {"test_length": list(lengths), "c": [1.3, 1.1]}}})


def test_interval_curve_interpolates_and_falls_back_to_the_largest():
    cal = IntervalCalibration.from_json(_calibration_json())
    cur = cal.curve("mfi")
    assert cur.factor(0) == 1.0 and cur.factor(3) == 2.0 and cur.factor(5) == 2.0
    assert cur.factor(12.5) == pytest.approx(1.75) and cur.factor(100) == 1.5
    other = cal.curve("kl")
    assert other.factor(20) == 1.5 and other.factor(5) == 2.0
    with pytest.raises(ValueError, match="interval_calibration"):
        IntervalCalibration.from_json("{not json")


def test_a_growing_stored_curve_is_applied_as_its_nonincreasing_envelope():
    """c(L) = (1.2, 1.5, 1.4, 1.8) at L = (5, 10, 20, 40): sessions apply max over l >= L, so the
    factor never grows with more answers and is never below the stored c; the same for z95."""
    from catengine.estimation.interval_calibration import IntervalCurve, right_envelope

    np.testing.assert_array_equal(right_envelope(np.array([1.2, 1.5, 1.4, 1.8, 1.0])), [1.8, 1.8, 1.8, 1.8, 1.0])
    cur = IntervalCurve((5, 10, 20, 40), (1.2, 1.5, 1.4, 1.8), "mfi", "test", z95=(2.0, 1.9, 2.2, 2.1))
    grid = np.arange(1, 80)
    f = np.array([cur.factor(L) for L in grid])
    z = np.array([cur.multiplier(L) for L in grid])
    assert np.all(np.diff(f) <= 1e-15) and np.all(np.diff(z) <= 1e-15)
    raw_c = np.interp(grid, (5, 10, 20, 40), (1.2, 1.5, 1.4, 1.8))
    raw_z = np.interp(grid, (5, 10, 20, 40), (2.0, 1.9, 2.2, 2.1))
    assert np.all(f >= raw_c - 1e-15) and np.all(z >= raw_z - 1e-15)
    assert cur.factor(5) == 1.8 and cur.multiplier(30) == pytest.approx(2.15)


def test_session_applies_the_stored_calibration_by_default_and_sd_scale_overrides():
    rng = np.random.default_rng(2)
    J = 60
    kw = dict(a=rng.uniform(0.5, 2, J), b=rng.normal(0, 1, J))
    plain = ItemBank.from_params("2pl", [f"i{k}" for k in range(J)], bank_id="plain", **kw)
    calibrated = plain.replace_attrs(interval_calibration=_calibration_json())
    answers = (rng.random(J) < 0.5).astype(int)

    def run(bank, **kwargs):
        s = CATSession(bank, selector=MaxFisherInformation(), stopping=MaxItems(12), rng=0, **kwargs)
        while not s.finished:
            item = s.next_item()
            s.record(item, int(answers[bank.index_of(item)]))
        return s.estimate

    base, cal = run(plain), run(calibrated)
    assert cal.theta == base.theta  # the same items: selection uses the mode
    factor = 2.0 - 0.5 * (12 - 5) / 15
    assert cal.theta_sd == pytest.approx(base.theta_sd * factor) and cal.interval_factor == pytest.approx(factor)
    assert "cross-fitted on 40 calibration LLMs" in cal.interval_calibration and base.interval_calibration == ""
    over = run(calibrated, estimator=MAPEstimator(sd_scale=1.2))
    assert over.theta_sd == pytest.approx(base.theta_sd * 1.2) and "sd_scale" in over.interval_calibration
    off = run(calibrated, estimator=MAPEstimator(interval_calibration=False))
    assert off.theta_sd == base.theta_sd


# ----------------------------------------------------------------------------- calibration side
def test_fit_factors_recovers_a_known_inflation():
    from calibration.heldout.interval_curves import fit_factors

    rng = np.random.default_rng(0)
    n, lengths = 4000, np.array([5, 10, 20, 40])
    full_sd = rng.uniform(0.05, 0.1, n)
    sd = 1.0 / np.sqrt(lengths[None, :] * rng.uniform(0.5, 1.5, (n, 1)))
    d = np.sqrt(sd**2 - full_sd[:, None] ** 2)
    k = 1.6
    diff = k * d * rng.standard_normal(d.shape)
    out = fit_factors(diff, sd, full_sd)
    assert np.allclose(out["rms_ratio_model"], k, rtol=0.05)
    assert np.allclose(out["c_raw"], k, rtol=0.06)
    assert np.allclose(out["rms_ratio_calibrated_in_sample"], 1.0, rtol=0.06)
    honest = fit_factors(d * rng.standard_normal(d.shape), sd, full_sd)
    assert np.allclose(honest["c"], 1.0, atol=0.05)
    wide = fit_factors(0.8 * d * rng.standard_normal(d.shape), sd, full_sd)  # intervals 25% too wide
    assert np.allclose(wide["c"], 0.8, rtol=0.05)  # 4000 LLMs: the upper bound is within 1% of the factor


def test_narrowing_floor_narrows_only_by_the_upper_confidence_bound():
    """c >= 1 is kept; c < 1 becomes min(1, c sqrt(n / chi2_{n, 0.3})) with 24 or more LLMs, else 1;
    the bound holds the true factor 70% of the time (brute force over normal replicates)."""
    from scipy.stats import chi2

    from calibration.heldout.interval_curves import narrowing_floor

    c = np.array([1.4, 1.0, 0.9, 0.5])
    for n in (24, 158):
        expected = np.where(c >= 1, c, np.minimum(1.0, c * np.sqrt(n / chi2.ppf(0.3, n))))
        np.testing.assert_allclose(narrowing_floor(c, n), expected, rtol=1e-12)
    np.testing.assert_array_equal(narrowing_floor(c, 23), [1.4, 1.0, 1.0, 1.0])  # too few LLMs to narrow
    rng = np.random.default_rng(11)
    n, k = 60, 0.7
    c_hat = k * np.sqrt(np.mean(rng.standard_normal((5000, n)) ** 2, axis=1))
    bound = c_hat * np.sqrt(n / chi2.ppf(0.3, n))
    assert np.mean(bound >= k) == pytest.approx(0.7, abs=0.03)


def test_interval_multipliers_are_an_upper_bound_of_the_held_out_95_quantile():
    """z95(L) is the k-th order statistic of |z| per length (in [1, 3]),
    k the smallest order above the 95% quantile with probability >= 0.5 (median-unbiased); 1.96 with
    fewer than 24 LLMs; close to 1.96 for many normal z; below it for a heavy-tailed z whose RMS is
    1 but most LLMs sit inside."""
    from scipy.stats import binom

    from calibration.heldout.interval_curves import Z95_CONFIDENCE, interval_multipliers, quantile_bound_order

    for n in (24, 60, 118, 158, 1000):
        k = quantile_bound_order(n)
        assert binom.cdf(k - 1, n, 0.95) >= Z95_CONFIDENCE > binom.cdf(k - 2, n, 0.95)
    assert Z95_CONFIDENCE == 0.5 and quantile_bound_order(23, confidence=0.7) == 24 and quantile_bound_order(24) == 24
    assert quantile_bound_order(118) == 113  # binom.cdf(111, 118, 0.95) = 0.38 < 0.5 <= binom.cdf(112, ...) = 0.54
    rng = np.random.default_rng(3)
    assert np.all(interval_multipliers(np.abs(rng.standard_normal((23, 3)))) == 1.959963984540054)
    # the 95% quantile of |z| from 20,000 draws: SE sqrt(0.95 * 0.05 / 20000) / (2 phi(1.96)) = 0.013 per length
    np.testing.assert_allclose(interval_multipliers(np.abs(rng.standard_normal((20000, 3)))), 1.96, atol=4 * 0.013)
    # brute force: how often does the (unsmoothed: one length) bound lie above the true 95% quantile?
    above = [np.sort(np.abs(rng.standard_normal(118)))[quantile_bound_order(118) - 1] >= 1.959964 for _ in range(4000)]
    assert np.mean(above) == pytest.approx(binom.cdf(quantile_bound_order(118) - 1, 118, 0.95), abs=0.03)
    n = 160
    heavy = np.abs(rng.standard_normal((n, 3))) * 0.6
    heavy[:3] = 6.0  # 2% far out: RMS about 1, but 97% of |z| below 1.6
    k = quantile_bound_order(n)
    by_hand = np.array([np.sort(heavy[:, t])[k - 1] for t in range(3)])  # each length on its own
    np.testing.assert_allclose(interval_multipliers(heavy), np.clip(by_hand, 1.0, 3.0), rtol=1e-12)
    assert np.all(interval_multipliers(heavy) < 1.9)
    assert np.all(interval_multipliers(np.full((30, 2), 100.0)) == 3.0)
    assert np.all(interval_multipliers(np.zeros((1000, 2))) == 1.0)


def test_robust_scale_ignores_the_items_that_dominate_the_rms():
    from calibration.heldout.interval_curves import robust_scale

    rng = np.random.default_rng(5)
    z = 3.0 * rng.standard_normal(20000)
    assert robust_scale(z) == pytest.approx(3.0, rel=0.03)
    z[:400] = 1e4  # 2% of items with b_sd near 0 (slopes near 0): the RMS is 1,400
    assert robust_scale(z) == pytest.approx(3.0, rel=0.06) and np.sqrt(np.mean(z * z)) > 1000


def test_trait_interval_uses_the_banks_multiplier_at_95_only():
    from catengine.estimation.base import TraitEstimate

    plain = TraitEstimate(0.5, 0.2, 10)
    assert plain.interval(0.95) == pytest.approx((0.5 - 1.959964 * 0.2, 0.5 + 1.959964 * 0.2))
    cal = TraitEstimate(0.5, 0.2, 10, interval_z95=1.7)
    assert cal.interval(0.95) == pytest.approx((0.5 - 1.7 * 0.2, 0.5 + 1.7 * 0.2))
    assert cal.interval(0.9) == plain.interval(0.9)


def test_stored_multiplier_reaches_the_session_and_old_records_keep_196():
    rng = np.random.default_rng(2)
    J = 60
    bank = ItemBank.from_params("2pl", [f"i{k}" for k in range(J)], bank_id="z", a=rng.uniform(0.5, 2, J),
                                b=rng.normal(0, 1, J))
    record = json.loads(_calibration_json())
    for cur in record["curves"].values():
        cur["z95"] = [1.7 - 0.01 * k for k in range(len(cur["c"]))]
    cal = IntervalCalibration.from_json(json.dumps(record))
    cur = cal.curve("mfi")
    L = cur.test_length
    assert cur.multiplier(0) is None and cur.multiplier(L[0]) == pytest.approx(1.7)
    assert cur.multiplier(L[-1] + 50) == pytest.approx(1.7 - 0.01 * (len(L) - 1))
    assert cal.curve("not-measured").multiplier(L[0]) == pytest.approx(max(c.multiplier(L[0]) for c in cal.curves.values()))
    assert IntervalCalibration.from_json(_calibration_json()).curve("mfi").multiplier(10) is None
    s = CATSession(bank.replace_attrs(interval_calibration=json.dumps(record)), stopping=MaxItems(8), rng=0)
    while not s.finished:
        s.record(s.next_item(), 1)
    z = IntervalCalibration.from_json(json.dumps(record)).curve(s.selector.name).multiplier(8)
    e = s.estimate
    assert e.interval_z95 == pytest.approx(z) and e.interval()[1] - e.theta == pytest.approx(z * e.theta_sd)
    assert s.history[-1].interval_z95 == e.interval_z95  # the widgets' interval band reads it
    assert "95% interval" in e.interval_calibration
    with pytest.raises(ValueError, match="z95"):
        record["curves"]["mfi"]["z95"] = [1.6]
        IntervalCalibration.from_json(json.dumps(record))


def _simulated_2pl(seed, n_subjects, n_items, a_range):
    """ResponseData drawn from a 2PL: theta ~ N(0, 1), a ~ U(a_range), b ~ N(0, 1)."""
    from calibration import ResponseData

    rng = np.random.default_rng(seed)
    theta = rng.standard_normal(n_subjects)
    a, b = rng.uniform(*a_range, n_items), rng.normal(0, 1, n_items)
    correct = (rng.random((n_subjects, n_items)) < 1 / (1 + np.exp(-(np.outer(theta, a) + b)))).astype(np.int8)
    return ResponseData.from_arrays(correct)


def test_default_calibration_path_stores_the_interval_check_and_sessions_use_it():
    from calibration.methods.cbmm.calibrator import CBMMCalibrator

    N = 40
    data = _simulated_2pl(4, N, 120, (0.5, 1.5))
    bank = CBMMCalibrator(rng=0, progress=False).fit(data).to_item_bank("sim")
    record = json.loads(bank.attrs["interval_calibration"])
    assert record["folds"] == 5 and record["n_subjects"] == N
    # default, plain maximum information, random; and randomised where the check finds the model losing to random items
    assert {record["selection"], "mfi", "random"} <= set(record["curves"]) <= {record["selection"], "mfi", "random", "randomised"}
    from calibration.heldout.interval_curves import narrowing_floor, smooth_table

    for cur in record["curves"].values():  # c(L): the smoothed raw factors, below 1 only by their bound
        expected = narrowing_floor(smooth_table(cur["c_raw"], log_scale=True), cur["n_llms"])
        np.testing.assert_allclose(cur["c"], expected, atol=2e-4)
    s = CATSession(bank, stopping=MaxItems(10), rng=0)
    while not s.finished:
        s.record(s.next_item(), 1)
    cur = IntervalCalibration.from_json(bank.attrs["interval_calibration"]).curve(s.selector.name)
    assert s.estimate.interval_factor == pytest.approx(cur.factor(10))
    small = CBMMCalibrator(rng=0, progress=False).fit(data.subset(subjects=np.arange(6))).to_item_bank("small")
    assert "interval_calibration" not in small.attrs and "needs 8" in small.attrs["interval_calibration_skipped"]
    off = CBMMCalibrator(rng=0, progress=False).fit(data).to_item_bank("off", interval_check=False)
    assert "interval_calibration" not in off.attrs


def test_psn_bank_b_sd_is_widened_by_the_cross_fitted_refit_spread():
    """PSN posterior width chosen by the cross-fit: the stored bank's b_sd equals the unchecked
    bank's times the factor recorded in interval_calibration (item_sd_factors.b_applied >= 1), and
    that factor is max(1, robust scale of z of the fold banks' linked b against the full bank's)."""
    from calibration.methods.psn import PSNCalibrator

    data = _simulated_2pl(6, 16, 50, (0.8, 2.0))
    settings = dict(max_epochs=2, batch_size=128, rng=0, hidden_dim=8, embedding_dim=8, progress=False)
    cal = PSNCalibrator(**settings).fit(data)
    plain = cal.to_item_bank("psn_plain", interval_check=False)
    checked = cal.to_item_bank("psn_checked")
    record = json.loads(checked.attrs["interval_calibration"])
    f = record["item_sd_factors"]
    assert f["b"] is not None and f["b_applied"] == pytest.approx(max(1.0, f["b"]), abs=1e-4)
    np.testing.assert_allclose(checked.item_metadata("b_sd"), plain.item_metadata("b_sd") * f["b_applied"], rtol=1e-12)
    np.testing.assert_array_equal(checked.params.b, plain.params.b)


@pytest.mark.parametrize("model", ["2pl", "4pl", "lart"])
@pytest.mark.parametrize("theta", [0.4, -4.0, 5.0])
def test_expected_selection_with_pruning_bounds_equals_a_full_scan(model, theta):
    """Far from the items the one-evaluation bound skips most of them: the result must still be
    the exact top 5 of a full scan (2PL: expected information; LaRT: theta-targeted variance)."""
    from catengine.estimation import TraitEstimate
    from catengine.selection import PosteriorExpectedInformation, SelectionState, ThetaTargetedInformation
    from catengine.session.session import item_table

    rng = np.random.default_rng(8)
    J = 2000
    kw = dict(a=rng.uniform(0.3, 2.0, J), b=rng.normal(0, 1.5, J))
    a_sd, b_sd, corr = rng.uniform(0, 0.5, J), rng.uniform(0.05, 0.6, J), rng.uniform(-0.7, 0.7, J)
    kw.update(model_item_params(model, rng, J, c=(0, 0.25), d=(0.8, 1.0), omega=(6, 0.3), phi=(1, 2), lam=(0.8, 1.4),
                                rho=-0.5))
    bank = ItemBank.from_params(model, [f"i{k}" for k in range(J)], bank_id="prune", a_sd=a_sd, b_sd=b_sd,
                                ab_cov=corr * a_sd * b_sd, **kw)
    table = item_table(bank)
    state = ResponseState(bank.params, table.covariance)
    est = TraitEstimate(theta=theta, theta_sd=0.4, n_items=0,
                        **({"tau": 0.3, "tau_sd": 0.5, "theta_tau_cov": -0.05} if model == "lart" else {}))
    eligible = np.ones(J, dtype=bool)
    eligible[::7] = False
    sel = ThetaTargetedInformation() if model == "lart" else PosteriorExpectedInformation()
    idx, val = sel.candidates(bank.params, SelectionState(est, eligible, state, table), np.random.default_rng(0), 5)
    code = {"2pl": 0, "4pl": 1, "lart": 2}[model]
    c, d = (kw["c"], kw["d"]) if model == "4pl" else (np.zeros(J), np.ones(J))
    u = np.array([_gh_expected(code, theta, kw["a"][j], kw["b"][j], a_sd[j] ** 2, b_sd[j] ** 2,
                               corr[j] * a_sd[j] * b_sd[j], c[j], d[j]) for j in range(J)])
    if model == "lart":
        P = est.precision()
        v = table.cot_info
        A, D = P[0, 0] + u, P[1, 1] + v
        u = -D / (A * D - P[0, 1] ** 2)
    u[~eligible] = -np.inf
    order = np.lexsort((np.arange(J), -u))[:5]
    np.testing.assert_array_equal(idx, order)
    np.testing.assert_allclose(val, u[order], rtol=1e-12)


def test_4pl_peak_bound_is_above_the_information_everywhere():
    rng = np.random.default_rng(9)
    c, d = rng.uniform(0, 0.4, 50), rng.uniform(0.6, 1.0, 50)
    peak = SK.peak_unit_info_4pl(c, d)
    z = np.linspace(-20, 20, 40001)
    for j in range(50):
        fine = max(SK.unit_info(1, float(v), c[j], d[j]) for v in z[::10]) if j % 10 else \
            max(SK.unit_info(1, float(v), c[j], d[j]) for v in z)
        assert fine <= peak[j] <= fine * 1.011 + 1e-12


def test_a_fold_that_cannot_be_calibrated_skips_the_check_and_says_why():
    """Two runs of one LLM hold every wrong answer: the full data can be calibrated, but the fold
    that holds that LLM out leaves answers that are all correct. The check cannot be made, so the
    bank records why (interval_check="auto") or the export fails (interval_check=True)."""
    from calibration import ResponseData
    from calibration.methods.cbmm.calibrator import CBMMCalibrator

    correct = np.ones((12, 8), dtype=np.int8)
    correct[0, [0, 2]] = 0  # m0 and m1, the two runs of llm0, are the only ones with a wrong answer
    correct[1, [1, 2]] = 0
    data = ResponseData.from_arrays(correct, subject_ids=[f"m{i}" for i in range(12)],
                                    item_ids=[f"q{j}" for j in range(8)],
                                    subject_groups=["llm0", "llm0"] + [f"llm{i}" for i in range(2, 12)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        calibrator = CBMMCalibrator(rng=0).fit(data)
        bank = calibrator.to_item_bank("one_informative_llm")
        assert "interval_calibration" not in bank.attrs
        reason = bank.attrs["interval_calibration_skipped"]
        assert "cannot be calibrated" in reason and "nothing to calibrate" in reason, reason
        with pytest.raises(ValueError, match="interval check impossible: fold .* cannot be calibrated"):
            calibrator.to_item_bank("one_informative_llm", interval_check=True)
