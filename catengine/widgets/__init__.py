"""ipywidgets views for JupyterLab: they observe library objects and compute nothing themselves.

* :class:`BankExplorer` — an item bank: sortable item table, item characteristic / information
  curves, parameter distributions (LaRT: CoT parameters and rho; posterior bands where stored).
* :class:`SessionPanel` — a live adaptive test (:class:`catengine.session.CATSession`): next item
  and criterion, answer buttons or step-by-step replay, theta trajectory with its 95% band, item
  sequence, ranking against the bank's calibration LLMs with P(ahead).
* :class:`SimulatedLLM` / :class:`ReplayedLLM` — responders that answer for a SessionPanel (a
  simulated LLM drawn from the bank's model; a known response vector replayed).

The audit dashboard drives the offline side, so it lives there: ``calibration.widgets.AuditDashboard``.

This is the only package of ``catengine`` that imports ipywidgets (and matplotlib); the classes
load lazily so ``import catengine.widgets`` stays cheap.
"""

from catengine.lazy import lazy_package

_LAZY = {
    "BankExplorer": "catengine.widgets.bank_explorer",
    "SessionPanel": "catengine.widgets.session_panel",
    "SimulatedLLM": "catengine.widgets.session_panel",
    "ReplayedLLM": "catengine.widgets.session_panel",
}

__all__, __getattr__, __dir__ = lazy_package(__name__, _LAZY)
