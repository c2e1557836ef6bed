"""The first run on a machine: a new process from ``import`` to a fitted cBMM bank and to a first
adaptive step, cold (empty numba cache) and warm (a second process), beside the warm fit in the
same process and beside the ``mirt`` package's EM fit of the same matrix.

    python benchmarks/first_run.py                          # 2211x1324 and 5000x3000, the step, mirt if installed
    python benchmarks/first_run.py --shapes 2211x1324 --warm 3

Design: the 2PL matrices of ``benchmarks/cbmm_scale.py`` (Qu et al. 2026: theta ~ N(0, 1),
a ~ U(0.5, 1), b ~ N(0, 0.5^2), complete data), simulated here and handed to the timed processes
as ``.npy`` files. Each timed process starts with an empty or a filled numba cache
(``NUMBA_CACHE_DIR`` pointed at a fresh temporary folder per case, removed at the end):

* **cold**: the first process on that cache: it compiles every kernel it needs and stores it;
* **warm**: a later process on the same cache (``--warm`` of them; the median is printed): it
  loads the kernels;
* **same process, next fit**: inside the last warm process, ``--repeat`` further fits (median):
  what a fit costs once everything is loaded, the figure the other benchmarks quote.

A process reports ``import`` (``from calibration import CBMMCalibrator, ResponseData``),
``fit`` (``CBMMCalibrator(progress=False).fit(data)``, the defaults) and their sum; the
``process`` column is the wall time from starting the interpreter to its exit, as a user's shell
sees it. The adaptive step: ``import catengine``, open the shipped ``math500_2pl`` bank, a
``CATSession`` with the defaults, its first item, one answer and the next item.

``mirt`` (the Python package, Rust EM; an optional peer, never a dependency: ``pip install mirt``):
``mirt.fit_mirt(responses, model="2PL", n_quadpts=61)`` of the same matrix in a process of its own,
import to fitted parameters. Without it the row says "not installed". Ratios are to the
warm in-process fit of the same matrix and, for mirt, mirt over the warm process. Timings are
wall-clock on whatever machine runs this; the load average is printed, quote it with them.
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()  # a timed child measures from here, before any import

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
SHAPES = ["2211x1324", "5000x3000"]
STEP_BANK = "math500_2pl"


# ------------------------------------------------------------------------------ timed children
def _child_fit(path: str, repeat: int) -> dict:
    import numpy as np

    from calibration import CBMMCalibrator, ResponseData

    t_import = time.perf_counter()
    data = ResponseData.from_arrays(np.load(path))
    t_data = time.perf_counter()
    CBMMCalibrator(progress=False).fit(data)
    t_fit = time.perf_counter()
    again = []
    for _ in range(repeat):
        t = time.perf_counter()
        CBMMCalibrator(progress=False).fit(data)
        again.append(time.perf_counter() - t)
    return {"import": t_import - _T0, "fit": t_fit - t_data, "total": (t_import - _T0) + (t_fit - t_data),
            "again": again}


def _child_step(bank_id: str) -> dict:
    import catengine
    from catengine.itembank.shipped import shipped_bank_directory

    t_import = time.perf_counter()
    bank = catengine.open_item_bank(shipped_bank_directory(bank_id))
    session = catengine.CATSession(bank)
    first = session.next_item()
    session.record(first, 1)
    session.next_item()
    t_step = time.perf_counter()
    return {"import": t_import - _T0, "fit": t_step - t_import, "total": t_step - _T0, "again": []}


def _child_mirt(path: str) -> dict:
    import numpy as np

    import mirt

    t_import = time.perf_counter()
    resp = np.load(path).astype(np.int64)
    t_data = time.perf_counter()
    mirt.fit_mirt(resp, model="2PL", n_quadpts=61, compute_standard_errors=False)
    t_fit = time.perf_counter()
    return {"import": t_import - _T0, "fit": t_fit - t_data, "total": (t_import - _T0) + (t_fit - t_data),
            "again": []}


# ------------------------------------------------------------------------------ the parent
def _run(kind: str, arg: str, cache: Path, repeat: int = 0) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    t = time.perf_counter()
    out = subprocess.run([sys.executable, str(HERE), "--child", kind, arg, "--repeat", str(repeat)], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    wall = time.perf_counter() - t
    if out.returncode != 0:
        raise SystemExit(f"the timed {kind} process failed:\n{out.stderr[-3000:]}")
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    rec["process"] = wall
    return rec


def _simulate(shape: str, seed: int, folder: Path) -> Path:
    import numpy as np

    from calibration.simulate import draw_abilities, draw_item_params, simulate_responses

    n, j = (int(v) for v in shape.lower().split("x"))
    params = draw_item_params("2pl", j, rng=seed)
    theta = draw_abilities(n, rng=seed + 1)
    data = simulate_responses(params, theta, rng=seed + 2)
    path = folder / f"responses_{n}x{j}.npy"
    np.save(path, np.asarray(data.correct, dtype=np.int8))
    return path


def _have_mirt() -> bool:
    import importlib.util

    return importlib.util.find_spec("mirt") is not None


def _row(label: str, case: str, rec: dict | None, base: float | None, note: str = "") -> str:
    if rec is None:
        return f"{label:17s} {case:30s} {note}"
    ratio = f"{rec['total'] / base:9.1f}x" if base else f"{'':>10s}"
    proc = f"{rec['process']:8.2f}" if "process" in rec else f"{'-':>8s}"
    imp = f"{rec['import']:7.2f}" if rec.get("import") is not None else f"{'-':>7s}"
    return f"{label:17s} {case:30s} {imp} {rec['fit']:8.3f} {rec['total']:11.3f} {proc} {ratio} {note}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", nargs="+", default=SHAPES, help="N x J of the simulated 2PL matrices")
    p.add_argument("--warm", type=int, default=2, help="warm processes per case (median printed)")
    p.add_argument("--repeat", type=int, default=3, help="further fits inside the last warm process (median printed)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-mirt", action="store_true", help="skip mirt even if it is installed")
    p.add_argument("--child", nargs=2, metavar=("KIND", "ARG"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.child:
        kind, arg = args.child
        rec = {"fit": _child_fit, "step": _child_step, "mirt": _child_mirt}[kind](
            *((arg, args.repeat) if kind == "fit" else (arg,)))
        print(json.dumps(rec))
        return 0

    import numba

    print(f"first run: {os.cpu_count()} CPUs, numba {numba.__version__} ({numba.config.NUMBA_NUM_THREADS} threads), "
          f"python {sys.version.split()[0]}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    header = (f"{'':17s} {'':30s} {'import':>7s} {'fit/step':>8s} {'import->fit':>11s} {'process':>8s} "
              f"{'x warm fit':>10s}")
    print(header)
    mirt_ok = _have_mirt() and not args.no_mirt
    with tempfile.TemporaryDirectory(prefix="first-run-") as tmp:
        tmp = Path(tmp)
        for shape in args.shapes:
            path = _simulate(shape, args.seed, tmp)
            cache = tmp / f"numba-{shape}"
            cache.mkdir()
            cold = _run("fit", str(path), cache)
            warm = [_run("fit", str(path), cache, repeat=args.repeat if k == args.warm - 1 else 0)
                    for k in range(args.warm)]
            inproc = statistics.median(warm[-1]["again"]) if warm[-1]["again"] else None
            warm_med = {key: statistics.median(w[key] for w in warm) for key in ("import", "fit", "total", "process")}
            label = shape.replace("x", " x ")
            print(_row(label, "cold process (empty cache)", cold, inproc))
            print(_row("", f"warm process (median of {args.warm})", warm_med, inproc))
            if inproc is not None:
                print(_row("", f"same process, next fit ({args.repeat})", {"import": None, "fit": inproc, "total": inproc},
                           inproc))
            if mirt_ok:
                m = _run("mirt", str(path), cache)
                print(_row("", "mirt EM, new process", m, inproc,
                           f"(mirt / cBMM warm process {m['total'] / warm_med['total']:.1f}x)"))
            else:
                print(_row("", "mirt EM", None, None, "not installed" if not args.no_mirt else "skipped (--no-mirt)"))
            shutil.rmtree(cache, ignore_errors=True)
            path.unlink()
        cache = tmp / "numba-step"
        cache.mkdir()
        cold = _run("step", STEP_BANK, cache)
        warm = [_run("step", STEP_BANK, cache) for _ in range(args.warm)]
        warm_med = {key: statistics.median(w[key] for w in warm) for key in ("import", "fit", "total", "process")}
        print(_row(f"step {STEP_BANK}", "cold process (empty cache)", cold, None))
        print(_row("", f"warm process (median of {args.warm})", warm_med, None))
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
