"""Notebook 01 in a real JupyterLab, in headless chromium: run all cells, use the SessionPanel.

The server's root dir is the repository; the test opens a scratch copy of notebook 01 under
``ci-artifacts/browser/`` (gitignored) so that JupyterLab's autosave can never write outputs into
the stored notebook. It runs every cell, checks that no cell failed, that the SessionPanel rendered
(its buttons visible) and that clicking "step" advances the item count, and saves screenshots to
``ci-artifacts/``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "ci-artifacts"
NOTEBOOK = ROOT / "notebooks" / "01_adaptive_evaluation.ipynb"
SENTINEL = "notebook 01 finished"
RUN_TIMEOUT_S = 300

# JavaScript run in the page: the state of the open notebook, read from JupyterLab's models
_NOTEBOOK_STATE_JS = """
() => {
  const app = window.jupyterapp;
  if (!app) return {ready: false, why: 'no window.jupyterapp'};
  const panel = app.shell.currentWidget;
  if (!panel || !panel.content || !panel.content.model) return {ready: false, why: 'no notebook panel'};
  const ctx = panel.sessionContext;
  const kernel = ctx && ctx.session ? ctx.session.kernel : null;
  const cells = panel.content.model.cells;
  const out = [];
  for (let i = 0; i < cells.length; i++) {
    const c = cells.get(i);
    if (c.type !== 'code') continue;
    out.push({index: i, count: c.executionCount, outputs: c.outputs.toJSON()});
  }
  return {ready: true, kernel: kernel ? kernel.status : null, cells: out};
}
"""


def _errors(state):
    found = []
    for cell in state.get("cells", []):
        for o in cell["outputs"]:
            if o.get("output_type") == "error":
                found.append(f"cell {cell['index']}: {o.get('ename')}: {o.get('evalue')}")
    return found


def _text(state):
    parts = []
    for cell in state.get("cells", []):
        for o in cell["outputs"]:
            if o.get("output_type") == "stream":
                text = o.get("text", "")
                parts.append("".join(text) if isinstance(text, list) else text)
    return "\n".join(parts)


@pytest.mark.slow
def test_notebook01_runs_in_jupyterlab_and_session_panel_steps(lab_server, browser):
    if importlib.util.find_spec("catengine.session") is None:
        pytest.skip("notebook 01 needs catengine.session, which does not exist yet")
    from playwright.sync_api import expect

    ARTIFACTS.mkdir(exist_ok=True)
    scratch = ARTIFACTS / "browser"
    scratch.mkdir(exist_ok=True)
    copy = scratch / NOTEBOOK.name
    shutil.copyfile(NOTEBOOK, copy)
    original_digest = hashlib.sha256(NOTEBOOK.read_bytes()).hexdigest()

    context = browser.new_context(viewport={"width": 1500, "height": 1100})
    page = context.new_page()
    console_errors = []
    page.on("pageerror", lambda exc: console_errors.append(str(exc)))
    try:
        rel = copy.relative_to(ROOT).as_posix()
        page.goto(lab_server.url(f"lab/tree/{rel}"), wait_until="domcontentloaded", timeout=120_000)
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
        page.wait_for_function(
            "() => { const p = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
            " return !!(p && p.sessionContext && p.sessionContext.session && p.sessionContext.session.kernel); }",
            timeout=120_000,
        )
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")

        deadline = time.monotonic() + RUN_TIMEOUT_S
        state = {}
        while time.monotonic() < deadline:
            state = page.evaluate(_NOTEBOOK_STATE_JS)
            errors = _errors(state)
            assert not errors, f"a notebook cell failed in JupyterLab: {errors}"
            if SENTINEL in _text(state) and state.get("kernel") == "idle":
                break
            time.sleep(1.0)
        else:
            page.screenshot(path=str(ARTIFACTS / "jupyterlab_notebook01_timeout.png"))
            pytest.fail(f"notebook 01 did not finish within {RUN_TIMEOUT_S} s in JupyterLab "
                        f"(kernel {state.get('kernel')!r}); server log:\n{lab_server.log_tail()}")
        assert all(c["count"] for c in state["cells"]), "every code cell ran"

        panel = page.locator(".catengine-session-panel").first
        panel.wait_for(state="visible", timeout=60_000)
        panel.scroll_into_view_if_needed()
        buttons = {name: panel.locator(f"button.catengine-{name.replace(' ', '-')}")
                   for name in ("correct", "incorrect", "step", "play to end")}
        for name, button in buttons.items():
            assert button.is_visible(), f"SessionPanel button {name!r} is not visible"
            assert button.inner_text().strip() == name
            assert button.is_enabled(), f"SessionPanel button {name!r} is disabled"
        count = panel.locator(".catengine-count-value")
        before = int(count.inner_text().strip())
        assert before >= 1, "the notebook answered a few items through the panel"
        trajectory = panel.locator(".jp-OutputArea-output img")
        assert trajectory.count() >= 1, "the trajectory figure rendered"

        # the next item's criterion reads in words with its natural sign (no "criterion = -0.07")
        next_line = panel.locator(".catengine-next-item").inner_text()
        assert "next item" in next_line or "finished" in next_line, next_line
        assert "= -" not in next_line and "criterion (" not in next_line, next_line

        buttons["step"].click()
        # the label's HTML is re-rendered on every update: re-query it until it shows the new count
        expect(count).to_have_text(str(before + 1), timeout=60_000)
        assert int(count.inner_text().strip()) == before + 1
        page.wait_for_timeout(500)  # let the redrawn trajectory land before the screenshots
        page.screenshot(path=str(ARTIFACTS / "jupyterlab_notebook01.png"))
        panel.screenshot(path=str(ARTIFACTS / "jupyterlab_session_panel.png"))
        (ARTIFACTS / "jupyterlab_notebook01_outputs.txt").write_text(_text(page.evaluate(_NOTEBOOK_STATE_JS)))
        if console_errors:  # informational: JupyterLab itself may log harmless page errors offline
            (ARTIFACTS / "jupyterlab_page_errors.txt").write_text("\n".join(console_errors))
    except BaseException:
        try:
            page.screenshot(path=str(ARTIFACTS / "jupyterlab_failure.png"))
            (ARTIFACTS / "jupyterlab_failure_server.log").write_text(lab_server.log_tail(100_000))
        except Exception:  # noqa: BLE001 - best effort; the original error matters
            pass
        raise
    finally:
        context.close()
    assert hashlib.sha256(NOTEBOOK.read_bytes()).hexdigest() == original_digest, "the stored notebook was modified"
    json.loads(NOTEBOOK.read_text())  # still valid JSON
