"""ipywidgets views of the offline side (they drive ``calibration`` and show ``catengine`` banks).

* :class:`AuditDashboard` -- small recovery audits (``calibration.audit``) with a progress bar.

The engine's own widgets (``BankExplorer``, ``SessionPanel``) are in ``catengine.widgets``, which
never imports ``calibration``; this package may import both. Classes load lazily.
"""

from catengine.lazy import lazy_package

_LAZY = {"AuditDashboard": "calibration.widgets.audit_dashboard"}

__all__, __getattr__, __dir__ = lazy_package(__name__, _LAZY)
