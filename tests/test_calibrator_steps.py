"""Split-out steps of the cBMM and PSN calibrators, each on its own: the cBMM MM loop against the
dense sweep of tests/naive_cbmm.py, the SQUAREM extrapolation against its formula, the stopping
rule; PSN's cell split, orientation and bank groups."""

from __future__ import annotations

import math

import numpy as np
import pytest

import naive_cbmm as naive
from calibration.data import ResponseData
from calibration.methods.cbmm.calibrator import _MMLoop, _Problem, squarem_step
from calibration.methods.psn import PSNCalibrator
from psn_cases import _sim as _psn_sim


def _problem(n=40, j=12, seed=0, missing=0.2):
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=n)
    a, b = rng.uniform(0.5, 1.5, j), rng.normal(0, 0.5, j)
    c = (rng.random((n, j)) < 1 / (1 + np.exp(-(np.outer(theta, a) + b)))).astype(np.int8)
    c[rng.random((n, j)) < missing] = -1
    prob = _Problem(c, np.ones(n, bool), np.ones(j, bool), 1)
    start = (rng.normal(size=n), rng.uniform(0.2, 1.0, j), rng.normal(size=j))
    return c, prob, start


# ----------------------------------------------------------------------------- cBMM


def test_plain_mm_loop_records_the_naive_sweeps():
    """acceleration='none', no prior: the trace is the dense formula's loss of every iterate and
    the returned point is the last recorded one."""
    c, prob, w = _problem()
    n, j = c.shape
    loop = _MMLoop(prob, 0.0, 6, None, accelerate=False, eb_on=False, progress=False)
    converged = loop.run(tuple(x.copy() for x in w))
    assert not converged and loop.sweeps == 6 and loop.rejected == 0
    losses, iterates = [], [w]
    for _ in range(6):
        loss, *nxt = naive.mm_sweep_dense(c, *iterates[-1], 1.0, np.arange(n), np.arange(j))
        losses.append(loss)
        iterates.append(tuple(nxt))
    np.testing.assert_allclose(loop.trace, losses[:6], rtol=1e-12)
    for got, want in zip(loop.best, iterates[5]):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_squarem_loop_trace_never_increases_and_ends_at_the_returned_point():
    c, prob, w = _problem(seed=1)
    loop = _MMLoop(prob, 1e-10, 60, None, accelerate=True, eb_on=False, progress=False)
    loop.run(w)  # joint ML of a small sample drifts on (no prior): the loop stops at max_iter
    assert loop.sweeps == 60 and loop.rejected > 0  # some extrapolations fell back to the MM point
    assert np.all(np.diff(loop.trace) <= 0)
    n, j = c.shape
    final = naive.joint_nll_dense(c, *loop.best, 1.0, np.arange(n), np.arange(j))[0]
    assert loop.trace[-1] == pytest.approx(final, rel=1e-12)


def test_record_is_the_stopping_rule():
    _, prob, _ = _problem()
    loop = _MMLoop(prob, 1e-3, 10, None, accelerate=False, eb_on=False, progress=False)
    assert loop.record(100.0) == "ok" and loop.record(90.0) == "ok"
    assert loop.record(95.0) == "worse" and loop.record(math.nan) == "worse"
    assert loop.record(89.95) == "stop"  # relative decrease 5.6e-4 <= 1e-3
    assert loop.trace == [100.0, 90.0, 89.95]


def test_squarem_step_is_the_s3_extrapolation():
    rng = np.random.default_rng(2)
    w0, w1, w2 = ((rng.normal(size=5), rng.uniform(0, 1, 4), rng.normal(size=4)) for _ in range(3))
    a_on = np.array([True, True, False, True])
    r = np.concatenate([x1 - x0 for x0, x1 in zip(w0, w1)])
    v = np.concatenate([x2 - 2 * x1 + x0 for x0, x1, x2 in zip(w0, w1, w2)])
    raw = -np.linalg.norm(r) / np.linalg.norm(v)
    for step_max in (1.0, 2.0, 1e6):
        alpha, wn = squarem_step(w0, w1, w2, step_max, a_on)
        assert alpha == pytest.approx(max(-step_max, min(-1.0, raw)), rel=1e-14)
        if alpha == -1.0:
            assert wn is w2
            continue
        want = [x0 - 2 * alpha * (x1 - x0) + alpha**2 * (x2 - 2 * x1 + x0) for x0, x1, x2 in zip(w0, w1, w2)]
        want[1] = np.where(a_on, np.maximum(want[1], 0.0), w0[1])
        for got, ref in zip(wn, want):
            np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-15)


# ----------------------------------------------------------------------------- PSN


def test_psn_cell_split_partitions_the_observed_cells():
    data, _ = _psn_sim(N=10, J=20, seed=1, missing=0.2)
    cal = PSNCalibrator(validation_fraction=0.25)
    subj, item, y, tr, val = cal._split_cells(data, np.random.default_rng(0))
    observed = np.argwhere(data.correct >= 0)
    np.testing.assert_array_equal(np.c_[subj, item], observed)
    np.testing.assert_array_equal(y, data.correct[subj, item])
    assert val.size == round(0.25 * subj.size) and np.all(np.diff(val) > 0) and np.all(np.diff(tr) > 0)
    np.testing.assert_array_equal(np.sort(np.r_[tr, val]), np.arange(subj.size))
    _, _, _, tr0, val0 = PSNCalibrator()._split_cells(data, np.random.default_rng(0))
    assert val0.size == 0 and tr0.size == subj.size
    with pytest.raises(ValueError, match="leaves 0 validation cells"):
        PSNCalibrator(validation_fraction=1e-6)._split_cells(data, np.random.default_rng(0))


def test_psn_orientation_and_bank_groups():
    data, theta = _psn_sim(N=12, J=30, seed=2)
    cal = PSNCalibrator(max_epochs=3, hidden_dim=8, embedding_dim=8, rng=0).fit(data)
    # orientation: larger theta = more correct answers on most items; reflecting flips the choice
    beta, a, c, d = cal.network_.item_parameters()
    assert np.sum(np.sign(np.where(c > d, -a, a))) >= 0
    cal.network_.reflect()
    cal._orient(cal.network_)
    assert cal.orientation_ == -1
    cal.network_.reflect()
    subjects = cal._subjects_group(True)
    post = cal.theta_posterior(standardize=True)
    np.testing.assert_array_equal(subjects["theta"].values, post["mean"])
    np.testing.assert_array_equal(np.diag(subjects["p_ahead"].values), 0.5)
    a_n = np.where(cal.c_ > cal.d_, -1.0, 1.0) * cal.a_
    beta_sd = cal.item_posterior_.marginal_sd()
    mu, _ = cal._scale(True)
    posterior = cal._posterior_group(a_n, beta_sd, mu, include_features=True)
    w = posterior["b_readout_mean"].values
    b = posterior["b_offset"].values + posterior["b_features"].values @ w
    np.testing.assert_allclose(b, -a_n * (cal.beta_ - mu), rtol=1e-6, atol=1e-6)  # the MAP b of the bank
    assert "b_features" not in cal._posterior_group(a_n, beta_sd, mu, include_features=False)
    calibration = cal._calibration_group(np.ones(data.n_items))
    assert calibration.attrs["n_iter"] == 3 and calibration.attrs["n_flipped_items"] == 0
    assert PSNCalibrator._bank_scale(False, 0.0, 1.0)["theta"] == "native PSN-IRT network scale"
