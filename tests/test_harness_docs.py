"""The Inspect AI and lm-evaluation-harness examples of docs/harnesses.md run offline as written
(each in a fresh process, in a temporary directory; the Inspect one with every non-local network
lookup and connection refused and no tokenizer files cached)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "harnesses.md"

_GUARD = '''
import socket
_real_connect, _real_lookup = socket.socket.connect, socket.getaddrinfo
_LOCAL = (None, "127.0.0.1", "::1", "localhost")
def _connect(self, address):
    host = address[0] if isinstance(address, tuple) else address
    if self.family in (socket.AF_INET, socket.AF_INET6) and host not in _LOCAL:
        raise SystemExit(f"the example tried to reach the network: {address!r}")
    return _real_connect(self, address)
def _lookup(host, *args, **kwargs):
    if host not in _LOCAL and not str(host).startswith("127."):
        raise SystemExit(f"the example tried to look up {host!r}")
    return _real_lookup(host, *args, **kwargs)
socket.socket.connect, socket.getaddrinfo = _connect, _lookup
'''


def _blocks(heading: str, lang: str) -> list[str]:
    section = DOC.read_text(encoding="utf-8").split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{lang}\n(.*?)```", section, flags=re.S)


def _env(tmp_path: Path) -> dict:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               XDG_DATA_HOME=str(tmp_path / "xdg-data"), XDG_CACHE_HOME=str(tmp_path / "xdg-cache"),
               TIKTOKEN_CACHE_DIR=str(tmp_path / "tiktoken-cache"), PYTHONPATH=str(ROOT))
    for var in ("INSPECT_EVAL_MODEL", "INSPECT_LOG_DIR", "INSPECT_TELEMETRY"):
        env.pop(var, None)
    return env


def test_docs_inspect_example_runs_offline_as_written(tmp_path):
    code = _blocks("## Inspect AI", "python")[0]
    script = tmp_path / "example.py"
    script.write_text(_GUARD + "\n" + code, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    first = done.stdout.splitlines()[0]
    assert re.match(r"accuracy \d+\.\d% \(95% interval \d+\.\d-\d+\.\d%", first), done.stdout
    assert "20 of 500 items answered" in first
    assert (tmp_path / "run.jsonl").exists() and len(list((tmp_path / "inspect-logs").glob("*.eval"))) == 2


def test_docs_lm_eval_example_runs_offline_as_written(tmp_path):
    script = _blocks("## lm-evaluation-harness", "bash")[0]
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "catengine lm-eval next: finished" in done.stderr, done.stderr[-3000:]
    assert re.search(r"predicted full-benchmark accuracy \d+\.\d% \(95% interval", done.stderr)
    report = json.loads((tmp_path / "ingest.json").read_text())
    n = report["estimate"]["n_items"]  # the stopping rule's choice, at most --max-items 30, in rounds of 10
    assert report["problems"] == [] and report["pending"] == [] and n in (10, 20, 30)
    assert report["estimate"]["predicted_score"].startswith("accuracy ") and f"{n} of 500 items answered" in \
        report["estimate"]["predicted_score"]
    assert len(list((tmp_path / "out").rglob("samples_hendrycks_math500_*.jsonl"))) == n // 10
