"""The model-based full-benchmark score (catengine.scoring, CATSession.predicted_score; docs/math.md §7.6):
against a dense theta grid, Monte Carlo draws, closed forms, and its category breakdown."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.special import expit
from scipy.stats import norm

from catengine import CATSession, ItemBank
from catengine.scoring import MIN_SMEARING_ITEMS, ScoreEstimate, predict_accuracy, predict_cot_total, smearing_moments
from catengine.session import read_log
from catengine.stopping import MaxItems

J = 30
AREAS = np.array(["algebra", "geometry", "counting"])


def make_bank(model, b_sd=None, seed=0):
    rng = np.random.default_rng(seed)
    kw = {"a": rng.lognormal(0.2, 0.3, J), "b": rng.normal(0, 1, J)}
    if model == "4pl":
        kw["c"] = rng.uniform(0.0, 0.2, J)
        kw["d"] = rng.uniform(0.85, 1.0, J)
    if model == "lart":
        kw.update(omega=rng.normal(6.0, 0.3, J), phi=rng.uniform(0.8, 1.2, J), lam=rng.uniform(0.4, 0.6, J), rho=-0.4)
    if b_sd is not None:
        kw["b_sd"] = np.full(J, b_sd)
    meta = {"subject": AREAS[np.arange(J) % 3], "source": np.array(["bench"] * J)}
    return ItemBank.from_params(model, [f"q{j:02d}" for j in range(J)], bank_id=f"t_{model}", item_metadata=meta, **kw)


def naive_p(bank, theta):
    """P(correct) at thetas (K,) for every item, written out from the response functions."""
    p = bank.params
    z = np.outer(theta, p.a) + p.b
    if p.response_model == "lart":
        return norm.cdf(z)
    if p.response_model == "2pl":
        return expit(z)
    return p.c + (p.d - p.c) * expit(z)


def answered_session(bank, n=8, seed=1):
    rng = np.random.default_rng(seed)
    s = CATSession(bank, stopping=MaxItems(n), rng=seed)
    lart = bank.response_model == "lart"
    while not s.finished:
        item = s.next_item()
        s.record(item, int(rng.random() < 0.6), float(rng.lognormal(6, 0.5)) if lart else None)
    return s


def observed(session):
    idx = np.array([session.bank.index_of(r.item) for r in session.history])
    y = np.array([r.correct for r in session.history], dtype=float)
    return idx, y


@pytest.mark.parametrize("model", ["2pl", "4pl", "lart"])
def test_accuracy_and_sd_equal_a_theta_grid_average(model):
    bank = make_bank(model)
    s = answered_session(bank)
    est = s.estimate
    score = s.predicted_score(method="model", by=False)  # the model's prediction
    # dense grid over the reported posterior Normal(theta, SD^2): trapezoid weights
    grid = est.theta + est.theta_sd * np.linspace(-12, 12, 24001)
    w = norm.pdf(grid, est.theta, est.theta_sd)
    w /= w.sum()
    idx, y = observed(s)
    unknown = np.ones(J, bool)
    unknown[idx] = False
    P = naive_p(bank, grid)[:, unknown]
    cond_mean = (y.sum() + P.sum(axis=1)) / J
    cond_var = (P * (1 - P)).sum(axis=1) / J**2
    mean = w @ cond_mean
    var = w @ cond_var + w @ (cond_mean - mean) ** 2
    assert score.accuracy == pytest.approx(mean, abs=1e-9)
    assert score.sd == pytest.approx(math.sqrt(var), rel=1e-7)
    assert score.n_observed == 8 and score.n_items == J
    assert y.sum() / J <= score.low < score.accuracy < score.high <= (y.sum() + unknown.sum()) / J


def test_lart_accuracy_matches_the_probit_closed_form():
    # E Phi(a theta + b) over theta ~ N(m, s^2) = Phi((a m + b) / sqrt(1 + a^2 s^2))
    bank = make_bank("lart")
    p = bank.params
    idx = np.array([0, 3, 7])
    y = np.array([1.0, 0.0, 1.0])
    m, sd = 0.4, 0.7
    got = predict_accuracy(p, m, sd, idx, y)[0]
    unknown = np.setdiff1d(np.arange(J), idx)
    closed = norm.cdf((p.a * m + p.b) / np.sqrt(1 + p.a**2 * sd**2))[unknown].sum() + y.sum()
    assert got.mean == pytest.approx(closed, rel=1e-10)


@pytest.mark.parametrize("model", ["2pl", "lart"])
def test_variance_and_interval_match_monte_carlo(model):
    bank = make_bank(model, seed=3)
    p = bank.params
    idx = np.arange(0, J, 4)
    y = (np.arange(idx.size) % 2).astype(float)
    m, sd = -0.3, 0.6
    pred = predict_accuracy(p, m, sd, idx, y)[0]
    rng = np.random.default_rng(11)
    n = 200_000
    theta = rng.normal(m, sd, n)
    unknown = np.setdiff1d(np.arange(J), idx)
    P = naive_p(bank, theta)[:, unknown]
    total = y.sum() + (rng.random(P.shape) < P).sum(axis=1)
    mc_sd = total.std()
    assert pred.mean == pytest.approx(total.mean(), abs=4 * mc_sd / math.sqrt(n))
    assert pred.sd == pytest.approx(mc_sd, rel=0.01)  # MC relative SE of an SD: ~0.16% here
    inside = np.mean((total >= pred.low - 1e-9) & (total <= pred.high + 1e-9))
    assert 0.94 <= inside <= 0.975  # the total is an integer: the normal-mixture interval is within one count


def test_item_parameter_uncertainty_matches_monte_carlo_over_item_draws():
    # y_j | theta ~ Bernoulli(P_j(theta; a_j + da, b_j + db)), (da, db) ~ N(0, Sigma_j) per item
    bank = make_bank("2pl", seed=5)
    p = bank.params
    idx, y = np.arange(5), np.array([1, 0, 1, 1, 0], float)
    a_sd, b_sd, ab_cov = np.full(J, 0.3), np.full(J, 0.8), np.full(J, 0.05)
    m, sd = 0.2, 0.5
    plain = predict_accuracy(p, m, sd, idx, y)[0]
    with_items = predict_accuracy(p, m, sd, idx, y, a_sd=a_sd, b_sd=b_sd, ab_cov=ab_cov)[0]
    rng = np.random.default_rng(2)
    n = 200_000
    unknown = np.setdiff1d(np.arange(J), idx)
    theta = rng.normal(m, sd, (n, 1))
    cov = np.array([[0.3**2, 0.05], [0.05, 0.8**2]])
    ab = rng.multivariate_normal([0, 0], cov, (n, unknown.size))
    P = expit((p.a[unknown] + ab[..., 0]) * theta + p.b[unknown] + ab[..., 1])
    total = y.sum() + (rng.random(P.shape) < P).sum(axis=1)
    se_mean = total.std() / math.sqrt(n)
    assert with_items.mean == pytest.approx(total.mean(), abs=4 * se_mean)
    # the shift of the mean (item uncertainty flattens the response curves), with common theta draws
    shift = P.sum(axis=1) - expit(p.a[unknown] * theta + p.b[unknown]).sum(axis=1)
    se_shift = shift.std() / math.sqrt(n)
    assert abs(shift.mean()) > 10 * se_shift
    assert with_items.mean - plain.mean == pytest.approx(shift.mean(), abs=4 * se_shift)
    assert with_items.sd == pytest.approx(total.std(), rel=0.01)


def test_bank_b_sd_is_wired_into_the_session_score():
    s_plain = answered_session(make_bank("2pl"))
    s_unc = answered_session(make_bank("2pl", b_sd=0.5))
    assert [r.item for r in s_plain.history] == [r.item for r in s_unc.history]
    a, b = s_plain.predicted_score(method="model", by=False), s_unc.predicted_score(method="model", by=False)
    idx, y = observed(s_plain)
    est = s_unc.estimate
    direct = predict_accuracy(s_plain.params, est.theta, est.theta_sd, idx, y, b_sd=np.full(J, 0.5))[0]
    assert b.accuracy == pytest.approx(direct.mean / J, rel=1e-12)
    assert b.sd == pytest.approx(direct.sd / J, rel=1e-12)
    assert b.accuracy != pytest.approx(a.accuracy, abs=1e-6)


def test_cot_total_matches_closed_form_mean_and_monte_carlo_spread():
    bank = make_bank("lart", seed=4)
    p = bank.params
    idx = np.array([1, 2])
    tokens = np.array([300.0, 800.0])
    tau, tau_sd, offset = 0.3, 0.4, 1.0
    pred = predict_cot_total(p, tau, tau_sd, idx, tokens, cot_offset=offset)[0]
    unknown = np.setdiff1d(np.arange(J), idx)
    phi, om, lam = p.phi[unknown], p.omega[unknown], p.lam[unknown]
    closed = tokens.sum() + np.sum(np.exp(om - phi * tau + 0.5 * (phi * tau_sd) ** 2 + 0.5 * lam**2) - offset)
    assert pred.mean == pytest.approx(closed, rel=1e-9)
    rng = np.random.default_rng(8)
    n = 400_000
    t = rng.normal(tau, tau_sd, (n, 1))
    T = np.exp(om - phi * t + lam * rng.standard_normal((n, unknown.size))) - offset
    total = tokens.sum() + T.sum(axis=1)
    assert pred.sd == pytest.approx(total.std(), rel=0.02)
    lo, hi = np.quantile(total, [0.025, 0.975])
    assert pred.low == pytest.approx(lo, rel=0.02) and pred.high == pytest.approx(hi, rel=0.02)


@pytest.mark.parametrize("model", ["2pl", "lart"])
def test_by_category_sums_back_to_the_total(model):
    s = answered_session(make_bank(model), n=10)
    score = s.predicted_score(method="model")  # the model's categories partition its total exactly
    assert score.category_field == "subject"  # chosen automatically: 'source' has one value only
    cats = score.by_category
    assert sorted(cats) == sorted(AREAS)
    assert sum(c.n_items for c in cats.values()) == J
    assert sum(c.n_observed for c in cats.values()) == score.n_observed == 10
    assert sum(c.accuracy * c.n_items for c in cats.values()) / J == pytest.approx(score.accuracy, abs=1e-12)
    for c in cats.values():
        assert c.low <= c.accuracy <= c.high
    if model == "lart":
        assert sum(c.cot_total for c in cats.values()) == pytest.approx(score.cot_total, rel=1e-12)
        assert score.cot_mean == pytest.approx(score.cot_total / J)
    # each category on its own: the same numerics restricted to its items
    p = s.params
    idx, y = observed(s)
    labels = np.asarray(s.bank.item_metadata("subject")).astype(str)
    est = s.estimate
    for label, c in cats.items():
        keep = np.flatnonzero(labels == label)
        sub = p.subset(keep)
        pos = {j: k for k, j in enumerate(keep)}
        o = [(pos[j], yy) for j, yy in zip(idx, y) if j in pos]
        g = predict_accuracy(sub, est.theta, est.theta_sd, [k for k, _ in o], [v for _, v in o])[0]
        assert c.accuracy == pytest.approx(g.mean / keep.size, abs=1e-12)
        assert c.sd == pytest.approx(g.sd / keep.size, rel=1e-9)


def test_category_column_choice():
    s = answered_session(make_bank("2pl"))
    assert s.predicted_score(by=False).by_category == {}
    assert s.predicted_score(by="source").by_category.keys() == {"bench"}
    with pytest.raises(KeyError, match="no per-item string column 'nope'"):
        s.predicted_score(by="nope")
    declared = CATSession(make_bank("2pl").replace_attrs(category_field="source"))
    assert declared.predicted_score().category_field == "source"


def test_every_item_answered_gives_the_observed_accuracy_exactly():
    bank = make_bank("2pl")
    s = CATSession(bank, stopping=MaxItems(J))
    y = np.arange(J) % 3 == 0
    for j, item in enumerate(bank.item_ids):
        s.record(item, int(y[j]))
    score = s.predicted_score(by=False)
    assert score.accuracy == pytest.approx(y.mean(), abs=1e-12) and score.sd == pytest.approx(0.0, abs=1e-12)
    assert score.low == pytest.approx(y.mean()) and score.high == pytest.approx(y.mean())


def test_score_estimate_round_trips_through_json_and_the_log(tmp_path):
    bank = make_bank("lart")
    log = tmp_path / "s.jsonl"
    s = CATSession(bank, stopping=MaxItems(5), rng=2, log=log)
    while not s.finished:
        s.record(s.next_item(), 1, 250.0)
    score = s.predicted_score(record=True)
    s.close()
    events = read_log(log).events
    logged = [e for e in events if e["event"] == "score"]
    assert len(logged) == 1 and logged[0]["step"] == 5
    back = ScoreEstimate.from_dict(json.loads(json.dumps(logged[0]["score"])))
    assert back.accuracy == score.accuracy and back.cot_total == score.cot_total
    assert back.by_category["geometry"].high == score.by_category["geometry"].high
    resumed = CATSession.resume(log, bank)
    assert resumed.predicted_score() == score
    resumed.close()


def test_bad_arguments_are_named():
    s = answered_session(make_bank("2pl"))
    with pytest.raises(ValueError, match=r"method must be one of \('auto', 'model', 'design', 'doubly-robust'\), got 'bayes'"):
        s.predicted_score(method="bayes")
    with pytest.raises(ValueError, match="level must lie in"):
        s.predicted_score(level=1.5)
    with pytest.raises(ValueError, match="b_sd"):
        predict_accuracy(s.params, 0.0, 1.0, [], [], b_sd=np.full(J, -1.0))


def test_session_panel_shows_the_predicted_score():
    from catengine import open_item_bank
    from catengine.widgets import SessionPanel
    from catengine.widgets.session_panel import SimulatedLLM

    bank = open_item_bank(Path(__file__).resolve().parents[1] / "item_banks" / "demo_math500_lart")
    session = CATSession(bank, stopping=MaxItems(6), rng=0)
    panel = SessionPanel(session, SimulatedLLM(bank, theta=0.5, tau=0.0, rng=1), show_ranking=False)
    panel.play()
    assert [t[0] for t in panel.score_trajectory] == list(range(1, 7))
    step, acc, low, high = panel.score_trajectory[-1]
    now = session.predicted_score()
    # the trajectory is the model's prediction; the reported score the default, design-based one, drawn beside it
    model = session.predicted_score(method="model")
    assert panel.score == now and acc == pytest.approx(model.accuracy, abs=1e-3) and low < acc < high
    assert now.method == "doubly-robust"
    assert "design-based estimate" in panel.score_figure.axes[0].get_legend_handles_labels()[1]
    assert len(panel.score_figure.axes) == 2  # trajectory + per-category bars (subject_area)
    assert "accuracy" in panel.score_text and "CoT tokens" in panel.score_text
    # a randomised session reports the design-based estimate, drawn beside the model's trajectory
    from catengine.selection import RandomisedSelection

    drawn = CATSession(bank, selector=RandomisedSelection(), stopping=MaxItems(6), rng=0)
    panel = SessionPanel(drawn, SimulatedLLM(bank, theta=0.5, tau=0.0, rng=1), show_ranking=False)
    panel.play()
    assert panel.score.method == "design" and panel.score == drawn.predicted_score(method="design")
    labels = panel.score_figure.axes[0].get_legend_handles_labels()[1]
    assert "design-based estimate" in labels and "predicted accuracy (model)" in labels


def _lart_bank_with(n_items, seed):
    rng = np.random.default_rng(seed)
    kw = {"a": rng.lognormal(0.0, 0.3, n_items), "b": rng.normal(0, 1, n_items), "omega": rng.normal(6.0, 0.4, n_items),
          "phi": rng.uniform(0.8, 1.2, n_items), "lam": rng.uniform(0.9, 1.3, n_items), "rho": -0.3}
    return ItemBank.from_params("lart", [f"q{j:03d}" for j in range(n_items)], bank_id="t_smear", **kw)


def test_cot_smearing_uses_the_llms_own_residuals_and_its_spread_matches_monte_carlo():
    """An LLM far more regular than the bank's lam (residual SD 0.3 against lam ~ 1.1): the log-normal
    moments overpredict its total by about exp(lam^2 / 2); Duan smearing from its recorded lengths
    recovers the expected total, and the predicted SD (item residuals + the shared smearing factor)
    matches the spread of the true total minus the prediction over repeated LLMs."""
    bank = _lart_bank_with(300, seed=11)
    p = bank.params
    tau, sigma, offset, n_obs = 0.2, 0.3, 1.0, 60
    rng = np.random.default_rng(12)
    observed_idx = np.arange(n_obs)
    mu = p.omega - p.phi * tau
    expected_total = np.sum(np.exp(mu + 0.5 * sigma**2) - offset)
    errors, sds, lognormal = [], [], []
    for _ in range(400):
        tokens = np.exp(mu + sigma * rng.standard_normal(mu.size)) - offset
        pred = predict_cot_total(p, tau, 0.0, observed_idx, tokens[observed_idx], cot_offset=offset)[0]
        errors.append(tokens.sum() - pred.mean)
        sds.append(pred.sd)
        lognormal.append(predict_cot_total(p, tau, 0.0, observed_idx, tokens[observed_idx], cot_offset=offset,
                                           residuals="lognormal")[0].mean)
        m1, m2, n = smearing_moments(p, tau, observed_idx, tokens[observed_idx], offset)
        unknown = np.arange(n_obs, mu.size)
        by_hand = tokens[observed_idx].sum() + np.sum(np.exp(mu[unknown]) * m1 - offset)
        assert pred.mean == pytest.approx(by_hand, rel=1e-12)
    errors = np.array(errors)
    assert abs(errors.mean()) < 0.01 * expected_total  # unbiased for the total
    assert np.std(errors) == pytest.approx(np.mean(sds), rel=0.12)
    assert np.mean(lognormal) > 1.4 * expected_total  # the bank's lam would overpredict this LLM


def test_cot_smearing_falls_back_to_the_lognormal_moments_with_few_lengths():
    bank = _lart_bank_with(40, seed=2)
    p = bank.params
    idx = np.arange(MIN_SMEARING_ITEMS - 1)
    tokens = np.full(idx.size, 500.0)
    a = predict_cot_total(p, 0.1, 0.3, idx, tokens, cot_offset=1.0)[0]
    b = predict_cot_total(p, 0.1, 0.3, idx, tokens, cot_offset=1.0, residuals="lognormal")[0]
    assert a == b
    with pytest.raises(ValueError, match="residuals must be one of"):
        predict_cot_total(p, 0.1, 0.3, idx, tokens, cot_offset=1.0, residuals="median")


@pytest.mark.parametrize("model", ["2pl", "lart"])
def test_mean_and_sd_alone_equal_those_of_the_full_prediction(model):
    """intervals=False (the calibration-time score check) skips only the mixture quantiles."""
    bank = make_bank(model, seed=6)
    p = bank.params
    idx, y = np.array([0, 3, 7]), np.array([1.0, 0.0, 1.0])
    full = predict_accuracy(p, 0.2, 0.5, idx, y, residual_sd=0.03)[0]
    fast = predict_accuracy(p, 0.2, 0.5, idx, y, residual_sd=0.03, intervals=False)[0]
    assert (fast.mean, fast.sd) == (full.mean, full.sd) and math.isnan(fast.low) and math.isnan(fast.high)
    assert full.low < full.mean < full.high
    if model == "lart":
        tokens = np.array([300.0, 500.0, 800.0])
        a = predict_cot_total(p, 0.1, 0.3, idx, tokens, cot_offset=1.0, log_extra_sd=0.2)[0]
        b = predict_cot_total(p, 0.1, 0.3, idx, tokens, cot_offset=1.0, log_extra_sd=0.2, intervals=False)[0]
        assert (b.mean, b.sd) == (a.mean, a.sd) and math.isnan(b.low)
