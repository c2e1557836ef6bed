"""Layering: the online engine never pulls in the offline package or widgets; numerics stay I/O-free."""

import subprocess
import sys

import pytest


def _modules_after_import(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return set(out.split())


def _top_level(modules):
    return {m.split(".")[0] for m in modules}


def test_catengine_does_not_import_calibration_or_widgets():
    top = _top_level(_modules_after_import("import catengine"))
    assert "catengine" in top
    assert "calibration" not in top
    assert "ipywidgets" not in top


@pytest.mark.parametrize("package", ["catengine.models", "catengine.estimation", "catengine.selection", "catengine.stopping"])
def test_numerics_do_not_import_xarray(package):
    top = _top_level(_modules_after_import(f"import {package}"))
    assert "xarray" not in top and "netCDF4" not in top and "ipywidgets" not in top


def test_adapters_are_optional_and_lazy():
    """The command line and the lm-eval loop import neither Inspect AI nor the offline package;
    the Inspect adapter module itself defers inspect_ai to run time."""
    top = _top_level(_modules_after_import(
        "import catengine, catengine.cli, catengine.adapters.lm_eval, catengine.adapters.inspect; "
        "catengine.cli.build_parser()"))
    assert "inspect_ai" not in top and "calibration" not in top
