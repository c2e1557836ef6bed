"""The on-disk cache of compiled kernels (``catengine.numba_cache``): what one process compiles,
another loads and runs with the same bits (the parallel kernels included); processes filling one
cache at once neither corrupt it nor compile the same function twice; an entry goes stale when any
source its kernel reaches changes."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: cBMM's fused sweep (parallel, fastmath reductions, dense columns flagged: the case whose
#: re-optimised loop LLVM reassociates differently), its serial twin, and whether the process
#: compiled or loaded the parallel one: printed as JSON
_PARALLEL_PROBE = textwrap.dedent("""
    import hashlib, json, numba
    import numpy as np
    from calibration.methods.cbmm import _kernels as K

    def run(kernel):
        rng = np.random.default_rng(33)
        n, j, n_chunks = 300, 41, 3
        c = (rng.random((n, j)) < 0.5).astype(np.int8)
        c[rng.random((n, j)) < 0.3] = -1
        theta, a, b = rng.normal(size=n) * 1.5, rng.uniform(0, 2, j), rng.normal(size=j) * 2
        rows = np.sort(rng.choice(n, size=n - 9, replace=False))
        roww = np.zeros(n)
        roww[rows] = 1.0
        cols = np.sort(rng.choice(j, size=j - 5, replace=False)).astype(np.int64)
        dense = np.r_[5:20, 22, 27:30, 33]  # runs and single columns on the dense path
        c[np.ix_(rows, dense)] = np.abs(c[np.ix_(rows, dense)])
        full = (c[rows] >= 0).all(axis=0).astype(np.uint8)
        bounds = (np.arange(n_chunks + 1, dtype=np.int64) * cols.size) // n_chunks
        out = [np.full(j, np.nan) for _ in range(9)]
        a2, b2, t2 = a + 10.0, b + 10.0, theta + 10.0
        bufs = [np.full((n_chunks, 2, n), np.nan), np.full((n_chunks, n), np.nan), np.full((n_chunks, n), np.nan),
                np.full((n_chunks, 2), np.nan)]
        ct = np.ascontiguousarray(c.T)
        kernel(ct, theta, roww, a, b, cols, full, bounds, True, 4.0, 0.9, 0.5, -0.2, 4.0, True, *out, a2, b2, t2, *bufs)
        return hashlib.sha256(b"".join(x.tobytes() for x in [*out, a2, b2, t2])).hexdigest()

    numba.set_num_threads(2)
    print(json.dumps({"parallel": run(K.sweep_r1.parallel), "serial": run(K.sweep_r1.serial),
                      "parallel_hits": sum(K.sweep_r1.parallel.stats.cache_hits.values()),
                      "parallel_misses": sum(K.sweep_r1.parallel.stats.cache_misses.values())}))
""")


def _run(code: str, cache: Path, timeout: float = 600) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), NUMBA_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_loaded_parallel_kernel_runs_the_bits_the_compiling_process_ran(tmp_path):
    """Numba's plain cache would hand the loading process the kernel's re-optimised copy of the
    prange loop (a few ulps off under fastmath); this cache loads the loop as it was compiled."""
    first = _run(_PARALLEL_PROBE, tmp_path)
    second = _run(_PARALLEL_PROBE, tmp_path)
    assert first["parallel_misses"] == 1 and second["parallel_hits"] == 1 and second["parallel_misses"] == 0
    assert first["parallel"] == first["serial"]
    assert second["parallel"] == first["parallel"] == second["serial"]


_SIGNATURE_PROBE = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    from calibration.methods.cbmm import _kernels as K

    dtype = np.dtype(sys.argv[1])
    while time.time() < float(sys.argv[2]):  # start together
        time.sleep(0.005)
    x = -np.linspace(0.0, 30.0, 1001).astype(dtype)
    got = K.exp_neg_array(x)
    ok = bool(np.allclose(got, np.exp(x.astype(np.float64)), rtol=1e-6 if dtype == np.float32 else 1e-15, atol=0))
    print(json.dumps({"ok": ok, "hits": sum(K.exp_neg_array.stats.cache_hits.values()),
                      "misses": sum(K.exp_neg_array.stats.cache_misses.values())}))
""")


def _start_together(cache: Path, dtypes) -> list[dict]:
    import time

    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    start = time.time() + 3.0
    procs = [subprocess.Popen([sys.executable, "-c", _SIGNATURE_PROBE, d, str(start)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for d in dtypes]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    return [json.loads(o.strip().splitlines()[-1]) for o, _ in outs]


@pytest.mark.slow
def test_processes_filling_one_cache_at_once(tmp_path):
    # two signatures of one function at once: both stored (numba alone could give both data file 1)
    both = _start_together(tmp_path, ["float64", "float32"])
    assert all(r["ok"] for r in both)
    again = _start_together(tmp_path, ["float64", "float32"])
    assert all(r["ok"] and r["hits"] == 1 and r["misses"] == 0 for r in again)
    # one signature at once, into a fresh cache: one process compiles it, the other waits and loads it
    same = _start_together(tmp_path / "fresh", ["float64", "float64"])
    assert all(r["ok"] for r in same)
    assert sorted(r["misses"] for r in same) == [0, 1]


def test_an_entry_is_stale_once_any_source_its_kernel_reaches_changes(tmp_path, monkeypatch):
    from catengine.numba_cache import cache_stamp

    pkg = tmp_path / "stamp_probe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helper.py").write_text(textwrap.dedent("""
        from catengine.numba_cache import njit
        SCALE = 2.0

        @njit(cache=True)
        def helper(x):
            return SCALE * x
    """))
    (pkg / "kernel.py").write_text(textwrap.dedent("""
        from catengine.numba_cache import njit
        from stamp_probe.helper import helper

        @njit(cache=True)
        def kernel(x):
            return helper(x) + 1.0
    """))
    monkeypatch.syspath_prepend(str(tmp_path))

    def stamp():
        for name in ("stamp_probe.kernel", "stamp_probe.helper"):
            sys.modules.pop(name, None)
        return cache_stamp(importlib.import_module("stamp_probe.kernel").kernel)

    before = stamp()
    assert stamp() == before  # deterministic
    helper = pkg / "helper.py"
    helper.write_text(helper.read_text().replace("SCALE * x", "SCALE * x * 1.0"))
    edited = stamp()
    assert edited != before  # the callee's module changed, the kernel's did not
    helper.write_text(helper.read_text().replace("SCALE = 2.0", "SCALE = 3.0"))
    assert stamp() != edited
    for name in ("stamp_probe.kernel", "stamp_probe.helper", "stamp_probe"):
        sys.modules.pop(name, None)
