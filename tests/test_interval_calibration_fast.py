"""The interval check's shortcuts against their references: refits started from the full fit
(cBMM, LaRT SAEM, score factors) reach the training folds' own optimum, and random-selection tests
scored at the tabulated lengths give the estimates of sessions that record the same answers one by
one. No timings are asserted (benchmarks/check_cost.py measures the cost and the check's figures)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from calibration.base import ConvergenceWarning
from calibration.heldout import DEFAULT_LENGTHS, RefitBank
from calibration.heldout.replay import random_replays as _random_replays
from calibration.methods.cbmm.calibrator import CBMMCalibrator, penalised_nll
from calibration.methods.lart.calibrator import LaRTSAEMCalibrator
from calibration.heldout.score_factors import _objective, _check_matrix, fit_score_factors
from calibration.simulate import draw_abilities, draw_item_params, simulate_dataset, simulate_responses


def _sim2pl(n, j, seed):
    params = draw_item_params("2pl", j, rng=seed)
    return simulate_responses(params, draw_abilities(n, rng=seed + 1), rng=seed + 2, missing="mcar", missing_rate=0.1)


# ------------------------------------------------------------------------------ cBMM
FIXED_PRIOR = {"a_mean": 1.0, "a_sd": 0.5, "b_mean": 0.0, "b_sd": 2.0}


@pytest.mark.parametrize("prior", ["none", FIXED_PRIOR])
def test_cbmm_refit_from_the_full_fit_reaches_the_cold_optimum(prior):
    data = _sim2pl(240, 50, seed=3)
    full = CBMMCalibrator(progress=False, prior=prior).fit(data)
    rows = np.flatnonzero(np.arange(data.n_subjects) % 4 != 0)
    sub = data.subset(subjects=rows)
    cold = CBMMCalibrator(progress=False, prior=prior, tol=1e-12, max_iter=20000).fit(sub)
    warm = CBMMCalibrator(progress=False, prior=prior, tol=1e-12, max_iter=20000).fit_from(sub, full.refit_start(rows))
    assert warm.converged_ and cold.converged_
    assert np.all(np.diff(warm.loss_trace_) <= 1e-9 * np.abs(warm.loss_trace_[1:]))  # the MM guarantee holds
    assert warm.loss_ == pytest.approx(cold.loss_, rel=1e-8)
    # the penalised loss, checked with the independent dense objective
    dense = penalised_nll(sub, warm.raw_theta_, warm.raw_a_, warm.raw_b_, warm.prior_, warm.sigma,
                          subjects=~warm.extreme_subjects_, items=~warm.perfect_items_)
    assert dense == pytest.approx(warm.loss_, rel=1e-9)
    np.testing.assert_allclose(warm.a_, cold.a_, atol=2e-3)
    np.testing.assert_allclose(warm.b_, cold.b_, atol=2e-3)
    assert warm.n_iter_ <= cold.n_iter_


def test_cbmm_with_the_empirical_bayes_prior_refits_cold():
    data = _sim2pl(60, 12, seed=5)
    full = CBMMCalibrator(progress=False).fit(data)
    assert full.refit_start(np.arange(30)) is None


def test_cbmm_refit_start_is_checked():
    data = _sim2pl(60, 12, seed=5)
    full = CBMMCalibrator(progress=False, prior="none").fit(data)
    start = full.refit_start(np.arange(50))
    with pytest.raises(ValueError, match="shapes"):
        CBMMCalibrator(progress=False).fit_from(data, start)  # 50 rows of start for 60 subjects
    with pytest.raises(ValueError, match="sigma"):
        CBMMCalibrator(progress=False, prior="none", sigma=0.5).fit_from(data, full.refit_start(np.arange(60)))
    assert CBMMCalibrator(progress=False)._start is None  # fit_from leaves no start behind


# ------------------------------------------------------------------------------ LaRT SAEM
def test_saem_refit_from_the_full_fit_recovers_as_a_cold_fit():
    """Started at the full fit, a refit on 3/4 of the LLMs lands as close to the truth as a cold
    fit (the recovery bar of tests/test_lart_saem.py's 300 x 40 design) and within Monte-Carlo
    noise of it, not nearer to the full fit than a cold fit is."""
    data, truth = simulate_dataset("lart", 400, 40, rng=11, rho=-0.6)
    full = LaRTSAEMCalibrator(rng=0).fit(data)
    rows = np.flatnonzero(np.arange(400) % 4 != 0)
    sub = data.subset(subjects=rows)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        cold = LaRTSAEMCalibrator(rng=1).fit(sub)
        warm = LaRTSAEMCalibrator(rng=1, **full.refit_settings()).fit_from(sub, full.refit_start(rows))
    p = truth.params
    for fit in (cold, warm):
        assert np.corrcoef(fit.a_, p.a)[0, 1] > 0.85
        assert np.sqrt(np.mean((fit.b_ - p.b) ** 2)) < 0.2
        assert abs(fit.rho_ - p.rho) < 0.12
    assert warm.n_burnin_ == LaRTSAEMCalibrator.REFIT_BURNIN
    assert warm.n_iter_ < cold.n_iter_
    a_sd = np.median(cold.a_sd_)
    assert np.mean(np.abs(warm.a_ - cold.a_)) < a_sd  # Monte-Carlo differences, below the estimates' SE
    # no pull towards the full fit (which saw the held-out quarter)
    assert np.mean(np.abs(warm.a_ - full.a_)) > 0.5 * np.mean(np.abs(cold.a_ - full.a_))


def test_saem_refit_start_is_checked():
    data, _ = simulate_dataset("lart", 40, 8, rng=2)
    full = LaRTSAEMCalibrator(rng=0, max_iter=20, n_burnin=5).fit(data)
    start = full.refit_start(np.arange(30))
    with pytest.raises(ValueError, match="shape"):
        LaRTSAEMCalibrator(rng=0).fit_from(data, start)
    start = full.refit_start(np.arange(40))
    start["omega"] = None
    with pytest.raises(ValueError, match="CoT"):
        LaRTSAEMCalibrator(rng=0).fit_from(data, start)


# ------------------------------------------------------------------------------ score factors
@pytest.mark.parametrize("dims", [1, 2])
def test_score_factor_fit_from_a_start_reaches_the_same_optimum(dims):
    """One factor on a simulated 2PL, one and two on a two-factor simulation: identified factors,
    one fixed point, reached from the principal components or from the full fit's values. (A
    factor the data do not identify, e.g. a second one on a one-factor 2PL, has several fixed
    points, from either start; the factor count's cross-validation keeps such factors out.)"""
    rng = np.random.default_rng(9)
    n, j = 200, 40
    traits = rng.standard_normal((n, dims))
    loadings = rng.uniform(0.8, 2.0, (j, dims)) * np.where(np.arange(j)[:, None] % dims == np.arange(dims), 1.0, 0.2)
    p = 1 / (1 + np.exp(-(traits @ loadings.T + rng.normal(0, 1, j))))
    y = (rng.random((n, j)) < p).astype(np.int8)
    y[rng.random((n, j)) < 0.1] = -1
    full = fit_score_factors(y, dims)
    rows = np.arange(160)
    cold = fit_score_factors(y[rows], dims, tol=1e-12, max_iter=5000)
    warm = fit_score_factors(y[rows], dims, tol=1e-12, max_iter=5000,
                             start=(full.traits[rows], full.loadings, full.intercepts))
    Y, M = _check_matrix(y[rows])
    f_cold = _objective(Y, M, cold.traits, cold.loadings, cold.intercepts, 4.0, 25.0)
    f_warm = _objective(Y, M, warm.traits, warm.loadings, warm.intercepts, 4.0, 25.0)
    assert f_warm == pytest.approx(f_cold, rel=1e-9)
    # the factor model is identified up to a rotation: compare the fitted probabilities
    p_cold = 1 / (1 + np.exp(-(cold.traits @ cold.loadings.T + cold.intercepts)))
    p_warm = 1 / (1 + np.exp(-(warm.traits @ warm.loadings.T + warm.intercepts)))
    np.testing.assert_allclose(p_warm, p_cold, atol=1e-5)
    with pytest.raises(ValueError, match="start shapes"):
        fit_score_factors(y[rows], dims, start=(full.traits, full.loadings, full.intercepts))


# ------------------------------------------------------------------------------ the check
def test_refit_bank_starts_each_fold_from_the_full_fit(monkeypatch):
    data = _sim2pl(80, 20, seed=4)
    full = CBMMCalibrator(progress=False, rng=0, prior="none").fit(data)
    seen = []
    original = CBMMCalibrator.fit_from

    def spy(self, d, start):
        seen.append((list(d.subject_ids), start["theta"].copy()))
        return original(self, d, start)

    monkeypatch.setattr(CBMMCalibrator, "fit_from", spy)
    rows = np.array([3, 7, 1, 50, 60, 22])
    sub = data.subset(subjects=np.setdiff1d(np.arange(80), rows))
    bank, converged = RefitBank(full)(sub, np.random.default_rng(0), "fold")
    assert len(seen) == 1 and seen[0][0] == list(sub.subject_ids)
    index = {s: k for k, s in enumerate(data.subject_ids)}
    np.testing.assert_array_equal(seen[0][1], full.raw_theta_[[index[s] for s in sub.subject_ids]])
    seen.clear()
    RefitBank(full, warm=False)(sub, np.random.default_rng(0), "fold")
    assert not seen  # cold refits: a plain fit


@pytest.mark.parametrize("kind", ["2pl", "lart"])
def test_random_tests_scored_at_the_lengths_match_sessions_recording_one_by_one(kind):
    from catengine.selection import RandomSelection
    from catengine.session import CATSession
    from catengine.estimation import ESTIMATORS

    if kind == "2pl":
        data = _sim2pl(30, 60, seed=8)
        bank = CBMMCalibrator(progress=False).fit(data).to_item_bank("b", interval_check=False)
        scoring = "irt"
    else:
        data, _ = simulate_dataset("lart", 60, 60, rng=8)
        bank = LaRTSAEMCalibrator(rng=0).fit(data).to_item_bank("b", interval_check=False)
        scoring = "lart"
    rows, lengths = [0, 4, 9], [L for L in DEFAULT_LENGTHS if L <= 40]
    est, sd, sessions = _random_replays(bank, data, rows, lengths, scoring, "map", 0, 0)
    ids = list(bank.item_ids)
    for k, (i, s) in enumerate(zip(rows, sessions)):
        order = [ids.index(r.item) for r in s.history]
        assert len(order) == lengths[-1] == len(set(order)) and all(data.correct[i, j] >= 0 for j in order)
        ref = CATSession(bank, selector=RandomSelection(), estimator=ESTIMATORS["map"](use_cot=scoring == "lart"))
        for step, j in enumerate(order):
            cot = None if data.cot_length is None or scoring != "lart" else float(data.cot_length[i, j])
            e = ref.record(ids[j], int(data.correct[i, j]), cot)
            if step + 1 in lengths:
                t = lengths.index(step + 1)
                assert est[k, t] == pytest.approx(e.theta, abs=1e-6)
                assert sd[k, t] == pytest.approx(e.theta_sd, rel=1e-6)
                h = s.history[step]
                assert h.theta == est[k, t] and h.theta_sd == sd[k, t]
                if scoring == "lart":
                    assert h.tau == pytest.approx(e.tau, abs=1e-6)
            else:
                assert math.isnan(s.history[step].theta)


@pytest.mark.parametrize("method", ["cbmm", "saem"])
def test_the_check_gives_the_same_record_on_one_thread_and_on_two(method, monkeypatch):
    """The refits, score-factor fits, replays and score sums run side by side (``calibration.heldout.threads``):
    each draws from its own stream and the results are read in fold order, so the record is the
    one a single thread writes."""
    import json

    import calibration.heldout.threads as threads

    if method == "cbmm":
        data = simulate_responses(draw_item_params("2pl", 80, rng=11), draw_abilities(60, rng=12), rng=13)  # complete rows
        cal = CBMMCalibrator(progress=False, rng=3).fit(data)
    else:  # LaRT with CoT: the SAEM refits start from the full fit, and 60 LLMs get score factors
        data, _ = simulate_dataset("lart", 60, 60, rng=14)
        cal = LaRTSAEMCalibrator(rng=3).fit(data)
    records = []
    for n in (1, 2):
        monkeypatch.setattr(threads, "MAX_THREADS", n)
        monkeypatch.setattr(threads, "available_cores", lambda: 2)
        record = json.loads(cal.to_item_bank("b", interval_check=True).attrs["interval_calibration"])
        record.pop("seconds")
        records.append(record)
    assert records[0]["curves"] and records[0]["score_curves"]
    assert records[0] == records[1]


def test_workers_give_each_result_by_its_own_future(monkeypatch):
    import time

    import calibration.heldout.threads as threads

    monkeypatch.setattr(threads, "available_cores", lambda: 2)

    def slow_first(k):
        time.sleep(0.05 if k == 0 else 0.0)
        return k * k

    with threads.Workers(2) as workers:
        futures = [workers.submit(slow_first, k) for k in range(5)]
        assert workers.n_threads == 2 and [f.result() for f in futures] == [0, 1, 4, 9, 16]


def test_a_refit_counts_its_convergence_warnings_without_showing_them():
    """Refits run on worker threads, where ``warnings.catch_warnings`` would mix up fits: a refit's
    calibrator keeps its convergence warnings (``convergence_warnings_``) and shows none."""
    data = _sim2pl(60, 30, seed=21)
    full = CBMMCalibrator(progress=False, max_iter=2, prior="none")
    with pytest.warns(ConvergenceWarning):
        full.fit(data)
    assert full.convergence_warnings_ and not full.converged_
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        _, converged = RefitBank(full, warm=False)(data.subset(subjects=np.arange(50)), np.random.default_rng(0), "f")
    assert not converged
    assert not [w for w in shown if issubclass(w.category, ConvergenceWarning)]
    ok = CBMMCalibrator(progress=False).fit(data)
    assert ok.convergence_warnings_ == [] and RefitBank(ok, warm=False)(data, np.random.default_rng(0), "g")[1]


def test_workers_run_numba_and_blas_on_one_thread_and_restore_blas(monkeypatch):
    import numba
    from threadpoolctl import threadpool_info

    import calibration.heldout.threads as threads

    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    before = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
    assert before  # numpy's BLAS is loaded: the limits below are checked on it
    with threads.Workers(2) as workers:
        assert workers.n_threads == 2
        inside = workers.submit(numba.get_num_threads).result()
        during = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
    assert inside == 1 and all(n == 1 for n in during)
    assert [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"] == before
    # pools that overlap in time share the limit: it holds while either is open and is lifted after both
    first, second = threads.Workers(2), threads.Workers(2)
    first.close()
    assert all(p["num_threads"] == 1 for p in threadpool_info() if p["user_api"] == "blas")
    second.close()
    assert [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"] == before
    # a default pool has the caller's numba threads (an audit worker process runs one: no pool)
    threads_before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        with threads.Workers() as one:
            assert one.n_threads == 1
    finally:
        numba.set_num_threads(threads_before)
    with threads.Workers() as default:
        assert default.n_threads == min(threads_before, 2)
    assert [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"] == before
    # a large matrix: one thread, the caller's (each kernel then uses all of numba's threads)
    assert threads.threads_for(threads.MAX_POOLED_CELLS) == 1 and threads.threads_for(158 * 500) is None
    with threads.Workers(1) as inline:  # one thread: the task runs at once, its error comes back by its future
        failed = inline.submit(lambda: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            failed.result()
