"""PSN-IRT network, Adam, Laplace posterior, calibrator, report and CLI (calibration.methods.psn)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import naive_psn as naive
from calibration.base import NotFittedError
from calibration.data import ResponseData
from calibration.methods.psn import (
    PSNCalibrator,
    PSNNetwork,
    calibration_report,
    expected_calibration_error,
    fit_ability_posterior,
    fit_item_posterior,
    fit_network,
    p_ahead,
    reliability_diagram,
    tune_prior_precision,
)
from calibration.methods.psn import _kernels as K
from calibration.methods.psn.network import PARAM_NAMES
from calibration.methods.psn.laplace import ReadoutPosterior, cell_curvature

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "psn_irt" / "percent_0.7.csv.gz"


def _random_net(ordered, *, N=4, J=7, H=5, E=6, seed=0, scale=0.7):
    """A tiny float64 network with O(1) weights (the torch init is too small to exercise ReLUs)."""
    net = PSNNetwork(N, J, hidden_dim=H, embedding_dim=E, ordered_asymptotes=ordered, rng=seed)
    rng = np.random.default_rng(seed + 100)
    for name in PARAM_NAMES:
        arr = getattr(net, name)
        arr[...] = rng.normal(0.0, scale, arr.shape)
    return net


def _cells(N, J, n, seed=1):
    rng = np.random.default_rng(seed)
    return rng.integers(0, N, n), rng.integers(0, J, n), rng.integers(0, 2, n).astype(float)


def _sim(N=30, J=60, seed=3, missing=0.0):
    """Small 4PL data set in the native form with a clear ability signal."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(0, 1.2, N)
    beta = rng.normal(0, 1.0, J)
    a = rng.uniform(1.0, 2.0, J)
    c = rng.uniform(0.0, 0.2, J)
    d = rng.uniform(0.85, 1.0, J)
    P = c + (d - c) / (1 + np.exp(-a * (theta[:, None] - beta)))
    Y = (rng.random(P.shape) < P).astype(np.int8)
    if missing:
        Y[rng.random(Y.shape) < missing] = -1
        Y[:, 0] = np.where(Y[:, 0] < 0, 1, Y[:, 0])  # keep every subject observed
    return ResponseData.from_arrays(Y), theta


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


@pytest.mark.parametrize("ordered", [False, True])
def test_network_gradient_matches_finite_differences(ordered):
    """Every parameter of every layer (tables, hidden, embedding, both readouts) vs central differences."""
    net = _random_net(ordered)
    s, i, y = _cells(net.n_subjects, net.n_items, 40)
    _, grads = net.loss_and_grad(s, i, y)
    h = 1e-6
    for name in PARAM_NAMES:
        arr = getattr(net, name)
        fd = np.zeros_like(arr)
        for k in np.ndindex(arr.shape):
            old = arr[k]
            arr[k] = old + h
            up = net.loss(s, i, y)
            arr[k] = old - h
            dn = net.loss(s, i, y)
            arr[k] = old
            fd[k] = (up - dn) / (2 * h)
        # loss is O(1), h = 1e-6: truncation + rounding error ~1e-9 per entry
        np.testing.assert_allclose(grads[name], fd, atol=2e-8, err_msg=f"gradient of {name}")


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


# ============================================================================ Laplace


def _readout_problem(seed=0, asymptotes=True):
    """Tiny ability / item readout problem with all cells observed."""
    rng = np.random.default_rng(seed)
    N, J, E = 5, 9, 3
    U = rng.normal(0, 1, (N, E))
    V = rng.normal(0, 1, (J, E))
    wt = rng.normal(0, 0.7, E + 1)
    wb = rng.normal(0, 0.7, E + 1)
    wa = rng.normal(1.0, 0.3, E + 1) * 0.5
    Phi = np.hstack([U, np.ones((N, 1))])
    Psi = np.hstack([V, np.ones((J, 1))])
    theta = Phi @ wt
    beta = Psi @ wb
    a = Psi @ wa
    if asymptotes:
        c, d = rng.uniform(0.05, 0.3, J), rng.uniform(0.7, 0.95, J)
    else:
        c, d = np.zeros(J), np.ones(J)
    s, i = (x.ravel() for x in np.meshgrid(np.arange(N), np.arange(J), indexing="ij"))
    P = c[i] + (d[i] - c[i]) / (1 + np.exp(-a[i] * (theta[s] - beta[i])))
    y = (rng.random(s.size) < P).astype(float)
    return dict(U=U, V=V, wt=wt, wb=wb, wa=wa, theta=theta, beta=beta, a=a, c=c, d=d, cells=(s, i, y))


def _nlp(loglik_fn, w, delta):
    return -loglik_fn(w) + 0.5 * delta * w @ w


def _fd_hessian(f, w, h=1e-4):
    P = w.size
    H = np.zeros((P, P))
    for p in range(P):
        for q in range(P):
            e_p, e_q = np.eye(P)[p] * h, np.eye(P)[q] * h
            H[p, q] = (f(w + e_p + e_q) - f(w + e_p - e_q) - f(w - e_p + e_q) + f(w - e_p - e_q)) / (4 * h * h)
    return H


def _loglik(theta, beta, a, c, d, cells):
    s, i, y = cells
    return cell_curvature(theta, beta, a, c, d, s, i, y, "fisher")[1].sum()


@pytest.mark.parametrize("branch", ["ability", "b"])
@pytest.mark.parametrize("case", ["exact-4pl", "fisher-2pl"])
def test_laplace_hessian_equals_fd_hessian(branch, case):
    """H = GGN + delta I equals the finite-difference Hessian of the negative log posterior of the readout.

    eta = a (theta - beta) is linear in either readout, so with the observed ("exact") curvature
    the GGN *is* the Hessian (4PL with asymptotes); with the default Fisher curvature the two
    coincide where the link is canonical (c = 0, d = 1), which is where they should agree.
    """
    curvature, asym = ("exact", True) if case == "exact-4pl" else ("fisher", False)
    pb = _readout_problem(seed=1, asymptotes=asym)
    delta = 0.7
    c, d, cells = pb["c"], pb["d"], pb["cells"]
    if branch == "ability":
        post = fit_ability_posterior(pb["U"], pb["wt"], (pb["beta"], pb["a"], c, d), cells, prior_precision=delta, curvature=curvature)
        Phi = np.hstack([pb["U"], np.ones((pb["U"].shape[0], 1))])
        f = lambda w: _nlp(lambda w_: _loglik(Phi @ w_, pb["beta"], pb["a"], c, d, cells), w, delta)
        w0 = pb["wt"]
    else:
        post = fit_item_posterior(pb["V"], pb["wb"], pb["theta"], (pb["beta"], pb["a"], c, d), cells, prior_precision=delta, curvature=curvature)
        Psi = np.hstack([pb["V"], np.ones((pb["V"].shape[0], 1))])
        f = lambda w: _nlp(lambda w_: _loglik(pb["theta"], Psi @ w_, pb["a"], c, d, cells), w, delta)
        w0 = pb["wb"]
    H_fd = _fd_hessian(f, w0)
    # second differences with h = 1e-4 on an O(10) function: error ~1e-6 relative
    np.testing.assert_allclose(post.precision, H_fd, rtol=1e-5, atol=1e-5 * np.abs(H_fd).max())
    # the log-likelihood stored for the evidence is the one at the mean
    assert -f(w0) + 0.5 * delta * w0 @ w0 == pytest.approx(post.log_likelihood, rel=1e-12)


def test_fisher_ggn_is_not_exact_hessian_with_asymptotes():
    """Documented choice: with c > 0 or d < 1 the Fisher GGN differs from the exact Hessian (and stays PSD)."""
    pb = _readout_problem(seed=2, asymptotes=True)
    args = (pb["U"], pb["wt"], (pb["beta"], pb["a"], pb["c"], pb["d"]), pb["cells"])
    fisher = fit_ability_posterior(*args, curvature="fisher")
    exact = fit_ability_posterior(*args, curvature="exact")
    assert not np.allclose(fisher.ggn, exact.ggn, rtol=1e-3)
    assert np.linalg.eigvalsh(fisher.ggn).min() > -1e-10


@pytest.mark.parametrize("mode", ["fisher", "logistic", "exact"])
def test_curvature_kernel_matches_naive(mode):
    rng = np.random.default_rng(3)
    N, J, n = 4, 6, 50
    theta, beta, a = rng.normal(0, 1, N), rng.normal(0, 1, J), rng.normal(1, 0.5, J)
    c, d = rng.uniform(0, 0.3, J), rng.uniform(0.7, 1.0, J)
    s, i, y = _cells(N, J, n, seed=4)
    lam, ll = cell_curvature(theta, beta, a, c, d, s, i, y, mode)
    ref = [naive.cell_curvature(theta[s[k]], beta[i[k]], a[i[k]], c[i[k]], d[i[k]], y[k], mode) for k in range(n)]
    # "exact" is checked against second differences (h = 1e-4): error ~1e-7
    np.testing.assert_allclose(lam, ref, rtol=1e-6 if mode == "exact" else 1e-12, atol=1e-7)
    p = c[i] + (d[i] - c[i]) / (1 + np.exp(-a[i] * (theta[s] - beta[i])))
    np.testing.assert_allclose(ll, np.where(y == 1, np.log(p), np.log1p(-p)), rtol=1e-12)


def test_joint_ab_ggn_equals_per_cell_sum():
    """Joint (b, a) GGN built from per-item weights == sum over cells of Lambda J J' (J = d eta / d[w_b; w_a])."""
    pb = _readout_problem(seed=3, asymptotes=True)
    post = fit_item_posterior(
        pb["V"], pb["wb"], pb["theta"], (pb["beta"], pb["a"], pb["c"], pb["d"]), pb["cells"], a_readout=pb["wa"], prior_precision=1.0
    )
    s, i, y = pb["cells"]
    Psi = np.hstack([pb["V"], np.ones((pb["V"].shape[0], 1))])
    G = np.zeros((2 * Psi.shape[1],) * 2)
    for k in range(s.size):
        j = i[k]
        lam = naive.cell_curvature(pb["theta"][s[k]], pb["beta"][j], pb["a"][j], pb["c"][j], pb["d"][j], y[k], "fisher")
        Jn = np.concatenate([-pb["a"][j] * Psi[j], (pb["theta"][s[k]] - pb["beta"][j]) * Psi[j]])
        G += lam * np.outer(Jn, Jn)
    np.testing.assert_allclose(post.ggn, G, rtol=1e-10, atol=1e-12)
    draws = post.sample(3, rng=0)
    assert draws.shape == (3, Psi.shape[0], 2)


def test_gaussian_marginals_match_joint_draws():
    """Closed-form marginal variances and covariances == empirical moments of many joint draws."""
    pb = _readout_problem(seed=4)
    post = fit_item_posterior(pb["V"], pb["wb"], pb["theta"], (pb["beta"], pb["a"], pb["c"], pb["d"]), pb["cells"], prior_precision=0.5)
    n = 40_000
    draws = post.sample(n, rng=11)
    emp_cov = np.cov(draws, rowvar=False)
    cov = post.covariance()
    np.testing.assert_allclose(np.diag(cov), post.marginal_variance(), rtol=1e-10)
    # sample variances: relative SE sqrt(2/n) = 0.7%; 5 SE
    np.testing.assert_allclose(np.diag(emp_cov), post.marginal_variance(), rtol=0.035)
    sd = np.sqrt(np.diag(cov))
    # correlations: SE <= 1/sqrt(n) = 0.005
    np.testing.assert_allclose(emp_cov / np.outer(sd, sd), cov / np.outer(sd, sd), atol=0.03)
    np.testing.assert_allclose(draws.mean(axis=0), post.predictive_mean(), atol=5 * sd.max() / math.sqrt(n))
    # subsets give the same marginals
    np.testing.assert_allclose(post.marginal_variance([2, 5]), post.marginal_variance()[[2, 5]], rtol=1e-12)


def test_tune_prior_precision_maximises_evidence():
    pb = _readout_problem(seed=5)
    post = fit_ability_posterior(pb["U"], pb["wt"], (pb["beta"], pb["a"], pb["c"], pb["d"]), pb["cells"])
    tuned = tune_prior_precision(post)
    assert tuned.tuned and tuned.prior_precision > 0
    best = tuned.log_marginal_likelihood()
    for delta in np.geomspace(1e-3, 1e3, 25):
        assert best >= post.log_marginal_likelihood(delta) - 1e-8
    # the evidence formula equals its definition through log det(GGN + delta I)
    delta = 2.5
    sign, logdet = np.linalg.slogdet(post.ggn + delta * np.eye(post.n_weights))
    manual = post.log_likelihood - 0.5 * delta * post.mean @ post.mean + 0.5 * post.n_weights * np.log(delta) - 0.5 * logdet
    assert post.log_marginal_likelihood(delta) == pytest.approx(manual, rel=1e-12)


def test_temperature_tempers_the_likelihood():
    pb = _readout_problem(seed=8)
    post = fit_ability_posterior(pb["U"], pb["wt"], (pb["beta"], pb["a"], pb["c"], pb["d"]), pb["cells"], prior_precision=0.3)
    hot = post.with_temperature(50.0)
    np.testing.assert_allclose(hot.precision, post.ggn / 50.0 + 0.3 * np.eye(post.n_weights), rtol=1e-14)
    assert np.all(hot.marginal_variance() > post.marginal_variance())
    sign, logdet = np.linalg.slogdet(post.ggn / 50.0 + 0.3 * np.eye(post.n_weights))
    manual = post.log_likelihood / 50.0 - 0.15 * post.mean @ post.mean + 0.5 * post.n_weights * np.log(0.3) - 0.5 * logdet
    assert hot.log_marginal_likelihood() == pytest.approx(manual, rel=1e-12)
    with pytest.raises(ValueError):
        post.with_temperature(0.0)


def test_mean_loss_posterior_does_not_narrow_with_more_cells():
    # Seed 002 reports that its a-and-b miscalibration was "unaffected by a 10x increase in fitting
    # data": true of the Laplace of the *mean* loss (T = number of cells), not of the summed one.
    pb = _readout_problem(seed=9)
    s, j, y = pb["cells"]
    tenfold = (np.tile(s, 10), np.tile(j, 10), np.tile(y, 10))
    item_params = (pb["beta"], pb["a"], pb["c"], pb["d"])
    one = fit_ability_posterior(pb["U"], pb["wt"], item_params, pb["cells"], temperature=float(s.size))
    ten = fit_ability_posterior(pb["U"], pb["wt"], item_params, tenfold, temperature=float(10 * s.size))
    np.testing.assert_allclose(ten.covariance(), one.covariance(), rtol=1e-10)
    plain_one = fit_ability_posterior(pb["U"], pb["wt"], item_params, pb["cells"])
    plain_ten = fit_ability_posterior(pb["U"], pb["wt"], item_params, tenfold)
    assert np.all(plain_ten.marginal_variance() < 0.5 * plain_one.marginal_variance())  # 0.1x less the prior


def test_p_ahead_against_draws():
    rng = np.random.default_rng(6)
    A = rng.normal(0, 1, (4, 4))
    cov = A @ A.T + 0.1 * np.eye(4)
    mean = rng.normal(0, 1, 4)
    pa = p_ahead(mean, cov)
    np.testing.assert_allclose(pa + pa.T, 1.0, atol=1e-12)
    draws = rng.multivariate_normal(mean, cov, 100_000)
    emp = (draws[:, :, None] > draws[:, None, :]).mean(axis=0)
    np.fill_diagonal(emp, 0.5)
    np.testing.assert_allclose(pa, emp, atol=0.01)  # binomial SE <= 0.0016


def test_n_separated_pairs_by_hand():
    from calibration.methods.psn import n_separated_pairs

    pa = np.array([[0.5, 0.97, 0.60], [0.03, 0.5, 0.04], [0.40, 0.96, 0.5]])
    assert n_separated_pairs(pa) == 2  # (0, 1) at 0.97 and (1, 2) at 0.04; (0, 2) at 0.60 is open
    assert n_separated_pairs(pa, level=0.55) == 3


def test_non_pd_precision_raises_clear_error():
    pb = _readout_problem(seed=7)
    post = fit_ability_posterior(pb["U"], pb["wt"], (pb["beta"], pb["a"], pb["c"], pb["d"]), pb["cells"])
    bad = ReadoutPosterior(post.mean, -10 * np.eye(post.n_weights), post.features, 1.0, "exact", 0.0, 1)
    with pytest.raises(np.linalg.LinAlgError, match="not positive definite"):
        bad.marginal_variance()


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
    assert cal.n_iter_ == 8 and cal.converged_ and cal.loss_curve_.shape == (8,)
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
    assert back.response_model == "4pl" and back.attrs["calibration_method"] == "psn-laplace"
    p = back.params
    assert np.all(p.c < p.d)
    # the bank's slope-intercept 4PL (ordered asymptotes, standardised theta) predicts exactly the network
    th = back.subjects["theta"].values
    P_bank = prob_correct(p, th)
    s, i = np.nonzero(np.ones(data.shape, bool))
    np.testing.assert_allclose(P_bank[s, i], cal.predict_proba(s, i), rtol=1e-9, atol=1e-12)
    scale = back.scale
    np.testing.assert_allclose(th, (cal.theta_ - scale["location"]) / scale["scale"], rtol=1e-12)
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
    np.testing.assert_allclose(bank.subjects["theta"].values, cal.theta_, rtol=1e-12)


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


# ============================================================================ CLI


def test_cli_fit_writes_bank(tmp_path, capsys):
    from calibration.cli import main
    from calibration.io import load_responses
    from catengine.itembank import open_item_bank

    data, _ = _sim(N=8, J=30, seed=2)
    csv_path = tmp_path / "resp.csv"
    np.savetxt(csv_path, data.correct, fmt="%d", delimiter=",")  # headerless matrix, as percent_0.7.csv
    assert load_responses(csv_path).shape == data.shape
    assert main(["fit", "--method", "psn", "--responses", str(csv_path), "--bank-id", "cli_psn", "--out",
                 str(tmp_path / "banks"), "--epochs", "2", "--hidden-dim", "8", "--embedding-dim", "8",
                 "--no-progress", "--seed", "5"]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path.parent == tmp_path / "banks" / "cli_psn"
    bank = open_item_bank(path)
    assert bank.bank_id == "cli_psn" and bank.n_items == 30 and "b_sd" in bank.items
    assert bank.subjects["p_ahead"].shape == (8, 8)
    assert main(["fit", "--method", "psn", "--responses", str(csv_path), "--bank-id", "cli_psn_mean", "--out",
                 str(tmp_path / "banks"), "--epochs", "1", "--hidden-dim", "4", "--embedding-dim", "4",
                 "--no-progress", "--temperature", "mean-loss"]) == 0
    bank = open_item_bank(Path(capsys.readouterr().out.strip()))
    assert bank.posterior.attrs["temperature"] == float((data.correct >= 0).sum())
    with pytest.raises(SystemExit):
        main(["fit", "--method", "psn", "--responses", str(csv_path), "--bank-id", "x", "--temperature", "warm"])
    assert "expected a positive number, 'split-half' or 'mean-loss', got 'warm'" in capsys.readouterr().err


def test_calibration_cli_entry_point(tmp_path, capsys):
    """``calibration fit --method psn ...`` through the package's dispatcher; path on stdout."""
    from calibration.cli import main

    data, _ = _sim(N=6, J=20, seed=3)
    nc = tmp_path / "resp.nc"
    data.to_netcdf(nc)
    rc = main(["fit", "--method", "psn", "--responses", str(nc), "--bank-id", "psn_cli", "--out", str(tmp_path),
               "--epochs", "1", "--hidden-dim", "4", "--embedding-dim", "4", "--no-progress", "--tune-prior-precision"])
    assert rc == 0
    out = capsys.readouterr()
    path = Path(out.out.strip())
    assert path.exists() and path.parent.name == "psn_cli" and "PSN-IRT" in out.err
    rc = main(["fit", "--method", "psn", "--responses", str(nc), "--bank-id", "psn_cli_sh", "--out", str(tmp_path),
               "--epochs", "1", "--hidden-dim", "4", "--embedding-dim", "4", "--no-progress", "--temperature", "split-half"])
    assert rc == 0 and "split-half check at T = 1: 6 subjects: RMS z" in capsys.readouterr().err
    rc = main(["fit", "--method", "psn", "--responses", str(tmp_path / "missing.csv"), "--bank-id", "x", "--out", str(tmp_path)])
    assert rc == 2 and "does not exist" in capsys.readouterr().err


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
@pytest.mark.skipif(not DATA.exists(), reason="shared PSN-IRT data not available")
def test_real_data_two_epochs():
    """percent_0.7 (12 x 29,309): two epochs train, the loss drops below the reference's epoch-2 level."""
    Y = np.loadtxt(DATA, delimiter=",").astype(np.int8)
    cal = PSNCalibrator(max_epochs=2, rng=3407).fit(ResponseData.from_arrays(Y))
    assert cal.loss_curve_[-1] < 0.45
    assert stats.spearmanr(cal.theta_, (Y == 1).mean(axis=1)).statistic > 0.9


def test_collapsed_training_is_reported():
    # Pure-noise answers with the reference head (d starts equal to c: a flat 4PL) leave every
    # ability at the same value; a standardised scale built on that would be meaningless.
    from calibration import ConvergenceWarning, ResponseData
    from calibration.methods.psn import PSNCalibrator

    noise = (np.random.default_rng(0).random((22, 150)) < 0.5).astype(int)
    with pytest.warns(ConvergenceWarning, match="PSN training collapsed"):
        PSNCalibrator(max_epochs=15, ordered_asymptotes=False, progress=False, rng=0).fit(ResponseData.from_arrays(noise))
