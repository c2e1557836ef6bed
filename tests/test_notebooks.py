"""The JupyterLab walkthroughs in notebooks/ run top to bottom, headless, without any error.

Each notebook is executed with nbclient in a fresh kernel of this interpreter (working directory
notebooks/, as in JupyterLab), and any cell error fails the test. A notebook is skipped, with the
reason, only while a library module it needs does not exist yet. The stored notebooks carry no
outputs (they are executed here, never committed executed).

The kernel runs with ``CATENGINE_NOTEBOOK_FAST=1`` (``FAST_PATH_ENV``): each notebook reads it in its
first cell and then runs every cell, the same calls in the same order, on a slice of its data (fewer
items and LLMs) or with fewer replications.
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"

# notebook -> library modules it needs (a notebook is skipped only while one of these is missing)
NOTEBOOKS = {
    "01_adaptive_evaluation.ipynb": ["catengine.session", "catengine.widgets.session_panel"],
    "02_calibrate_a_bank.ipynb": ["calibration.methods.lart.calibrator", "calibration.methods.cbmm.calibrator", "calibration.linking"],
    "03_trust_audit.ipynb": ["calibration.audit", "calibration.widgets.audit_dashboard"],
    "04_uncertainty.ipynb": ["calibration.methods.psn", "calibration.methods.psn.laplace"],
}

# the notebooks' fast path (read in their first cell); the browser test sets it for its kernel too
FAST_PATH_ENV = {"CATENGINE_NOTEBOOK_FAST": "1"}

# generous per-cell limit: a runaway cell fails instead of hanging CI (each notebook's whole budget is
# 3 minutes on a fresh install; they take well under one minute here)
CELL_TIMEOUT_S = 300


def _missing_modules(modules):
    missing = []
    for name in modules:
        try:
            if importlib.util.find_spec(name) is None:
                missing.append(name)
        except ModuleNotFoundError:
            missing.append(name)
    return missing


def test_every_notebook_is_listed():
    present = {p.name for p in NOTEBOOK_DIR.glob("*.ipynb")}
    assert present <= set(NOTEBOOKS), f"notebooks not covered by this test: {sorted(present - set(NOTEBOOKS))}"


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_notebook_is_stored_without_outputs(name):
    path = NOTEBOOK_DIR / name
    if not path.exists():
        pytest.skip(f"{name} is not written yet")
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [k for k, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, f"{name}: cells {dirty} carry outputs or execution counts; store notebooks cleared"
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_notebook_runs_top_to_bottom(name, tmp_path, monkeypatch):
    path = NOTEBOOK_DIR / name
    missing = _missing_modules(NOTEBOOKS[name])
    if missing:
        pytest.skip(f"{name} needs {', '.join(missing)}, which does not exist yet")
    assert path.exists(), f"{name} is missing although everything it needs exists"
    nb = nbformat.read(path, as_version=4)
    assert any("CATENGINE_NOTEBOOK_FAST" in c.source for c in nb.cells if c.cell_type == "code"), \
        f"{name} does not read the fast-path switch CATENGINE_NOTEBOOK_FAST"
    for key, value in FAST_PATH_ENV.items():  # the kernel inherits this process's environment
        monkeypatch.setenv(key, value)
    scratch = tmp_path / "tmp"  # the notebooks' scratch folders (tempfile.mkdtemp) go here, not in /tmp
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",  # jupyter_client starts "python" kernels with this interpreter
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
        allow_errors=False,
    )
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError (with the cell and traceback) on any error
    elapsed = time.perf_counter() - start
    errors = [
        (k, o.get("ename"), o.get("evalue"))
        for k, c in enumerate(nb.cells) if c.cell_type == "code"
        for o in c.get("outputs", []) if o.get("output_type") == "error"
    ]
    assert not errors, f"{name}: error outputs {errors}"
    # keep the executed copy beside the test's tmp dir for inspection when something looks off
    (tmp_path / name).write_text(json.dumps(nb), encoding="utf-8")
    print(f"{name}: executed in {elapsed:.1f} s")
