"""Fixtures of the browser test: a JupyterLab server on 127.0.0.1 and Debian's chromium via Playwright.

What it needs (installed by ``.ci/browser_setup.sh``): the ``chromium`` package at /usr/bin/chromium
and Playwright's Python package (its browser downloads are never used: chromium is launched by
``executable_path``). Without them the browser test skips with the reason, except when
``REQUIRE_BROWSER_TEST=1`` (set by CI): then it fails.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "ci-artifacts"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SERVER_START_TIMEOUT_S = 120


def require_or_skip(reason: str) -> None:
    """Skip with ``reason`` — or fail, when CI demands the browser test (REQUIRE_BROWSER_TEST=1)."""
    if os.environ.get("REQUIRE_BROWSER_TEST") == "1":
        pytest.fail(f"REQUIRE_BROWSER_TEST=1 but the browser test cannot run: {reason} (run .ci/browser_setup.sh)")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0):
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - a local URL we built
        return resp.status, resp.read()


class LabServer:
    def __init__(self, port: int, token: str, proc: subprocess.Popen, log_path: Path):
        self.port, self.token, self.proc, self.log_path = port, token, proc, log_path
        self.base = f"http://127.0.0.1:{port}"

    def url(self, path: str) -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.base}/{path.lstrip('/')}{sep}token={self.token}"

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def shutdown(self) -> None:
        if self.proc.poll() is None:
            req = urllib.request.Request(self.url("api/shutdown"), method="POST", data=b"",
                                         headers={"Authorization": f"token {self.token}"})
            try:
                urllib.request.urlopen(req, timeout=10).close()  # noqa: S310 - local server
            except (urllib.error.URLError, OSError):
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def playwright_api():
    if not CHROMIUM.exists():
        require_or_skip(f"Debian's chromium is not installed at {CHROMIUM}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        require_or_skip("the Python package 'playwright' is not installed")
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def browser(playwright_api):
    try:
        b = playwright_api.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
    except Exception as exc:  # noqa: BLE001 - any launch failure means "no usable browser"
        require_or_skip(f"chromium at {CHROMIUM} could not be launched by Playwright: {exc}")
    yield b
    b.close()


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory):
    """``jupyter lab`` on 127.0.0.1 with a token, root dir = the repository; shut down afterwards."""
    if shutil.which("jupyter") is None and not (Path(sys.executable).parent / "jupyter").exists():
        pytest.importorskip("jupyterlab")
    state = tmp_path_factory.mktemp("jupyter-state")
    settings = state / "settings"
    # render every cell (JupyterLab 4 virtualises off-screen cells by default) and stay offline
    tracker = settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True)
    tracker.write_text(json.dumps({"windowingMode": "none"}))
    notification = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notification.parent.mkdir(parents=True)
    notification.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    port = _free_port()
    token = secrets.token_hex(16)
    log_path = state / "jupyter-lab.log"
    env = dict(os.environ)
    env.update({
        "JUPYTER_CONFIG_DIR": str(state / "config"),
        "JUPYTER_RUNTIME_DIR": str(state / "runtime"),
        "IPYTHONDIR": str(state / "ipython"),
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "CATENGINE_NOTEBOOK_FAST": "1",  # the notebook's fast path (tests/test_notebooks.py: FAST_PATH_ENV)
    })
    cmd = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip", "127.0.0.1", "--port", str(port),
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={ROOT}",
        "--ServerApp.port_retries=0", "--LabApp.expose_app_in_browser=True",
        f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={state / 'workspaces'}",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--LabApp.news_url=",
        "--LabApp.extension_manager=readonly",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # CI runs as root
    log = open(log_path, "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(ROOT),
                            stdin=subprocess.DEVNULL)
    server = LabServer(port, token, proc, log_path)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"jupyter lab exited with code {proc.returncode}:\n{server.log_tail()}")
            try:
                status, _ = _get(server.url("api/status"))
                if status == 200:
                    break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"jupyter lab did not answer within {SERVER_START_TIMEOUT_S} s:\n{server.log_tail()}")
            time.sleep(0.5)
        yield server
    finally:
        server.shutdown()
        log.close()
