"""The ``catengine`` command: ``demo``, ``evaluate``, ``serve``, ``banks``, ``run``, ``regrade``,
``compare``, ``rank`` and ``lm-eval``; one module per command (the last four register themselves
from their packages), the shared options in :mod:`catengine.cli.options`. Each command is a thin
layer over a library call (``evaluate`` over :func:`catengine.replay`)."""

from catengine.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
