"""The cross-fitted score check (calibration.heldout.score_curves) and its use by the engine
(catengine.scoring.calibration): the fitted residual SD against known injected misfit, the widened
variance against its closed form, and the default path on simulated banks with and without misfit."""

import json
import math

import numpy as np
import pytest
from scipy.special import expit

from calibration.heldout.score_curves import MIN_COMPLETE_LLMS, coverage_matching_variance, fit_score_curve
from catengine import CATSession, ItemBank
from catengine.estimation import MAPEstimator
from catengine.scoring import predict_accuracy
from catengine.scoring.calibration import ScoreCalibration
from catengine.stopping import MaxItems


def test_fit_recovers_an_injected_residual_sd_and_floors_at_zero():
    rng = np.random.default_rng(0)
    n, lengths, J = 4000, [10, 20, 40], 200
    model_sd = np.array([0.08, 0.06, 0.04])  # per-unanswered-item SDs the model claims
    delta = 0.05
    e = rng.standard_normal((n, 3)) * np.sqrt(model_sd**2 + delta**2)
    pooled = {"acc_resid": e, "acc_model_var": np.tile(model_sd**2, (n, 1)),
              "acc_err": e * (J - np.array(lengths)) / J, "acc_sd": np.tile(model_sd, (n, 1)) * (J - np.array(lengths)) / J,
              "acc_truth": np.tile(rng.integers(40, 161, n)[:, None] / J, (1, 3)),
              "cot_log_ratio": np.empty((0, 3)), "cot_model_var": np.empty((0, 3))}
    curve = fit_score_curve(pooled, lengths, J)
    assert curve["residual_sd"] == pytest.approx([delta] * 3, abs=0.004)
    # the random mean's exact MAE, against its normal approximation sqrt(2 / pi) x the hypergeometric SD
    a, L = pooled["acc_truth"][:, 0], np.array(lengths)
    normal = np.sqrt(2 / np.pi) * np.sqrt(a[:, None] * (1 - a[:, None]) / L * (J - L) / (J - 1)).mean(axis=0)
    assert curve["random_mean_mae"] == pytest.approx(normal, rel=0.03)
    assert curve["cot_log_sd"] is None
    honest = dict(pooled, acc_resid=rng.standard_normal((n, 3)) * model_sd * 0.8)  # narrower than claimed
    assert fit_score_curve(honest, lengths, J)["residual_sd"] == [0.0, 0.0, 0.0]
    few = {k: v[: MIN_COMPLETE_LLMS - 1] for k, v in pooled.items()}
    assert fit_score_curve(few, lengths, J) is None


def test_coverage_matching_is_exact_for_normal_residuals_and_ignores_a_few_far_outliers():
    rng = np.random.default_rng(3)
    n = 20000
    x = coverage_matching_variance(rng.standard_normal((n, 1)) * np.sqrt(1.0 + 0.5), np.ones((n, 1)))
    assert x[0] == pytest.approx(0.5, abs=0.06)
    core = rng.standard_normal(960)
    resid = np.concatenate([core, np.full(40, 50.0)])[:, None]
    x = coverage_matching_variance(resid, np.ones_like(resid))
    # 95% of all = 98.96% of the normal core: 1.96 sqrt(1 + x) at its 98.96% point
    expected = (np.quantile(np.abs(core), 0.95 / 0.96) / 1.96) ** 2 - 1.0
    assert x[0] == pytest.approx(expected, abs=0.05) and x[0] < 1.5
    assert np.mean(resid**2) - 1.0 > 50  # what a mean-square fit would have added
    assert coverage_matching_variance(0.5 * rng.standard_normal((500, 1)), np.ones((500, 1)))[0] == 0.0


def test_residual_sd_adds_the_closed_form_variance_per_group():
    rng = np.random.default_rng(1)
    J = 40
    bank = ItemBank.from_params("2pl", [f"q{j}" for j in range(J)], bank_id="t", a=rng.uniform(0.5, 2, J),
                                b=rng.normal(0, 1, J))
    p = bank.params
    obs = np.arange(6)
    y = np.array([1, 0, 1, 1, 0, 1], dtype=float)
    codes = np.arange(J) % 2
    delta, theta = 0.07, 0.3
    plain = predict_accuracy(p, theta, 0.0, obs, y, codes=codes, n_groups=2)
    wide = predict_accuracy(p, theta, 0.0, obs, y, codes=codes, n_groups=2, residual_sd=delta)
    pj = expit(theta * p.a + p.b)
    unknown = np.ones(J, bool)
    unknown[obs] = False
    for g, members in enumerate([np.ones(J, bool), codes == 0, codes == 1]):
        u = unknown & members
        assert plain[g].sd ** 2 == pytest.approx(np.sum(pj[u] * (1 - pj[u])), rel=1e-9)
        assert wide[g].sd ** 2 == pytest.approx(np.sum(pj[u] * (1 - pj[u])) + (delta * u.sum()) ** 2, rel=1e-9)
        assert wide[g].mean == pytest.approx(plain[g].mean, rel=1e-12)
    with pytest.raises(ValueError, match="residual_sd"):
        predict_accuracy(p, theta, 0.0, obs, y, residual_sd=-1.0)


def _record(name, residual_sd):
    return json.dumps({"version": 1, "folds": 4, "n_subjects": 40, "calibration_method": "cbmm", "selection": name,
                       "curves": {name: {"test_length": [5, 20], "c": [1.0, 1.0], "rms_ratio_model": [1.0, 1.0]}},
                       "score_curves": {name: {"test_length": [5, 20], "residual_sd": list(residual_sd),
                                               "cot_log_sd": None}}})


def test_sessions_widen_the_score_by_the_stored_curve_unless_the_estimator_opts_out():
    rng = np.random.default_rng(2)
    J = 60
    plain = ItemBank.from_params("2pl", [f"q{j}" for j in range(J)], bank_id="t", a=rng.uniform(0.5, 2, J),
                                 b=rng.normal(0, 1, J))
    name = CATSession(plain).selector.name
    bank = plain.replace_attrs(interval_calibration=_record(name, [0.02, 0.06]))

    def run(b, **kw):
        s = CATSession(b, stopping=MaxItems(10), rng=0, **kw)
        answers = np.random.default_rng(3)
        while not s.finished:
            s.record(s.next_item(), int(answers.random() < 0.5))
        return s

    s = run(bank)
    score = s.predicted_score(method="model", by=False)  # the model's prediction, widened by the stored curve
    curve = ScoreCalibration.from_record(json.loads(bank.attrs["interval_calibration"]), "40 LLMs").curve(name)
    delta = curve.residual(10)
    assert delta == pytest.approx(0.02 + (0.06 - 0.02) * 5 / 15)
    est = s.estimate
    idx = np.array([bank.index_of(r.item) for r in s.history])
    y = np.array([r.correct for r in s.history], dtype=float)
    direct = predict_accuracy(bank.params, est.theta, est.theta_sd, idx, y, residual_sd=delta)[0]
    assert score.sd == pytest.approx(direct.sd / J, rel=1e-9)
    assert score.sd > predict_accuracy(bank.params, est.theta, est.theta_sd, idx, y)[0].sd / J
    assert "residual SD" in score.calibration and "cross-fitted" in score.calibration
    quiet = ScoreCalibration.from_record(json.loads(_record(name, [0.0, 0.0])), "40 LLMs").curve(name)
    assert quiet.describe(10).startswith("not widened: the score check found the model's intervals wide enough after 10")
    assert run(plain).predicted_score(by=False).calibration == ""
    opted_out = run(bank, estimator=MAPEstimator(interval_calibration=False)).predicted_score(by=False)
    assert opted_out.calibration == "" and opted_out.sd == pytest.approx(
        run(plain, estimator=MAPEstimator(interval_calibration=False)).predicted_score(by=False).sd)
    other = ScoreCalibration.from_record(json.loads(bank.attrs["interval_calibration"]), "x").curve("kl")
    assert other.residual(20) == pytest.approx(0.06)
    with pytest.raises(ValueError, match="malformed"):
        ScoreCalibration.from_record({"score_curves": {"x": {"test_length": [5], "residual_sd": [-1]}}}, "x")


def test_the_default_path_stores_a_score_check_that_restores_unit_rms_in_sample():
    """A cBMM bank (1-D) of 2-D data: the stored score check has a curve per selector on the c(L)
    grid, and its residual SDs bring the held-out RMS z of the accuracy to about 1 where the
    model's own was above 1 (no more than the smoothing moves it). Fewer LLMs than a bank needs
    for score factors, so the one-trait prediction is what is checked (the factor path's check:
    test_the_score_factor_path_stores_a_check_that_restores_coverage)."""
    from calibration import ResponseData
    from calibration.methods.cbmm.calibrator import CBMMCalibrator
    from calibration.heldout import MIN_SCORE_FACTOR_LLMS

    rng = np.random.default_rng(5)
    N, J = MIN_SCORE_FACTOR_LLMS - 1, 160
    theta = rng.standard_normal((N, 2))
    slopes = rng.uniform(0.8, 1.6, J)
    logit = np.where(np.arange(J) < J // 2, theta[:, :1] * slopes, theta[:, 1:] * slopes) + rng.normal(0, 1, J)
    data = ResponseData.from_arrays((rng.random((N, J)) < expit(logit)).astype(np.int8))
    bank = CBMMCalibrator(rng=0, progress=False).fit(data).to_item_bank("two_d")
    record = json.loads(bank.attrs["interval_calibration"])
    assert set(record["score_curves"]) == set(record["curves"])
    for name, curve in record["score_curves"].items():
        assert curve["test_length"] == record["curves"][name]["test_length"] and curve["n_llms"] == N
        assert all(d >= 0 for d in curve["residual_sd"]) and curve["cot_log_sd"] is None
        for model, calibrated, d in zip(curve["accuracy_rms_z_model"], curve["accuracy_rms_z_calibrated_in_sample"],
                                        curve["residual_sd"]):
            assert calibrated <= model + 1e-9
            assert (d == 0 and calibrated == model) or calibrated < max(model, 1.15)
            assert calibrated < 1.2
    s = CATSession(bank, stopping=MaxItems(20), rng=0)
    while not s.finished:
        s.record(s.next_item(), int(rng.random() < 0.5))
    # the stored check widens the model-based prediction (the default score, design-based, needs no widening)
    assert "cross-fitted" in s.predicted_score(method="model", by=False).calibration
    assert s.predicted_score(by=False).calibration == ""


def test_the_fit_summary_names_the_score_check():
    from calibration.heldout import describe

    record = dict(json.loads(_record("pei", [0.01, 0.03])), seconds=1.5)
    record["score_curves"]["pei"]["cot_log_sd"] = [0.2, 0.4]
    text = describe(record)
    assert "score check, pei: residual SD per unanswered item L=5: 0.010, L=20: 0.030" in text
    assert "CoT-total log-SD L=5: 0.20, L=20: 0.40" in text


def test_the_score_factor_path_stores_a_check_that_restores_coverage():
    """A cBMM bank of 2-D data from enough LLMs for score factors: the check runs the factor
    prediction for every selector it replays (the default's design draws, maximum information and
    random items) and its residual SDs raise the in-sample 95% coverage of the held-out accuracies
    to at least 0.93 at every length (from 0.81-0.92 after maximum information): the matched
    coverage is 0.95 per length, and the smoothing over neighbouring lengths can move two of the 90
    LLMs across the bound."""
    from calibration import ResponseData
    from calibration.methods.cbmm.calibrator import CBMMCalibrator

    rng = np.random.default_rng(6)
    N, J = 90, 160
    theta = rng.standard_normal((N, 2))
    slopes = rng.uniform(0.8, 1.6, J)
    logit = np.where(np.arange(J) < J // 2, theta[:, :1] * slopes, theta[:, 1:] * slopes) + rng.normal(0, 1, J)
    data = ResponseData.from_arrays((rng.random((N, J)) < expit(logit)).astype(np.int8))
    bank = CBMMCalibrator(rng=0, progress=False).fit(data).to_item_bank("two_d_factors")
    assert bank.score_factors is not None
    record = json.loads(bank.attrs["interval_calibration"])
    # the check measures the default selector (doubly robust: every step a design draw) beside the others
    assert record["selection"] == "doubly-robust"
    assert set(record["score_curves"]) == {"doubly-robust", "mfi", "random"}
    for curve in record["score_curves"].values():
        for model, calibrated in zip(curve["accuracy_coverage_model_normal"],
                                     curve["accuracy_coverage_calibrated_in_sample_normal"]):
            assert calibrated >= model - 1e-9
            assert calibrated >= 0.93 - 1e-9
    # the factor model alone is overconfident after maximum-information items
    assert min(record["score_curves"]["mfi"]["accuracy_coverage_model_normal"]) < 0.9


def _record_versus(name, accuracy_mae, random_mean_mae):
    record = json.loads(_record(name, [0.02, 0.06]))
    if accuracy_mae is not None:
        record["score_curves"][name].update(accuracy_mae=list(accuracy_mae), random_mean_mae=list(random_mean_mae))
    return json.dumps(record)


def test_the_check_compares_the_model_with_random_items_and_a_losing_bank_defaults_to_the_design():
    """The stored check's model-based MAE against the random mean's: interpolated between checked
    lengths, reported in the score's calibration text, and, when the model loses at the longest
    checked length, sessions default to randomised selection and ``predicted_score()`` to the
    design-based estimate; a winning or older record keeps the usual default."""
    from catengine.selection import RandomisedSelection

    rng = np.random.default_rng(2)
    J = 60
    plain = ItemBank.from_params("2pl", [f"q{j}" for j in range(J)], bank_id="t", a=rng.uniform(0.5, 2, J),
                                 b=rng.normal(0, 1, J))
    usual = CATSession(plain).selector.name
    losing = plain.replace_attrs(interval_calibration=_record_versus(usual, [0.05, 0.09], [0.08, 0.04]))
    curve = ScoreCalibration.from_record(json.loads(losing.attrs["interval_calibration"]), "40 LLMs").curve(usual)
    ratio = (0.05 + 0.04 * 5 / 15) / (0.08 - 0.04 * 5 / 15)
    assert curve.versus_random(10) == pytest.approx(ratio)
    assert curve.versus_random(4) is None and curve.versus_random(21) is None  # outside the checked lengths
    assert curve.loses_to_random()
    assert f"erred {ratio:.2f}x as much as the mean of 10 random items" in curve.describe(10)
    # random items err 0 only when every item is answered: that length says nothing, the one before decides
    whole = ScoreCalibration.from_record(json.loads(_record_versus(usual, [0.09, 0.01], [0.08, 0.0])), "x").curve(usual)
    assert whole.versus_random(20) is None and whole.loses_to_random()

    s = CATSession(losing, stopping=MaxItems(10), rng=0)
    assert isinstance(s.selector, RandomisedSelection)
    answers = np.random.default_rng(3)
    while not s.finished:
        s.record(s.next_item(), int(answers.random() < 0.5))
    auto, design, model = s.predicted_score(by=False), s.predicted_score(method="design", by=False), \
        s.predicted_score(method="model", by=False)
    assert auto.method == "design" and auto.to_dict() == design.to_dict()
    assert model.method == "model"

    for attrs in (_record_versus(usual, [0.05, 0.03], [0.08, 0.04]), _record_versus(usual, None, None)):
        kept = plain.replace_attrs(interval_calibration=attrs)
        assert CATSession(kept).selector.name == usual
        assert not ScoreCalibration.from_record(json.loads(attrs), "x").curve(usual).loses_to_random()
    t = CATSession(plain, stopping=MaxItems(5), rng=0)
    while not t.finished:
        t.record(t.next_item(), 1)
    assert t.predicted_score(by=False).method == "doubly-robust"  # the default: adaptive steps and design draws
    from catengine.selection import MaxFisherInformation

    u = CATSession(plain, selector=MaxFisherInformation(), stopping=MaxItems(5), rng=0)
    while not u.finished:
        u.record(u.next_item(), 1)
    assert u.predicted_score(by=False).method == "model"  # no design draws: the model's
    one = CATSession(plain, selector=RandomisedSelection(), rng=0)
    one.record(one.next_item(), 1)
    assert one.predicted_score(by=False).method == "model"  # one draw is too few for the design


def test_a_check_whose_model_loses_to_random_items_measures_the_randomised_selector_too():
    """A deliberately wrong bank (the data's intercepts reversed, slopes tripled): its check finds the
    model-based score worse than random items', replays the held-out LLMs once more with the
    randomised selector on the same fold banks, and stores that selector's own interval and score
    curves, which sessions of the bank (now randomised by default) then use."""
    from calibration import ResponseData
    from calibration.heldout import cross_fit_intervals
    from calibration.heldout.cross_fit import loses_to_random as _loses_to_random

    rng = np.random.default_rng(8)
    N, J = 24, 120
    ids = [f"q{j}" for j in range(J)]
    theta, a, b = rng.standard_normal(N), rng.uniform(0.8, 1.6, J), rng.normal(0, 1, J)
    data = ResponseData.from_arrays((rng.random((N, J)) < expit(a * theta[:, None] + b)).astype(np.int8), item_ids=ids)

    def wrong(train, fold_rng, bank_id):
        return ItemBank.from_params("2pl", ids, bank_id=bank_id, a=3 * a, b=-b), True

    record = cross_fit_intervals(data, wrong, rng=0)
    usual = record["selection"]
    assert usual != "randomised" and _loses_to_random(record["score_curves"], usual)
    assert "randomised" in record["curves"] and "randomised" in record["score_curves"]
    assert record["score_curves"]["randomised"]["n_llms"] == N
    bank = ItemBank.from_params("2pl", ids, bank_id="wrong", a=3 * a, b=-b).replace_attrs(
        interval_calibration=json.dumps(record))
    s = CATSession(bank, stopping=MaxItems(10), rng=0)
    assert s.selector.name == "randomised"
    while not s.finished:
        s.record(s.next_item(), 1)
    assert "with randomised selection" in s.estimate.interval_calibration  # its own curve, not the largest
    assert "not measured" not in s.predicted_score(method="model", by=False).calibration
