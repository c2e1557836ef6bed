"""cBMM at leaderboard scale, side by side with scipy's L-BFGS-B on the same objective (issue 3).

    python benchmarks/cbmm_scale.py                   # issue 33's table (kernels, fits, baselines) + the five shapes + MATH500
    python benchmarks/cbmm_scale.py --table-only      # only issue 33's table, every row beside its baseline
    python benchmarks/cbmm_scale.py --shapes 1000x1000 2211x541 --repeat 3
    python benchmarks/cbmm_scale.py --huge            # + 11,785 x 36,259 (cBMM only; ~0.5 GB int8)
    python benchmarks/cbmm_scale.py --peers           # + mirt / girth (pip-installed on demand)
    python benchmarks/cbmm_scale.py --peers --pyirt-python /tmp/pyirt-venv/bin/python   # + py-irt

Design (Qu et al. 2026): theta ~ N(0,1), a ~ U(0.5,1), b ~ N(0, 0.5^2), complete data, temperature 1.
For every shape:

* cBMM (``CBMMCalibrator()`` defaults: SVD start, SQUAREM, tol 1e-6) is timed after a warm-up fit
  that loads the compiled kernels (so JIT compilation is not counted). The time includes
  everything ``fit`` does (extreme-item scan, start, sweeps, standardisation, responses hash).
  Peak memory: a second fit under ``tracemalloc``; reported as bytes per cell (numba's own
  allocations are not traced, but inside the kernels they are only small per-row scratch
  arrays of rank-r fits; the int8 transposed copy is a numpy array and is traced).
* L-BFGS-B: ``scipy.optimize.minimize(method="L-BFGS-B")`` on the same joint negative
  log-likelihood (dense numpy, float64, analytic gradient, bounds a >= 0) from cBMM's own starting
  point, stopped (via the callback) at the first iterate whose loss is <= cBMM's final loss.
  Its time excludes building the float64 +-1 matrix it works on (one pass, done before timing).
* Both final losses are evaluated by the same numpy objective; Spearman correlations of theta,
  a, b with the truth; the ratio is L-BFGS-B time / cBMM time.

Issue 33's table (printed first): per shape 2211 x 1324 and 2211 x 12032, the cBMM fit with the
default empirical-Bayes prior and with ``prior="none"`` (joint ML; median of ``--repeat`` fits),
L-BFGS-B at cBMM's joint-ML loss (the baseline of the fit rows), the two streaming passes of a
two-pass sweep (``col_pass_r1`` with and without the loss, ``row_pass_r1``) and the fused one-pass
sweep that fits of >= 128 items run (``sweep_r1``, with and without the loss; priors on, the
problem built as a fit builds it) beside three measured baselines over the same int8 cells: a numba
parallel sum of the transposed matrix (the memory limit: GB/s of int8 read), a parallel sum of
sigmoid(theta_i a_j + b_j) over the observed cells by the kernels' own sigmoid (the compute floor:
the one exp and one division per cell that any pass needs), and the same sum in float32 with the
crudest rational exp ([2/2] Pade, relative error ~1e-5, too coarse for a fit: how far any pass
that evaluates a sigmoid per cell stays from the memory limit on this machine). Kernel timings interleave the candidates round-robin and report medians, so a
shared machine's load falls on all of them alike; the ratios are the figures to quote.

Timings are wall-clock on whatever machine runs this; state its load when quoting them. cBMM
runs single-threaded below 2.1 M cells (``calibration.methods.cbmm.calibrator._PARALLEL_MIN_CELLS``). On a busy
machine numba's default OpenMP layer makes every parallel region wait for descheduled workers;
``--threading-layer workqueue`` shows the difference. py-irt pins pandas < 3, so it is run in
its own interpreter (``--pyirt-python``), e.g. a venv made with
``pip install py-irt /opt/wheels/torch-*+cpu-*.whl``.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import math
import os
import subprocess
import sys
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
from scipy import optimize, special, stats

from calibration.methods.cbmm.calibrator import CBMMCalibrator
from calibration.data import ResponseData
from calibration.simulate import draw_abilities, draw_item_params, simulate_responses

SHAPES = ["2211x541", "2211x1324", "2211x5761", "2211x12032", "1000x1000"]
HUGE = "11785x36259"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _paths import REFERENCE, lart_files  # noqa: E402  (the shipped data/, gzip)

MATH500_LBFGS_OPTIMUM = 24432.61  # data/reference/cbmm_math500/SOURCE.md


def _shape(text: str) -> tuple[int, int]:
    n, j = text.lower().split("x")
    return int(n), int(j)


def simulate(n: int, j: int, seed: int):
    params = draw_item_params("2pl", j, rng=seed)
    theta = draw_abilities(n, rng=seed + 1)
    if n * j <= 60_000_000:
        data = simulate_responses(params, theta, rng=seed + 2)
    else:  # chunked, so the float probabilities never exist for the whole matrix
        gen = np.random.default_rng(seed + 2)
        correct = np.empty((n, j), dtype=np.int8)
        for i0 in range(0, n, 256):
            z = np.outer(theta[i0 : i0 + 256], params.a) + params.b
            correct[i0 : i0 + 256] = gen.random(z.shape) < special.expit(z)
        data = ResponseData.from_arrays(correct)
    return data, params, theta


class DenseObjective:
    """sum_observed log(1 + exp(-y (theta a + b))) and its gradient, plain numpy (L-BFGS-B side)."""

    def __init__(self, correct: np.ndarray, subjects=None, items=None):
        ym = np.where(correct == 1, 1.0, np.where(correct == 0, -1.0, 0.0))
        if subjects is not None:
            ym[~np.asarray(subjects, bool)] = 0.0
        if items is not None:
            ym[:, ~np.asarray(items, bool)] = 0.0
        self.ym = ym
        self.n, self.j = correct.shape
        self.n_off = int((ym == 0).sum())  # cells outside the objective contribute log 2 each below
        self.nfev = 0

    def __call__(self, z):
        self.nfev += 1
        n, j = self.n, self.j
        th, a, b = z[:n], z[n : n + j], z[n + j :]
        m = np.outer(th, a)
        m += b
        m *= self.ym  # m = y x (0 outside the objective)
        t = np.negative(m)
        loss = float(np.logaddexp(0.0, t, out=m).sum()) - self.n_off * math.log(2.0)
        special.expit(t, out=t)
        t *= self.ym  # y * sigmoid(-y x) = -d loss / d x
        grad = np.concatenate([-(t @ a), -(t.T @ th), -t.sum(axis=0)])
        return loss, grad


def run_lbfgsb(obj: DenseObjective, start: dict, target: float, time_limit: float):
    n, j = obj.n, obj.j
    z0 = np.concatenate([start["theta"], start["a"], start["b"]])
    bounds = [(None, None)] * n + [(0.0, None)] * j + [(None, None)] * j
    state = {"nit": 0, "reached": False, "fun": math.inf}
    t0 = time.perf_counter()

    def callback(intermediate_result):
        state["nit"] += 1
        state["fun"] = intermediate_result.fun
        if intermediate_result.fun <= target:
            state["reached"] = True
            raise StopIteration
        if time.perf_counter() - t0 > time_limit:
            raise StopIteration

    res = optimize.minimize(obj, z0, jac=True, method="L-BFGS-B", bounds=bounds, callback=callback,
                            options={"maxiter": 100_000, "maxfun": 200_000, "ftol": 0.0, "gtol": 0.0})
    elapsed = time.perf_counter() - t0
    return res, elapsed, state


def time_cbmm(data, repeat: int, tol: float):
    times, cpu = [], []
    cal = None
    for _ in range(repeat):
        gc.collect()
        cal = CBMMCalibrator(progress=False, tol=tol)
        t0, c0 = time.perf_counter(), time.process_time()
        cal.fit(data)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    CBMMCalibrator(progress=False, tol=tol).fit(data)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return cal, min(times), min(cpu), peak


def spearman(x, y):
    return float(stats.spearmanr(x, y)[0])


def bench_shape(n: int, j: int, args) -> dict:
    data, params, theta = simulate(n, j, args.seed)
    cal, t_cbmm, cpu_cbmm, peak = time_cbmm(data, args.repeat, args.tol)
    row = {
        "shape": f"{n}x{j}", "cells": n * j, "cbmm_s": t_cbmm, "cbmm_cpu_s": cpu_cbmm,
        "bytes_per_cell": peak / (n * j), "sweeps": cal.n_iter_, "rejected": cal.n_rejected_,
        "cbmm_loss_internal": cal.loss_,
        "cbmm_rho": (spearman(cal.theta_, theta), spearman(cal.a_, params.a), spearman(cal.b_, params.b)),
        "perfect": int(cal.perfect_items_.sum()), "extreme": int(cal.extreme_subjects_.sum()),
    }
    if args.no_lbfgs:
        return row
    obj = DenseObjective(data.correct, ~cal.extreme_subjects_, ~cal.perfect_items_)
    target = obj(np.concatenate([cal.raw_theta_, cal.raw_a_, cal.raw_b_]))[0]
    start_loss = obj(np.concatenate([cal.init_params_["theta"], cal.init_params_["a"], cal.init_params_["b"]]))[0]
    obj.nfev = 0
    res, t_lb, state = run_lbfgsb(obj, cal.init_params_, target, args.lbfgs_time_limit)
    th, a, b = res.x[:n], res.x[n : n + j], res.x[n + j :]
    sd = th[~cal.extreme_subjects_].std()
    row.update({
        "start_loss": start_loss, "cbmm_loss": target, "lbfgs_loss": float(state["fun"]), "lbfgs_s": t_lb,
        "lbfgs_nit": state["nit"], "lbfgs_nfev": obj.nfev, "reached": state["reached"],
        "ratio": t_lb / t_cbmm,
        "lbfgs_rho": (spearman(th, theta), spearman(a * sd, params.a), spearman(b + a * th.mean(), params.b)),
    })
    del obj
    gc.collect()
    return row


def print_row(r: dict) -> None:
    rc = " ".join(f"{v:.3f}" for v in r["cbmm_rho"])
    print(f"\n{r['shape']} ({r['cells'] / 1e6:.1f} M cells)", flush=True)
    print(f"  cBMM      {r['cbmm_s']:8.3f} s wall ({r['cbmm_cpu_s']:.2f} s CPU)  {r['sweeps']:4d} sweeps "
          f"({r['rejected']} rejected extrapolations)  peak {r['bytes_per_cell']:.3f} B/cell  "
          f"Spearman theta/a/b {rc}  perfect items {r['perfect']}, extreme subjects {r['extreme']}")
    if "lbfgs_s" in r:
        rl = " ".join(f"{v:.3f}" for v in r["lbfgs_rho"])
        reached = "reached cBMM's loss" if r["reached"] else "DID NOT reach cBMM's loss (time limit)"
        print(f"  L-BFGS-B  {r['lbfgs_s']:8.3f} s wall   {r['lbfgs_nit']:4d} iterations ({r['lbfgs_nfev']} evaluations)  "
              f"{reached}  Spearman theta/a/b {rl}")
        print(f"  losses    start {r['start_loss']:.6f}  cBMM {r['cbmm_loss']:.6f}  L-BFGS-B {r['lbfgs_loss']:.6f}  "
              f"(cBMM internal {r['cbmm_loss_internal']:.6f})")
        print(f"  ratio     L-BFGS-B / cBMM = {r['ratio']:.1f}x{'' if r['reached'] else ' (lower bound)'}")


def math500_gap(tol: float) -> None:
    import gzip

    acc = lart_files("math500")[0]
    with gzip.open(REFERENCE / "cbmm_math500" / "lbfgs_math500_theta.csv.gz", "rt") as fh:
        llms = [line.split(",")[0] for line in fh.read().splitlines()[1:]]
    data = ResponseData.from_wide_csv(acc)
    sub = data.subset(subjects=llms)
    cal = CBMMCalibrator(progress=False, tol=tol)
    t0 = time.perf_counter()
    cal.fit(sub)
    dt = time.perf_counter() - t0
    gap = (cal.loss_ - MATH500_LBFGS_OPTIMUM) / MATH500_LBFGS_OPTIMUM
    rho = spearman(cal.theta_, sub.correct.mean(axis=1))
    print(f"\nMATH500 140 x 500 (reference rows): cBMM loss {cal.loss_:.3f} vs long L-BFGS-B {MATH500_LBFGS_OPTIMUM} "
          f"-> relative gap {gap:.2e} (target <= 1e-3; the paper's public cBMM: 3.3e-3), {cal.n_iter_} sweeps, "
          f"{dt:.3f} s, {int(cal.perfect_items_.sum())} never-solved items set aside, Spearman(theta, accuracy) {rho:.3f}")


# ------------------------------------------------------------------------------------------ peers
def _ensure(module: str, pip_name: str, extra_args=()) -> bool:
    try:
        importlib.import_module(module)
        return True
    except ImportError:
        pass
    print(f"  installing {pip_name} into this environment for the benchmark only ...", flush=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", pip_name, *extra_args], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"  could not install {pip_name}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}")
        return False
    importlib.invalidate_caches()
    try:
        importlib.import_module(module)
        return True
    except ImportError as exc:
        print(f"  {pip_name} installed but does not import: {exc}")
        return False


_PYIRT_RUNNER = r"""
import json, sys, time
import numpy as np, pandas as pd
from py_irt.config import IrtConfig
from py_irt.dataset import Dataset
from py_irt.training import IrtModelTrainer
c = np.load(sys.argv[1]); epochs = int(sys.argv[2]); n, j = c.shape
cols = [f"i{k}" for k in range(j)]
df = pd.DataFrame(c.astype(int), columns=cols); df.insert(0, "subject", [f"s{i}" for i in range(n)])
t0 = time.perf_counter()
ds = Dataset.from_pandas(df, subject_column="subject", item_columns=cols)
tr = IrtModelTrainer(config=IrtConfig(model_type="2pl", epochs=epochs, log_every=10**9, seed=0), data_path=None,
                     dataset=ds, verbose=False)
tr.train(epochs=epochs, device="cpu")
p = tr.last_params
dt = time.perf_counter() - t0
th, a, d = np.empty(n), np.empty(j), np.empty(j)
th[[int(p["subject_ids"][k][1:]) for k in range(n)]] = p["ability"]
order = [int(p["item_ids"][k][1:]) for k in range(j)]
a[order] = p["disc"]; d[order] = p["diff"]
json.dump({"seconds": dt, "theta": th.tolist(), "a": a.tolist(), "diff": d.tolist()}, open(sys.argv[3], "w"))
"""


def _run_pyirt(python: str, resp, params, theta, epochs: int) -> None:
    """py-irt (SVI, its default 2PL with vague priors) in a separate interpreter: it pins pandas < 3."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "runner.py").write_text(_PYIRT_RUNNER)
        np.save(tmp / "c.npy", np.asarray(resp))
        proc = subprocess.run([python, str(tmp / "runner.py"), str(tmp / "c.npy"), str(epochs), str(tmp / "out.json")],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [str(proc.returncode)]
            print(f"  py-irt: failed ({tail[0]})")
            return
        out = json.loads((tmp / "out.json").read_text())
    a = np.asarray(out["a"])
    print(f"  py-irt SVI ({epochs} epochs) {out['seconds']:8.2f} s  Spearman theta/a/b {spearman(out['theta'], theta):.3f} "
          f"{spearman(a, params.a):.3f} {spearman(-a * np.asarray(out['diff']), params.b):.3f}  (time excludes interpreter start)",
          flush=True)


def peers(shapes, args) -> None:
    """girth (MML) and mirt (EM, 61 quadrature points) at the given shapes, with cBMM beside them."""
    print("\nPeers (installed into this environment for the benchmark only; never a dependency)")
    have_girth = _ensure("girth", "girth")
    have_mirt = _ensure("mirt", "mirt")
    for text in shapes:
        n, j = _shape(text)
        data, params, theta = simulate(n, j, args.seed)
        resp = np.asarray(data.correct)  # complete data in this design
        print(f" {text}:", flush=True)
        cal = CBMMCalibrator(progress=False)
        t0 = time.perf_counter()
        cal.fit(data)
        print(f"  cBMM                    {time.perf_counter() - t0:8.2f} s  Spearman theta/a/b "
              f"{spearman(cal.theta_, theta):.3f} {spearman(cal.a_, params.a):.3f} {spearman(cal.b_, params.b):.3f}", flush=True)
        if have_mirt:
            import mirt

            try:
                t0 = time.perf_counter()
                res = mirt.fit_mirt(resp.astype(np.int64), model="2PL", n_quadpts=61, compute_standard_errors=False)
                scores = mirt.fscores(res, resp.astype(np.int64), method="EAP")
                dt = time.perf_counter() - t0
                coef = res.coef()
                a = coef["discrimination"].to_numpy()
                intercept = -a * coef["difficulty"].to_numpy()  # mirt reports a (theta - difficulty)
                th = np.asarray(scores.theta).reshape(n, -1)[:, 0]
                print(f"  mirt EM (61 quad. pts)  {dt:8.2f} s  Spearman theta/a/b {spearman(th, theta):.3f} "
                      f"{spearman(a, params.a):.3f} {spearman(intercept, params.b):.3f}", flush=True)
            except Exception as exc:  # noqa: BLE001 - report whatever the peer does
                print(f"  mirt: could not run ({type(exc).__name__}: {exc})")
        if have_girth and n * j <= args.girth_max_cells:
            import girth

            try:
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    est = girth.twopl_mml(resp.T.astype(int))  # girth wants items x subjects
                    th = girth.ability_eap(resp.T.astype(int), est["Difficulty"], est["Discrimination"])
                dt = time.perf_counter() - t0
                a = est["Discrimination"]
                print(f"  girth twopl_mml + EAP   {dt:8.2f} s  Spearman theta/a/b {spearman(th, theta):.3f} "
                      f"{spearman(a, params.a):.3f} {spearman(-a * est['Difficulty'], params.b):.3f}", flush=True)
            except Exception as exc:  # noqa: BLE001
                print(f"  girth: could not run ({type(exc).__name__}: {exc})")
        elif have_girth:
            print(f"  girth: skipped above --girth-max-cells={args.girth_max_cells:g}")
        if args.pyirt_python:
            _run_pyirt(args.pyirt_python, resp, params, theta, args.pyirt_epochs)
        else:
            print("  py-irt: skipped (pass --pyirt-python PATH: a Python with py-irt and CPU torch installed)")


# ------------------------------------------------------------------------------ issue 33's table
def _stream_kernels():
    """The two baselines, compiled like the cBMM kernels (parallel, fastmath, no cache)."""
    from numba import njit, prange

    from calibration.methods.cbmm import _kernels as K

    @njit(parallel=True, **K._OPTS)
    def int8_sum(ct):  # the memory limit: every int8 cell read once
        tot = 0
        for j in prange(ct.shape[0]):
            s = 0
            for i in range(ct.shape[1]):
                s += ct[j, i]
            tot += s
        return tot

    @njit(parallel=True, **K._OPTS)
    def sigmoid_sum(ct, theta, a, b, out):  # the compute floor: the kernels' sigmoid (one exp, one division) per cell
        for j in prange(ct.shape[0]):
            aj = a[j]
            bj = b[j]
            z = 0.0
            for i in range(np.uint64(0), np.uint64(ct.shape[1])):
                w = 1.0 if ct[j, i] >= 0 else 0.0
                x = theta[i] * aj + bj
                q, eq = K._sigmoid_pair(x, 1.0)
                z += w * (q if x >= 0.0 else eq)
            out[j] = z

    from llvmlite import ir
    from numba.core import types
    from numba.extending import intrinsic

    @intrinsic
    def bits_to_f32(typingctx, x):
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], ir.FloatType())
        return types.float32(types.int32), codegen

    @intrinsic
    def f32_to_bits(typingctx, x):
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], ir.IntType(32))
        return types.int32(types.float32), codegen

    shifter = np.float32(12582912.0 + 127.0)  # 1.5 * 2^23 + the float32 exponent bias
    log2e, ln2_hi, ln2_lo = np.float32(1.4426950408889634), np.float32(0.693359375), np.float32(-2.12194440e-4)

    @njit(parallel=True, **K._OPTS)
    def sigmoid_sum_f32(ct, theta32, a, b, out):  # below any usable floor: float32 and a [2/2] Pade exp (~1e-5)
        for j in prange(ct.shape[0]):
            aj = np.float32(a[j])
            bj = np.float32(b[j])
            z = np.float32(0.0)
            for i in range(np.uint64(0), np.uint64(ct.shape[1])):
                x = theta32[i] * aj + bj
                y = max(-abs(x), np.float32(-80.0))
                kd = y * log2e + shifter
                k = kd - shifter
                f = y - k * ln2_hi - k * ln2_lo
                ev = np.float32(1.0 / 12.0) * f * f + np.float32(1.0)
                od = np.float32(0.5) * f
                num = bits_to_f32(f32_to_bits(kd) << 23) * (ev + od)
                eq = num / ((ev - od) + num)
                w = np.float32(1.0) if ct[j, i] >= 0 else np.float32(0.0)
                z += w * (np.float32(1.0) - eq if x >= np.float32(0.0) else eq)
            out[j] = z

    return int8_sum, sigmoid_sum, sigmoid_sum_f32


def _medians(fns: dict, repeat: int) -> dict:
    """Median wall time of each callable, run round-robin ``repeat`` times."""
    times = {k: [] for k in fns}
    for _ in range(repeat):
        for k, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    return {k: float(np.median(v)) for k, v in times.items()}


def kernel_rows(data, repeat: int) -> dict:
    """Per-cell cost of one column pass (with / without the loss) and one row pass at a converged
    default-prior fit, with the two baselines; plus the per-call average inside a whole fit."""
    import numba

    from calibration.methods.cbmm import _kernels as K
    from calibration.methods.cbmm.calibrator import _Problem, _find_extremes, _transposed

    int8_sum, sigmoid_sum, sigmoid_sum_f32 = _stream_kernels()
    c = np.ascontiguousarray(data.correct, dtype=np.int8)
    n, j = c.shape
    cal = CBMMCalibrator(progress=False).fit(data)
    ct = _transposed(c)
    row_on, col_on, counts, _ = _find_extremes(c, ct)
    prob = _Problem(c, row_on, col_on, 1, ct=ct, counts=counts)
    prob.prior = cal.prior_
    th, a, b = (np.ascontiguousarray(x, dtype=np.float64) for x in (cal.raw_theta_, cal.raw_a_, cal.raw_b_))
    an = np.where(prob.col_mask, a, 0.0)
    db = np.zeros(j)
    tn = th.copy()
    out = np.zeros(j)
    th32 = th.astype(np.float32)
    ridge = 0.0 if cal.prior_ is None else cal.prior_.theta_precision / 0.25
    threads = numba.get_num_threads()
    if c.size < 2_100_000:  # as the fit does (calibrator._PARALLEL_MIN_CELLS)
        numba.set_num_threads(1)
    pr = cal.prior_
    fused = getattr(prob, "n_chunks", 0) > 0 and pr is not None
    if fused:
        bufs = (np.zeros((prob.n_chunks, 2, n)), np.zeros((prob.n_chunks, n)), np.zeros((prob.n_chunks, n)),
                np.zeros((prob.n_chunks, 2)))
        a2, b2 = a.copy(), b.copy()

        def sweep(want_loss):  # the fused sweep kernel alone (what prob.sweep runs, without its copies)
            K.sweep_r1(prob.ct, th, prob.roww, a, b, prob.cols, prob.full_col, prob.bounds, True, pr.a_precision, pr.a_mean,
                       pr.b_precision, pr.b_mean, ridge, want_loss, prob.s0, prob.s1, prob.cnt, prob.st, prob.st2,
                       prob.lossj, prob.h0, prob.h1, prob.h2, a2, b2, tn, *bufs)
    try:
        fns = {
            "int8 sum": lambda: int8_sum(ct),
            "sigmoid sum": lambda: sigmoid_sum(ct, th, a, b, out),
            "f32 sigmoid sum": lambda: sigmoid_sum_f32(ct, th32, a, b, out),
            "col pass + loss": lambda: prob.col_pass(th, a, b, True),
            "col pass": lambda: prob.col_pass(th, a, b, False),
            "row pass": lambda: K.row_pass_r1(c, th, a, b, an, an * an, an * a, an * db, ridge, prob.rows, prob.full_row, tn,
                                              prob.rsum),
        }
        if fused:
            fns["sweep + loss"] = lambda: sweep(True)
            fns["sweep"] = lambda: sweep(False)
        for f in fns.values():
            f()
        med = _medians(fns, repeat)
    finally:
        numba.set_num_threads(threads)
    # per-call averages inside real fits (what a profiler of a fit sees: loss and no-loss column passes mixed)
    per_call = {}
    for prior in ("empirical-bayes", "none"):
        acc = {"col": [0.0, 0], "row": [0.0, 0], "sweep": [0.0, 0]}
        orig = {"col": K.col_pass_r1, "row": K.row_pass_r1, "sweep": getattr(K, "sweep_r1", None)}

        def timed(name):
            def f(*args):
                t0 = time.perf_counter()
                orig[name](*args)
                acc[name][0] += time.perf_counter() - t0
                acc[name][1] += 1
            return f

        K.col_pass_r1, K.row_pass_r1 = timed("col"), timed("row")
        if orig["sweep"] is not None:
            K.sweep_r1 = timed("sweep")
        try:
            CBMMCalibrator(progress=False, prior=prior).fit(data)
        finally:
            K.col_pass_r1, K.row_pass_r1 = orig["col"], orig["row"]
            if orig["sweep"] is not None:
                K.sweep_r1 = orig["sweep"]
        per_call[prior] = {k: (v[0] / max(v[1], 1), v[1]) for k, v in acc.items()}
    return {"cells": n * j, "med": med, "per_call": per_call}


def print_kernel_rows(shape: str, kr: dict) -> None:
    cells, med = kr["cells"], kr["med"]
    base, floor = med["int8 sum"], med["sigmoid sum"]
    row = med["row pass"]
    print(f"\n{shape}: one pass over the {cells / 1e6:.1f} M int8 cells (median of round-robin repeats)")
    print(f"  {'pass':<16} {'ms':>8} {'ns/cell':>8} {'GB/s':>7} {'x int8 sum':>11} {'x sigmoid sum':>14} {'x row pass':>11}")
    for k, t in med.items():
        print(f"  {k:<16} {t * 1e3:8.2f} {t / cells * 1e9:8.3f} {cells / t / 1e9:7.2f} {t / base:11.2f} {t / floor:14.2f} "
              f"{t / row:11.2f}")
    for prior, pc in kr["per_call"].items():
        (tc, nc), (tr, nr), (tw, nw) = pc["col"], pc["row"], pc["sweep"]
        ratio = f"{tc / tr:.2f}" if nc and nr else "-"
        print(f"  inside a fit (prior={prior}): col_pass_r1 {tc * 1e3:.2f} ms/call x {nc}, row_pass_r1 {tr * 1e3:.2f} ms/call "
              f"x {nr}, fused sweep_r1 {tw * 1e3:.2f} ms/call x {nw}: column / row per cell {ratio} (target <= 1.3)")


def _median_fit(data, repeat: int, **kw):
    times = []
    cal = None
    for _ in range(repeat):
        gc.collect()
        cal = CBMMCalibrator(progress=False, **kw)
        t0 = time.perf_counter()
        cal.fit(data)
        times.append(time.perf_counter() - t0)
    return cal, float(np.median(times))


def issue33_table(args) -> None:
    """Every workload row of issue 33 beside its baseline, as ratios, in one run."""
    print("\n== issue 33: cBMM fits, joint ML and default prior, beside L-BFGS-B at equal loss and the streaming passes ==")
    summary = []
    for text in args.table_shapes:
        n, j = _shape(text)
        data, _, _ = simulate(n, j, args.seed)
        cal_ml, t_ml = _median_fit(data, args.repeat, prior="none", tol=args.tol)
        cal_eb, t_eb = _median_fit(data, args.repeat, tol=args.tol)
        line = {"shape": text, "ml": t_ml, "eb": t_eb, "ml_sweeps": cal_ml.n_iter_, "eb_sweeps": cal_eb.n_iter_}
        if n * j <= args.table_lbfgs_max_cells:
            obj = DenseObjective(data.correct, ~cal_ml.extreme_subjects_, ~cal_ml.perfect_items_)
            target = obj(np.concatenate([cal_ml.raw_theta_, cal_ml.raw_a_, cal_ml.raw_b_]))[0]
            _, t_lb, state = run_lbfgsb(obj, cal_ml.init_params_, target, args.lbfgs_time_limit)
            line.update(lbfgs=t_lb, reached=state["reached"], target=target, lbfgs_loss=state["fun"])
            del obj
            gc.collect()
        kr = kernel_rows(data, max(args.kernel_repeat, 3))
        print_kernel_rows(text, kr)
        line["kernels"] = kr
        summary.append(line)
    print("\n  issue 33 rows (this run; targets from the issue, an idle 2-core machine):")
    for ln in summary:
        lb = ""
        if "lbfgs" in ln:
            lb = (f"; L-BFGS-B at equal loss {ln['lbfgs']:.2f} s -> {ln['lbfgs'] / ln['ml']:.1f}x"
                  f"{'' if ln['reached'] else ' (lower bound: time limit)'}")
        print(f"  cBMM {ln['shape']}, joint ML (prior='none'): {ln['ml']:.3f} s ({ln['ml_sweeps']} sweeps){lb}")
        print(f"  cBMM {ln['shape']}, default (empirical-Bayes prior): {ln['eb']:.3f} s ({ln['eb_sweeps']} sweeps), "
              f"{ln['eb'] / ln['ml']:.2f}x the joint-ML fit")
        med, cells = ln["kernels"]["med"], ln["kernels"]["cells"]
        pc = ln["kernels"]["per_call"]["empirical-bayes"]
        print(f"  cBMM {ln['shape']}, one column / one row pass: {med['col pass + loss'] * 1e3:.1f} (with loss) / "
              f"{med['col pass'] * 1e3:.1f} / {med['row pass'] * 1e3:.1f} ms = {med['col pass + loss'] / cells * 1e9:.3f} / "
              f"{med['col pass'] / cells * 1e9:.3f} / {med['row pass'] / cells * 1e9:.3f} ns per cell; int8 sum "
              f"{med['int8 sum'] / cells * 1e9:.3f} ns/cell ({cells / med['int8 sum'] / 1e9:.1f} GB/s), sigmoid sum "
              f"{med['sigmoid sum'] / cells * 1e9:.3f} ns/cell, float32 [2/2] sigmoid sum "
              f"{med['f32 sigmoid sum'] / cells * 1e9:.3f} ns/cell = {med['f32 sigmoid sum'] / med['int8 sum']:.1f}x the int8 sum; "
              f"per fit call column / row = "
              f"{pc['col'][0] / pc['row'][0] if pc['col'][1] and pc['row'][1] else float('nan'):.2f}")
        if "sweep" in med:
            print(f"  cBMM {ln['shape']}, one fused sweep (both blocks, one exp per cell): {med['sweep + loss'] * 1e3:.1f} "
                  f"(with loss) / {med['sweep'] * 1e3:.1f} ms = {med['sweep + loss'] / cells * 1e9:.3f} / "
                  f"{med['sweep'] / cells * 1e9:.3f} ns per cell, {med['sweep + loss'] / med['int8 sum']:.2f} / "
                  f"{med['sweep'] / med['int8 sum']:.2f}x the int8 sum; the two-pass sweep it replaces: "
                  f"{(med['col pass + loss'] + med['row pass']) * 1e3:.1f} / {(med['col pass'] + med['row pass']) * 1e3:.1f} ms")
    print("  targets: 2211x12032 <= 0.35 s default and <= 0.3 s joint ML; 2211x1324 joint ML >= 30x L-BFGS-B; "
          "column pass <= 1.3x the row pass per cell, both <= 3x the streaming baseline")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", nargs="*", default=SHAPES, help="N x J shapes, e.g. 2211x541 (none: skip)")
    p.add_argument("--repeat", type=int, default=3, help="cBMM timing repeats (best of)")
    p.add_argument("--seed", type=int, default=2024)
    p.add_argument("--tol", type=float, default=CBMMCalibrator().tol, help="cBMM tolerance (default: the calibrator's)")
    p.add_argument("--no-lbfgs", action="store_true", help="skip the L-BFGS-B side")
    p.add_argument("--lbfgs-time-limit", type=float, default=900.0, help="seconds per shape for L-BFGS-B")
    p.add_argument("--huge", action="store_true", help=f"also fit {HUGE} with cBMM (no L-BFGS-B there)")
    p.add_argument("--peers", action="store_true", help="also time girth/mirt at 1000x1000 and 2211x1324")
    p.add_argument("--peer-shapes", nargs="+", default=["500x200", "1000x1000", "2211x1324"])
    p.add_argument("--girth-max-cells", type=float, default=1.2e5, help="skip girth above this many cells (it takes ~1 min at 500x200)")
    p.add_argument("--pyirt-python", default=None, metavar="PATH",
                   help="a Python interpreter with py-irt + CPU torch (py-irt pins pandas < 3, so keep it in its own venv)")
    p.add_argument("--pyirt-epochs", type=int, default=2000, help="py-irt SVI epochs (its default: 2000)")
    p.add_argument("--threading-layer", choices=("default", "omp", "workqueue", "tbb"), default="default",
                   help="numba threading layer (set before the first parallel kernel runs)")
    p.add_argument("--no-math500", action="store_true")
    p.add_argument("--table-only", action="store_true", help="print issue 33's table only (no shapes, MATH500, peers)")
    p.add_argument("--no-table", action="store_true", help="skip issue 33's table")
    p.add_argument("--table-shapes", nargs="+", default=["2211x1324", "2211x12032"])
    p.add_argument("--table-lbfgs-max-cells", type=float, default=5e6,
                   help="run L-BFGS-B for the table's joint-ML rows up to this many cells")
    p.add_argument("--kernel-repeat", type=int, default=9, help="round-robin repeats of the pass timings (median)")
    args = p.parse_args(argv)

    import numba

    if args.threading_layer != "default":
        numba.config.THREADING_LAYER = args.threading_layer

    CBMMCalibrator(progress=False).fit(simulate(300, 200, 0)[0])
    print(f"numba threads {numba.get_num_threads()} ({numba.threading_layer()} layer); python {sys.version.split()[0]}; numpy {np.__version__}; "
          f"cBMM tol {args.tol:g}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    warm, _, _ = simulate(1500, 800, 0)  # > the serial threshold: loads the parallel kernels too
    CBMMCalibrator(progress=False).fit(warm)  # load the compiled kernels (JIT cache) before timing
    if not args.no_table:
        issue33_table(args)
    if args.table_only:
        return 0
    rows = []
    for text in args.shapes:
        n, j = _shape(text)
        row = bench_shape(n, j, args)
        rows.append(row)
        print_row(row)
    if args.huge:
        n, j = _shape(HUGE)
        saved = args.no_lbfgs, args.repeat
        args.no_lbfgs, args.repeat = True, 1
        row = bench_shape(n, j, args)
        args.no_lbfgs, args.repeat = saved
        print_row(row)
    if not args.no_math500:
        math500_gap(args.tol)
    if args.peers:
        peers(args.peer_shapes, args)
    if rows and not args.no_lbfgs:
        print("\nsummary: shape, cBMM s, L-BFGS-B s, ratio, sweeps, L-BFGS-B iterations, B/cell")
        for r in rows:
            print(f"  {r['shape']:>11} {r['cbmm_s']:8.3f} {r['lbfgs_s']:9.2f} {r['ratio']:7.1f}x{'' if r['reached'] else '+'} "
                  f"{r['sweeps']:5d} {r['lbfgs_nit']:6d} {r['bytes_per_cell']:7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
