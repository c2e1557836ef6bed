"""The benchmarks' data paths: those of ``tests/real_data.py`` (the one definition), loaded from there.

``from _paths import DATA, LART, ...`` in a benchmark run as ``python benchmarks/<name>.py``
(its folder is first on ``sys.path``). ``DATA`` is the repository's ``data/`` (shipped, always
present); PSN-IRT data lives under ``PSN_DATA`` beside the repository and is not shipped: a
benchmark that needs it stops with :func:`psn_missing`'s reason (:func:`exit_without_psn`).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if "real_data" not in sys.modules:
    _spec = importlib.util.spec_from_file_location("real_data", Path(__file__).resolve().parents[1] / "tests" / "real_data.py")
    sys.modules["real_data"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["real_data"])

from real_data import (  # noqa: E402
    CHEMBENCH, DATA, LART, LRM_TOKEN_ECONOMY, PSN_DATA, PSN_IRT, REFERENCE, ROOT, lart_files, psn_missing,
)


def test_support(name: str):
    """The test-support module ``tests/<name>.py`` (e.g. ``llm_server``, the simulated chat endpoint),
    loaded once and registered under ``name``."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / f"{name}.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def exit_without_psn(path: Path = PSN_IRT) -> Path:
    """``path`` if the PSN-IRT data is there; otherwise print why it is not and exit with status 2."""
    reason = psn_missing(path)
    if reason is not None:
        print(reason, file=sys.stderr)
        raise SystemExit(2)
    return Path(path)


__all__ = ["CHEMBENCH", "DATA", "LART", "LRM_TOKEN_ECONOMY", "PSN_DATA", "PSN_IRT", "REFERENCE",
           "ROOT", "exit_without_psn", "lart_files", "psn_missing", "test_support"]
