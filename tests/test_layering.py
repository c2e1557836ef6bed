"""Layering: the online engine never pulls in the offline package or widgets; numerics stay I/O-free."""

import subprocess
import sys
from pathlib import Path

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


#: what no command of ``catengine`` needs: Dask (xarray imports an installed one unless told), the
#: widgets (ipywidgets and the packages' own) and plotting
_NOT_FOR_COMMANDS = ("dask", "distributed", "ipywidgets", "matplotlib")


def _heavy(modules) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in _NOT_FOR_COMMANDS or "widgets" in m.split("."))


def test_the_command_line_module_imports_no_dask_widgets_or_plotting():
    assert not _heavy(_modules_after_import("import catengine.cli; catengine.cli.build_parser()"))


def test_catengine_evaluate_imports_no_dask_widgets_or_plotting(tmp_path):
    """The console command end to end (``main()`` as the ``catengine`` script calls it): a shipped
    bank opened with xarray, an adaptive run, the score; none of these modules in the process."""
    code = (
        "import sys\n"
        "from catengine.cli import main\n"
        "sys.argv = ['catengine', 'evaluate', '--bank', 'math500_2pl', '--responses',\n"
        "            'data/lart/accuracy_math500.csv.gz', '--subject', 'Qwen_Qwen3_8B_zero_shot', '--seed', '0',\n"
        f"            '--log', {str(tmp_path / 'log.jsonl')!r}]\n"
        "rc = main()\n"
        "print('\\n'.join(sorted(m for m, v in sys.modules.items() if v is not None)))\n"
        "sys.exit(rc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    modules = set(out.stdout.split())
    assert "xarray" in modules and "catengine.session.session" in modules  # it did run
    assert not _heavy(modules)
