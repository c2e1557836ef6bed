"""cBMM at leaderboard scale, side by side with scipy's L-BFGS-B on the same objective (issue 3).

    python benchmarks/cbmm_scale.py                   # the five shapes + MATH500 gap
    python benchmarks/cbmm_scale.py --shapes 1000x1000 2211x541 --repeat 3
    python benchmarks/cbmm_scale.py --huge            # + 11,785 x 36,259 (cBMM only; ~0.5 GB int8)
    python benchmarks/cbmm_scale.py --peers           # + mirt / girth (pip-installed on demand)
    python benchmarks/cbmm_scale.py --peers --pyirt-python /tmp/pyirt-venv/bin/python   # + py-irt

Design (seed 001): theta ~ N(0,1), a ~ U(0.5,1), b ~ N(0, 0.5^2), complete data, temperature 1.
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
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
MATH500_LBFGS_OPTIMUM = 24432.61  # shared/data/reference/cbmm_math500/README.md


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
    acc = DATA / "lart" / "accuracy_math500.csv"
    ref = DATA / "reference" / "cbmm_math500" / "lbfgs_math500_theta.csv"
    if not acc.exists() or not ref.exists():
        print(f"\nMATH500: data not found under {DATA}; skipped")
        return
    data = ResponseData.from_wide_csv(acc)
    llms = [line.split(",")[0] for line in ref.read_text().splitlines()[1:]]
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
    args = p.parse_args(argv)

    import numba

    if args.threading_layer != "default":
        numba.config.THREADING_LAYER = args.threading_layer

    CBMMCalibrator(progress=False).fit(simulate(300, 200, 0)[0])
    print(f"numba threads {numba.get_num_threads()} ({numba.threading_layer()} layer); python {sys.version.split()[0]}; numpy {np.__version__}; "
          f"cBMM tol {args.tol:g}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    warm, _, _ = simulate(1500, 800, 0)  # > the serial threshold: loads the parallel kernels too
    CBMMCalibrator(progress=False).fit(warm)  # load the compiled kernels (JIT cache) before timing
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
