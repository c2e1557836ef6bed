"""The strength-ordered part of the cross-fitted check (calibration.heldout.strength_ordered, record
``beyond``) and its use by sessions whose trait estimate stands beyond the calibration population
(catengine.session.scoring.score_curve: the model-based score's curves)."""

import json

import numpy as np
import pytest
from scipy.special import expit

from calibration import CBMMCalibrator, ResponseData
from calibration.heldout.limits import MIN_HELD_OUT
from calibration.heldout.strength_ordered import EDGE_SHARE, edge_folds
from catengine import CATSession
from catengine.estimation.interval_calibration import IntervalCalibration
from catengine.stopping import MaxItems


def _runs(group_accuracy, runs=2, J=50, seed=0):
    """Two runs per LLM whose answered items' accuracy is exactly the given value per LLM."""
    rng = np.random.default_rng(seed)
    rows, groups = [], []
    for g, acc in enumerate(group_accuracy):
        for _ in range(runs):
            y = np.zeros(J)
            y[rng.permutation(J)[: int(round(acc * J))]] = 1
            rows.append(y)
            groups.append(f"llm{g}")
    return ResponseData.from_arrays(np.array(rows), subject_groups=groups)


def test_edge_folds_hold_out_whole_llms_strictly_beyond_every_calibration_llm():
    acc = np.linspace(0.1, 0.9, 20)  # 20 LLMs, distinct accuracies
    data = _runs(acc)
    n_obs = np.count_nonzero(data.correct >= 0, axis=1)
    folds = edge_folds(data, n_obs, 10)
    n_edge = int(np.floor(EDGE_SHARE * 20))
    groups = np.asarray(data.llm_groups)
    for side, expected in (("above", np.argsort(acc)[-n_edge:]), ("below", np.argsort(acc)[:n_edge])):
        rows, test = folds[side]
        assert set(groups[rows]) == set(expected)  # whole LLMs: both runs of each
        assert rows.size == 2 * n_edge and np.array_equal(rows, test)
        rest = np.setdiff1d(np.arange(data.n_subjects), rows)
        run_acc = data.correct.mean(axis=1)
        if side == "above":
            assert run_acc[rows].min() > run_acc[rest].max()
        else:
            assert run_acc[rows].max() < run_acc[rest].min()
    # ties at the boundary stay in the calibration: the bottom 4 LLMs tie with a fifth at 0
    tied = np.concatenate([np.zeros(5), np.linspace(0.3, 0.9, 15)])
    data = _runs(tied)
    folds = edge_folds(data, np.count_nonzero(data.correct >= 0, axis=1), 10)
    assert "below" not in folds and "above" in folds
    # runs with fewer answers than the check's longest length are not replayed
    short = _runs(acc)
    n_obs = np.count_nonzero(short.correct >= 0, axis=1)
    n_obs[np.flatnonzero(np.asarray(short.llm_groups) == np.argmax(acc))] = 5
    rows, test = edge_folds(short, n_obs, 10)["above"]
    assert test.size == rows.size - 2 and test.size >= MIN_HELD_OUT
    # too few LLMs for a side of MIN_HELD_OUT runs: no side
    assert edge_folds(_runs(acc[:8], runs=1), np.full(8, 50), 10) == {}


@pytest.fixture(scope="module")
def checked_bank():
    """A cBMM bank from 70 simulated 2PL LLMs (abilities N(0, 1)), with the default check."""
    rng = np.random.default_rng(11)
    N, J = 70, 60
    theta = rng.normal(0, 1, N)
    a, b = rng.uniform(0.7, 2.0, J), rng.normal(0, 1, J)
    y = (rng.random((N, J)) < expit(a * (theta[:, None] - b))).astype(np.int8)
    data = ResponseData.from_arrays(y, subject_ids=[f"llm{i}" for i in range(N)], item_ids=[f"q{j}" for j in range(J)])
    return CBMMCalibrator(rng=0, progress=False).fit(data).to_item_bank("edges"), a, b


def _session(bank, theta_true, a, b, n=15, seed=0, fixed=False):
    """A session of a simulee at ``theta_true``: adaptive, or (``fixed``) the bank's first ``n``
    items in order, so that sessions on differently calibrated copies of a bank see the same answers."""
    s = CATSession(bank, stopping=MaxItems(n), rng=seed)
    rng = np.random.default_rng(seed)
    index = bank.index_of
    for step in range(n):
        item = bank.item_ids[step] if fixed else s.next_item()
        j = index(item)
        s.record(item, int(rng.random() < expit(a[j] * (theta_true - b[j]))))
    return s


def test_the_default_check_stores_both_sides(checked_bank):
    bank, a, b = checked_bank
    record = json.loads(bank.attrs["interval_calibration"])
    beyond = record["beyond"]
    name = record["selection"]
    for side in ("above", "below"):
        part = beyond[side]
        assert part["n_held_out"] >= MIN_HELD_OUT and part["n_calibration"] + part["n_held_out"] == 70
        assert set(part["curves"]) == {name}
        assert part["curves"][name]["test_length"] == record["curves"][name]["test_length"]
    calib = IntervalCalibration.from_json(bank.attrs["interval_calibration"])
    inside, above = calib.curve(name), calib.curve(name, "above")
    for L in range(1, 30):
        assert above.factor(L) == pytest.approx(max(inside.factor(L), calib.beyond["above"][name].factor(L)))
    # the trait curves beyond are reported, not applied: a session's trait factor never jumps at the edge
    s_up = _session(bank, 3.5, a, b)
    assert s_up.predicted_score(by=False).extrapolation == "above"
    assert s_up.estimate.interval_factor == pytest.approx(inside.factor(15))


def test_flagged_sessions_widen_the_score_by_the_strength_ordered_record(checked_bank):
    """A hand-made record whose strength-ordered check is much wider than its random folds: the score of
    a session beyond the population takes it, one inside does not, and without ``beyond`` neither does."""
    bank, a, b = checked_bank
    record = json.loads(bank.attrs["interval_calibration"])
    name = record["selection"]
    grid = [5, 15, 30]
    record["curves"] = {name: {"test_length": grid, "c": [1.0] * 3, "rms_ratio_model": [1.0] * 3, "z95": [1.96] * 3}}
    record["score_curves"] = {name: {"test_length": grid, "residual_sd": [0.0] * 3, "cot_log_sd": None}}
    wide = {"n_held_out": 9, "n_calibration": 81, "calibration_accuracy_range": [0.1, 0.8],
            "curves": {name: {"test_length": grid, "c": [2.0] * 3, "rms_ratio_model": [2.0] * 3, "z95": [2.5] * 3}},
            "score_curves": {name: {"test_length": grid, "residual_sd": [0.1] * 3, "cot_log_sd": None,
                                    "accuracy_mae": [0.2] * 3, "random_mean_mae": [0.1] * 3}}}
    with_edges = bank.replace_attrs(interval_calibration=json.dumps(dict(record, beyond={"above": wide, "below": wide})))
    without = bank.replace_attrs(interval_calibration=json.dumps(dict(record, beyond=None)))
    up, up_plain = _session(with_edges, 3.5, a, b, fixed=True), _session(without, 3.5, a, b, fixed=True)
    mid, mid_plain = _session(with_edges, 0.0, a, b, fixed=True), _session(without, 0.0, a, b, fixed=True)
    # the trait estimate is the same either way (the trait curves beyond are not applied)
    assert up.estimate.theta == pytest.approx(up_plain.estimate.theta)
    assert up.estimate.theta_sd == pytest.approx(up_plain.estimate.theta_sd)
    assert up.estimate.interval_factor == pytest.approx(1.0)
    # the model-based score: (0.1 n_U)^2 more variance in the predicted number correct, only beyond
    m_up, m_plain = up.predicted_score(method="model", by=False), up_plain.predicted_score(method="model", by=False)
    n_u = 60 - 15
    assert m_up.sd > m_plain.sd
    assert (m_up.sd * 60) ** 2 == pytest.approx((m_plain.sd * 60) ** 2 + (0.1 * n_u) ** 2, rel=0.02)
    assert "strength-ordered" in m_up.calibration and "random items" in m_up.calibration
    m_mid, m_mid_plain = mid.predicted_score(method="model", by=False), mid_plain.predicted_score(method="model", by=False)
    assert m_mid.sd == pytest.approx(m_mid_plain.sd, rel=1e-9)
