"""One contract, run over every registered calibrator (calibration.methods.METHODS).

The registry agrees with the bank schema, the command line and the audits; every calibrator
declares and checks all of its settings, fits through the shared template, exposes the same fitted
attributes on one scale, is reproducible from its seed, and writes a bank whose recorded settings
rebuild an equal calibrator (what recalibration relies on).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from calibration import ResponseData, simulate_dataset
from calibration.base import FITTED_ATTRIBUTES, BaseCalibrator, ConvergenceWarning, NotFittedError
from calibration.methods import METHODS, all_method_names, get_method

# A small, fast configuration of every registered method: a new method must add one here.
SMALL = {
    "cbmm": {},
    "saem": {"max_iter": 40, "n_burnin": 10},
    "psn": {"max_epochs": 30, "batch_size": 32, "hidden_dim": 8, "embedding_dim": 8},  # the default budget: the prior joins late here
}
N_SUBJECTS, N_ITEMS = 40, 12


def _data(name):
    model = "lart" if get_method(name).needs_cot else "2pl"
    data, _ = simulate_dataset(model, N_SUBJECTS, N_ITEMS, rng=5, cot_offset=1.0)
    return data


def _fit(name, seed=3, **extra):
    cls = get_method(name).calibrator
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return cls(**{**SMALL[name], "rng": seed, "progress": False, **extra}).fit(_data(name))


@pytest.fixture(scope="module", params=sorted(METHODS))
def fitted(request):
    return request.param, _fit(request.param)


# ----------------------------------------------------------------------------- registry


def test_every_registered_method_has_a_small_configuration():
    assert set(SMALL) == set(METHODS)


def test_registry_matches_the_bank_schema():
    from catengine.itembank.schema import CALIBRATION_METHODS

    assert set(CALIBRATION_METHODS) - {"", "simulation"} == set(all_method_names())


def test_registry_names_classes_and_aliases():
    for name, method in METHODS.items():
        cls = method.calibrator
        assert issubclass(cls, BaseCalibrator) and cls.method_name == name
        for spelling in method.names:
            assert get_method(spelling) is method
    assert get_method("psn-laplace").name == "psn"  # banks written before the registry
    with pytest.raises(ValueError, match="unknown calibration method 'irt'; allowed: cbmm, saem, psn"):
        get_method("irt")


def test_audits_and_command_line_use_the_registry():
    from calibration.audit.methods import METHODS as AUDIT_METHODS, NEEDS_COT
    from calibration.cli import build_parser

    assert set(METHODS) <= set(AUDIT_METHODS)
    assert NEEDS_COT == {name for name, m in METHODS.items() if m.needs_cot}
    parser = build_parser()
    for name, method in METHODS.items():
        for spelling in method.names:
            args = parser.parse_args(["fit", spelling, "--responses", "r.csv", "--bank-id", "x"])
            assert get_method(args.method) is method


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_setting_is_declared_and_checked(name):
    cls = get_method(name).calibrator
    assert set(cls.SETTINGS) == set(cls._param_names())
    defaults = cls()
    defaults.validated_settings()  # the defaults are valid
    for setting in cls.SETTINGS:
        bad = cls().set_params(**{setting: object()})
        with pytest.raises((ValueError, TypeError), match=setting):
            bad.validated_settings()
    with pytest.raises(ValueError, match="unknown setting"):
        cls().set_params(no_such_setting=1)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_command_line_defaults_are_the_constructor_defaults(name):
    from calibration.cli import build_parser
    from calibration.cli.fit import build_calibrator

    method = get_method(name)
    args = build_parser().parse_args(["fit", name, "--responses", "r.csv", "--bank-id", "x", "--no-progress"])
    built = build_calibrator(args).get_params()
    expected = {**method.calibrator.default_settings(), "rng": method.cli_seed, "progress": False}
    assert built == expected


# ----------------------------------------------------------------------------- settings round trip


@pytest.mark.parametrize("name", sorted(METHODS))
def test_config_round_trip(name):
    cls = get_method(name).calibrator
    cal = cls(**{**SMALL[name], "rng": 11})
    config = cal.to_config()
    assert config["type"] == name and config["rng"] == 11
    assert cls.from_config(config).get_params() == cal.get_params()
    with pytest.raises(ValueError, match="unknown setting"):
        cls.from_config({**config, "bogus": 1})
    other = next(n for n in METHODS if n != name)
    with pytest.raises(ValueError, match="given to"):
        cls.from_config({**config, "type": other})
    generator = cls(rng=np.random.default_rng(0)).to_config()
    assert generator["rng"] == "numpy.random.Generator(PCG64)" and cls.from_config(generator).rng is None


def test_unfitted_calibrators_refuse_to_export():
    for method in METHODS.values():
        with pytest.raises(NotFittedError):
            method.calibrator().to_item_bank("x")


COMMON_EXPORT_PARAMETERS = ("self", "bank_id", "interval_check", "item_metadata", "keep_responses")


def test_every_calibrator_exports_through_one_signature():
    """``to_item_bank`` is the template of ``BaseCalibrator`` on every method: the same parameters
    (bank_id, then keyword-only interval_check, item_metadata, keep_responses), the method's own
    options as keyword-only arguments with defaults of its ``_bank_parts`` hook."""
    import inspect

    base = inspect.signature(BaseCalibrator.to_item_bank)
    common = [p for p in base.parameters.values() if p.kind is not p.VAR_KEYWORD]
    assert tuple(p.name for p in common) == COMMON_EXPORT_PARAMETERS
    assert all(p.kind is p.KEYWORD_ONLY for p in common[2:])
    for name, method in METHODS.items():
        cls = method.calibrator
        assert cls.to_item_bank is BaseCalibrator.to_item_bank, f"{name} overrides to_item_bank"
        sig = inspect.signature(cls.to_item_bank)
        assert [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD] == common, name
        hook = inspect.signature(cls._bank_parts).parameters
        own = [p for p in hook.values() if p.name != "self"]
        assert all(p.kind is p.KEYWORD_ONLY and p.default is not p.empty for p in own), name
        assert not set(cls.bank_options()) & set(COMMON_EXPORT_PARAMETERS), name
        assert set(cls.EXPORT_SETTINGS) <= set(cls.bank_options()), name
    assert {n: set(m.calibrator.bank_options()) for n, m in METHODS.items()} == {
        "cbmm": {"include_subjects"}, "saem": {"scale"}, "psn": {"standardize", "include_features"}}


def test_export_options_of_the_template(fitted):
    """The common options behave alike on every method; another method's option is refused."""
    name, cal = fitted
    meta = {"topic": [f"t{k % 2}" for k in range(N_ITEMS)]}
    bank = cal.to_item_bank("contract", interval_check=False, item_metadata=meta, keep_responses=True)
    assert list(bank.item_metadata("topic")) == meta["topic"]
    assert bank.responses is not None and bank.responses.identical(cal.training_data_.to_dataset())
    assert cal.to_item_bank("contract", interval_check=False).responses is None
    foreign = next(o for n, m in METHODS.items() if n != name for o in m.calibrator.bank_options())
    with pytest.raises(TypeError, match=f"unknown option.*{foreign}"):
        cal.to_item_bank("contract", interval_check=False, **{foreign: True})


def test_fit_rejects_other_inputs():
    for method in METHODS.values():
        with pytest.raises(TypeError, match="ResponseData"):
            method.calibrator().fit({"not": "responses"})


@pytest.mark.parametrize("name", sorted(METHODS))
def test_fit_refuses_responses_that_carry_no_information(name):
    """Every method, before it starts: an item nobody answered is named, and answers that are the
    same on every item (here all correct) are refused, instead of a bank reporting parameters the
    data do not contain (a SAEM fit of all-correct answers would write one)."""
    data = _data(name)
    cls = get_method(name).calibrator
    correct = np.ones_like(data.correct)
    all_right = ResponseData.from_arrays(correct, data.cot_length, subject_ids=data.subject_ids, item_ids=data.item_ids)
    with pytest.raises(ValueError, match="nothing to calibrate: on each of the 12 items every observed answer is the same"):
        cls(**SMALL[name], progress=False).fit(all_right)
    gap = data.correct.copy()
    gap[:, 3] = -1
    unanswered = ResponseData.from_arrays(gap, data.cot_length, subject_ids=data.subject_ids, item_ids=data.item_ids)
    with pytest.raises(ValueError, match=rf"1 item\(s\) have no observed response.*'{data.item_ids[3]}'"):
        cls(**SMALL[name], progress=False).fit(unanswered)


# ----------------------------------------------------------------------------- fitted state


def test_fitted_attributes(fitted):
    name, cal = fitted
    data = _data(name)
    for attr in FITTED_ATTRIBUTES:
        assert hasattr(cal, attr), f"{name}: {attr} missing"
    assert cal.theta_.shape == (N_SUBJECTS,) and cal.theta_sd_.shape == (N_SUBJECTS,)
    assert np.isfinite(cal.theta_).all()
    assert np.isnan(cal.theta_sd_).all() or (np.isfinite(cal.theta_sd_).all() and (cal.theta_sd_ > 0).all())
    assert cal.item_params_.response_model == get_method(name).response_model and cal.item_params_.n_items == N_ITEMS
    assert isinstance(cal.converged_, bool)
    # every convergence warning of the fit is kept (the interval check's refits read it, quietly)
    assert isinstance(cal.convergence_warnings_, list) and all(isinstance(w, str) for w in cal.convergence_warnings_)
    assert isinstance(cal.n_iter_, int) and cal.n_iter_ >= 1
    assert cal.loss_trace_.ndim == 1 and cal.loss_trace_.size >= 1 and np.isfinite(cal.loss_trace_).all()
    assert cal.elapsed_ > 0
    assert cal.subject_ids_ == data.subject_ids and cal.item_ids_ == data.item_ids
    assert cal.n_subjects_ == N_SUBJECTS and cal.n_items_ == N_ITEMS
    assert cal.responses_sha256_ == data.sha256()


def test_item_params_and_theta_share_one_scale(fitted):
    """The fitted abilities explain the answers under the fitted items better than permuted ones."""
    from catengine.models import prob_correct

    name, cal = fitted
    data = _data(name)
    seen = data.correct >= 0
    y = data.correct

    def loglik(theta):
        p = np.clip(prob_correct(cal.item_params_, np.asarray(theta, dtype=float)), 1e-12, 1 - 1e-12)
        return float(np.where(seen, y * np.log(p) + (1 - y) * np.log1p(-p), 0.0).sum())

    permuted = np.random.default_rng(0).permutation(cal.theta_)
    assert loglik(cal.theta_) > loglik(permuted) + 10.0
    # and better than any rescaled version that misplaces the scale by a factor 3 or a shift of 1
    assert loglik(cal.theta_) > max(loglik(3 * cal.theta_), loglik(cal.theta_ / 3), loglik(cal.theta_ + 1))


def test_theta_and_item_params_reproduce_the_banks_own_log_likelihood(fitted):
    """theta_ and item_params_ are on the bank's scale: the answers' log-likelihood under the
    fitted attributes equals the one under the bank's own items and stored thetas (theta_ on PSN's
    network scale would have SD 13.6 against the bank's 1.0)."""
    from catengine.models import prob_correct

    name, cal = fitted
    data = _data(name)
    seen = data.correct >= 0
    y = data.correct

    def loglik(params, theta):
        p = np.clip(prob_correct(params, np.asarray(theta, dtype=float)), 1e-12, 1 - 1e-12)
        return float(np.where(seen, y * np.log(p) + (1 - y) * np.log1p(-p), 0.0).sum())

    bank = cal.to_item_bank("contract", interval_check=False)
    bank_theta = bank.subjects["theta"].values
    assert list(bank.subjects["subject"].values) == list(cal.subject_ids_)
    assert loglik(cal.item_params_, cal.theta_) == pytest.approx(loglik(bank.params, bank_theta), rel=1e-9)
    np.testing.assert_allclose(cal.theta_, bank_theta, rtol=1e-9, atol=1e-9)


def test_same_seed_same_fit(fitted):
    name, cal = fitted
    again = _fit(name)
    np.testing.assert_array_equal(again.theta_, cal.theta_)
    np.testing.assert_array_equal(again.item_params_.a, cal.item_params_.a)
    np.testing.assert_array_equal(again.item_params_.b, cal.item_params_.b)
    np.testing.assert_array_equal(again.loss_trace_, cal.loss_trace_)


@pytest.mark.slow
def test_bank_records_settings_that_rebuild_the_calibrator(fitted, tmp_path):
    from calibration.recalibration import make_calibrator
    from catengine.itembank import open_item_bank, write_item_bank

    name, cal = fitted
    bank = open_item_bank(write_item_bank(cal.to_item_bank("contract"), tmp_path / "contract"))
    assert bank.attrs["calibration_method"] == name
    assert bank.response_model == get_method(name).response_model
    assert bank.attrs["responses_sha256"] == cal.responses_sha256_
    settings = bank.calibration_settings
    assert {k: settings[k] for k in cal.SETTINGS} == {k: v for k, v in cal.to_config().items() if k != "type"}
    rebuilt = make_calibrator(name, settings, rng=cal.rng, progress=cal.progress)
    assert rebuilt.get_params() == cal.get_params()
    assert type(cal).export_options(settings) == {k: settings[k] for k in cal.EXPORT_SETTINGS}


def test_refit_from_bank_settings_reproduces_the_bank(fitted):
    from calibration.recalibration import make_calibrator

    name, cal = fitted
    bank = cal.to_item_bank("contract")
    settings = bank.calibration_settings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # the small SAEM run stops at max_iter
        refit = make_calibrator(name, settings, rng=cal.rng).fit(_data(name))
    again = refit.to_item_bank("contract", **refit.export_options(settings))
    for var in bank.params.parameter_names:
        np.testing.assert_array_equal(getattr(again.params, var), getattr(bank.params, var))


def test_responses_as_arrays_only_where_declared():
    data = _data("cbmm")
    for name, method in METHODS.items():
        cls = method.calibrator
        if cls.accepts_arrays:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                fit = cls(**SMALL[name], rng=3, progress=False).fit(np.asarray(data.correct))
            ref = cls(**SMALL[name], rng=3, progress=False).fit(ResponseData.from_arrays(np.asarray(data.correct)))
            np.testing.assert_array_equal(fit.theta_, ref.theta_)
        else:
            with pytest.raises(TypeError, match="ResponseData"):
                cls().fit(np.asarray(data.correct))
