"""The default step's design probabilities against numpy from scratch.

Every default step is a design draw (``DoublyRobustSelection`` -> ``RandomisedSelection``):
pi_j = (1 - eps) w_j / W + eps / n over the n eligible items, w_j = sqrt(f_j (1 - f_j)),
f_j = E_q P_j(theta) under q = Normal(theta^, SD^2). The engine computes f in one compiled pass
(``catengine.scoring._kernels.expected_logistic``: the Gauss-Hermite nodes taken in symmetric pairs,
one exponential per pair; closed form for probit items) and the weights, their total, the
probabilities and the draw in compiled passes (``catengine.selection._kernels``). Here the same
quantities are computed the plain way: every node's logistic by scipy's ``expit`` (the probit
closed form by ``erfc``), the weights by numpy, W by ``math.fsum``.

The two are compared within a bound derived from the floating-point arithmetic of both, per item
(``_bounds``; eps = 2^-52, K nodes, M_k = |a theta| + |a SD x_k| + |b| the magnitudes that make up
node k's argument):

* each implementation rounds node k's argument by at most 4 eps M_k and evaluates the logistic
  within 8 eps relative, so the nodes differ by at most sigma_k (1 - sigma_k) 8 eps M_k + 16 eps sigma_k;
  the weighted sums by that plus 2 K eps f (K positive terms each side); 4PL: times (d - c) plus
  4 eps (|c| + f); probit: phi(x) 8 eps (|x| + |a theta + b|) + 16 eps f;
* w: |d(f (1 - f))| <= |1 - f - f'| |df| + 2 eps (v + v'), and |dw| = |dv| / (w + w') + eps (w + w');
* W: the sum of the |dw| plus the rounding of the engine's eight-lane sum, (J / 8 + 4) eps W;
* pi: (1 - eps_u) (|dw_j| / W + w_j |dW| / (W (W - |dW|))) + 4 eps pi_j.

The bounds are a few ulps times the number of terms; the differences seen are well inside them.
No timing here (``benchmarks/engine.py step`` times the step).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import erfc, expit

from catengine import CATSession, ItemBank
from catengine.models.expected_information import gauss_hermite_normal
from catengine.scoring.model_based import expected_probabilities
from catengine.selection import DoublyRobustSelection, RandomisedSelection, SelectionState
from catengine.selection._kernels import design_probabilities, draw_index
from catengine.selection.randomised import draw_one
from score_checks import model_item_params

EPS = np.finfo(float).eps
N_NODES = RandomisedSelection().n_nodes
UNIFORM_SHARE = RandomisedSelection().uniform_share


def _bank(model: str, J: int, seed: int) -> ItemBank:
    """A bank with ordinary items and a few extreme ones (intercepts of +-60, steep slopes: with
    a = 50 and SD 2.5 the quadrature's outer nodes reach |a SD x| >= 700, where the exponential is clamped)."""
    rng = np.random.default_rng(seed)
    kw = dict(a=rng.uniform(0.3, 2.5, J), b=rng.normal(0.0, 2.0, J))
    kw["a"][:5] = [1.0, 1.0, 4.0, 0.5, 50.0]
    kw["b"][:5] = [60.0, -60.0, 0.0, -9.0, 3.0]
    kw.update(model_item_params(model, rng, J, c=(0.0, 0.3), d=(0.75, 1.0), omega=(6.4, 0.35), phi=(1.5, 2.5),
                                lam=(0.8, 1.4), rho=-0.6))
    return ItemBank.from_params(model, [f"i{j:04d}" for j in range(J)], bank_id=f"step-{model}", **kw)


def _reference(params, theta: float, sd: float, eligible: np.ndarray, eps_u: float):
    """(f, pi, bound on |pi_engine - pi|, bound on |f_engine - f|): the design from scratch in numpy."""
    a, b = np.asarray(params.a, float), np.asarray(params.b, float)
    if params.response_model == "lart":
        scale = np.sqrt(1.0 + (a * sd) ** 2)
        x = (a * theta + b) / scale
        f = 0.5 * erfc(-x / math.sqrt(2.0))
        density = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        df = density * 8.0 * EPS * (np.abs(x) + np.abs(a * theta + b)) + 16.0 * EPS * f
    else:
        nodes, weights = gauss_hermite_normal(N_NODES)
        z = a[None, :] * (theta + sd * nodes)[:, None] + b[None, :]  # (K, J)
        s = expit(z)
        g = weights @ s
        m = np.abs(a * theta)[None, :] + np.abs(a * sd)[None, :] * np.abs(nodes)[:, None] + np.abs(b)[None, :]
        dg = weights @ (s * (1.0 - s) * 8.0 * EPS * m * np.exp(8.0 * EPS * m) + 16.0 * EPS * s) + 2 * N_NODES * EPS * g
        if params.response_model == "4pl":
            c, d = np.asarray(params.c, float), np.asarray(params.d, float)
            f = c + (d - c) * g
            df = (d - c) * dg + 4.0 * EPS * (np.abs(c) + f)
        else:
            f, df = g, dg
    v = np.clip(f * (1.0 - f), 0.0, None)
    w = np.where(eligible, np.sqrt(v), 0.0)
    n = int(eligible.sum())
    W = math.fsum(w)
    pi = np.where(eligible, (1.0 - eps_u) * w / W + eps_u / n, 0.0)
    return f, pi, w, W, df


def _bounds(f_engine, f, w, W, df, eligible, eps_u):
    """Per-item bound on |pi_engine - pi| propagated from |f_engine - f| <= df (module docstring)."""
    assert np.all(np.abs(f_engine - f) <= df), np.max(np.abs(f_engine - f) / df)
    v, v_engine = f * (1.0 - f), f_engine * (1.0 - f_engine)
    dv = np.abs(1.0 - f - f_engine) * df + df * df + 2.0 * EPS * (np.abs(v) + np.abs(v_engine))
    w_engine = np.sqrt(np.clip(v_engine, 0.0, None))
    both = w + w_engine
    # (both weights 0: equal; computed alike, sqrt(f (1 - f)), so w_engine is the engine's weight)
    dw = np.where(both > 0.0, dv / np.where(both > 0.0, both, 1.0) + EPS * both, 0.0)
    dw = np.where(eligible, dw, 0.0)
    J = f.size
    dW = math.fsum(dw) + (J / 8 + 4) * EPS * W
    assert dW < W
    return (1.0 - eps_u) * (dw / W + w * dW / (W * (W - dW))) + 4.0 * EPS * ((1.0 - eps_u) * w / W + eps_u)


def _state(bank, theta, sd, eligible):
    from catengine.estimation import TraitEstimate
    from catengine.session.bank_log import item_table

    lart = bank.response_model == "lart"
    est = TraitEstimate(theta=theta, theta_sd=sd, n_items=0,
                        **({"tau": 0.5, "tau_sd": 0.4, "theta_tau_cov": 0.0} if lart else {}))
    return SelectionState(est, eligible, None, item_table(bank))


@pytest.mark.parametrize("model", ["2pl", "4pl", "lart"])
def test_probabilities_match_numpy_from_scratch(model):
    """The fast path's f and pi at many posteriors and eligible masks, item by item within the
    derived bound; off the eligible set exactly 0; the drawn item's probability is the one it was
    drawn with."""
    J = 3001
    bank = _bank(model, J, seed=11)
    params = bank.params
    sel = RandomisedSelection()
    rng = np.random.default_rng(12)
    worst = 0.0
    for theta, sd in ((0.0, 1.0), (0.4, 0.35), (-3.0, 0.6), (2.7, 0.05), (-0.8, 2.5), (35.0, 0.2)):
        for share_out in (0.0, 0.3, 0.97):
            eligible = rng.random(J) >= share_out
            eligible[[0, 1, 2, 4]] = True  # the extreme items stay in
            f_engine = expected_probabilities(params, theta, sd, N_NODES)
            f, pi, w, W, df = _reference(params, theta, sd, eligible, UNIFORM_SHARE)
            bound = _bounds(np.asarray(f_engine), f, w, W, df, eligible, UNIFORM_SHARE)
            pi_engine = sel.probabilities(params, _state(bank, theta, sd, eligible))
            assert np.all(pi_engine[~eligible] == 0.0)
            assert np.all(pi_engine[eligible] >= UNIFORM_SHARE / eligible.sum() * (1 - 4 * EPS))
            assert np.all(np.abs(pi_engine - pi) <= bound)
            worst = max(worst, float(np.max(np.abs(pi_engine - pi) / np.where(bound > 0, bound, 1.0))))
            assert math.fsum(pi_engine) == pytest.approx(1.0, abs=(J / 8 + 8) * EPS)
            # the selector's draw: the probability recorded is the one drawn with, bit for bit
            state = _state(bank, theta, sd, eligible)
            for seed in range(5):
                pick, prob = sel.candidates(params, state, np.random.default_rng(seed), 1)
                assert eligible[pick[0]] and prob[0] == pi_engine[pick[0]]
    assert worst <= 1.0
    print(f"{model}: largest |pi_engine - pi| / bound = {worst:.3g}")


@pytest.mark.parametrize("model", ["2pl", "4pl", "lart"])
def test_default_session_steps_record_the_probabilities_they_drew_with(model):
    """A default session with excluded and administered items: every step is a design draw whose
    recorded criterion is the engine's probability of the drawn item at the state it was drawn from
    (bit for bit) and the numpy reference's within the bound."""
    J = 1500
    bank = _bank(model, J, seed=21)
    params = bank.params
    rng = np.random.default_rng(22)
    s = CATSession(bank, rng=23)
    assert isinstance(s.selector, DoublyRobustSelection) and s.selector.share == 1.0
    for j in rng.choice(J, 200, replace=False):
        s.exclude(bank.item_ids[j])
    p_true = np.clip(rng.random(J), 0.05, 0.95)
    for _ in range(25):
        est, eligible = s.estimate, s.eligible_mask().copy()
        state = SelectionState(est, eligible, s._responses, s.items)
        item = s.next_item()
        assert s.pending_is_design_draw
        j = bank.index_of(item)
        crit = s.pending_criterion
        pi_engine = s.selector.probabilities(params, state)
        assert crit == pi_engine[j]
        f, pi, w, W, df = _reference(params, est.theta, est.theta_sd, eligible, UNIFORM_SHARE)
        f_engine = np.asarray(expected_probabilities(params, est.theta, est.theta_sd, N_NODES))
        bound = _bounds(f_engine, f, w, W, df, eligible, UNIFORM_SHARE)
        assert abs(crit - pi[j]) <= bound[j]
        assert np.all(np.abs(pi_engine - pi) <= bound)
        y = int(rng.random() < p_true[j])
        s.record(item, y, 300.0 if model == "lart" else None)
        assert s.history[-1].criterion == crit


def test_draw_index_is_numpys_inversion_bit_for_bit():
    """The compiled draw takes the index ``searchsorted(cumsum(pi) / cumsum(pi)[-1], u, "right")``
    for every uniform, including the crossings' neighbourhoods and zero-probability runs."""
    rng = np.random.default_rng(31)
    for trial in range(200):
        J = int(rng.integers(1, 5000))
        pi = rng.random(J) * (rng.random(J) < 0.6)
        if pi.sum() == 0:
            pi[-1] = 1.0
        pi = pi / pi.sum() if trial % 2 else pi  # unnormalised too
        cdf = np.cumsum(pi)
        cdf /= cdf[-1]
        us = np.concatenate([rng.random(20), np.nextafter(cdf[rng.integers(0, J, 5)], 0.0), cdf[rng.integers(0, J, 5)]])
        total = float(np.cumsum(pi)[-1])
        for u in us[(us >= 0.0) & (us < 1.0)]:
            want = int(cdf.searchsorted(u, side="right"))
            # the sum unknown, known, and a wrong hint (the search then starts from the first item)
            for hint in (math.nan, total * (1 + 1e-12), total * 1.5):
                got = draw_index(pi, float(u), hint)
                assert got == want and pi[got] > 0.0
        seed = int(rng.integers(2**31))
        assert draw_one(pi / pi.sum(), np.random.default_rng(seed))[0] == \
            np.random.default_rng(seed).choice(J, p=pi / pi.sum())


def test_design_probabilities_degenerate_weights():
    """Nothing eligible: 0 and the output untouched beyond zeros; weights that are all 0 or not
    finite: the uniform design over the eligible items."""
    J = 7
    out = np.full(J, 5.0)
    assert design_probabilities(np.full(J, 0.5), True, np.zeros(J, bool), 0.5, out) == 0
    eligible = np.array([1, 0, 1, 1, 0, 1, 1], bool)
    for values, from_expected in ((np.zeros(J), True), (np.ones(J), True), (np.full(J, np.nan), True),
                                  (np.full(J, np.inf), False)):
        assert design_probabilities(values, from_expected, eligible, 0.3, out) == 5
        np.testing.assert_array_equal(out, np.where(eligible, 1 / 5, 0.0))


def test_expected_logistic_with_a_rule_that_is_not_symmetric():
    """The node-by-node branch of the compiled quadrature (rules that are not symmetric) against numpy."""
    from catengine.scoring._kernels import expected_logistic

    rng = np.random.default_rng(41)
    J = 257
    a, b = rng.uniform(0.2, 3.0, J), rng.normal(0.0, 3.0, J)
    x = np.array([-2.0, -0.5, 0.3, 1.1, 2.9])
    w = np.array([0.1, 0.3, 0.25, 0.25, 0.1])
    out = np.empty(J)
    expected_logistic(0.2, 0.7, x, w, a, b, a, a, False, out)
    z = a[None, :] * (0.2 + 0.7 * x)[:, None] + b[None, :]
    m = np.abs(a * 0.2)[None, :] + np.abs(a * 0.7)[None, :] * np.abs(x)[:, None] + np.abs(b)[None, :]
    s = expit(z)
    bound = w @ (s * (1.0 - s) * 8.0 * EPS * m + 16.0 * EPS * s) + 2 * x.size * EPS * (w @ s)
    assert np.all(np.abs(out - w @ s) <= bound)
