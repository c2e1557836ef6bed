"""Trait estimation: MAP (Newton, exact 2-D for LaRT) and EAP (quadrature) against brute force,
the LaRT closed forms, and catpie (a port of R catR) as an external oracle."""

import math

import numpy as np
import pytest

import naive_engine as naive
from catengine.estimation import EAPEstimator, MAPEstimator, ResponseState, TraitEstimate, TraitPrior, gaussian_part
from catengine.estimation import _kernels as K
from catengine.models import lart, logistic
from catengine.models.params import ItemParams


def _params(model, n, seed, negative_a=0):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2.0, n)
    a[:negative_a] = -0.4
    kw = dict(a=a, b=rng.normal(0, 1, n))
    if model == "lart":
        kw.update(omega=rng.normal(6, 0.3, n), phi=rng.uniform(1, 2, n), lam=rng.uniform(0.8, 1.3, n), rho=-0.6)
    if model == "4pl":
        kw.update(c=rng.uniform(0, 0.25, n), d=rng.uniform(0.8, 1.0, n))
    return ItemParams(model, **kw)


def _state(params, n, seed, cot=True):
    rng = np.random.default_rng(seed)
    s = ResponseState(params)
    for j in range(n):
        lt = rng.normal(6, 1.5) if (params.response_model == "lart" and cot) else math.nan
        s.add(j, int(rng.random() < 0.55), lt)
    return s


# ----------------------------------------------------------------------------- kernels vs naive twins
@pytest.mark.parametrize("model,code", [("2pl", 0), ("4pl", 1), ("lart", 2)])
def test_log_post_kernel_matches_naive(model, code):
    p = _params(model, 25, 1)
    s = _state(p, 25, 2)
    for theta in (-3.0, -0.4, 0.0, 1.3, 4.0):
        f, g, h, _ = K.log_post_1d(code, theta, s.a, s.b, s.c, s.d, s.y, s.n, 1.7, 0.2)
        nf, ng, nh = naive.log_post_1d(code, theta, s.a[:25], s.b[:25], s.c[:25], s.d[:25], s.y[:25], 1.7, 0.2)
        assert f == pytest.approx(nf, rel=1e-12, abs=1e-12)
        # central differences with h = 1e-4: first derivative to ~1e-7, second to ~1e-4
        assert g == pytest.approx(ng, rel=1e-6, abs=1e-6)
        assert h == pytest.approx(nh, rel=1e-3, abs=1e-3)


@pytest.mark.parametrize("model,code", [("2pl", 0), ("4pl", 1), ("lart", 2)])
def test_grid_loglik_kernels_match_naive(model, code):
    p = _params(model, 12, 3)
    s = _state(p, 12, 4)
    grid = np.linspace(-5, 5, 41)
    out = np.zeros(grid.size)
    for k in range(s.n):
        K.add_loglik_grid(code, grid, s.a[k], s.b[k], s.c[k], s.d[k], s.y[k], out)
    pts = K.loglik_points(code, grid, s.a, s.b, s.c, s.d, s.y, s.n)
    ref = [naive.loglik(code, t, s.a[:12], s.b[:12], s.c[:12], s.d[:12], s.y[:12]) for t in grid]
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(pts, ref, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- MAP = brute-force grid argmax
def _logpost_1d(params, state, prior, thetas):
    items, y = state.items, state.correct
    ll = logistic.log_likelihood(params, thetas, y, items) if state.n else np.zeros_like(thetas)
    return ll - 0.5 * (thetas - prior.theta_mean) ** 2 / prior.theta_sd**2


@pytest.mark.parametrize("model", ["2pl", "4pl"])
def test_map_equals_grid_argmax_at_every_step_logistic(model):
    from catengine.session import CATSession
    from catengine.stopping import MaxItems

    bank = naive.make_bank(model, 80, seed=11)
    oracle, _ = naive.make_oracle(bank.params, seed=5, theta=1.1)
    prior = TraitPrior(theta_mean=0.3, theta_sd=1.4)  # a non-standard prior, to exercise mean and SD
    s = CATSession(bank, estimator=MAPEstimator(prior=prior), stopping=MaxItems(40), rng=0)
    for _ in range(40):
        item = s.next_item()
        est = s.record(item, oracle[bank.index_of(item)][0])
        st = s._responses
        grid = np.linspace(-7, 7, 1401)  # global grid, spacing 0.01
        coarse = grid[np.argmax(_logpost_1d(bank.params, st, prior, grid))]
        assert abs(est.theta - coarse) <= 0.0101
        fine = coarse + np.linspace(-0.02, 0.02, 4001)  # around the global grid maximum, spacing 1e-5
        lp = _logpost_1d(bank.params, st, prior, fine)
        assert abs(est.theta - fine[np.argmax(lp)]) <= 1.01e-5
        at_map = _logpost_1d(bank.params, st, prior, np.array([est.theta]))[0]
        assert at_map >= lp.max() - 1e-10  # the MAP is at least as good as every grid point


def test_map_equals_2d_grid_argmax_at_every_step_lart():
    from catengine.session import CATSession
    from catengine.stopping import MaxItems

    bank = naive.make_bank("lart", 60, seed=12)
    p = bank.params
    oracle, _ = naive.make_oracle(p, seed=6)
    prior = TraitPrior(theta_mean=0.1, theta_sd=1.2, tau_mean=-0.2, tau_sd=0.9, rho=-0.5)
    Q = prior.precision()
    mu = np.array([prior.theta_mean, prior.tau_mean])
    s = CATSession(bank, estimator=MAPEstimator(prior=prior), stopping=MaxItems(15), rng=0)

    def logpost(th, ta, st):
        ll = lart.log_likelihood(p, th, ta, st.correct, st.log_cot, st.items)
        d0, d1 = th - mu[0], ta - mu[1]
        return ll - 0.5 * (Q[0, 0] * d0 * d0 + 2 * Q[0, 1] * d0 * d1 + Q[1, 1] * d1 * d1)

    for step in range(15):
        item = s.next_item()
        c, t = oracle[bank.index_of(item)]
        # every third answer without a CoT length (missing CoT must be handled)
        est = s.record(item, c, None if step % 3 == 2 else t)
        st = s._responses
        # global coarse grid: the mode found lies in the best cell
        g = np.linspace(-5, 5, 201)
        lp = logpost(g[:, None], g[None, :], st)
        i, k = np.unravel_index(np.argmax(lp), lp.shape)
        assert abs(est.theta - g[i]) <= 0.051 and abs(est.tau - g[k]) <= 0.051
        # fine local grid, spacing 5e-4
        gt = est.theta + np.linspace(-0.04, 0.04, 161)
        gu = est.tau + np.linspace(-0.04, 0.04, 161)
        lp = logpost(gt[:, None], gu[None, :], st)
        i, k = np.unravel_index(np.argmax(lp), lp.shape)
        assert abs(est.theta - gt[i]) <= 5.1e-4 and abs(est.tau - gu[k]) <= 5.1e-4
        assert logpost(np.array(est.theta), np.array(est.tau), st) >= lp.max() - 1e-10


def test_lart_map_hessian_and_gradient_match_math_1_5():
    p = _params("lart", 30, 5)
    s = _state(p, 30, 6)
    est = MAPEstimator().estimate(p, s)
    prior_prec = np.array([[1, -p.rho], [-p.rho, 1]]) / (1 - p.rho**2)
    _, g, h = lart.trait_derivatives(p, est.theta, est.tau, s.correct, s.log_cot, s.items)
    grad = g - prior_prec @ np.array([est.theta, est.tau])
    assert np.max(np.abs(grad)) < 1e-8
    H = prior_prec - h  # docs/math.md §1.5: Sigma^-1 + diag(sum a^2 m(x)(x + m(x)), F_T)
    cov = np.linalg.inv(H)
    assert est.theta_sd == pytest.approx(math.sqrt(cov[0, 0]), rel=1e-10)
    assert est.tau_sd == pytest.approx(math.sqrt(cov[1, 1]), rel=1e-10)
    assert est.theta_tau_cov == pytest.approx(cov[0, 1], rel=1e-8, abs=1e-14)


@pytest.mark.parametrize("rho,st,su", [(-0.6, 1.0, 1.0), (0.3, 0.5, 2.0), (0.0, 1.3, 0.7), (-0.99, 2.0, 0.3)])
def test_prior_precision_inverts_the_covariance(rho, st, su):
    cov = np.array([[st * st, rho * st * su], [rho * st * su, su * su]])
    np.testing.assert_allclose(TraitPrior(theta_sd=st, tau_sd=su, rho=rho).precision(), np.linalg.inv(cov), rtol=1e-10)


def test_lart_profile_prior_is_lemma_1():
    """With the standard prior, the Gaussian part for theta is Lemma 1's CoT-informed prior (docs/math.md §1.3)."""
    p = _params("lart", 20, 7)
    s = _state(p, 20, 8)
    gp = gaussian_part(p, s, TraitPrior.population(p))
    mean, var = lart.cot_informed_prior(p, s.items, s.log_cot)
    assert gp.m == pytest.approx(mean, rel=1e-12, abs=1e-14)
    assert 1 / gp.q == pytest.approx(var, rel=1e-12)
    t_mean, t_var = lart.tau_conditional(p, 0.37, s.items, s.log_cot)
    assert gp.tau_alpha + gp.tau_beta * 0.37 == pytest.approx(float(t_mean), rel=1e-12)
    assert 1 / gp.tau_precision == pytest.approx(t_var, rel=1e-12)


def test_lemma_1_worked_example_variance():
    """A worked example of Lemma 1 (docs/math.md §1.3): EAP of theta from the exact posterior: E 0.0276, Var 0.2929."""
    p = ItemParams(
        "lart",
        a=[1.136962, 0.769787, 0.540974, 0.516528], b=[-0.267835, 0.180798, 0.652000, 0.473540],
        omega=[-0.703735, -1.265421, -0.623274, 0.041326], phi=[1.357404, 0.533586, 1.229655, 0.675656],
        lam=[1.794768, 1.312192, 0.949568, 1.134031], rho=-0.8,
    )
    s = ResponseState(p)
    for j, (r, lt) in enumerate(zip((1, 0, 1, 1), (-1.884608, 0.154131, -2.115681, -0.033010))):
        s.add(j, r, lt)
    est = EAPEstimator().estimate(p, s)
    assert est.theta == pytest.approx(0.0276, abs=5e-5)
    assert est.theta_sd**2 == pytest.approx(0.2929, abs=5e-5)
    assert 1 / gaussian_part(p, s, TraitPrior.population(p)).q == pytest.approx(0.529794, abs=1e-6)


def test_use_cot_false_is_the_marginal_prior():
    p = _params("lart", 10, 9)
    s = _state(p, 10, 10)
    gp = gaussian_part(p, s, TraitPrior.population(p), use_cot=False)
    assert gp.m == pytest.approx(0.0, abs=1e-15) and gp.q == pytest.approx(1.0, rel=1e-12)
    with_cot = MAPEstimator().estimate(p, s)
    without = MAPEstimator(use_cot=False).estimate(p, s)
    assert with_cot.theta_sd < without.theta_sd  # CoT lengths sharpen theta whenever rho != 0


@pytest.mark.parametrize("model", ["2pl", "4pl", "lart"])
def test_map_independent_of_warm_start(model):
    p = _params(model, 40, 12)
    s = _state(p, 40, 13)
    cold = MAPEstimator().estimate(p, s)
    for start in (-5.0, 3.0):
        warm = MAPEstimator().estimate(p, s, start=TraitEstimate(theta=start, theta_sd=1.0, n_items=0))
        assert warm.theta == pytest.approx(cold.theta, abs=1e-9)
        assert warm.converged


# ----------------------------------------------------------------------------- EAP
@pytest.mark.parametrize("model,code", [("2pl", 0), ("4pl", 1), ("lart", 2)])
def test_eap_matches_brute_force_integral(model, code):
    p = _params(model, 15, 14)
    s = _state(p, 15, 15)
    est = EAPEstimator().estimate(p, s)
    gp = gaussian_part(p, s, TraitPrior.population(p))
    n = s.n
    mean, sd = naive.eap_by_quad(code, s.a[:n], s.b[:n], s.c[:n], s.d[:n], s.y[:n], gp.q, gp.m)
    assert est.theta == pytest.approx(mean, abs=1e-8)
    assert est.theta_sd == pytest.approx(sd, abs=1e-8)


def test_eap_tau_moments_match_2d_brute_force():
    p = _params("lart", 12, 16)
    s = _state(p, 12, 17)
    est = EAPEstimator().estimate(p, s)
    Q = TraitPrior.population(p).precision()
    th = np.linspace(est.theta - 3, est.theta + 3, 601)[:, None]
    ta = np.linspace(est.tau - 3, est.tau + 3, 601)[None, :]
    lp = lart.log_likelihood(p, th, ta, s.correct, s.log_cot, s.items)
    lp = lp - 0.5 * (Q[0, 0] * th**2 + 2 * Q[0, 1] * th * ta + Q[1, 1] * ta**2)
    w = np.exp(lp - lp.max())
    w /= w.sum()
    e_t, e_u = float((w * th).sum()), float((w * ta).sum())
    assert est.theta == pytest.approx(e_t, abs=1e-6)
    assert est.tau == pytest.approx(e_u, abs=1e-6)
    assert est.tau_sd**2 == pytest.approx(float((w * (ta - e_u) ** 2).sum()), abs=1e-6)
    assert est.theta_tau_cov == pytest.approx(float((w * (th - e_t) * (ta - e_u)).sum()), abs=1e-6)


def test_eap_does_not_underflow_for_long_rows():
    """3,000 answers: the likelihood is ~exp(-1500); the log-space EAP stays exact and finite."""
    rng = np.random.default_rng(18)
    n = 3000
    p = ItemParams("2pl", a=rng.uniform(0.5, 1.5, n), b=rng.normal(0, 1, n))
    s = ResponseState(p)
    theta_true = 0.8
    probs = 1 / (1 + np.exp(-(p.a * theta_true + p.b)))
    for j in range(n):
        s.add(j, int(rng.random() < probs[j]))
    raw = np.prod(np.where(s.correct == 1, probs, 1 - probs))
    assert raw == 0.0  # the naive product underflows
    est = EAPEstimator().estimate(p, s)
    assert math.isfinite(est.theta) and 0 < est.theta_sd < 0.1
    mean, sd = naive.eap_by_quad_2pl_vectorised(p.a, p.b, s.correct, lo=-3, hi=4)
    # posterior SD ~0.04 = the grid spacing: the trapezoid rule is still accurate to ~1e-6 here
    assert est.theta == pytest.approx(mean, abs=1e-6)
    assert est.theta_sd == pytest.approx(sd, rel=1e-4)
    m = MAPEstimator().estimate(p, s)
    assert abs(m.theta - est.theta) < 0.01


def _every_estimator_and_model(test):
    """Parametrize ``test`` over the MAP and EAP estimators and the 2PL, 4PL and LaRT banks."""
    test = pytest.mark.parametrize("model", ["2pl", "4pl", "lart"])(test)
    return pytest.mark.parametrize("estimator", [MAPEstimator(), EAPEstimator()])(test)


@_every_estimator_and_model
def test_sd_does_not_collapse_after_one_item(estimator, model):
    p = _params(model, 5, 19)
    for y in (0, 1):
        s = ResponseState(p)
        s.add(0, y, 6.0)
        est = estimator.estimate(p, s)
        info = float(np.max(logistic.item_information(p, est.theta, [0]) if model != "lart" else lart.item_information(p, est.theta, [0])[0]))
        # one item carries information <= a^2/4 (logistic) or 2a^2/pi (probit) ~< 2.5 here: the
        # posterior SD stays near 1/sqrt(1 + info) (LaRT: the CoT length adds a little)
        if model == "2pl" and isinstance(estimator, MAPEstimator):
            # logistic: observed = expected information, so the Laplace SD is exactly this
            assert est.theta_sd == pytest.approx(1 / math.sqrt(1 + info), rel=1e-9)
        assert 0.45 < est.theta_sd <= 1.25, (y, est)  # 4PL: observed information can be < 0
        assert abs(est.theta_sd - 1 / math.sqrt(1 + info)) < 0.3, (y, est, info)


@_every_estimator_and_model
def test_all_correct_and_all_wrong_prefixes_are_finite(estimator, model):
    p = _params(model, 40, 20)
    for y in (0, 1):
        s = ResponseState(p)
        prev = 0.0
        for j in range(40):
            s.add(j, y)  # no CoT lengths: they would move theta too
            est = estimator.estimate(p, s)
            assert math.isfinite(est.theta) and math.isfinite(est.theta_sd) and est.theta_sd > 0
            assert abs(est.theta) < 6
            # each further correct (wrong) answer moves theta up (down) or leaves it
            assert (est.theta >= prev - 1e-9) if y else (est.theta <= prev + 1e-9)
            prev = est.theta


@pytest.mark.parametrize("cls", [MAPEstimator, EAPEstimator])
@pytest.mark.parametrize("model", ["2pl", "lart"])
def test_sd_scale_widens_the_posterior_only(cls, model):
    from catengine.session.config import from_config, to_config

    p = _params(model, 12, 4)
    s = _state(p, 12, 5)
    plain = cls().estimate(p, s)
    wide = cls(sd_scale=2.0).estimate(p, s)
    assert wide.theta == plain.theta and wide.tau == plain.tau
    np.testing.assert_allclose(wide.covariance(), 4.0 * plain.covariance(), rtol=1e-12)
    assert wide.theta_sd == pytest.approx(2.0 * plain.theta_sd)
    assert from_config(to_config(cls(sd_scale=1.7))) == cls(sd_scale=1.7)
    for bad in (0.0, -1.0, math.inf, True, "2"):
        with pytest.raises(ValueError, match="sd_scale must be a finite number > 0"):
            cls(sd_scale=bad)


def test_state_restore_is_exact():
    p = _params("lart", 10, 21)
    s = _state(p, 6, 22)
    snap = s.snapshot()
    before = (s.cot_info, s.cot_score, s.n, s.administered.copy())
    s.add(7, 1, 5.5)
    s.restore(snap)
    assert (s.cot_info, s.cot_score, s.n) == before[:3]
    assert np.array_equal(s.administered, before[3])


def test_eap_cache_follows_undo():
    """Undo an answer (a failed record) and add another: the EAP grid cache must not keep the old one."""
    p = _params("2pl", 10, 23)
    s = _state(p, 4, 24)
    eap = EAPEstimator()
    eap.estimate(p, s)
    snap = s.snapshot()
    s.add(6, 1)
    eap.estimate(p, s)
    s.restore(snap)
    s.add(7, 0)
    fresh = _state(p, 4, 24)
    fresh.add(7, 0)
    assert eap.estimate(p, s) == eap.estimate(p, fresh)


def test_estimator_validation():
    with pytest.raises(ValueError, match="theta_sd"):
        TraitPrior(theta_sd=0)
    with pytest.raises(ValueError, match="rho"):
        TraitPrior(rho=1.0)
    with pytest.raises(TypeError, match="prior"):
        MAPEstimator(prior={"theta_mean": 0})
    with pytest.raises(ValueError, match="n_points"):
        EAPEstimator(n_points=2)
    with pytest.raises(ValueError, match="bounds"):
        EAPEstimator(bounds=(3, -3))
    with pytest.raises(ValueError, match="rule"):
        EAPEstimator(rule="simpson")
    with pytest.raises(TypeError, match="use_cot"):
        MAPEstimator(use_cot="yes")
    with pytest.raises(ValueError, match="max_iter"):
        MAPEstimator(max_iter=0)


# ----------------------------------------------------------------------------- catpie (R catR port) oracle
catpie = pytest.importorskip("catpie", reason="catpie (a port of R catR) is in the test extra")


def _catpie_bank(p):
    # catR's 4PL: c + (d - c) / (1 + exp(-a (theta - b))); ours z = a theta + b_intercept
    return [(float(a), float(-b / a), 0.0, 1.0) for a, b in zip(p.a, p.b)]


def test_map_eap_se_and_mfi_match_catpie():
    from catpie.estimators import r, r0
    from catpie.math import uniroot

    from catengine.selection import ItemTable, MaxFisherInformation, SelectionState

    rng = np.random.default_rng(23)
    J = 80
    p = ItemParams("2pl", a=rng.uniform(0.6, 2.0, J), b=rng.normal(0, 1, J))
    cbank = _catpie_bank(p)
    table = ItemTable(p)
    s = ResponseState(p)
    eap = EAPEstimator(n_points=33, bounds=(-4.0, 4.0), rule="trapezoid", widen=False)  # catR's defaults (truncated at +-4)
    est = MAPEstimator().estimate(p, s)
    theta_true = 0.7
    for step in range(25):
        eligible = ~s.administered
        j = MaxFisherInformation().select(p, SelectionState(est, eligible, s, table), np.random.default_rng(0))
        nxt = catpie.nextItem(cbank, est.theta, out=[int(v) for v in s.items], criterion="MFI")
        assert j == nxt.item
        info_ours = float(logistic.item_information(p, est.theta, [j])[0])
        assert info_ours == pytest.approx(nxt.info, rel=1e-9)
        s.add(j, int(rng.random() < 1 / (1 + math.exp(-(p.a[j] * theta_true + p.b[j])))))
        est = MAPEstimator().estimate(p, s, start=est)
        it = [cbank[k] for k in s.items]
        x = [int(v) for v in s.correct]
        # catR's BM estimate solves its score equation r0 + r = 0 by uniroot (tol 1.2e-4); the same
        # score solved to 1e-13 must equal our MAP to 1e-6
        root = uniroot(lambda th: r0(th, it, "BM") + r(th, it, x), -6, 6, tol=1e-13)
        assert est.theta == pytest.approx(root, abs=1e-6)
        assert est.theta == pytest.approx(catpie.thetaEst(it, x, method="BM"), abs=2.5e-4)  # catR's own tolerance
        se = catpie.semTheta(est.theta, it, x, method="BM")
        assert est.theta_sd == pytest.approx(se, abs=1e-6)
        e = eap.estimate(p, s)
        th_eap = catpie.eapEst(it, x)
        assert e.theta == pytest.approx(th_eap, abs=1e-6)
        assert e.theta_sd == pytest.approx(catpie.eapSem(th_eap, it, x), abs=1e-6)


@pytest.mark.parametrize("st,su,c", [(0.7, 1.2, 0.3), (1.0, 1.0, -0.95), (0.2, 3.0, 0.0)])
def test_estimate_precision_closed_form_inverts_the_covariance(st, su, c):
    est = TraitEstimate(theta=0.1, theta_sd=st, n_items=3, tau=0.0, tau_sd=su, theta_tau_cov=c * st * su)
    np.testing.assert_allclose(est.precision(), np.linalg.inv(est.covariance()), rtol=1e-12)
    one = TraitEstimate(theta=0.1, theta_sd=st, n_items=3)
    np.testing.assert_allclose(one.precision(), [[1.0 / st**2]], rtol=1e-14)
    with pytest.raises(np.linalg.LinAlgError, match="not positive definite"):
        TraitEstimate(theta=0.0, theta_sd=1.0, n_items=1, tau=0.0, tau_sd=1.0, theta_tau_cov=1.0).precision()


@pytest.mark.parametrize("model", ["2pl", "4pl", "lart"])
def test_add_many_is_adding_one_by_one_bit_for_bit(model):
    """ResponseState.add_many reaches the state of add() called in order: the arrays, counts and
    the CoT sums (accumulated in the same order), with and without item covariance and missing CoT."""
    import naive_engine as naive
    from catengine.estimation import ResponseState
    from catengine.models.item_covariance import ItemCovariance

    bank = naive.make_bank(model, 40, seed=8)
    params = bank.params
    rng = np.random.default_rng(9)
    items = rng.permutation(40)[:27]
    y = (rng.random(27) < 0.5).astype(float)
    log_t = rng.normal(5, 1, 27)
    log_t[::4] = np.nan
    va, vb = rng.uniform(0, 0.1, 40), rng.uniform(0, 0.2, 40)
    for cov in (None, ItemCovariance(va, vb, 0.5 * np.sqrt(va * vb) * rng.uniform(-1, 1, 40))):
        one, many = ResponseState(params, cov), ResponseState(params, cov)
        one.add(int(items[0]), int(y[0]), float(log_t[0]))
        many.add(int(items[0]), int(y[0]), float(log_t[0]))
        for j, c, t in zip(items[1:], y[1:], log_t[1:]):
            one.add(int(j), int(c), float(t))
        many.add_many(items[1:], y[1:], log_t[1:])
        assert (one.n, one.n_correct, one.cot_info, one.cot_score) == (many.n, many.n_correct, many.cot_info, many.cot_score)
        np.testing.assert_array_equal(one.administered, many.administered)
        for name in ("items", "correct", "a", "b", "c", "d"):  # the answered rows of the buffers
            np.testing.assert_array_equal(getattr(one, name)[: one.n], getattr(many, name)[: many.n])
        np.testing.assert_array_equal(one.log_cot, many.log_cot)
        if cov is not None:
            for name in ("va", "vb", "vab"):
                np.testing.assert_array_equal(getattr(one, name)[: one.n], getattr(many, name)[: many.n])
