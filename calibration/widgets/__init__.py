"""ipywidgets views of the offline side (they drive ``calibration`` and show ``catengine`` banks).

* :class:`AuditDashboard` -- small recovery audits (``calibration.audit``) with a progress bar.

The engine's own widgets (``BankExplorer``, ``SessionPanel``) are in ``catengine.widgets``, which
never imports ``calibration``; this package may import both. Classes load lazily.
"""

from importlib import import_module

_LAZY = {"AuditDashboard": "calibration.widgets.audit_dashboard"}

__all__ = list(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'calibration.widgets' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
