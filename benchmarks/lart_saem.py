"""LaRT SAEM at benchmark scale (issue 4): real MATH500 (158 x 500) and simulated N = J = 500.

    python benchmarks/lart_saem.py                 # MATH500 (LaRT + IRT-only) and simulated 500 x 500
    python benchmarks/lart_saem.py --peer          # + mirt's ResponseTimeGibbsSampler on the simulated data
    python benchmarks/lart_saem.py --sim 500x50 --seeds 5     # other simulated shapes / several seeds
    python benchmarks/lart_saem.py --table-only    # issue 33's SAEM / MATH500 rows beside their baselines
    python benchmarks/lart_saem.py --no-check      # the table without the (slow) default held-out checks

Issue 33's rows (printed first): on MATH500, the LaRT SAEM fit (median of ``--repeat`` fits) beside
the exact M-step (``_carry_tol = 0``: a full history pass per item and
iteration) in the same run, with the largest differences of the two fits' a, b, rho and item SDs
(same seed); the default held-out check (``to_item_bank(interval_check=True)`` minus the bank
without it) as a multiple of the fit, and where one more check's time goes (CPU seconds of its
fold and strength-ordered refits, the score factors' fits with their cross-validation, the replays
and the score check, each measured as the thread CPU time of the worker thread that ran it); and
cBMM's fit and check on the same data.

Every fit is timed after a warm-up fit on a tiny problem (numba kernels are compiled and cached
on first use; compilation is not counted). Times are wall-clock on whatever machine runs this:
state its load when quoting them (targets of issue 4: MATH500 <= 20 s, simulated 500 x 500
<= 60 s). The time breakdown (S-step / M-step / MAP) comes from the calibrator's ``timing_``.

Simulated design (docs/math.md §1.4 / Xu et al. 2025): a ~ U(0.5, 1), b ~ N(0, 0.5^2), omega ~ N(0, 1),
phi ~ U(0.5, 1.5), lam ~ U(0.5, 2), rho = -0.8, lengths exactly lognormal (``cot_offset = 0``).

Peer (``--peer``): ``mirt.estimation.rt_gibbs.ResponseTimeGibbsSampler`` (PyPI ``mirt``; van der
Linden's hierarchical model: logistic 2PL a(theta - b), log T ~ N(beta - tau, 1/alpha^2), free
population mean and covariance). It is a different model (logistic link, no per-item speed
loading), so only link- and scale-free quantities are compared: Pearson correlations of the trait
estimates and of item slopes/difficulties with the truth, and the ability-speed correlation
sigma_12 / sqrt(sigma_11 sigma_22). If mirt is not importable the peer row says so
(``pip install mirt`` into the environment, or point PYTHONPATH at a ``pip install --target`` dir).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy import stats

from calibration import ConvergenceWarning, ResponseData
from calibration.methods.lart.calibrator import LaRTSAEMCalibrator
from calibration.simulate import simulate_dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _paths import lart_files  # noqa: E402  (the shipped data/lart, gzip)


def _fit(data, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        t = time.perf_counter()
        cal = LaRTSAEMCalibrator(**kw).fit(data)
        return cal, time.perf_counter() - t


def _breakdown(cal) -> str:
    tm = cal.timing_
    return f"S-step {tm['s_step']:.1f} s, M-step(a,b) {tm['m_step_ab']:.1f} s, MAP {tm['map']:.2f} s"


def _rmse(x, y):
    return float(np.sqrt(np.mean((np.asarray(x) - np.asarray(y)) ** 2)))


def warm_up():
    data, _ = simulate_dataset("lart", 30, 5, rng=0, cot_offset=0.0)
    _fit(data, rng=0, cot_offset=0.0, max_iter=8, n_burnin=3)
    _fit(data, rng=0, cot_offset=0.0, max_iter=8, n_burnin=3, use_cot=False)


def _median_time(fn, repeat):
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return out, float(np.median(times)), times


def _check_cost(cal, repeat=3):
    """Seconds of the default held-out check on a fitted calibrator: bank with it minus bank without
    (medians of ``repeat`` runs each, after one untimed run that loads the compiled kernels)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal.to_item_bank("bench", interval_check=True)
        _, t_plain, _ = _median_time(lambda: cal.to_item_bank("bench", interval_check=False), repeat)
        _, t_check, _ = _median_time(lambda: cal.to_item_bank("bench", interval_check=True), repeat)
    return max(t_check - t_plain, 0.0)


def check_parts(cal) -> dict:
    """CPU seconds of the parts of one default check on ``cal`` (each part runs on one worker thread,
    so its thread CPU time is its cost), the check's wall time and the process's CPU time."""
    import threading

    from calibration.heldout import check, fold_replays, refits

    spent: dict[str, float] = {}
    lock = threading.Lock()

    def timed(owner, name, part):
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            t0 = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                with lock:
                    spent[part] = spent.get(part, 0.0) + time.thread_time() - t0

        setattr(owner, name, wrapper)
        return owner, name, original

    patched = [timed(refits.RefitBank, "__call__", "refits"), timed(check, "attach_score_factors", "score factors"),
               timed(refits, "attach_score_factors", "score factors"),
               timed(fold_replays.FoldReplays, "one_fold", "replays"),
               timed(fold_replays, "score_residuals", "score check")]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0, c0 = time.perf_counter(), time.process_time()
            cal.to_item_bank("bench", interval_check=True)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        for owner, name, original in patched:
            setattr(owner, name, original)
    return {"parts": spent, "wall": wall, "cpu": cpu}


def issue33_rows(seed: int, repeat: int, check: bool):
    """Issue 33's MATH500 rows, each beside its baseline, in one run (ratios are the figures to quote)."""
    from calibration.methods.cbmm.calibrator import CBMMCalibrator

    acc, cot = lart_files("math500")
    data = ResponseData.from_wide_csv(acc, cot)
    print(f"== issue 33: MATH500 {data.n_subjects} x {data.n_items}, median of {repeat} fits (round-robin) ==")
    keep = LaRTSAEMCalibrator._carry_tol
    times = {"new": [], "exact": []}
    cals = {}
    try:
        for _ in range(repeat):
            for name, ct in (("new", keep), ("exact", 0.0)):
                LaRTSAEMCalibrator._carry_tol = ct
                cals[name], dt = _fit(data, rng=seed)
                times[name].append(dt)
    finally:
        LaRTSAEMCalibrator._carry_tol = keep
    t_new, t_exact = float(np.median(times["new"])), float(np.median(times["exact"]))
    new, ref = cals["new"], cals["exact"]
    print(f"  LaRT SAEM fit            : {t_new:6.2f} s ({new.n_iter_} iter, {new.newton_passes_} M-step passes; "
          f"{_breakdown(new)}); target <= 2 s")
    print(f"  baseline, exact M-step   : {t_exact:6.2f} s ({ref.n_iter_} iter, {ref.newton_passes_} M-step passes; "
          f"{_breakdown(ref)}) -> fit / baseline {t_new / t_exact:.2f}x")
    print(f"  same seed, new vs exact  : max|da| {np.abs(new.a_ - ref.a_).max():.1e}  max|db| {np.abs(new.b_ - ref.b_).max():.1e}  "
          f"|drho| {abs(new.rho_ - ref.rho_):.1e}  max rel. d a_sd {np.abs(new.a_sd_ / ref.a_sd_ - 1).max():.1e}  "
          f"(median a_sd {np.median(ref.a_sd_):.3f}: the Monte-Carlo scale)")
    cb, t_cb, _ = _median_time(lambda: CBMMCalibrator(progress=False).fit(data), max(repeat, 3))
    print(f"  cBMM fit                 : {t_cb:6.3f} s ({cb.n_iter_} sweeps)")
    if check:
        c_saem = _check_cost(new)
        print(f"  SAEM default check       : {c_saem:6.1f} s = {c_saem / t_new:.1f}x the fit (target <= 3x; median of 3)")
        parts = check_parts(new)
        text = ", ".join(f"{k} {v:.2f}" for k, v in sorted(parts["parts"].items(), key=lambda kv: -kv[1]))
        refits = parts["parts"].get("refits", 0.0)
        print(f"    where its time goes (CPU s, one check, two worker threads): {text}; all {parts['cpu']:.2f} in "
              f"{parts['wall']:.2f} s. The refits alone, shared by two cores, are {refits / 2 / t_new:.1f}x the fit")
        c_cb = _check_cost(cb)
        print(f"  cBMM default check       : {c_cb:6.2f} s = {c_cb / t_cb:.0f}x the fit (target <= 2 s; median of 3)")
    else:
        print("  default checks: skipped (--no-check)")


def real_math500(seed: int):
    acc, cot = lart_files("math500")
    data = ResponseData.from_wide_csv(acc, cot)
    accuracy = np.asarray(data.correct).mean(axis=1)
    lart, t_lart = _fit(data, rng=seed)
    irt, t_irt = _fit(data, rng=seed, use_cot=False)
    print(f"MATH500 {data.n_subjects} x {data.n_items} (log(T + 1), no censoring)")
    print(f"  LaRT SAEM : {t_lart:6.1f} s  {lart.n_iter_:4d} iter  converged={lart.converged_}  "
          f"rho={lart.rho_:+.3f}  spearman(theta, accuracy)={stats.spearmanr(lart.theta_, accuracy)[0]:.3f}")
    print(f"              ({_breakdown(lart)})")
    print(f"  IRT-only  : {t_irt:6.1f} s  {irt.n_iter_:4d} iter  converged={irt.converged_}  "
          f"spearman(theta, accuracy)={stats.spearmanr(irt.theta_, accuracy)[0]:.3f}")
    ratio = lart.theta_sd_ / irt.theta_sd_
    print(f"  posterior SD of theta, LaRT / IRT: median {np.median(ratio):.3f}; "
          f"LaRT smaller for {100 * np.mean(ratio < 1):.0f}% of LLMs; "
          f"theta scale slope IRT->LaRT {np.polyfit(irt.theta_, lart.theta_, 1)[0]:.3f}")
    cens, t_cens = _fit(data, rng=seed, censor_at=10240.0)
    print(f"  LaRT + Tobit censoring at 10,240 tokens: {t_cens:6.1f} s  {cens.n_iter_} iter  "
          f"rho={cens.rho_:+.3f}  ({cens.censored_cells_} censored cells)")


def simulated(n: int, j: int, seeds, peer: bool):
    rows = []
    for seed in seeds:
        data, truth = simulate_dataset("lart", n, j, rng=seed, rho=-0.8, cot_offset=0.0)
        cal, el = _fit(data, rng=seed, cot_offset=0.0)
        p = truth.params
        rows.append(dict(
            seed=seed, time=el, iters=cal.n_iter_, conv=cal.converged_,
            a=_rmse(cal.a_, p.a), b=_rmse(cal.b_, p.b), omega=_rmse(cal.omega_, p.omega),
            phi=_rmse(cal.phi_, p.phi), lam=_rmse(cal.lam_, p.lam), rho=cal.rho_ - p.rho,
            r_theta=np.corrcoef(cal.theta_, truth.theta)[0, 1], r_tau=np.corrcoef(cal.tau_, truth.tau)[0, 1],
            breakdown=_breakdown(cal),
        ))
        r = rows[-1]
        print(f"simulated N={n} J={j} seed={seed}: {el:6.1f} s  {r['iters']} iter  converged={r['conv']}")
        print(f"  RMSE a {r['a']:.3f}  b {r['b']:.3f}  omega {r['omega']:.3f}  phi {r['phi']:.3f}  "
              f"lam {r['lam']:.3f}  rho err {r['rho']:+.3f}  r(theta) {r['r_theta']:.3f}  r(tau) {r['r_tau']:.3f}")
        print(f"  ({r['breakdown']})")
        if peer:
            run_peer(data, truth, cal, el)
    if len(rows) > 1:
        m = {k: np.mean([abs(r[k]) if k == "rho" else r[k] for r in rows]) for k in ("time", "a", "b", "phi", "rho")}
        print(f"mean over {len(rows)} seeds: time {m['time']:.1f} s  RMSE a {m['a']:.3f}  b {m['b']:.3f}  "
              f"phi {m['phi']:.3f}  |rho err| {m['rho']:.3f}")


def run_peer(data, truth, cal, t_saem, n_iter=2000, burnin=500):
    try:
        from mirt.estimation.rt_gibbs import ResponseTimeGibbsSampler
    except ImportError:
        print("  peer mirt.ResponseTimeGibbsSampler: not installed (pip install mirt); skipped")
        return
    R = np.asarray(data.correct).astype(float)
    T = np.asarray(data.cot_length)
    t = time.perf_counter()
    res = ResponseTimeGibbsSampler(n_iter=n_iter, burnin=burnin, seed=0).fit(R, T)
    el = time.perf_counter() - t
    mod = res.model
    cov = np.asarray(mod.ability_speed_cov)
    rho = cov[0, 1] / np.sqrt(cov[0, 0] * cov[1, 1])
    p = truth.params
    diff_true = -p.b / p.a
    ours_diff = -cal.b_ / cal.a_
    print(f"  peer mirt Gibbs ({n_iter} iter, {burnin} burn-in): {el:6.1f} s  (SAEM {t_saem:.1f} s, "
          f"ratio {el / t_saem:.1f}x)")
    print(f"    r(theta) mirt {np.corrcoef(res.theta_estimates, truth.theta)[0, 1]:.3f} vs SAEM "
          f"{np.corrcoef(cal.theta_, truth.theta)[0, 1]:.3f};  r(tau) mirt "
          f"{np.corrcoef(res.tau_estimates, truth.tau)[0, 1]:.3f} vs SAEM {np.corrcoef(cal.tau_, truth.tau)[0, 1]:.3f}")
    print(f"    r(a) mirt {np.corrcoef(mod.discrimination, p.a)[0, 1]:.3f} vs SAEM {np.corrcoef(cal.a_, p.a)[0, 1]:.3f};"
          f"  r(difficulty) mirt {np.corrcoef(mod.difficulty, diff_true)[0, 1]:.3f} vs SAEM "
          f"{np.corrcoef(ours_diff, diff_true)[0, 1]:.3f}")
    print(f"    rho (after standardising) mirt {rho:+.3f} vs SAEM {cal.rho_:+.3f} (truth {p.rho:+.3f})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sim", default="500x500", help="simulated shape NxJ (default 500x500)")
    ap.add_argument("--seeds", type=int, default=1, help="number of simulated seeds (default 1)")
    ap.add_argument("--no-real", action="store_true", help="skip the MATH500 fits")
    ap.add_argument("--peer", action="store_true", help="also fit the simulated data with mirt's Gibbs sampler")
    ap.add_argument("--table-only", action="store_true", help="only issue 33's MATH500 rows")
    ap.add_argument("--no-table", action="store_true", help="skip issue 33's MATH500 rows")
    ap.add_argument("--no-check", action="store_true", help="issue 33's rows without the default held-out checks")
    ap.add_argument("--repeat", type=int, default=3, help="fits per timing in issue 33's rows (median)")
    args = ap.parse_args(argv)
    n, j = (int(x) for x in args.sim.lower().split("x"))
    print(f"# machine: {os.cpu_count()} logical CPUs; load average {os.getloadavg()[0]:.1f} at start")
    warm_up()
    if not args.no_table:
        issue33_rows(0, args.repeat, not args.no_check)
    if args.table_only:
        print(f"# load average {os.getloadavg()[0]:.1f} at end")
        return 0
    if not args.no_real:
        real_math500(seed=0)
    simulated(n, j, range(args.seeds), args.peer)
    print(f"# load average {os.getloadavg()[0]:.1f} at end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
