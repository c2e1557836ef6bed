"""Every command of the README runs as written: the shell blocks in a subprocess (paths under /tmp/
moved to a temporary directory), the Python session loop with a stand-in LLM; the Inspect example is
the one of docs/harnesses.md, which tests/test_harness_docs.py runs offline. The install lines of the
first block are what CI runs (.ci/run)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _blocks_under(heading: str, lang: str = "bash", text: str = README) -> list[str]:
    assert f"\n{heading}" in text, f"the README lost its section {heading!r}"
    section = text.split(f"\n{heading}", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{lang}\n(.*?)```", section, flags=re.S)


def _run(script: str, cwd: Path, tmp_path: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script.replace("/tmp/", f"{tmp_path}/")], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    return done


def _assert_score_summary(out: str) -> None:
    """The summary every evaluation prints: the predicted accuracy with its interval and the items
    used, the stop reason, one ranking statement."""
    assert re.search(r"^predicted full-benchmark accuracy \d+\.\d% \(95% interval \d+\.\d-\d+\.\d%.*from \d+ of \d+ items",
                     out, flags=re.M), out[-3000:]
    assert re.search(r"^stopped: \S", out, flags=re.M), out[-3000:]
    assert len(re.findall(r"^standing: ", out, flags=re.M)) == 1, out[-3000:]


def test_readme_opens_with_the_two_commands():
    first = re.search(r"```bash\n(.*?)```", README, flags=re.S).group(1).splitlines()
    assert len(first) == 2
    assert first[0].endswith("catengine demo") and "pytest" in first[1]


def test_readme_states_the_defaults_the_code_has():
    from catengine import CATSession, open_item_bank
    from catengine.selection import DoublyRobustSelection
    from catengine.stopping import rules

    assert (rules.DEFAULT_SCORE_HALF_WIDTH, rules.DEFAULT_MIN_ITEMS, rules.DEFAULT_MAX_ITEMS) == (0.05, 10, 100)
    assert "within +-5 points (its 95% interval), after at least 10 items, or at 100 items" in " ".join(README.split())
    assert DoublyRobustSelection().share == 1.0 and DoublyRobustSelection().extrapolation_share == 1.0
    assert "The default selection is `doubly-robust`" in " ".join(README.split())
    assert isinstance(CATSession(open_item_bank("math500_lart")).selector, DoublyRobustSelection)


def test_readme_run_against_the_test_endpoint_runs(tmp_path):
    """The README's `catengine run` against the repository's simulated LLM endpoint (started in the
    background by the block itself, on 127.0.0.1) prints the summary; its quoted output lines start
    as the real ones do; the options it names exist."""
    real, simulated = _blocks_under("## Evaluate your LLM")
    assert real.startswith("catengine run --bank math500_lart --model my-model --base-url http://127.0.0.1:")
    done = _run(simulated, ROOT, tmp_path)
    _assert_score_summary(done.stdout)
    assert re.search(r"^asked \d+ of 500 items .* completion tokens", done.stdout, flags=re.M), done.stdout
    # the 11 flagged items are left out: the score and the cost are over the other 489
    assert re.search(r"^predicted full-benchmark accuracy .* of 489 items$", done.stdout, flags=re.M), done.stdout
    assert re.search(r"^the whole benchmark less the 11 items left out would have taken 489 items", done.stdout,
                     flags=re.M), done.stdout
    for line in _blocks_under("## Evaluate your LLM", "text")[0].splitlines():
        start = re.split(r"[\d:]", line, maxsplit=1)[0]
        assert re.search(rf"^{re.escape(start)}", done.stdout, flags=re.M), (line, done.stdout[-3000:])
    help_text = subprocess.run([Path(sys.executable).parent / "catengine", "run", "--help"], capture_output=True,
                               text=True).stdout
    section = README.split("## Evaluate your LLM", 1)[1].split("\n## ", 1)[0]
    for option in set(re.findall(r"(--[a-z-]+)", section)) - {"--content", "--grader", "--theta", "--port"}:
        assert option in help_text, option  # (--theta and --port are the test endpoint's)
    assert "--content" in help_text and "--grader" in subprocess.run(
        [Path(sys.executable).parent / "catengine", "regrade", "--help"], capture_output=True, text=True).stdout


def test_readme_evaluate_your_llm_runs(tmp_path):
    answers = _blocks_under("## Score answers you already have", "text")[0]
    assert len(answers.splitlines()) == 3 and answers.startswith("item,correct")
    (tmp_path / "answers.csv").write_text(answers)
    command = _blocks_under("## Score answers you already have")[0]
    _assert_score_summary(_run(command, tmp_path, tmp_path).stdout)
    for option in re.findall(r"`(--[a-z-]+)`", README.split("## Score answers you already have", 1)[1].split("\n## ", 1)[0]):
        assert option in subprocess.run([Path(sys.executable).parent / "catengine", "evaluate", "--help"],
                                        capture_output=True, text=True).stdout, option


def test_readme_session_loop_runs(tmp_path, monkeypatch):
    code = _blocks_under("## Score answers you already have", "python")[0]
    asked = []

    def ask_my_llm(item):  # a stand-in LLM: right on two items in three, 400 CoT tokens each
        asked.append(item)
        return int(int(item.split("/")[1]) % 3 != 0), 400

    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {"ask_my_llm": ask_my_llm})
    assert 10 <= len(asked) <= 100 and all(item.startswith("math500/") for item in asked)


def test_readme_shipped_bank_on_its_source_data(tmp_path):
    done = _run(_blocks_under("## A shipped bank on its own source data")[0], ROOT, tmp_path)
    assert "with the bank's prefix 'math500/'" in done.stderr, done.stderr[-2000:]
    _assert_score_summary(done.stdout)
    quoted = _blocks_under("## A shipped bank on its own source data", "text")[0].splitlines()
    # the quoted output is one run's (the figures move with the random draws): its lines start as the real ones do
    for line in quoted:
        start = re.split(r"[\d:]", line, maxsplit=1)[0]
        assert re.search(rf"^{re.escape(start)}", done.stdout, flags=re.M), (line, done.stdout[-3000:])


def test_readme_harness_section_points_to_the_tested_examples():
    """The README names the harness entry points and links the page whose examples
    tests/test_harness_docs.py runs offline."""
    section = README.split("\n## Inside Inspect AI", 1)[1].split("\n## ", 1)[0]
    assert "run_adaptive" in section and "lm-eval next" in section and "(docs/harnesses.md)" in section
    from catengine.adapters.inspect import run_adaptive  # noqa: F401 - the name the README gives exists


@pytest.mark.slow
def test_readme_calibration_and_recalibration_run(tmp_path):
    # the recalibration continues from the bank the calibration section fits (AMC23, 154 of its 156 runs)
    calibrate, recalibrate = _blocks_under("## Calibrate your own bank")[0], _blocks_under("## Recalibrate")[0]
    done = _run(calibrate, ROOT, tmp_path)
    assert (tmp_path / "banks" / "my_amc23" / "my_amc23_v1.nc").exists()
    assert "calibrating on 154 of 156 LLMs" in done.stdout + done.stderr
    _assert_score_summary(done.stdout)
    out = _run(recalibrate, ROOT, tmp_path).stdout
    assert "my_amc23_v2.nc (v2, parent v1); linked by stocking-lord" in out
    assert re.search(r"^\s+2\s+1\s", out, flags=re.M), out  # the log lists v2 with parent v1
    assert "diff v1 -> v2" in out and "subjects added: 2 (Qwen_Qwen3_8B_one_shot, Qwen_Qwen3_8B_zero_shot)" in out
    again = _run(recalibrate.splitlines()[0].rstrip("\\ ") + " " + recalibrate.splitlines()[1].strip(), ROOT, tmp_path)
    assert "no new version" in again.stdout + again.stderr


def test_readme_notebook_commands_are_valid_jupyter_invocations():
    # every `jupyter lab` line of the README (section "Read more") parses (also the root/container one):
    # --show-config makes JupyterLab validate its options and print its configuration without serving
    lines = [ln.strip() for block in _blocks_under("## Read more") for ln in block.splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    assert any("--allow-root" in ln for ln in lines), "the README must say how to start JupyterLab as root"
    jupyter = Path(sys.executable).parent / "jupyter"
    for line in lines:
        assert line.startswith(".venv/bin/jupyter lab notebooks/"), line
        argv = [str(jupyter), *line.split()[1:], "--show-config"]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "root_dir" in done.stdout
