"""Benchmarks of the online engine, printed side by side (not timed tests).

Sections (``python benchmarks/engine.py [step|compare|throughput|serve|math500|all] [--quick]``):

* ``step``    — one step (record + MAP update + next-item selection) on 30,000-item banks:
                p50 / p99 per step, for the default a session gets (``CATSession(bank)``: every
                step a design draw, sqrt-variance weights from E_q P_j by 21-node quadrature over
                every item), point and posterior-expected information (2PL, 4PL, LaRT), with and
                without the durable JSONL log, and D-optimal selection in two score factors (the
                adaptive default of banks calibrated on >= 40 LLMs). Targets: p50 <= 0.5 ms and
                p99 <= 2 ms (default, point) and p50 <= 2 ms (posterior-expected, score factors).
* ``compare`` — the same adaptive test (2PL, maximum information, MAP with a N(0, 1) prior,
                30 items) run by catengine, by a plain numpy loop (allenai fluid-benchmarking's
                approach: information for every item + masked argmax, Newton MAP in numpy) and by
                catsim (MaxInfoSelector + a MAP estimator on catsim's own log-likelihood), on the same
                bank, simulees and pre-drawn answers: time per step and RMSE of theta after 30 items.
                catsim is installed for this benchmark only (``pip install --target`` into a
                temporary folder), never as a dependency.
* ``throughput`` — many sessions through one ``Engine`` and one shared JSONL log on the demo bank:
                1,000 subjects x 100 answers (``--quick``: 100 x 50), answers per second with and
                without fsync, and the p99 of one record + next step. Target: >= 10,000 answers/s
                without fsync.
* ``serve``   — ``record`` replies of ``catengine serve`` (estimate and predicted full-benchmark score)
                on 1,000,000-item 2PL and LaRT banks (``--quick``: 100,000), for an adaptive and a
                doubly robust session: p50 / p95 per reply and peak memory, side by side with the
                model-based score computed from scratch (a pass over every item at every node).
                Target: p50 <= 50 ms.
* ``score``   — replies (record + the default predicted_score()) of a doubly robust session on 2,000-
                and 20,000-item banks, whose accuracy interval inverts the test of each hypothesis
                (docs/math.md §7.8), after 300 answers (``--quick``: 100), side by side with the
                same replies under the pooled-variance interval: p50 over the session and over its
                last 10 replies, and their ratios.
* ``math500`` — adaptive efficiency on the real MATH500 data (data/lart): calibrate LaRT
                (SAEM, with CoT) and IRT-only (SAEM, probit, no CoT) banks on 120 LLMs, replay the
                real answers and CoT lengths of the other 38 adaptively, and report Kendall tau
                between the adaptive estimate after 25 / 50 / 100 items and the full-500-item
                estimate, for point vs posterior-expected vs random selection.

Timings depend on the machine; the numbers in reports were taken on 2 cores shared with other jobs.
"""

from __future__ import annotations

import argparse
import importlib
import math
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from catengine import ItemBank  # noqa: E402
from catengine.estimation import MAPEstimator  # noqa: E402
from catengine.selection import (  # noqa: E402
    MaxFisherInformation,
    PosteriorExpectedInformation,
    RandomSelection,
    ScoreFactorDOptimal,
    ThetaTargetedInformation,
)
from catengine.session import CATSession  # noqa: E402
from catengine.stopping import MaxItems  # noqa: E402

from _paths import lart_files  # noqa: E402


# ----------------------------------------------------------------------------- helpers
def _bank(model: str, n_items: int, seed: int, uncertainty: str = "b") -> ItemBank:
    """``uncertainty``: "none" (point parameters), "b" (b_sd only, as PSN banks) or "ab" (a_sd, b_sd, ab_cov)."""
    rng = np.random.default_rng(seed)
    kw = dict(a=rng.uniform(0.5, 2.0, n_items), b=rng.normal(0.0, 1.5, n_items), b_sd=rng.uniform(0.1, 0.6, n_items))
    a_sd, corr = rng.uniform(0.05, 0.4, n_items), rng.uniform(-0.6, 0.6, n_items)
    if uncertainty == "none":
        kw.pop("b_sd")
    extra = {}
    if model == "4pl":
        kw.update(c=rng.uniform(0.0, 0.25, n_items), d=rng.uniform(0.85, 1.0, n_items))
    if model == "lart":  # the demo bank's design (scripts/build_demo_bank.py)
        kw.update(a=rng.lognormal(0.3, 0.35, n_items), b=rng.normal(-0.05, 0.8, n_items),
                  omega=rng.normal(6.4, 0.35, n_items), phi=rng.uniform(1.5, 2.5, n_items), lam=rng.uniform(0.8, 1.4, n_items))
        extra = dict(rho=-0.6, cot_offset=1.0)
    if uncertainty == "ab":
        kw.update(a_sd=a_sd, ab_cov=corr * a_sd * kw["b_sd"])
    return ItemBank.from_params(model, [f"i{k:05d}" for k in range(n_items)], bank_id=f"bench_{model}", **extra, **kw)


def _answers(params, theta: float, tau: float, rng):
    """Pre-drawn answers (and CoT tokens) of one simulee to every item of the bank."""
    from catengine.models.information import prob_correct

    p = prob_correct(params, theta)
    correct = (rng.random(params.n_items) < p).astype(int)
    tokens = None
    if params.response_model == "lart":
        lt = params.omega - params.phi * tau + params.lam * rng.standard_normal(params.n_items)
        tokens = np.clip(np.round(np.exp(lt) - 1.0), 0.0, 1e9)  # the engine's plausible range
    return correct, tokens


def _pct(x, q):
    return float(np.percentile(np.asarray(x), q))


# ----------------------------------------------------------------------------- section: one step
def bench_step(quick: bool) -> None:
    n_items = 30_000
    n_sim, n_steps = (6, 40) if quick else (20, 50)
    print(f"\n== one step (record + MAP update + next item) on {n_items:,}-item banks: "
          f"{n_sim} simulees x {n_steps} steps; first 2 steps of each session excluded (warm-up) ==")
    # banks: "<model>" point parameters (no item uncertainty), "<model>~b" b_sd only (PSN-like),
    # "<model>~ab" per-item (a, b) covariances: the uncertainty-aware step (Cheng-Yuan SD + expected
    # information over (a, b)), the default for such banks
    # selector None: the session's default (catengine.selection.default_selector_for: a design draw every step)
    configs = [
        ("2pl", "default (design draw every step)", None, False),
        ("2pl", "point information (MFI)", MaxFisherInformation(), False),
        ("2pl", "point information (MFI), JSONL log", MaxFisherInformation(), True),
        ("2pl~b", "posterior-expected over b (PEI, 9 GH nodes)", PosteriorExpectedInformation(), False),
        ("2pl~ab", "uncertainty-aware: PEI over (a, b) + SD", PosteriorExpectedInformation(), False),
        ("4pl", "default (design draw every step)", None, False),
        ("4pl", "point information (MFI)", MaxFisherInformation(), False),
        ("4pl~b", "posterior-expected over b (PEI, 9 GH nodes)", PosteriorExpectedInformation(), False),
        ("4pl~ab", "uncertainty-aware: PEI over (a, b) + SD", PosteriorExpectedInformation(), False),
        ("lart", "default (design draw every step)", None, False),
        ("lart", "theta-targeted 2x2 precision", ThetaTargetedInformation(), False),
        ("lart", "point probit information (MFI)", MaxFisherInformation(), False),
        ("lart~ab", "uncertainty-aware: theta-targeted, (a, b)", ThetaTargetedInformation(), False),
        ("lart~ab", "uncertainty-aware: PEI over (a, b) + SD", PosteriorExpectedInformation(), False),
        ("2pl+sf", "D-optimal in 2 score factors (their default)", ScoreFactorDOptimal(), False),
        ("lart+sf", "D-optimal in 2 score factors (their default)", ScoreFactorDOptimal(), False),
    ]
    banks = {key: _bank(key.split("~")[0].split("+")[0], n_items, seed=1,
                        uncertainty=key.split("~")[1] if "~" in key else "none")
             for key in {c[0] for c in configs}}
    g = np.random.default_rng(3)  # random two-factor score models for the "+sf" banks
    for key in [k for k in banks if k.endswith("+sf")]:
        banks[key] = banks[key].with_score_factors(g.normal(0.0, 1.2, (n_items, 2)), g.normal(0.0, 1.0, n_items), {"dims": 2})
    print("(p99 on a shared machine includes scheduler preemptions of ~4 ms; 'theta=-4 ms' is the selection alone\n"
          " at an estimate far below every item, where the branch-and-bound pruning cannot skip much: the worst case)")
    print(f"{'bank':<7} {'selector':<44} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'theta=-4 ms':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        for model, label, selector, logged in configs:
            bank = banks[model]
            rng = np.random.default_rng(7)
            times = []
            for sim in range(n_sim + 1):  # simulee 0 warms up (JIT cache load)
                theta = float(rng.standard_normal())
                tau = float(bank.params.rho * theta + math.sqrt(1 - bank.params.rho**2) * rng.standard_normal())
                correct, tokens = _answers(bank.params, theta, tau, rng)
                log = Path(tmp) / f"{model}_{sim}_{id(selector)}.jsonl" if logged else None
                s = CATSession(bank, selector=selector, stopping=MaxItems(n_steps), rng=sim, log=log)
                item = s.next_item()
                for step in range(n_steps - 1):
                    j = bank.index_of(item)
                    t0 = time.perf_counter()
                    s.record(item, int(correct[j]), None if tokens is None else float(tokens[j]))
                    item = s.next_item()
                    dt = time.perf_counter() - t0
                    if sim > 0 and step >= 2:
                        times.append(dt * 1e3)
                s.close()
            far = _far_selection_ms(bank, selector)
            print(f"{model:<7} {label:<44} {_pct(times, 50):>8.3f} {_pct(times, 99):>8.3f} {np.mean(times):>8.3f} {far:>11.3f}")


def _far_selection_ms(bank, selector) -> float:
    """Median time of one selection at theta = -4 after 10 answers (the pruning's worst case)."""
    from catengine.estimation import ResponseState, TraitEstimate
    from catengine.selection import SelectionState
    from catengine.session.bank_log import item_table

    table = item_table(bank)
    if selector is None:
        from catengine.selection import default_selector_for

        selector = default_selector_for(table)
    state = ResponseState(bank.params, table.covariance)
    for j in range(10):
        state.add(j, 0)
    est = TraitEstimate(theta=-4.0, theta_sd=0.3, n_items=10,
                        **({"tau": 2.0, "tau_sd": 0.3, "theta_tau_cov": 0.0} if bank.response_model == "lart" else {}))
    sel_state = SelectionState(est, ~state.administered, state, table)
    rng = np.random.default_rng(0)
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        selector.candidates(bank.params, sel_state, rng, 1)
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1e3)


# ----------------------------------------------------------------------------- section: comparison
def _import_catsim():
    try:
        return importlib.import_module("catsim")
    except ImportError:
        pass
    target = Path(tempfile.gettempdir()) / "catengine-benchmark-catsim"
    if not (target / "catsim").is_dir():
        print(f"(installing catsim + numexpr into {target} for this benchmark only)")
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
               "catsim==0.21.0", "numexpr"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"catsim could not be installed ({proc.stderr.strip()[-300:]}); skipping it")
            return None
    sys.path.insert(0, str(target))
    try:
        return importlib.import_module("catsim")
    except ImportError as exc:
        print(f"catsim could not be imported ({exc}); skipping it")
        return None


def _numpy_loop(a, b, correct_row, n_items_test):
    """fluid-benchmarking's approach in plain numpy: 2PL information of every item, masked argmax,
    MAP (N(0, 1) prior) by Newton on the administered items."""
    available = np.ones(a.size, dtype=bool)
    admin, resp = [], []
    theta = 0.0
    step_times = []
    for _ in range(n_items_test):
        t0 = time.perf_counter()
        p = 1.0 / (1.0 + np.exp(-(a * theta + b)))
        info = np.where(available, a * a * p * (1.0 - p), -1.0)
        j = int(np.argmax(info))
        available[j] = False
        admin.append(j)
        resp.append(correct_row[j])
        aa, bb, yy = a[admin], b[admin], np.asarray(resp, dtype=float)
        for _ in range(100):
            pp = 1.0 / (1.0 + np.exp(-(aa * theta + bb)))
            g = np.sum(aa * (yy - pp)) - theta
            h = -np.sum(aa * aa * pp * (1.0 - pp)) - 1.0
            step = g / h
            theta -= step
            if abs(step) < 1e-10:
                break
        step_times.append(time.perf_counter() - t0)
    return theta, step_times, admin


def _catsim_loop(catsim, cbank, correct_row, n_items_test):
    from scipy.optimize import minimize_scalar

    from catsim import irt
    from catsim.estimation.base import BaseEstimator
    from catsim.selection import MaxInfoSelector

    class MAPEstimatorCatsim(BaseEstimator):
        """MAP with a N(0, 1) prior on catsim's own log-likelihood (catsim 0.21 ships ML only)."""

        def estimate(self, index=None, item_bank=None, administered_items=None, response_vector=None, est_theta=None):
            items = item_bank.get_items(administered_items)
            res = minimize_scalar(lambda t: -irt.log_likelihood(t, response_vector, items) + 0.5 * t * t,
                                  bounds=(-6, 6), method="bounded", options={"xatol": 1e-8})
            return float(res.x)

    selector, estimator = MaxInfoSelector(), MAPEstimatorCatsim()
    admin, resp = [], []
    theta = 0.0
    step_times = []
    for _ in range(n_items_test):
        t0 = time.perf_counter()
        j = int(selector.select(item_bank=cbank, administered_items=admin, est_theta=theta))
        admin.append(j)
        resp.append(bool(correct_row[j]))
        theta = estimator.estimate(item_bank=cbank, administered_items=admin, response_vector=resp, est_theta=theta)
        step_times.append(time.perf_counter() - t0)
    return theta, step_times, admin


def bench_compare(quick: bool) -> None:
    n_items, n_sim, n_test = (2_000, 15, 30) if quick else (14_000, 40, 30)
    print(f"\n== the same adaptive test in three engines: 2PL bank of {n_items:,} items, {n_sim} simulees "
          f"theta ~ N(0, 1), {n_test} items, max information + MAP (N(0, 1) prior), pre-drawn answers ==")
    bank = _bank("2pl", n_items, seed=3)
    a, b = np.asarray(bank.params.a), np.asarray(bank.params.b)
    rng = np.random.default_rng(11)
    thetas = rng.standard_normal(n_sim)
    answers = (rng.random((n_sim, n_items)) < 1 / (1 + np.exp(-(np.outer(thetas, a) + b)))).astype(int)
    results = {}
    # catengine (warm-up run first: numba cache load)
    CATSession(bank, stopping=MaxItems(2)).record(bank.item_ids[0], 1)
    est, times, orders = [], [], []
    for i in range(n_sim):
        s = CATSession(bank, selector=MaxFisherInformation(), estimator=MAPEstimator(), stopping=MaxItems(n_test))
        order = []
        while not s.finished:
            t0 = time.perf_counter()
            item = s.next_item()
            j = bank.index_of(item)
            s.record(item, int(answers[i, j]))
            times.append(time.perf_counter() - t0)
            order.append(j)
        est.append(s.estimate.theta)
        orders.append(order)
    results["catengine"] = (np.array(est), times, orders)

    def every_simulee(loop):
        """(estimates, per-step times, item orders) of ``loop(answer row)`` over all simulees."""
        est, times, orders = [], [], []
        for i in range(n_sim):
            th, t, order = loop(answers[i])
            est.append(th)
            times.extend(t)
            orders.append(order)
        return np.array(est), times, orders

    results["numpy loop (fluid-benchmarking style)"] = every_simulee(lambda row: _numpy_loop(a, b, row, n_test))
    catsim = _import_catsim()
    if catsim is not None:
        cbank = catsim.ItemBank(np.column_stack([a, -b / a, np.zeros(n_items), np.ones(n_items)]))
        results[f"catsim {catsim.__version__}"] = every_simulee(lambda row: _catsim_loop(catsim, cbank, row, n_test))
    base = results["catengine"]
    base_ms = np.median(base[1]) * 1e3
    print(f"{'engine':<40} {'p50 ms/step':>11} {'mean ms':>8} {'x catengine':>11} {'RMSE(theta)':>11} "
          f"{'same items':>10} {'max|dtheta|':>11}")
    for name, (est, times, orders) in results.items():
        ms = np.asarray(times) * 1e3
        rmse = float(np.sqrt(np.mean((est - thetas) ** 2)))
        same = np.mean([o == p for o, p in zip(orders, base[2])])
        print(f"{name:<40} {np.median(ms):>11.3f} {np.mean(ms):>8.3f} {np.median(ms) / base_ms:>11.1f} {rmse:>11.4f} "
              f"{same:>10.2f} {np.max(np.abs(est - base[0])):>11.2e}")


# ----------------------------------------------------------------------------- section: MATH500
def bench_math500(quick: bool) -> None:
    from scipy.stats import kendalltau

    from calibration.audit.replay import replay_metrics

    print("\n== adaptive efficiency on the real MATH500 data (LaRT paper, 158 LLMs x 500 items) ==")
    try:
        from calibration.data import ResponseData
        from calibration.methods.lart.calibrator import LaRTSAEMCalibrator
    except ImportError as exc:
        print(f"skipped: the LaRT SAEM calibrator is not available yet ({exc})")
        return
    data = ResponseData.from_wide_csv(*lart_files("math500"))
    rng = np.random.default_rng(2024)
    perm = rng.permutation(data.n_subjects)
    cal_ids = [data.subject_ids[k] for k in perm[:120]]
    test_idx = perm[120:]
    cal = data.subset(subjects=cal_ids)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit_lart = LaRTSAEMCalibrator(rng=1).fit(cal)
        fit_irt = LaRTSAEMCalibrator(rng=1, use_cot=False).fit(cal)
    print(f"calibrated on 120 LLMs in {time.perf_counter() - t0:.0f} s: LaRT rho = {fit_lart.rho_:+.3f} "
          f"({fit_lart.n_iter_} it), IRT-only ({fit_irt.n_iter_} it); {len(test_idx)} held-out LLMs replayed")
    from catengine.selection._kernels import probit_h_fast

    def b_sd(a, b, thetas):
        z = np.outer(thetas, a) + b
        return 1.0 / np.sqrt(np.vectorize(probit_h_fast)(z).sum(axis=0) + 1.0 / 25.0)

    ids = [str(i) for i in data.item_ids]
    J = len(ids)
    bank_lart = ItemBank.from_params(
        "lart", ids, bank_id="math500_lart", rho=fit_lart.rho_, cot_offset=1.0, a=fit_lart.a_, b=fit_lart.b_,
        omega=fit_lart.omega_, phi=fit_lart.phi_, lam=fit_lart.lam_, b_sd=b_sd(fit_lart.a_, fit_lart.b_, fit_lart.theta_))
    # IRT-only: the probit accuracy model fitted without CoT; CoT parameters inert (phi = 0), rho = 0
    bank_irt = ItemBank.from_params(
        "lart", ids, bank_id="math500_irt", rho=0.0, cot_offset=1.0, a=fit_irt.a_, b=fit_irt.b_,
        omega=np.zeros(J), phi=np.zeros(J), lam=np.ones(J), b_sd=b_sd(fit_irt.a_, fit_irt.b_, fit_irt.theta_))
    R = np.asarray(data.correct)
    T = np.asarray(data.cot_length)
    checkpoints = (25, 50, 100)
    n_random = 2 if quick else 5
    models = {
        "LaRT (answers + CoT)": (bank_lart, MAPEstimator(), {
            "point: theta-targeted": ThetaTargetedInformation(),
            "point: probit MFI": MaxFisherInformation(),
            "posterior-expected": PosteriorExpectedInformation(),
            "random": RandomSelection()}),
        "IRT-only (answers)": (bank_irt, MAPEstimator(use_cot=False), {
            "point: probit MFI": MaxFisherInformation(),
            "posterior-expected": PosteriorExpectedInformation(),
            "random": RandomSelection()}),
    }
    print(f"{'model':<22} {'selection':<24} " + " ".join(f"{'tau@' + str(c):>8}" for c in checkpoints)
          + f" {'|d|@50':>8} {'ms/step':>8}")
    full_by_model = {}
    honesty = {}
    for mname, (bank, estimator, selectors) in models.items():
        use_cot = estimator.use_cot
        full, full_sd = [], []
        for i in test_idx:
            s = CATSession(bank, estimator=estimator, stopping=MaxItems(J))
            for j in range(J):
                s.record(ids[j], int(R[i, j]), float(T[i, j]) if use_cot and not np.isnan(T[i, j]) else None)
            full.append(s.estimate.theta)
            full_sd.append(s.estimate.theta_sd)
        full, full_sd = np.array(full), np.array(full_sd)
        full_by_model[mname] = full
        for sname, selector in selectors.items():
            reps = n_random if isinstance(selector, RandomSelection) else 1
            taus = {c: [] for c in checkpoints}
            honest = {c: [] for c in checkpoints}
            dev50 = []
            times = []
            for rep in range(reps):
                at = {c: [] for c in checkpoints}
                sd_at = {c: [] for c in checkpoints}
                for i in test_idx:
                    s = CATSession(bank, selector=selector, estimator=estimator, stopping=MaxItems(max(checkpoints)), rng=rep)
                    while not s.finished:
                        t0 = time.perf_counter()
                        item = s.next_item()
                        j = int(item)
                        s.record(item, int(R[i, j]), float(T[i, j]) if use_cot and not np.isnan(T[i, j]) else None)
                        times.append(time.perf_counter() - t0)
                        if s.n_items in at:
                            at[s.n_items].append(s.estimate.theta)
                            sd_at[s.n_items].append(s.estimate.theta_sd)
                for c in checkpoints:
                    taus[c].append(kendalltau(at[c], full).statistic)
                    honest[c].append(replay_metrics(full, full_sd, np.array(at[c]), np.array(sd_at[c])))
                dev50.append(np.mean(np.abs(np.array(at[50]) - full)))
            cells = " ".join(f"{np.mean(taus[c]):>8.3f}" for c in checkpoints)
            print(f"{mname:<22} {sname + (f' (x{reps})' if reps > 1 else ''):<24} {cells} {np.mean(dev50):>8.3f} "
                  f"{np.median(times) * 1e3:>8.3f}")
            honesty[(mname, sname)] = {c: {k: np.mean([h[k] for h in honest[c]]) for k in honest[c][0]} for c in checkpoints}
    both = list(full_by_model.values())
    print(f"Kendall tau between the full-500 LaRT and IRT-only estimates: {kendalltau(both[0], both[1]).statistic:.3f}")
    print("\nAre the adaptive error bars honest on real LLMs? (calibration.audit.replay_metrics) coverage: share of the held-out")
    print("LLMs whose full-500 estimate lies in the adaptive 95% interval, against what the model promises (>= 0.95);")
    print("ratio: RMS(theta_n - theta_full) / RMS sqrt(SD_n^2 - SD_full^2), 1 when the SDs are honest")
    print(f"{'model':<22} {'selection':<24} " + " ".join(f"{'cov@' + str(c):>7} {'prom':>5} {'ratio':>5}" for c in checkpoints))
    for (mname, sname), h in honesty.items():
        cells = " ".join(f"{h[c]['coverage']:>7.2f} {h[c]['nominal_coverage']:>5.2f} {h[c]['sd_ratio']:>5.2f}" for c in checkpoints)
        print(f"{mname:<22} {sname:<24} {cells}")
    print("(the same check, cross-fitted over folds of LLMs: calibration audit --kind replay)")

# ----------------------------------------------------------------------------- section: throughput
def bench_throughput(quick: bool) -> None:
    from catengine import open_item_bank
    from catengine.session import Engine

    bank = open_item_bank(ROOT / "item_banks" / "demo_math500_lart")
    n_subjects, n_answers = (100, 50) if quick else (1000, 100)
    print(f"\n== throughput: {n_subjects} subjects x {n_answers} answers through one Engine and one JSONL log "
          f"(demo bank, {bank.n_items} items, MaxItems({n_answers})) ==")
    rng = np.random.default_rng(3)
    subjects = [f"llm{k:04d}" for k in range(n_subjects)]
    answers = {}
    for s in subjects:
        theta = float(rng.standard_normal())
        tau = float(bank.params.rho * theta + math.sqrt(1 - bank.params.rho**2) * rng.standard_normal())
        answers[s] = _answers(bank.params, theta, tau, rng)
    print("(answers/s by wall clock, and per CPU second of this process: the latter is what a shared machine cannot steal)")
    print(f"{'fsync':<6} {'answers/s':>10} {'per CPU s':>10} {'p50 ms':>8} {'p99 ms':>8} {'log MB':>7}")
    for fsync in (False, True):
        subset = subjects if not fsync else subjects[: max(10, n_subjects // 20)]
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "sessions.jsonl"
            engine = Engine(bank, stopping=MaxItems(n_answers), rng=0, log=log, fsync=fsync)
            steps = []
            t_start, cpu_start = time.perf_counter(), time.process_time()
            for s in subset:
                correct, tokens = answers[s]
                item = engine.next_item(s)
                for _ in range(n_answers):
                    j = bank.index_of(item)
                    t0 = time.perf_counter()
                    engine.record(s, item, int(correct[j]), float(tokens[j]))
                    item = engine.next_item(s) if not engine.session(s).finished else None
                    steps.append(time.perf_counter() - t0)
                    if item is None:
                        break
            total, cpu = time.perf_counter() - t_start, time.process_time() - cpu_start
            engine.close()
            size = log.stat().st_size / 1e6
        print(f"{str(fsync):<6} {len(steps) / total:>10,.0f} {len(steps) / cpu:>10,.0f} {_pct(steps, 50) * 1e3:>8.3f} {_pct(steps, 99) * 1e3:>8.3f} {size:>7.1f}")


# ----------------------------------------------------------------------------- section: serve
def _serve_replies(bank, selector, n_replies, rng_seed, from_scratch):
    """Wall time and peak traced memory of each ``record`` reply of one serve subject (the reply
    includes the predicted full-benchmark score), the model-based part from the bank's summed
    curves or, with ``from_scratch``, by a pass over every item at every node."""
    import tracemalloc
    from contextlib import ExitStack
    from unittest import mock

    from catengine.scoring import predict_accuracy, predict_cot_total
    from catengine.session import Engine
    from catengine.session import scoring as session_scoring
    from catengine.session.serve import handle

    params = bank.params
    rng = np.random.default_rng(rng_seed)
    correct, tokens = _answers(params, 0.4, -0.3, rng)
    engine = Engine(bank, selector=selector, stopping=MaxItems(n_replies + 1), rng=rng_seed)
    times, peaks, method = [], [], None
    with ExitStack() as stack:
        if from_scratch:
            uncertainty = session_scoring.item_uncertainty(bank, engine.items)

            def accuracy(curves, theta, sd, observed, values, **kw):
                return predict_accuracy(params, theta, sd, observed, values, codes=curves.codes if curves.n_groups else None,
                                        n_groups=curves.n_groups, **uncertainty, **kw)

            def cot(curves, params_, tau, sd, observed, values, **kw):
                return predict_cot_total(params_, tau, sd, observed, values, codes=curves.codes if curves.n_groups else None,
                                         n_groups=curves.n_groups, **kw)

            stack.enter_context(mock.patch.object(session_scoring, "predict_accuracy_from_curves", accuracy))
            stack.enter_context(mock.patch.object(session_scoring, "predict_cot_total_from_curves", cot))
        for _ in range(n_replies):
            item = handle(engine, {"op": "next", "subject": "llm"})["item"]
            j = bank.index_of(item)
            req = {"op": "record", "subject": "llm", "item": item, "correct": int(correct[j])}
            if tokens is not None:
                req["cot_length"] = float(tokens[j])
            tracemalloc.start()
            t0 = time.perf_counter()
            reply = handle(engine, req)
            times.append(time.perf_counter() - t0)
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
            method = reply["score"]["method"]
    engine.close()
    return np.array(times), np.array(peaks), method


def bench_serve(quick: bool) -> None:
    from catengine.selection import DoublyRobustSelection

    n_items = 100_000 if quick else 1_000_000
    n_replies, n_baseline = (12, 3) if quick else (30, 3)
    print(f"\n== serve: one subject's record replies (estimate + predicted full-benchmark score) on {n_items:,}-item "
          f"banks, {n_replies} replies (the first builds the bank's interpolation panels, shared by later sessions); "
          f"from scratch: {n_baseline} replies ==")
    print("(memory: peak traced allocation during one reply, tracemalloc)")
    print(f"{'bank':<8} {'selector':<24} {'method':<14} {'p50 ms':>9} {'p95 ms':>9} {'first ms':>9} {'peak MB':>8} "
          f"{'scratch p50 ms':>14} {'scratch MB':>10} {'ratio p50':>9}")
    for model in ("2pl", "lart"):
        t0 = time.perf_counter()
        bank = _bank(model, n_items, seed=1, uncertainty="b")
        built = time.perf_counter() - t0
        for name, selector in (("adaptive (MFI)", MaxFisherInformation()), ("doubly-robust", DoublyRobustSelection())):
            times, peaks, method = _serve_replies(bank, selector, n_replies, 5, from_scratch=False)
            later = times[1:]
            base, base_peaks, _ = _serve_replies(bank, selector, n_baseline, 5, from_scratch=True)
            print(f"{model:<8} {name:<24} {method:<14} {_pct(later, 50) * 1e3:>9.1f} {_pct(later, 95) * 1e3:>9.1f} "
                  f"{times[0] * 1e3:>9.0f} {peaks[1:].max() / 1e6:>8.1f} {_pct(base, 50) * 1e3:>14.0f} "
                  f"{base_peaks.max() / 1e6:>10.0f} {_pct(base, 50) / _pct(later, 50):>9.0f}")
        print(f"(bank of {n_items:,} items built in {built:.1f} s)")


# ----------------------------------------------------------------------------- section: score
def _scored_replies(bank, n_answers, pooled: bool):
    """Wall time of each reply (record + the default predicted_score()) of one doubly robust
    session of ``n_answers`` answers; ``pooled``: the accuracy interval of the pooled variance (the
    rule of banks above HYPOTHESIS_ITEMS) in place of the test-inverted one."""
    from unittest import mock

    from catengine import CATSession
    from catengine.session import scoring as session_scoring

    rng = np.random.default_rng(7)
    correct, tokens = _answers(bank.params, 0.4, -0.3, rng)
    times = []
    with mock.patch.object(session_scoring, "HYPOTHESIS_ITEMS", 0 if pooled else session_scoring.HYPOTHESIS_ITEMS):
        s = CATSession(bank, stopping=MaxItems(n_answers), rng=3)
        while not s.finished:
            item = s.next_item()
            j = bank.index_of(item)
            t0 = time.perf_counter()
            s.record(item, int(correct[j]), None if tokens is None else float(tokens[j]))
            s.predicted_score()
            times.append(time.perf_counter() - t0)
    return np.array(times)


def bench_score(quick: bool) -> None:
    sizes, n_answers = ((2_000, 20_000), 100) if quick else ((2_000, 20_000), 300)
    print(f"\n== score: one doubly robust session's replies (record + the default predicted_score()) on banks "
          f"whose accuracy interval inverts a test, {n_answers} answers; beside them the same replies with the "
          f"pooled-variance interval ==")
    print(f"{'bank':<14} {'interval':<14} {'p50 ms':>8} {'last 10 p50 ms':>15} {'ratio p50':>10} {'ratio last 10':>14}")
    for n_items in sizes:
        bank = _bank("2pl", n_items, seed=1)
        base = _scored_replies(bank, n_answers, pooled=True)[2:]
        tested = _scored_replies(bank, n_answers, pooled=False)[2:]
        for name, t in (("pooled", base), ("test-inverted", tested)):
            print(f"{f'2pl {n_items:,}':<14} {name:<14} {_pct(t, 50) * 1e3:>8.1f} {_pct(t[-10:], 50) * 1e3:>15.1f} "
                  f"{_pct(t, 50) / _pct(base, 50):>10.2f} {_pct(t[-10:], 50) / _pct(base[-10:], 50):>14.2f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("section", nargs="?", default="all",
                        choices=("step", "compare", "throughput", "serve", "score", "math500", "all"))
    parser.add_argument("--quick", action="store_true", help="smaller runs (for smoke tests)")
    args = parser.parse_args(argv)
    print("catengine benchmarks; timings depend on the machine (wall clock, single thread)")
    if args.section in ("step", "all"):
        bench_step(args.quick)
    if args.section in ("compare", "all"):
        bench_compare(args.quick)
    if args.section in ("throughput", "all"):
        bench_throughput(args.quick)
    if args.section in ("serve", "all"):
        bench_serve(args.quick)
    if args.section in ("score", "all"):
        bench_score(args.quick)
    if args.section in ("math500", "all"):
        bench_math500(args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
