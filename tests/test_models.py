"""Tests of catengine.models: kernels vs naive twins, information identities, derivatives, tails,
and a worked example of Lemma 1 (docs/math.md §1.3)."""

from __future__ import annotations

import math
import subprocess
import sys
import warnings

import numpy as np
import pytest
from scipy.special import log_ndtr

from catengine.models import ItemParams, fisher_information, lart, logistic, prob_correct
from catengine.models import _kernels as K

try:  # tests/ may or may not be a package
    from . import naive_models as N
except ImportError:
    import naive_models as N


# ----------------------------------------------------------------------------- fixtures


def _rng(seed=0):
    return np.random.default_rng(seed)


def _bank_2pl(n=12, seed=0):
    r = _rng(seed)
    return ItemParams("2pl", a=r.uniform(-1.0, 2.5, n), b=r.normal(0, 1.5, n))


def _bank_4pl(n=12, seed=1, d_one=False):
    r = _rng(seed)
    c = r.uniform(0.0, 0.3, n)
    c[:3] = 0.0  # exercise the c = 0 branch
    d = np.ones(n) if d_one else r.uniform(0.75, 1.0, n)
    d[3:6] = 1.0  # exercise the d = 1 branch
    return ItemParams("4pl", a=r.uniform(-1.0, 2.5, n), b=r.normal(0, 1.5, n), c=c, d=d)


def _bank_lart(n=12, seed=2, rho=-0.6):
    r = _rng(seed)
    return ItemParams(
        "lart",
        a=r.uniform(-0.8, 2.0, n),
        b=r.normal(0, 1.0, n),
        omega=r.normal(0, 1.0, n),
        phi=r.uniform(0.3, 1.5, n),
        lam=r.uniform(0.5, 1.8, n),
        rho=rho,
    )


# ----------------------------------------------------------------------------- kernels vs naive twins

# Includes the branch points of the kernels (0, -20) and of the naive twins (-30), and the far tails.
X_GRID = np.concatenate(
    [np.linspace(-45, 45, 361), [-40.0, 40.0, -20.0, -20.0000001, -19.9999999, -30.0, -30.0001, 0.0, -1e-12, 1e-12]]
)


@pytest.mark.parametrize(
    "name", ["sigmoid", "log_sigmoid", "log_phi_pdf", "phi_pdf", "phi_cdf", "log_phi_cdf", "inv_mills",
             "probit_curvature", "probit_info_h"]
)
def test_scalar_primitives_match_naive(name):
    fast, slow = getattr(K, name), getattr(N, name)
    got = np.array([fast(x) for x in X_GRID])
    want = np.array([slow(x) for x in X_GRID])
    assert np.all(np.isfinite(got))
    # rtol 1e-10: the naive probit curvature m(x + m) cancels ~3 digits near x = -40
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-300)


def test_log_phi_cdf_matches_scipy_and_mills_limits():
    got = np.array([K.log_phi_cdf(x) for x in X_GRID])
    # rtol 1e-12: libm erfc and cephes erfc differ by ~2e-13 relative deep in the upper tail
    np.testing.assert_allclose(got, log_ndtr(X_GRID), rtol=1e-12, atol=1e-300)
    # m(x) -> -x - 1/x ... in the lower tail, h(0) = 2/pi, curvature in (0, 1)
    assert K.inv_mills(-40.0) == pytest.approx(40.0 + 1 / 40 - 2 / 40**3 + 10 / 40**5, rel=1e-10)
    assert K.probit_info_h(0.0) == pytest.approx(2 / math.pi, rel=1e-14)
    curv = np.array([K.probit_curvature(x) for x in X_GRID])
    assert np.all((curv >= 0) & (curv < 1))


def test_primitives_are_callable_from_other_njit_code():
    from numba import njit

    @njit
    def probit_score(x):  # what a calibration kernel does: combine primitives inside njit
        return K.log_phi_cdf(x) + K.inv_mills(x) - K.probit_curvature(x) + K.probit_info_h(x) + K.log_sigmoid(x)

    for x in (-40.0, -3.0, 0.0, 2.5, 40.0):
        want = N.log_phi_cdf(x) + N.inv_mills(x) - N.probit_curvature(x) + N.probit_info_h(x) + N.log_sigmoid(x)
        assert probit_score(x) == pytest.approx(want, rel=1e-10, abs=1e-12)


def _theta_and_items_with_extreme_z(n, seed):
    """theta values and (a, b) such that z = a theta + b reaches +-40 and beyond."""
    r = _rng(seed)
    theta = np.concatenate([r.normal(0, 2, 6), [0.0, -4.0, 4.0]])
    a = r.uniform(-2.5, 2.5, n)
    b = r.normal(0, 2, n)
    a[:4] = [10.0, -10.0, 0.0, 1e-3]
    b[:4] = [0.0, 0.0, 40.0, -40.0]
    return theta, a, b


def _asymptotes(r, n):
    """4PL asymptotes c in [0, 0.3) and d in [0.7, 1), with c = 0 on every 3rd item and d = 1 on every 4th."""
    c = r.uniform(0, 0.3, n)
    d = r.uniform(0.7, 1, n)
    c[::3] = 0.0
    d[::4] = 1.0
    return c, d


def test_probability_and_information_kernels_match_naive():
    theta, a, b = _theta_and_items_with_extreme_z(15, 3)
    c, d = _asymptotes(_rng(4), 15)
    pairs = [
        (K.prob_2pl(theta, a, b), N.prob_2pl(theta, a, b)),
        (K.prob_4pl(theta, a, b, c, d), N.prob_4pl(theta, a, b, c, d)),
        (K.prob_probit(theta, a, b), N.prob_probit(theta, a, b)),
        (K.info_2pl(theta, a, b), N.info_2pl(theta, a, b)),
        (K.info_4pl(theta, a, b, c, d), N.info_4pl(theta, a, b, c, d)),
        (K.info_probit(theta, a, b), N.info_probit(theta, a, b)),
    ]
    for got, want in pairs:
        assert got.shape == (theta.size, a.size)
        assert np.all(np.isfinite(got))
        # atol: the textbook 4PL form rounds (P - c) to 0 where s < eps c; values there are < 1e-15
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-15)


def test_derivative_kernels_match_naive():
    theta, a, b = _theta_and_items_with_extreme_z(15, 5)
    r = _rng(6)
    c, d = _asymptotes(r, 15)
    omega, phi, lam = r.normal(0, 1, 15), r.uniform(0.3, 1.5, 15), r.uniform(0.5, 1.8, 15)
    log_t = r.normal(0, 1, 15)
    log_t[::5] = np.nan
    tau = r.normal(0, 1, theta.size)
    for y in (r.integers(0, 2, 15).astype(float), np.ones(15), np.zeros(15)):
        pairs = [
            (K.derivs_2pl(theta, a, b, y), N.derivs_2pl(theta, a, b, y)),
            (K.derivs_4pl(theta, a, b, c, d, y), N.derivs_4pl(theta, a, b, c, d, y)),
            (K.derivs_lart(theta, tau, a, b, y, omega, phi, lam, log_t),
             N.derivs_lart(theta, tau, a, b, y, omega, phi, lam, log_t)),
        ]
        for got, want in pairs:
            assert np.all(np.isfinite(got))
            # atol 1e-9: the textbook Hessian P''/P - (P'/P)^2 cancels two O(a^2) = O(100) terms
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-9)


# ----------------------------------------------------------------------------- information = -E[l'']

H_FD = 1e-4  # central second differences: truncation O(h^2) ~ 1e-8, rounding ~ 1e-16/h^2 = 1e-8


def _fd2(f, x, h=H_FD):
    return (f(x + h) - 2 * f(x) + f(x - h)) / h**2


def _expected_info_logistic(params, theta):
    """-E_y[d2/dtheta2 log p(y | theta)] per item, by finite differences of log_likelihood."""
    out = np.zeros(params.n_items)
    p = logistic.prob_correct(params, theta)
    for j in range(params.n_items):
        for y, py in ((1, p[j]), (0, 1 - p[j])):
            out[j] -= py * _fd2(lambda t: logistic.log_likelihood(params, t, [y], [j]), theta)
    return out


@pytest.mark.parametrize("kind", ["2pl", "3pl", "4pl"])
@pytest.mark.parametrize("theta", [-2.0, 0.0, 0.7, 2.5])
def test_logistic_information_is_expected_negative_hessian(kind, theta):
    params = {"2pl": _bank_2pl(8), "3pl": _bank_4pl(8, d_one=True), "4pl": _bank_4pl(8)}[kind]
    got = logistic.item_information(params, theta)
    want = _expected_info_logistic(params, theta)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_3pl_information_matches_textbook_formula():
    params = _bank_4pl(10, d_one=True)
    theta = np.linspace(-3, 3, 7)
    p = logistic.prob_correct(params, theta)
    c = params.c
    want = params.a**2 * ((p - c) / (1 - c)) ** 2 * (1 - p) / p  # docs/math.md §5.1 (3PL: d = 1)
    np.testing.assert_allclose(logistic.item_information(params, theta), want, rtol=1e-12)


def test_2pl_information_at_z0_is_a2_over_4():
    params = _bank_2pl(10)
    for j in range(params.n_items):
        a, b = params.a[j], params.b[j]
        if abs(a) < 0.05:
            continue
        assert logistic.item_information(params, -b / a, [j])[0] == pytest.approx(a * a / 4, rel=1e-12)


def test_2pl_fast_path_equals_4pl_with_c0_d1():
    p2 = _bank_2pl(10)
    p4 = ItemParams("4pl", a=p2.a, b=p2.b, c=np.zeros(10), d=np.ones(10))
    theta = np.linspace(-5, 5, 11)
    y = _rng(7).integers(0, 2, 10)
    np.testing.assert_allclose(logistic.prob_correct(p2, theta), logistic.prob_correct(p4, theta), rtol=1e-14)
    np.testing.assert_allclose(logistic.item_information(p2, theta), logistic.item_information(p4, theta), rtol=1e-12)
    for f2, f4 in zip(logistic.trait_derivatives(p2, theta, y), logistic.trait_derivatives(p4, theta, y)):
        np.testing.assert_allclose(f2, f4, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("theta", [-1.5, 0.0, 1.2])
def test_lart_information_is_expected_negative_hessian(theta):
    params = _bank_lart(8)
    tau = 0.4
    u, v = lart.item_information(params, theta)
    p = lart.prob_correct(params, theta)
    r = _rng(8)
    for j in range(params.n_items):
        # theta block: expectation over R in {0, 1}; the CoT part does not involve theta
        u_fd = 0.0
        for y, py in ((1, p[j]), (0, 1 - p[j])):
            u_fd -= py * _fd2(lambda t: lart.log_likelihood(params, t, tau, [y], [np.nan], [j]), theta)
        assert u[j] == pytest.approx(u_fd, rel=1e-5, abs=1e-7)
        # tau block: Gaussian expectation over log T ~ N(omega - phi tau, lam^2), by averaging
        # finite differences at sampled log T (the second derivative is in fact constant)
        mu = params.omega[j] - params.phi[j] * tau
        samples = mu + params.lam[j] * r.standard_normal(5)
        v_fd = -np.mean(
            [_fd2(lambda s: lart.log_likelihood(params, theta, s, [1], [lt], [j]), tau) for lt in samples]
        )
        assert v[j] == pytest.approx(v_fd, rel=1e-5)
        # cross term: E[d2 l / dtheta dtau] = 0 (the joint information is diagonal)
        h = H_FD
        f = lambda t, s: lart.log_likelihood(params, t, s, [1], [samples[0]], [j])  # noqa: E731
        cross = (f(theta + h, tau + h) - f(theta + h, tau - h) - f(theta - h, tau + h) + f(theta - h, tau - h)) / (4 * h * h)
        assert abs(cross) < 1e-6


def test_lart_information_nonnegative_for_miskeyed_items():
    params = ItemParams("lart", a=[-1.3, 1.3, 0.0], b=[0.4, -0.4, 0.2], omega=[0, 0, 0], phi=[1, 1, 1], lam=[1, 1, 1])
    u, _ = lart.item_information(params, np.linspace(-40, 40, 81))
    assert np.all(u >= 0)
    np.testing.assert_allclose(u[:, 0], u[:, 1], rtol=1e-13, atol=1e-300)  # h is even: (a, b) ~ (-a, -b)
    assert np.all(u[:, 2] == 0)


# ----------------------------------------------------------------------------- gradients / Hessians vs FD


@pytest.mark.parametrize("kind", ["2pl", "4pl"])
def test_logistic_gradient_hessian_match_finite_differences(kind):
    params = _bank_2pl(10) if kind == "2pl" else _bank_4pl(10)
    r = _rng(9)
    items = np.array([0, 2, 3, 5, 7, 9])
    y = r.integers(0, 2, items.size)
    h = 1e-5
    for theta in (-2.2, 0.1, 1.9):
        ll, g, hs = logistic.trait_derivatives(params, theta, y, items)
        assert ll == logistic.log_likelihood(params, theta, y, items)
        f = lambda t: logistic.log_likelihood(params, t, y, items)  # noqa: E731
        gr = lambda t: logistic.trait_gradient(params, t, y, items)  # noqa: E731
        assert g == pytest.approx((f(theta + h) - f(theta - h)) / (2 * h), rel=1e-6, abs=1e-8)
        assert hs == pytest.approx((gr(theta + h) - gr(theta - h)) / (2 * h), rel=1e-6, abs=1e-8)
        assert hs == logistic.trait_hessian(params, theta, y, items)


def test_lart_gradient_hessian_match_finite_differences():
    params = _bank_lart(10)
    r = _rng(10)
    items = np.array([1, 2, 4, 6, 8, 9])
    y = r.integers(0, 2, items.size)
    log_cot = r.normal(0, 1, items.size)
    log_cot[2] = np.nan
    h = 1e-5
    for theta, tau in ((-1.0, 0.5), (0.3, -1.2), (2.0, 2.0)):
        f = lambda t, s: lart.log_likelihood(params, t, s, y, log_cot, items)  # noqa: E731
        gfun = lambda t, s: lart.trait_gradient(params, t, s, y, log_cot, items)  # noqa: E731
        g = gfun(theta, tau)
        fd_g = [(f(theta + h, tau) - f(theta - h, tau)) / (2 * h), (f(theta, tau + h) - f(theta, tau - h)) / (2 * h)]
        np.testing.assert_allclose(g, fd_g, rtol=1e-6, atol=1e-8)
        hess = lart.trait_hessian(params, theta, tau, y, log_cot, items)
        fd_h = np.column_stack(
            [(gfun(theta + h, tau) - gfun(theta - h, tau)) / (2 * h), (gfun(theta, tau + h) - gfun(theta, tau - h)) / (2 * h)]
        )
        np.testing.assert_allclose(hess, fd_h, rtol=1e-6, atol=1e-7)


# ----------------------------------------------------------------------------- tails and shapes


def test_no_nan_inf_or_warnings_in_the_tails():
    # items whose z = a theta + b runs over [-40, 40] on the theta grid (a = +-1, b = 0 and a steep item)
    theta = np.linspace(-40, 40, 161)
    banks = [
        ItemParams("2pl", a=[1.0, -1.0, 0.0, 0.5], b=[0.0, 0.0, 40.0, 20.0]),
        ItemParams("4pl", a=[1.0, -1.0, 1.0, 1.0], b=[0.0, 0.0, 0.0, 0.0], c=[0.0, 0.2, 0.0, 0.25], d=[1.0, 0.9, 0.95, 1.0]),
    ]
    lart_bank = ItemParams("lart", a=[1.0, -1.0, 0.0, 0.5], b=[0.0, 0.0, 40.0, 20.0],
                           omega=[0, 1, 2, 3], phi=[1, 1, 0.5, 2], lam=[1, 0.5, 2, 1], rho=-0.8)
    with warnings.catch_warnings(), np.errstate(divide="raise", over="raise", invalid="raise"):
        warnings.simplefilter("error")
        outs = []
        for y in ([1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0]):
            for p in banks:
                outs += [logistic.prob_correct(p, theta), logistic.item_information(p, theta),
                         fisher_information(p, theta)]
                outs += list(logistic.trait_derivatives(p, theta, y))
            outs += [lart.prob_correct(lart_bank, theta), *lart.item_information(lart_bank, theta)]
            outs += list(lart.trait_derivatives(lart_bank, theta, theta, y, [40.0, np.nan, -40.0, 0.0]))
            outs += [lart.theta_precision_tau_known(lart_bank, theta), lart.theta_precision_marginal(lart_bank, theta)]
            outs += list(lart.tau_conditional(lart_bank, theta, None, [40.0, np.nan, -40.0, 0.0]))
    for o in outs:
        assert np.all(np.isfinite(o))
    # curvature of the probit log-likelihood never vanishes wrongly in the far lower tail
    assert lart.trait_hessian(lart_bank, -40.0, 0.0, [1, 0, 0, 0], None, None)[0, 0] < -0.99


def test_shapes_and_broadcasting():
    p2, pl = _bank_2pl(5), _bank_lart(5)
    assert logistic.prob_correct(p2, 0.3).shape == (5,)
    assert logistic.item_information(p2, np.zeros((3, 2)), [0, 1]).shape == (3, 2, 2)
    y = [1, 0, 1]
    assert np.ndim(logistic.log_likelihood(p2, 0.0, y, [0, 2, 4])) == 0
    assert logistic.trait_gradient(p2, np.zeros((4, 3)), y, [0, 2, 4]).shape == (4, 3)
    th, ta = np.linspace(-1, 1, 4)[:, None], np.linspace(-2, 2, 3)[None, :]
    assert lart.log_likelihood(pl, th, ta, y, [0.1, np.nan, 0.2], [0, 2, 4]).shape == (4, 3)
    assert lart.trait_gradient(pl, th, ta, y, None, [0, 2, 4]).shape == (4, 3, 2)
    assert lart.trait_hessian(pl, 0.0, 0.0, y, None, [0, 2, 4]).shape == (2, 2)
    u, v = lart.item_information(pl, th, [1, 3])
    assert u.shape == (4, 1, 2) and v.shape == (2,)
    # empty item set: zero log-likelihood / information
    assert logistic.log_likelihood(p2, 0.0, [], []) == 0.0
    assert lart.cot_informed_prior(pl, [], []) == (0.0, 1.0)
    # dispatch agrees with the model modules
    np.testing.assert_array_equal(fisher_information(pl, th), lart.item_information(pl, th)[0])
    np.testing.assert_array_equal(prob_correct(pl, th), lart.prob_correct(pl, th))
    np.testing.assert_array_equal(fisher_information(p2, th), logistic.item_information(p2, th))


def test_input_validation():
    p2, pl = _bank_2pl(5), _bank_lart(5)
    with pytest.raises(ValueError, match="response_model"):
        logistic.prob_correct(pl, 0.0)
    with pytest.raises(ValueError, match="response_model"):
        lart.item_information(p2, 0.0)
    with pytest.raises(ValueError, match="out of range"):
        logistic.item_information(p2, 0.0, [5])
    with pytest.raises(TypeError, match="integer"):
        logistic.item_information(p2, 0.0, [0.5])
    with pytest.raises(ValueError, match="0 or 1"):
        logistic.log_likelihood(p2, 0.0, [2], [0])
    with pytest.raises(ValueError, match="one 0/1 answer per item"):
        logistic.log_likelihood(p2, 0.0, [1, 0], [0])
    with pytest.raises(ValueError, match="finite"):
        logistic.prob_correct(p2, np.nan)
    with pytest.raises(ValueError, match="log_cot"):
        lart.log_likelihood(pl, 0.0, 0.0, [1], [np.inf], [0])
    with pytest.raises(ValueError, match="token counts"):
        lart.log_cot_length([3.0, -1.0])
    with pytest.raises(TypeError):
        logistic.prob_correct("not params", 0.0)


def test_log_cot_length():
    got = lart.log_cot_length([0.0, 9.0, np.nan, 10240.0])
    np.testing.assert_allclose(got[[0, 1, 3]], np.log1p([0.0, 9.0, 10240.0]), rtol=1e-15)
    assert np.isnan(got[2])
    assert lart.log_cot_length(4.0, cot_offset=0.5) == pytest.approx(math.log(4.5))


# ----------------------------------------------------------------------------- Lemma 1 worked example (docs/math.md §1.3)

WE = dict(
    a=[1.136962, 0.769787, 0.540974, 0.516528],
    b=[-0.267835, 0.180798, 0.652000, 0.473540],
    omega=[-0.703735, -1.265421, -0.623274, 0.041326],
    phi=[1.357404, 0.533586, 1.229655, 0.675656],
    lam=[1.794768, 1.312192, 0.949568, 1.134031],
)
WE_LOGT = np.array([-1.884608, 0.154131, -2.115681, -0.033010])
WE_R = np.array([1, 0, 1, 1])
ITEMS = np.arange(4)


@pytest.fixture(scope="module")
def worked():
    params = ItemParams("lart", rho=-0.8, **WE)
    g = np.linspace(-6, 6, 801)  # posterior SDs are ~0.5-0.6: step 0.015 and +-6 are ample
    th, ta = np.meshgrid(g, g, indexing="ij")
    rho = params.rho
    log_prior = -(th**2 - 2 * rho * th * ta + ta**2) / (2 * (1 - rho**2))
    ll = lart.log_likelihood(params, th, ta, WE_R, WE_LOGT, ITEMS)
    return params, g, th, ta, log_prior, ll


def _moments(logw, x):
    w = np.exp(logw - logw.max())
    w /= w.sum()
    m = float((w * x).sum())
    return m, float((w * (x - m) ** 2).sum())


def test_worked_example_cot_informed_prior_variance(worked):
    params = worked[0]
    mean, var = lart.cot_informed_prior(params, ITEMS, WE_LOGT)
    assert var == pytest.approx(0.529794, abs=1e-5)
    # the public reference code's variance 1/(1/(1-rho^2) - s2 rho^2/(1-rho^2)) must not be what we compute
    f_t, _ = lart.cot_statistics(params, ITEMS, WE_LOGT)
    rho = params.rho
    s2 = 1 / (1 / (1 - rho**2) + f_t)
    assert abs(var - 1 / (1 / (1 - rho**2) - s2 * rho**2 / (1 - rho**2))) > 1e-2


def test_worked_example_grid_posterior(worked):
    params, g, th, ta, log_prior, ll = worked
    mean, var = _moments(log_prior + ll, th)
    assert mean == pytest.approx(0.0276, abs=2e-4)
    assert var == pytest.approx(0.2929, abs=1e-3)
    # Lemma 1 step 2: the 1-D posterior N(theta; mu, v) * prod Phi(s z) has the same moments
    mu, v = lart.cot_informed_prior(params, ITEMS, WE_LOGT)
    s = 2 * WE_R - 1
    log_post_1d = -((g - mu) ** 2) / (2 * v) + log_ndtr(s * (np.outer(g, params.a) + params.b)).sum(axis=1)
    m1, v1 = _moments(log_post_1d, g)
    assert m1 == pytest.approx(mean, abs=1e-6)
    assert v1 == pytest.approx(var, abs=1e-6)


def test_worked_example_cot_part_gives_lemma1_step1(worked):
    """Prior x CoT likelihood alone (accuracy part removed): theta ~ N(mu, v), tau | theta ~ N(., s2)."""
    params, g, th, ta, log_prior, ll = worked
    s = 2 * WE_R - 1
    ll_acc = log_ndtr(s * (th[..., None] * params.a + params.b)).sum(axis=-1)
    logw = log_prior + ll - ll_acc
    mu, v = lart.cot_informed_prior(params, ITEMS, WE_LOGT)
    m, var = _moments(logw, th)
    assert m == pytest.approx(mu, abs=1e-6)
    assert var == pytest.approx(v, abs=1e-6)
    row = 500  # theta = g[500] = 1.5
    t_mean, t_var = lart.tau_conditional(params, g[row], ITEMS, WE_LOGT)
    m_tau, v_tau = _moments(logw[row], g)
    assert m_tau == pytest.approx(t_mean, abs=1e-6)
    assert v_tau == pytest.approx(t_var, abs=1e-6)


# ----------------------------------------------------------------------------- precision of theta (docs/math.md §1.5)


def test_theta_precision_forms():
    params = _bank_lart(8, rho=-0.7)
    items = np.array([0, 3, 4, 6])
    seen = np.array([True, False, True, True])
    theta = np.array([-1.0, 0.5])
    u, v = lart.item_information(params, theta, items)
    rho = params.rho
    sigma_inv = np.linalg.inv(np.array([[1, rho], [rho, 1]]))
    f_t = v[seen].sum()
    marg = lart.theta_precision_marginal(params, theta, items, seen)
    known = lart.theta_precision_tau_known(params, theta, items)
    for k in range(theta.size):
        prec = sigma_inv + np.diag([u[k].sum(), f_t])
        assert marg[k] == pytest.approx(1 / np.linalg.inv(prec)[0, 0], rel=1e-12)  # Schur complement
        assert known[k] == pytest.approx(prec[0, 0], rel=1e-12)
    # no CoT seen: the prior contributes precision 1; marginal <= tau-known always
    none = lart.theta_precision_marginal(params, theta, items, np.zeros(4, bool))
    np.testing.assert_allclose(none, u.sum(axis=1) + 1.0, rtol=1e-14)
    assert np.all(marg <= known)
    # grows with |rho|
    weak = lart.theta_precision_marginal(ItemParams("lart", rho=-0.2, **{k: getattr(params, k) for k in WE}),
                                         theta, items, seen)
    assert np.all(weak < marg)


def test_models_import_neither_xarray_nor_ipywidgets():
    code = "import sys, catengine.models; print(any(m.split('.')[0] in ('xarray', 'ipywidgets') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_small_cholesky_kernels_match_numpy_and_refuse_indefinite_matrices():
    """catengine.models.kernels.cholesky_in_place / cholesky_solve_in_place (used by the score
    factors' Newton steps and cBMM's rank-r trait steps) against numpy on random SPD matrices."""
    from catengine.models.kernels import cholesky_in_place, cholesky_solve_in_place

    rng = np.random.default_rng(4)
    for d in (1, 2, 3, 5):
        m = rng.standard_normal((d, d))
        a = m @ m.T + 0.1 * np.eye(d)
        b = rng.standard_normal(d)
        work = a.copy()
        work[np.triu_indices(d, 1)] = 7.0  # the strict upper triangle is neither read nor written
        assert cholesky_in_place(work)
        np.testing.assert_allclose(np.tril(work), np.linalg.cholesky(a), rtol=1e-12, atol=1e-14)
        assert np.all(work[np.triu_indices(d, 1)] == 7.0)
        x = b.copy()
        cholesky_solve_in_place(work, x)
        np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-10, atol=1e-12)
    assert not cholesky_in_place(np.array([[1.0, 2.0], [2.0, 1.0]]))
    assert not cholesky_in_place(np.array([[np.nan]]))


def test_fused_terms_are_bit_for_bit_the_separate_primitives():
    """``logistic_terms`` / ``probit_terms`` (one exp / erfc pass for an answer's likelihood terms,
    the MAP's inner loop) give exactly what the separate primitives give, in both tails too."""
    from catengine.models.kernels import (inv_mills, log_phi_cdf, log_sigmoid, logistic_terms, probit_curvature,
                                          probit_terms, sigmoid)

    rng = np.random.default_rng(3)
    xs = np.concatenate([rng.normal(0.0, 4.0, 4000), rng.normal(0.0, 40.0, 4000),
                         [0.0, -0.0, 1e-300, -1e-300, -20.0, np.nextafter(-20.0, -np.inf), 20.0, 37.0, -37.0,
                          709.0, -709.0, 1e6, -1e6]])
    for x in xs:
        assert logistic_terms(x) == (sigmoid(x), sigmoid(-x), log_sigmoid(x), log_sigmoid(-x)), x
        assert probit_terms(x) == (log_phi_cdf(x), inv_mills(x), probit_curvature(x)), x
