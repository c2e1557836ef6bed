"""PSN-IRT cell kernel, network gradients, Adam and training (calibration.methods.psn.network, _kernels)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import naive_psn as naive
from calibration.methods.psn import PSNCalibrator, PSNNetwork, fit_network, tune_prior_precision
from calibration.methods.psn import _kernels as K
from calibration.methods.psn.network import PARAM_NAMES
from psn_cases import _random_net, _cells, _sim

# ============================================================================ cell kernel / gradients


@pytest.mark.parametrize("ordered", [False, True])
def test_cell_kernel_matches_naive_finite_differences(ordered):
    """Loss and its gradient wrt (theta, beta, a, p2, p3) -- all four item heads -- vs central differences."""
    rng = np.random.default_rng(4)
    B = 40
    theta = rng.normal(0, 2, B)
    out = rng.normal(0, 1.5, (B, 4))
    y = rng.integers(0, 2, B).astype(float)
    g_t, g_o = np.empty(B), np.empty((B, 4))
    total = K.cell_loss_grad(theta, out, y, ordered, 0.25, g_t, g_o)
    n_total, n_t, n_o = naive.cell_loss_grad(theta, out, y, ordered, 0.25)
    assert total == pytest.approx(n_total, rel=1e-12)
    # central differences with h = 1e-6 on O(1) quantities: error ~1e-9
    np.testing.assert_allclose(g_t, n_t, atol=1e-8)
    np.testing.assert_allclose(g_o, n_o, atol=1e-8)


def test_cell_kernel_floors_log_like_torch():
    """P far below exp(-100): loss contributes 100 (torch's clamp) and no gradient, never inf/NaN."""
    theta = np.array([0.0])
    out = np.array([[0.0, 1.0, -800.0, -800.0]])  # c = d = sigmoid(-800) ~ 0 -> P ~ 0
    g_t, g_o = np.empty(1), np.empty((1, 4))
    loss = K.cell_loss_grad(theta, out, np.array([1.0]), False, 1.0, g_t, g_o)
    assert loss == pytest.approx(100.0)
    assert np.all(g_o == 0) and np.all(np.isfinite(g_t))


@pytest.mark.parametrize("ordered,with_prior", [(False, False), (True, False), (True, True)])
def test_network_gradient_matches_finite_differences(ordered, with_prior):
    """Every parameter of every layer (tables, hidden, embedding, both readouts) vs central differences,
    with and without the slope / ability prior (PSNNetwork.set_prior) in the loss."""
    net = _random_net(ordered)
    if with_prior:
        rng = np.random.default_rng(9)
        net.set_prior(rng.uniform(0.1, 2.0, net.n_items), rng.uniform(0.1, 2.0, net.n_subjects))
    s, i, y = _cells(net.n_subjects, net.n_items, 40)
    loss, grads = net.loss_and_grad(s, i, y)
    assert loss == pytest.approx(net.loss(s, i, y, include_prior=True), rel=1e-12)
    h = 1e-6
    for name in PARAM_NAMES:
        arr = getattr(net, name)
        fd = np.zeros_like(arr)
        for k in np.ndindex(arr.shape):
            old = arr[k]
            arr[k] = old + h
            up = net.loss(s, i, y, include_prior=True)
            arr[k] = old - h
            dn = net.loss(s, i, y, include_prior=True)
            arr[k] = old
            fd[k] = (up - dn) / (2 * h)
        # loss is O(1), h = 1e-6: truncation + rounding error ~1e-9 per entry
        np.testing.assert_allclose(grads[name], fd, atol=2e-8, err_msg=f"gradient of {name}")


def test_prior_term_is_the_per_cell_share_of_the_gaussian_log_densities():
    """Over cells covering each item and subject the prior term sums to sum_j a_j^2 / (2 s^2) +
    sum_i theta_i^2 / 2 when the weights are 1 / (s^2 cells_j) and 1 / cells_i (the calibrator's)."""
    net = _random_net(True)
    s, i, y = _cells(net.n_subjects, net.n_items, 300)
    s_prior = 0.7
    per_item, per_subject = np.bincount(i, minlength=net.n_items), np.bincount(s, minlength=net.n_subjects)
    net.set_prior(1.0 / (s_prior**2 * per_item), 1.0 / per_subject)
    _, a, _, _ = net.item_parameters()
    expected = np.sum(a**2) / (2 * s_prior**2) + np.sum(net.theta() ** 2) / 2
    prior_share = (net.loss(s, i, y, include_prior=True) - net.loss(s, i, y)) * s.size
    assert prior_share == pytest.approx(expected, rel=1e-10)
    with pytest.raises(ValueError, match="slope_penalty"):
        net.set_prior(-np.ones(net.n_items), np.ones(net.n_subjects))
    net.clear_prior()
    assert net.loss(s, i, y, include_prior=True) == net.loss(s, i, y)


def test_forward_matches_dense_onehot_reference():
    """Embedding-table lookups equal the reference one-hot-times-Linear construction."""
    for ordered in (False, True):
        net = _random_net(ordered, seed=5)
        s, i, _ = _cells(net.n_subjects, net.n_items, 25, seed=6)
        np.testing.assert_allclose(net.predict_proba(s, i), naive.forward_onehot(net, s, i), rtol=1e-12)


def test_reflect_keeps_predictions():
    net = _random_net(False, seed=8)
    s, i, _ = _cells(net.n_subjects, net.n_items, 30)
    before, th = net.predict_proba(s, i), net.theta()
    net.reflect()
    np.testing.assert_allclose(net.predict_proba(s, i), before, rtol=1e-12)
    np.testing.assert_allclose(net.theta(), -th, rtol=1e-12)


def test_torch_default_init_ranges():
    net = PSNNetwork(12, 400, rng=0)
    assert np.abs(net.I).max() <= 1 / math.sqrt(400)
    assert np.abs(net.S).max() <= 1 / math.sqrt(12)
    assert np.abs(net.s_W2).max() <= 1 / math.sqrt(64)
    assert np.abs(net.t_w).max() <= 1 / math.sqrt(128)
    assert net.S.shape == (12, 64) and net.i_W.shape == (128, 4)


# ============================================================================ Adam


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_lazy_table_adam_equals_dense_adam(dtype):
    """Row-lazy Adam with replayed weight-decay steps == torch Adam updating every row every step."""
    rng = np.random.default_rng(9)
    R, H, T = 13, 8, 40
    w0 = rng.normal(0, 1, (R, H))
    steps = []
    for _ in range(T):
        idx = rng.integers(0, R, rng.integers(1, 6))  # a few rows, with repeats
        rows = rng.normal(0, 0.1, (idx.size, H))
        steps.append((idx, rows))
    dense = []
    for idx, rows in steps:
        g = np.zeros((R, H))
        np.add.at(g, idx, rows)
        dense.append(g)
    expected = naive.adam_dense_steps(w0, dense, lr=3e-3, wd=0.05)

    w = w0.astype(dtype)
    m, v = np.zeros_like(w), np.zeros_like(w)
    last = np.zeros(R, dtype=np.int64)
    slot = np.full(R, -1, dtype=np.int64)
    consts = np.array([3e-3, 0.9, 0.999, 1e-8, 0.05])
    fac = K.step_factors(T, consts, dtype)
    for t, (idx, rows) in enumerate(steps, start=1):
        K.adam_rows(w, m, v, last, idx.astype(np.int64), rows.astype(dtype), t, consts, slot, np.empty_like(rows, dtype=dtype), fac)
    K.adam_flush_rows(w, m, v, last, T, consts, fac)
    assert np.all(slot == -1)
    # float64: same operations in the same order; float32: single-precision rounding over 40 steps
    tol = 1e-12 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(w, expected, rtol=0, atol=tol)


def test_dense_adam_kernel_matches_naive():
    rng = np.random.default_rng(10)
    w0 = rng.normal(0, 1, 50)
    grads = [rng.normal(0, 1, 50) for _ in range(7)]
    w, m, v = w0.copy(), np.zeros(50), np.zeros(50)
    consts = np.array([1e-2, 0.9, 0.999, 1e-8, 1e-3])
    for t, g in enumerate(grads, start=1):
        K.adam_dense(w, g, m, v, t, consts)
    np.testing.assert_allclose(w, naive.adam_dense_steps(w0, grads, lr=1e-2, wd=1e-3), rtol=1e-13)


# ============================================================================ training


def test_training_reproducible_and_decreasing():
    data, _ = _sim()
    s, i = np.nonzero(data.correct >= 0)
    y = data.correct[s, i].astype(float)
    nets = []
    for _ in range(2):
        net = PSNNetwork(data.n_subjects, data.n_items, hidden_dim=16, embedding_dim=16, rng=1)
        hist = fit_network(net, s, i, y, batch_size=64, max_epochs=6, rng=2)
        nets.append((net, hist))
    for name in PARAM_NAMES:
        np.testing.assert_array_equal(getattr(nets[0][0], name), getattr(nets[1][0], name))
    loss = nets[0][1].train_loss
    assert loss[-1] < loss[0]
    other = PSNNetwork(data.n_subjects, data.n_items, hidden_dim=16, embedding_dim=16, rng=1)
    fit_network(other, s, i, y, batch_size=64, max_epochs=6, rng=3)
    assert not np.array_equal(other.I, nets[0][0].I)


def test_minibatches_use_observed_cells_only():
    """Missing cells (-1) never enter training or the Laplace sums."""
    data, _ = _sim(missing=0.3)
    cal = PSNCalibrator(max_epochs=2, batch_size=128, rng=0, hidden_dim=8, embedding_dim=8).fit(data)
    s, i, y = cal.cells_
    assert s.size == int((data.correct >= 0).sum())
    assert np.all(data.correct[s, i] >= 0) and np.array_equal(y, data.correct[s, i])
    assert cal.item_posterior_.n_cells == s.size


def test_early_stopping_restores_best_epoch():
    data, _ = _sim(N=40, J=80)
    cal = PSNCalibrator(
        max_epochs=40, validation_fraction=0.2, patience=2, batch_size=64, learning_rate=0.05,
        hidden_dim=16, embedding_dim=16, rng=0,
    ).fit(data)
    val = cal.validation_loss_curve_
    assert val.size == cal.n_iter_ and cal.history_.stopped_early
    best = cal.history_.best_epoch
    assert val[best - 1] == val.min()
    # the kept weights are the best epoch's: their validation loss is the minimum of the curve
    s, i, y = (x[cal.validation_index_] for x in cal.cells_)
    assert s.size == round(0.2 * cal.cells_[0].size)
    assert cal.network_.loss(s, i, y) == pytest.approx(val[best - 1], rel=1e-12)


def test_progress_bar_runs(capsys):
    data, _ = _sim()
    PSNCalibrator(max_epochs=1, batch_size=256, rng=0, hidden_dim=4, embedding_dim=4, progress=True).fit(data)
    assert "PSN-IRT" in capsys.readouterr().err
    PSNCalibrator(max_epochs=1, batch_size=256, rng=0, hidden_dim=4, embedding_dim=4, progress=False).fit(data)
    assert capsys.readouterr().err == ""


def test_tuned_prior_precision_in_calibrator():
    data, _ = _sim()
    cal = PSNCalibrator(max_epochs=2, batch_size=128, rng=0, hidden_dim=8, embedding_dim=8, tune_prior_precision=True).fit(data)
    assert cal.ability_posterior_.tuned and cal.item_posterior_.tuned
    bank = cal.to_item_bank("tuned")
    assert bank.posterior.attrs["prior_tuned"] == 1
    assert bank.posterior.attrs["prior_precision_b"] == pytest.approx(cal.item_posterior_.prior_precision)


def test_validation_warns_when_still_improving():
    from calibration.base import ConvergenceWarning

    data, _ = _sim()
    with pytest.warns(ConvergenceWarning):
        PSNCalibrator(max_epochs=2, validation_fraction=0.2, batch_size=64, rng=0, hidden_dim=8, embedding_dim=8).fit(data)
