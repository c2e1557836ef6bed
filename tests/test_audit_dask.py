"""Audits on Dask distributed (issue 16): same results as one process, worker deaths, resume, CLI.

One LocalCluster (2 worker processes, 1 thread each) is shared by the module; problems are tiny
(30-item banks, a few records) so that the cost is the cluster's start and the workers' one-time
numba compiles.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

distributed = pytest.importorskip("distributed", reason="the Dask backend needs the [distributed] extra")

from calibration.audit import load_results, recovery_audit, replay_audit  # noqa: E402
from calibration.audit.methods import fit_cbmm  # noqa: E402
from calibration.audit.store import ResultStore  # noqa: E402
from calibration.data import ResponseData  # noqa: E402
from calibration.simulate import draw_item_params  # noqa: E402
from catengine import ItemBank  # noqa: E402

# the workers receive this module's fit functions by value (they need not import the tests)
import cloudpickle  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])

TIMING = ["runtime_s", "cpu_s", "wall_s"]
ROOT = Path(__file__).resolve().parents[1]


def _strip(ds):
    return ds.drop_vars([v for v in TIMING if v in ds]).drop_attrs()


def _bank(n_items=30, seed=1):
    p = draw_item_params("2pl", n_items, rng=seed)
    return ItemBank.from_params("2pl", [f"i{k:03d}" for k in range(n_items)], bank_id="dask_test", a=p.a, b=p.b)


def _responses(seed=2, n_llms=24, n_items=60):
    g = np.random.default_rng(seed)
    theta = g.normal(0, 1, n_llms)
    a, b = g.uniform(0.8, 2.0, n_items), g.normal(0, 1, n_items)
    z = a * theta[:, None] + b
    return ResponseData.from_arrays((g.random(z.shape) < 1 / (1 + np.exp(-z))).astype(np.int8))


def fit_fragile(data, rng, **options):
    """cBMM, except that it raises on the 60-subject samples (a record stored as failed)."""
    if data.n_subjects == 60:
        raise ValueError("fragile method: refuses 60 subjects")
    return fit_cbmm(data, rng, **options)


def fit_killing_once(data, rng, *, kill_marker, **options):
    """cBMM; the first call that sees 60 subjects kills its own worker process (SIGKILL)."""
    if data.n_subjects == 60 and not os.path.exists(kill_marker):
        Path(kill_marker).write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return fit_cbmm(data, rng, **options)


RECOVERY = dict(n_subjects=[30, 60], replications=2, rng=11, progress=False)


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None,
                                  silence_logs=logging.ERROR) as cluster, distributed.Client(cluster) as c:
        # the workers compile cBMM while this process computes the reference (keep the futures alive)
        warm = [c.submit(_compile_cbmm, workers=[w], pure=False) for w in c.scheduler_info()["workers"]]
        yield c
        del warm


def _compile_cbmm():
    from calibration.simulate import simulate_responses

    p = draw_item_params("2pl", 10, rng=0)
    fit_cbmm(simulate_responses(p, np.linspace(-1, 1, 20), rng=0), np.random.default_rng(0))


@pytest.fixture(scope="module")
def reference():
    """The one-process recovery audit (cbmm and a method failing on one sample size)."""
    return recovery_audit(_bank(), method=["cbmm", ("fragile", fit_fragile)], n_workers=1, **RECOVERY)


@pytest.mark.slow
def test_recovery_audit_on_dask_equals_one_process(client, reference):
    ds = recovery_audit(_bank(), method=["cbmm", ("fragile", fit_fragile)], scheduler=client, **RECOVERY)
    xr.testing.assert_identical(_strip(ds), _strip(reference))
    fragile = ds.sel({"method": "fragile"})
    # the raising records are stored as failed with their error, the others computed
    assert fragile["failed"].sel(n_subjects=60).values.ravel().tolist() == [1, 1]
    assert all("refuses 60 subjects" in str(e) for e in fragile["error"].sel(n_subjects=60).values.ravel())
    assert fragile["failed"].sel(n_subjects=30).values.ravel().tolist() == [0, 0]
    assert bool(ds["done"].all())


@pytest.mark.slow
def test_replay_audit_on_dask_equals_one_process(client):
    kw = dict(method="cbmm", folds=3, test_lengths=(6, 12), selector=("mfi", "random"), rng=4, progress=False)
    one = replay_audit(_responses(), n_workers=1, **kw)
    ds = replay_audit(_responses(), scheduler=client, **kw)
    xr.testing.assert_identical(_strip(ds), _strip(one))
    assert int(ds["failed"].sum()) == 0 and int(ds["n_llms"].sum()) == 24


def test_interrupted_client_resumes_without_recomputing(client, reference, tmp_path, monkeypatch):
    out = tmp_path / "audit"
    kw = dict(method=["cbmm", ("fragile", fit_fragile)], out=out, **RECOVERY)
    write = ResultStore.write
    written = []

    def interrupt_on_third(self, key, record):
        if len(written) == 2:
            raise KeyboardInterrupt  # Ctrl-C while the client streams results in
        written.append(dict(key))
        return write(self, key, record)

    monkeypatch.setattr(ResultStore, "write", interrupt_on_third)
    with pytest.raises(KeyboardInterrupt):
        recovery_audit(_bank(), scheduler=client, **kw)
    monkeypatch.setattr(ResultStore, "write", write)
    first = {p.name: p.stat().st_mtime_ns for p in (out / "records").glob("*.nc")}
    assert len(first) == 2 and int(load_results(out)["done"].sum()) == 2

    resumed = []

    def spy(self, key, record):
        resumed.append(dict(key))
        return write(self, key, record)

    monkeypatch.setattr(ResultStore, "write", spy)
    # the same audit again, this time through the scheduler's address (another client)
    ds = recovery_audit(_bank(), scheduler=client.scheduler.address, **kw)
    xr.testing.assert_identical(_strip(ds), _strip(reference))
    # only the missing records ran, and the failed ones among the first two (a rerun retries a failure:
    # fit_fragile refuses 60 subjects, so it fails again and is stored as failed again)
    failed = [k for k in written if k["method"] == "fragile" and k["n_subjects"] == 60]
    succeeded = [k for k in written if k not in failed]
    assert len(resumed) == 6 + len(failed) and not any(k in succeeded for k in resumed)
    assert all(k in resumed for k in failed)
    kept = {name: t for name, t in first.items() if not name.endswith(".failed.nc")}
    assert {p.name: p.stat().st_mtime_ns for p in (out / "records").glob("*.nc") if p.name in kept} == kept


def test_a_killed_worker_is_survived(client, reference, tmp_path):
    marker = tmp_path / "killed"
    out = tmp_path / "audit"
    ds = recovery_audit(_bank(), method=[("cbmm", fit_killing_once)], method_options={"cbmm": {"kill_marker": str(marker)}},
                        scheduler=client, out=out, **RECOVERY)
    assert marker.exists()  # a worker process did die mid-audit
    xr.testing.assert_identical(_strip(ds), _strip(reference.sel({"method": ["cbmm"]})))
    assert len(list((out / "records").glob("*.nc"))) == 4  # each record once
    assert not list((out / "records").glob(".tmp-*"))
    client.wait_for_workers(2, timeout=60)  # the nanny restarted the killed worker


@pytest.mark.slow
def test_cli_scheduler_local_writes_what_the_local_runner_writes(tmp_path, capsys):
    from catengine import write_item_bank

    from calibration.cli import main

    bank_path = write_item_bank(_bank(), tmp_path / "bank")
    # the CAT audit: catengine's kernels are cached, so the fresh workers start computing at once
    argv = ["audit", "--kind", "cat", "--bank", str(bank_path), "--simulees", "20", "--test-lengths", "5,10",
            "--reps", "2", "--seed", "3", "--no-progress"]
    assert main([*argv, "--workers", "1", "--out", str(tmp_path / "pool")]) == 0
    assert main([*argv, "--scheduler", "local", "--workers", "2", "--out", str(tmp_path / "dask")]) == 0
    capsys.readouterr()

    def files(root):
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())

    assert files(tmp_path / "dask") == files(tmp_path / "pool")
    assert "cat_report.html" in files(tmp_path / "pool") and len(files(tmp_path / "pool")) == 4 + 5  # records, manifest, results, summary, report x2
    for name in ("cat_results.nc", "cat_summary.nc"):
        with xr.open_dataset(tmp_path / "pool" / name) as a, xr.open_dataset(tmp_path / "dask" / name) as b:
            if "statistic" in a.dims:  # the summary of the timings differs, the rest must not
                a, b = a.drop_vars([v for v in TIMING if v in a]), b.drop_vars([v for v in TIMING if v in b])
            xr.testing.assert_identical(_strip(a.load()), _strip(b.load()))
            assert a.attrs["config"] == b.attrs["config"]
    assert (tmp_path / "dask" / "audit.json").read_text() == (tmp_path / "pool" / "audit.json").read_text()


def test_bad_scheduler_is_named(tmp_path):
    with pytest.raises(ValueError, match="neither 'local', an address"):
        recovery_audit(_bank(), [30], replications=1, rng=1, scheduler=str(tmp_path / "no-such-file"), progress=False)
    with pytest.raises(TypeError, match="scheduler must be"):
        recovery_audit(_bank(), [30], replications=1, rng=1, scheduler=3, progress=False)


def test_core_calibration_does_not_import_dask():
    # importing calibration imports no dask; running the local runner imports no distributed
    # (xarray may import dask itself when it is installed: not ours to prevent)
    code = (
        "import sys\n"
        "import calibration, calibration.audit, calibration.cli, calibration.cli.audit, calibration.cli.study\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed'))\n"
        "assert not bad, bad\n"
        "import xarray as xr\n"
        "from calibration.audit.runner import run_tasks\n"
        "from calibration.audit.store import MemoryStore\n"
        "layout = {'kind': 'x', 'cell_dims': {}, 'record_dims': {}, 'replications': 2}\n"
        "store = MemoryStore(layout, {})\n"
        "counts = run_tasks([({'replication': r}, r) for r in range(2)], lambda r: xr.Dataset({'x': ((), float(r))}),\n"
        "                   store, n_workers=1, progress=False)\n"
        "assert counts['ran'] == 2 and store.load()['x'].values.tolist() == [0.0, 1.0]\n"
        "assert 'distributed' not in sys.modules\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT, timeout=300)


def test_dashboard_link_only_when_the_scheduler_serves_one(client):
    from calibration.audit.dask_backend import dashboard_link

    class Scheduler:
        def __init__(self, services, bokeh):
            self.services, self.bokeh, self.dashboard_link = services, bokeh, "http://10.0.0.1:8787/status"

        def scheduler_info(self):
            return {"services": self.services}

        def run_on_scheduler(self, fn):
            return self.bokeh

    assert dashboard_link(Scheduler({"dashboard": 8787}, bokeh=True)) == "http://10.0.0.1:8787/status"
    assert dashboard_link(Scheduler({"dashboard": 8787}, bokeh=False)) is None  # the port only says "needs bokeh"
    assert dashboard_link(Scheduler({}, bokeh=True)) is None
    assert dashboard_link(client) is None  # the test cluster runs without a dashboard
