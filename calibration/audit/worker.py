"""What every audit worker shares, whatever runs it (the local process pool or Dask)."""

from __future__ import annotations

from catengine.errors import CatEngineError


class RecordsLostError(CatEngineError, RuntimeError):
    """Some records could not be computed (their worker processes kept dying); the others are stored."""


def init_worker() -> None:
    """Start of a worker process: one numba thread (the workers already use every core)."""
    try:
        import numba

        numba.set_num_threads(1)
    except Exception:  # pragma: no cover - numba is a dependency, but never fail a worker on this
        pass
