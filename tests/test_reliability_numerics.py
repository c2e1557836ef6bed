"""Numerical reliability.

10. EAP is not falsely precise when the posterior lies beyond its +-8 grid: the grid widens
    (same spacing) and the estimate matches brute-force quadrature on a wide grid;
11. CoT lengths outside the plausible range (1e300, 5e-324 on a bank with offset 0, a JSON
    big integer) raise CoTOutOfRangeError instead of absurd traits or an OverflowError.
"""

import math
import warnings

import numpy as np
import pytest
from scipy.special import log_expit

import naive_engine as naive
from catengine import ItemBank
from catengine.estimation import EAPEstimator, GridEdgeWarning, MAPEstimator, ResponseState
from catengine.estimation import eap as eap_module
from catengine.models.params import ItemParams
from catengine.session import CATSession, CoTOutOfRangeError, InvalidResponseError


def _hard_all_correct(n=200, b=-15.0):
    """n correct answers to very hard items (difficulty 10): the posterior mode lies near 11.9."""
    params = ItemParams("2pl", a=np.full(n, 1.5), b=np.full(n, b))
    state = ResponseState(params)
    for j in range(n):
        state.add(j, 1)
    return params, state


def _brute_force(params, n_correct, lo=-60.0, hi=60.0, m=120_001):
    grid = np.linspace(lo, hi, m)
    lp = sum(log_expit(params.a[j] * grid + params.b[j]) for j in range(n_correct)) - 0.5 * grid**2
    w = np.exp(lp - lp.max())
    mean = np.sum(w * grid) / w.sum()
    return mean, math.sqrt(np.sum(w * (grid - mean) ** 2) / w.sum())


def test_eap_widens_its_grid_to_hold_the_posterior():
    params, state = _hard_all_correct()
    mean, sd = _brute_force(params, state.n)
    assert mean > 10  # the case of the issue: far beyond the default grid's +8
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: the widened grid holds the posterior
        est = EAPEstimator().estimate(params, state)
    assert abs(est.theta - mean) < 1e-6 and abs(est.theta_sd - sd) < 1e-6
    map_est = MAPEstimator().estimate(params, state)
    assert abs(map_est.theta - est.theta) < 3 * est.theta_sd  # and MAP agrees roughly


def test_eap_inside_the_grid_is_unchanged():
    params, state = _hard_all_correct(10, b=0.0)  # an ordinary posterior, well inside +-8
    mean, sd = _brute_force(params, 10)
    est = EAPEstimator().estimate(params, state)
    assert abs(est.theta - mean) < 1e-6 and abs(est.theta_sd - sd) < 1e-6
    assert ("eap-widened", 401, (-8.0, 8.0)) not in state.scratch


def test_eap_warns_when_even_the_widest_grid_is_not_enough(monkeypatch):
    monkeypatch.setattr(eap_module, "MAX_ABS_THETA", 9.0)
    params, state = _hard_all_correct()
    with pytest.warns(GridEdgeWarning, match="edge of the widest grid"):
        EAPEstimator().estimate(params, state)


# ----------------------------------------------------------------------------- 11. CoT range
@pytest.fixture
def lart_bank():
    return naive.make_bank("lart", 30, seed=3)


@pytest.mark.parametrize("cot", [1e300, 1e9 + 1, 10**400])
def test_absurd_cot_lengths_are_refused(lart_bank, cot):
    s = CATSession(lart_bank, rng=0)
    item = s.next_item()
    with pytest.raises(CoTOutOfRangeError, match="plausible range"):
        s.record(item, 1, cot_length=cot)
    assert s.n_items == 0  # unchanged
    s.record(item, 1, cot_length=500)
    assert math.isfinite(s.estimate.theta) and abs(s.estimate.theta) < 5


def test_a_tiny_cot_on_a_bank_with_offset_zero_is_refused(lart_bank):
    p = lart_bank.params
    bank = ItemBank.from_params("lart", lart_bank.item_ids, bank_id="zero", rho=p.rho, cot_offset=0.0,
                                **{n: getattr(p, n) for n in p.parameter_names})
    s = CATSession(bank, rng=0)
    item = s.next_item()
    with pytest.raises(CoTOutOfRangeError):
        s.record(item, 1, cot_length=5e-324)
    s.record(item, 1, cot_length=1.0)
    assert abs(s.estimate.theta) < 5


def test_the_cot_limit_is_configurable_per_session(lart_bank):
    s = CATSession(lart_bank, rng=0)
    s.max_cot_length = 1e11
    item = s.next_item()
    s.record(item, 0, cot_length=5e9)
    assert s.n_items == 1
    assert issubclass(CoTOutOfRangeError, InvalidResponseError)
