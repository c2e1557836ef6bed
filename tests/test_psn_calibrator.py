"""PSNCalibrator: fit, temperature options, bank export, calibration report, recovery (calibration.methods.psn)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from calibration.base import ConvergenceWarning, NotFittedError
from calibration.data import ResponseData
from calibration.methods.psn import (
    PSNCalibrator,
    calibration_report,
    expected_calibration_error,
    p_ahead,
    reliability_diagram,
)
from psn_cases import DATA, _sim
from real_data import psn_missing

# ============================================================================ calibrator


@pytest.fixture(scope="module")
def fitted():
    data, theta = _sim(N=25, J=120, seed=12)
    cal = PSNCalibrator(max_epochs=8, batch_size=128, learning_rate=0.01, hidden_dim=16, embedding_dim=16, rng=4)
    return cal.fit(data), data, theta


def test_calibrator_contract():
    cal = PSNCalibrator(max_epochs=3, rng=1)
    params = cal.get_params()
    assert params["max_epochs"] == 3 and params["learning_rate"] == 3e-3 and params["batch_size"] == 512
    assert params["hidden_dim"] == 64 and params["embedding_dim"] == 128 and params["weight_decay"] == 1e-4
    assert params["prior_precision"] == 1.0 and params["progress"] is False
    assert "PSNCalibrator(" in repr(cal)
    with pytest.raises(NotFittedError):
        cal.to_item_bank("x")
    with pytest.raises(TypeError):
        cal.fit(np.zeros((3, 3)))
    data, _ = _sim()
    for bad in (dict(max_epochs=0), dict(learning_rate=-1.0), dict(validation_fraction=1.0), dict(curvature="hessian"), dict(dtype="float16")):
        with pytest.raises(ValueError):
            PSNCalibrator(**bad).fit(data)


def test_fit_sets_attributes(fitted):
    cal, data, theta = fitted
    assert cal.n_iter_ == 8 and cal.converged_ and cal.loss_trace_.shape == (8,)
    assert cal.theta_.shape == (25,) and cal.beta_.shape == (120,)
    assert cal.subject_ids_ == data.subject_ids and cal.responses_sha256_ == data.sha256()
    # larger theta = more able (orientation fixed after training)
    assert stats.kendalltau(cal.theta_, (data.correct == 1).mean(axis=1)).statistic > 0.5


def test_mean_loss_temperature_option():
    data, _ = _sim(N=12, J=40, seed=5)
    settings = dict(max_epochs=2, hidden_dim=8, embedding_dim=8, rng=2)
    plain = PSNCalibrator(**settings).fit(data)
    mean_loss = PSNCalibrator(temperature="mean-loss", **settings).fit(data)
    n_cells = int((data.correct >= 0).sum())
    assert plain.temperature_ == 1.0 and mean_loss.temperature_ == float(n_cells)
    np.testing.assert_allclose(mean_loss.theta_, plain.theta_)  # same training; only the posterior differs
    np.testing.assert_allclose(mean_loss.ability_posterior_.covariance(),
                               plain.ability_posterior_.with_temperature(n_cells).covariance(), rtol=1e-10)
    np.testing.assert_allclose(mean_loss.item_posterior_.marginal_sd(),
                               plain.item_posterior_.with_temperature(n_cells).marginal_sd(), rtol=1e-10)
    bank = mean_loss.to_item_bank("mean_loss")
    assert bank.posterior.attrs["temperature"] == float(n_cells)
    assert bank.calibration_settings["temperature"] == "mean-loss"
    assert plain.split_half_ is None and bank.posterior.attrs["temperature_setting"] == "mean-loss"
    for bad in ("mean", "hot", -1.0, 0.0):
        with pytest.raises(ValueError, match="temperature"):
            PSNCalibrator(temperature=bad, **settings).fit(data)


def test_split_half_temperature_option():
    data, _ = _sim(N=12, J=40, seed=5)
    settings = dict(max_epochs=2, hidden_dim=8, embedding_dim=8, rng=2)
    plain = PSNCalibrator(**settings).fit(data)
    cal = PSNCalibrator(temperature="split-half", **settings).fit(data)
    check = cal.split_half_
    assert cal.temperature_ == max(1.0, check.implied_temperature)
    np.testing.assert_allclose(cal.theta_, plain.theta_)  # the main fit is unchanged
    np.testing.assert_allclose(cal.ability_posterior_.covariance(),
                               plain.ability_posterior_.with_temperature(cal.temperature_).covariance(), rtol=1e-10)
    # the halves: the calibrator's settings at T = 1, on disjoint item halves
    assert [f.temperature_ for f in check.fits] == [1.0, 1.0]
    assert [f.n_items_ for f in check.fits] == [20, 20] and not set(check.item_halves[0]) & set(check.item_halves[1])
    th = [f.theta_posterior() for f in check.fits]  # all 12 subjects answered items in both halves
    np.testing.assert_allclose(check.z, (th[0]["mean"] - th[1]["mean"]) / np.hypot(th[0]["sd"], th[1]["sd"]), rtol=1e-9)
    attrs = cal.to_item_bank("split").posterior.attrs
    assert attrs["temperature"] == cal.temperature_ and attrs["split_half_rms_z"] == pytest.approx(check.rms_z)


def test_item_bank_export_round_trip(fitted, tmp_path):
    from catengine.itembank import open_item_bank, write_item_bank
    from catengine.models.logistic import prob_correct

    cal, data, _ = fitted
    bank = cal.to_item_bank("psn_test")
    path = write_item_bank(bank, tmp_path)
    back = open_item_bank(path)
    assert back.response_model == "4pl" and back.attrs["calibration_method"] == "psn"
    p = back.params
    assert np.all(p.c < p.d)
    # the bank's slope-intercept 4PL (ordered asymptotes, standardised theta) predicts exactly the network
    th = back.subjects["theta"].values
    P_bank = prob_correct(p, th)
    s, i = np.nonzero(np.ones(data.shape, bool))
    np.testing.assert_allclose(P_bank[s, i], cal.predict_proba(s, i), rtol=1e-9, atol=1e-12)
    scale = back.scale
    np.testing.assert_allclose(th, (cal.native_theta_ - scale["location"]) / scale["scale"], rtol=1e-12)
    np.testing.assert_allclose(th, cal.theta_, rtol=1e-12, atol=1e-12)  # theta_ is on the bank's scale
    np.testing.assert_allclose(th.mean(), 0, atol=1e-12)
    # b posterior: b = b_offset + F @ w reproduces b at the mean, and draws reproduce b_sd
    post = back.posterior
    F = post["b_features"].values
    mean_b = post["b_offset"].values + F @ post["b_readout_mean"].values
    np.testing.assert_allclose(mean_b, p.b, rtol=1e-9, atol=1e-9)
    L = np.linalg.cholesky(post["b_readout_cov"].values)
    w = post["b_readout_mean"].values[:, None] + L @ np.random.default_rng(0).standard_normal((L.shape[0], 20_000))
    b_draws = post["b_offset"].values[:, None] + F @ w
    np.testing.assert_allclose(b_draws.std(axis=1), back.items["b_sd"].values, rtol=0.04)  # SE 0.5%
    # subjects group: intervals, p_ahead consistency
    sub = back.subjects
    np.testing.assert_allclose(sub["theta_upper"] - sub["theta"], 1.959963984540054 * sub["theta_sd"], rtol=1e-12)
    pa = sub["p_ahead"].values
    np.testing.assert_allclose(pa + pa.T, 1.0, atol=1e-12)
    assert sub.attrs["n_pairs"] == 25 * 24 // 2
    settings = back.calibration_settings
    assert settings["max_epochs"] == 8 and settings["rng"] == 4


def test_native_scale_export(fitted):
    cal, _, _ = fitted
    bank = cal.to_item_bank("psn_native", standardize=False, include_features=False)
    p = bank.params
    assert "b_features" not in bank.posterior
    flip = cal.c_ > cal.d_
    a_n = np.where(flip, -cal.a_, cal.a_)
    np.testing.assert_allclose(p.a, a_n, rtol=1e-12)
    np.testing.assert_allclose(p.b, -a_n * cal.beta_, rtol=1e-12, atol=1e-12)
    # b_sd: the Laplace marginal, widened by the cross-fitted factor the bank records (>= 1)
    import json

    widen = json.loads(bank.attrs["interval_calibration"])["item_sd_factors"]["b_applied"]
    assert widen >= 1.0
    np.testing.assert_allclose(bank.items["b_sd"].values, widen * np.abs(a_n) * cal.item_posterior_.marginal_sd(), rtol=1e-12)
    np.testing.assert_allclose(bank.subjects["theta"].values, cal.native_theta_, rtol=1e-12)


# ============================================================================ report


def test_ece_and_reliability_by_hand():
    p = np.array([0.05, 0.15, 0.12, 0.95, 1.0, 0.55])
    y = np.array([0, 1, 0, 1, 1, 0])
    rd = reliability_diagram(p, y, 10)
    assert rd["count"].tolist() == [1, 2, 0, 0, 0, 1, 0, 0, 0, 2]
    # bins: [0,.1): |0 - .05|, [.1,.2): |.5 - .135|, [.5,.6): |0 - .55|, [.9,1]: |1 - .975|
    ece = (1 * 0.05 + 2 * 0.365 + 1 * 0.55 + 2 * 0.025) / 6
    assert expected_calibration_error(p, y) == pytest.approx(ece)


def test_calibration_report(fitted):
    cal, data, _ = fitted
    rng = np.random.default_rng(0)
    s = rng.integers(0, data.n_subjects, 300)
    i = rng.integers(0, data.n_items, 300)
    y = (rng.random(300) < cal.predict_proba(s, i)).astype(float)
    rep = calibration_report(cal, (s, i, y), configurations=("map", "ability", "b", "ab", "ability+b"), n_draws=20, rng=1)
    table = rep.as_dict()
    assert set(table) == {"map", "ability", "b", "ab", "ability+b"}
    p = cal.predict_proba(s, i)
    assert table["map"]["ece"] == pytest.approx(expected_calibration_error(p, y))
    assert table["map"]["nll"] == pytest.approx(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
    assert rep.reliability["b"]["count"].sum() == 300
    again = calibration_report(cal, (s, i, y), configurations=("b",), n_draws=20, rng=1)
    assert "ECE" in str(again)
    held = np.full(data.shape, -1, dtype=np.int8)
    held[s, i] = y
    rep2 = calibration_report(cal, ResponseData.from_arrays(held, subject_ids=data.subject_ids, item_ids=data.item_ids), configurations=("map",))
    assert rep2.rows[0]["n_cells"] == int((held >= 0).sum())


# ============================================================================ recovery


@pytest.mark.slow
def test_recovery_paper_4pl_design():
    """Simulated 4PL (simulate_dataset design), N = 50 LLMs x J = 2000 items.

    theta ranks: Kendall tau >= 0.9. Difficulty ranks: the paper design (b ~ N(0, 0.5^2),
    c ~ U(0, .25), d ~ U(.85, 1)) carries little information per item at N = 50 -- even the
    sufficient-statistic-like proportion correct reaches only tau ~ 0.55 -- so tau >= 0.9 is out
    of reach for any estimator; require PSN to match that benchmark within 0.05 instead (the
    tau >= 0.9 case is ``test_recovery_informative_design``). ``ordered_asymptotes``: with the reference
    head d starts at c (both sigmoid(0)), the 4PL is flat and on this weak-signal design training
    stalls at theta = 0 (documented in the report).
    """
    from calibration.simulate import simulate_dataset

    data, truth = simulate_dataset("4pl", 50, 2000, rng=11)
    cal = PSNCalibrator(ordered_asymptotes=True, rng=1).fit(data)
    tau_theta = stats.kendalltau(cal.theta_, truth.theta).statistic
    difficulty = -truth.params.b / truth.params.a
    tau_beta = stats.kendalltau(cal.beta_, difficulty).statistic
    tau_pc = stats.kendalltau(-(data.correct == 1).mean(axis=0), difficulty).statistic
    assert tau_theta >= 0.9
    assert tau_beta >= tau_pc - 0.05


def _grid_posterior_mean_difficulty(Y, theta, a, c, d, grid=np.linspace(-6, 6, 481)):
    """Each item's beta by brute force: posterior mean on a grid (flat prior) given the TRUE theta,
    a, c, d -- an oracle no estimator of beta from these responses can beat by much."""
    P = c[:, None, None] + (d - c)[:, None, None] / (1 + np.exp(-a[:, None, None] * (theta[None, :, None] - grid)))
    ll = np.where(Y.T[:, :, None] == 1, np.log(P), np.log1p(-P)).sum(axis=1)
    w = np.exp(ll - ll.max(axis=1, keepdims=True))
    return (w * grid).sum(axis=1) / w.sum(axis=1)


@pytest.mark.slow
def test_recovery_informative_design():
    """N = 50 LLMs x J = 2000 items: Kendall tau >= 0.9 for the ranks of theta AND of difficulty.

    With 50 binary answers per item a difficulty rank is at the information limit: items whose
    difficulty falls between the same two abilities cannot be told apart, and on realistic
    designs (item parameters resampled from the PSN-IRT repository's fit, or a ~ U(1, 2.5)) even
    the grid oracle below reaches only tau 0.63-0.89 (measured while choosing this design). So
    this design makes the items informative -- abilities spread like the difficulties, steep
    slopes a ~ U(4, 8), asymptotes c <= .05, d >= .95 -- where the oracle reaches ~0.93 and the
    threshold is attainable; PSN must also stay within 0.03 of that oracle. Over 3 data seeds x 2
    training seeds PSN gave tau(difficulty) 0.904-0.915 against the oracle's 0.924-0.929, and
    tau(theta) 0.969-0.980.
    """
    from calibration.simulate import simulate_responses
    from catengine.models.params import ItemParams

    g = np.random.default_rng(401)
    theta = g.uniform(-3, 3, 50)
    beta = g.uniform(-2.5, 2.5, 2000)
    a, c, d = g.uniform(4, 8, 2000), g.uniform(0, 0.05, 2000), g.uniform(0.95, 1, 2000)
    data = simulate_responses(ItemParams("4pl", a=a, b=-a * beta, c=c, d=d), theta, rng=g)
    cal = PSNCalibrator(rng=1).fit(data)
    assert stats.kendalltau(cal.theta_, theta).statistic >= 0.9
    tau_beta = stats.kendalltau(cal.beta_, beta).statistic
    tau_oracle = stats.kendalltau(_grid_posterior_mean_difficulty(data.correct, theta, a, c, d), beta).statistic
    assert tau_beta >= 0.9
    assert tau_beta >= tau_oracle - 0.03


@pytest.mark.slow
@pytest.mark.skipif(psn_missing(DATA) is not None, reason=str(psn_missing(DATA)))
def test_real_data_two_epochs():
    """percent_0.7 (12 x 29,309): two epochs train, the loss drops below the reference's epoch-2 level."""
    Y = np.loadtxt(DATA, delimiter=",").astype(np.int8)
    cal = PSNCalibrator(max_epochs=2, rng=3407).fit(ResponseData.from_arrays(Y))
    assert cal.loss_trace_[-1] < 0.45
    assert stats.spearmanr(cal.theta_, (Y == 1).mean(axis=1)).statistic > 0.9


def test_collapsed_training_is_reported():
    # Pure-noise answers with the reference head (d starts equal to c: a flat 4PL) leave every
    # ability at the same value; a standardised scale built on that would be meaningless.
    from calibration import ConvergenceWarning, ResponseData
    from calibration.methods.psn import PSNCalibrator

    noise = (np.random.default_rng(0).random((22, 150)) < 0.5).astype(int)
    with pytest.warns(ConvergenceWarning, match="PSN training collapsed"):
        PSNCalibrator(max_epochs=15, ordered_asymptotes=False, progress=False, rng=0).fit(ResponseData.from_arrays(noise))



def test_item_diagnostics_and_runaway_slopes_held_in_the_plausible_range(fitted):
    """diagnostics_ flags slopes above 10 on the standardised scale; bank slopes / intercepts beyond
    the schema's plausible range are held at its edge instead of making an invalid bank (ChemBench
    folds of 14-18 LLMs reached a = 53 and b = -117 without it)."""
    import copy

    from catengine.itembank.schema import PLAUSIBLE_RANGES

    cal, data, _ = fitted
    a_std = np.where(cal.c_ > cal.d_, -cal.a_, cal.a_) * cal._scale(True)[1]
    np.testing.assert_array_equal(cal.diagnostics_.runaway_slope, np.abs(a_std) > 10)
    assert cal.diagnostics_.fit_identified and cal.converged_
    summary = json.loads(cal.to_item_bank("ok", interval_check=False).calibration.attrs["diagnostics"])
    assert summary["n_runaway_slope"] == 0
    runaway = copy.deepcopy(cal)
    runaway.a_ = cal.a_ * 400.0  # as a separated item's slope runs away
    bank = runaway.to_item_bank("runaway", interval_check=False)
    lo, hi = PLAUSIBLE_RANGES["a"]
    assert lo <= bank.params.a.min() and bank.params.a.max() <= hi and np.isclose(np.abs(bank.params.a).max(), hi)
    assert np.abs(bank.params.b).max() <= PLAUSIBLE_RANGES["b"][1]
    inside = np.abs(runaway.a_ * cal._scale(True)[1]) < hi
    np.testing.assert_allclose(np.abs(bank.params.a[inside]), np.abs(runaway.a_[inside] * cal._scale(True)[1]))


def test_item_prior_holds_separated_items_of_a_small_sample():
    """12 LLMs, strongly discriminating items: without the prior the slopes run away (some above 10
    on the standardised scale, flagged, converged_ False); with the default prior they stay below
    10 and the fit is identified. The abilities' order is kept."""
    import warnings

    data, theta = _sim(N=12, J=400, seed=21)
    settings = dict(max_epochs=30, batch_size=128, hidden_dim=16, embedding_dim=16, learning_rate=0.01, rng=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        plain = PSNCalibrator(item_prior="none", **settings).fit(data)
    prior = PSNCalibrator(**settings).fit(data)
    a_plain, a_prior = (np.abs(c._bank_arrays(True)[0]) for c in (plain, prior))
    assert a_plain.max() > 10 and not plain.converged_ and plain.diagnostics_.runaway_slope.any()
    assert a_prior.max() < 10 and prior.converged_ and np.median(a_prior) < np.median(a_plain)
    assert stats.kendalltau(prior.theta_, theta).statistic > 0.6
