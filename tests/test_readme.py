"""The README's recalibration workflow runs as written (with its /tmp paths moved to a temp dir)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bash_blocks_under(heading: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)```", section, flags=re.S)


def test_readme_opens_with_the_two_commands():
    first = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S).group(1).splitlines()
    assert len(first) == 2
    assert first[0].endswith("catengine demo") and "pytest" in first[1]


@pytest.mark.slow
def test_readme_recalibration_workflow_runs(tmp_path):
    script = _bash_blocks_under("## Recalibrate")[0].replace("/tmp/", f"{tmp_path}/")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1800)  # the fits run their cross-fitted interval checks (5 refits each)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "my_math_v2.nc (v2, parent v1); linked by stocking-lord" in out
    assert "no new version" in out
    assert re.search(r"^\s+2\s+1\s", out, flags=re.M), out  # the log lists v2 with parent v1
    assert "diff v1 -> v2" in out and "subjects added: 40" in out


def test_readme_notebook_commands_are_valid_jupyter_invocations():
    # every `jupyter lab` line of the Notebooks section parses (also the root/container one):
    # --show-config makes JupyterLab validate its options and print its configuration without serving
    lines = [ln.strip() for block in _bash_blocks_under("## Notebooks") for ln in block.splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    assert any("--allow-root" in ln for ln in lines), "the README must say how to start JupyterLab as root"
    jupyter = Path(sys.executable).parent / "jupyter"
    for line in lines:
        assert line.startswith(".venv/bin/jupyter lab notebooks/"), line
        argv = [str(jupyter), *line.split()[1:], "--show-config"]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "root_dir" in done.stdout
