"""What the fuzz tests share: hypothesis settings bounded and deterministic in CI, and a scratch
folder per test module that is made before its first test and removed after its last."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings


def fuzz_settings(examples: int):
    """``examples`` deterministic examples per test; ``CATENGINE_FUZZ_EXAMPLES=N`` runs a longer,
    randomised search of N examples instead."""
    n = int(os.environ.get("CATENGINE_FUZZ_EXAMPLES", "0"))
    return settings(max_examples=n or examples, deadline=None, derandomize=not n, database=None,
                    suppress_health_check=list(HealthCheck))


class ScratchFolder:
    """A module's scratch folder: ``fixture()`` is its autouse module fixture, ``new(name)`` a fresh
    path inside it (each call a new number, so examples never collide)."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.path: Path | None = None
        self._count = itertools.count()

    def fixture(self):
        @pytest.fixture(autouse=True, scope="module")
        def _scratch_folder():
            self.path = Path(tempfile.mkdtemp(prefix=self.prefix))
            yield
            shutil.rmtree(self.path, ignore_errors=True)

        return _scratch_folder

    def new(self, name: str = "") -> Path:
        return self.path / f"{next(self._count)}{name}"
