"""How the command-line tools (``catengine``, ``calibration``) show warnings: one line,
``prog: ConvergenceWarning: message``, without the library's source path and line of code."""

from __future__ import annotations

import sys
import warnings
from contextlib import contextmanager


@contextmanager
def plain_warnings(prog: str, enabled: bool = True):
    """Within the block, warnings print as ``prog: Category: message`` on stderr (the filters, e.g.
    ``-W error`` or ``PYTHONWARNINGS``, still decide which are shown); ``enabled=False`` leaves
    Python's format (the tools called from Python, e.g. by tests)."""
    if not enabled:
        yield
        return
    previous = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        print(f"{prog}: {category.__name__}: {message}", file=sys.stderr if file is None else file)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous
