"""Gauss-Hermite rules for expectations over a standard normal (shared by the information and
scoring code and the response-model objects; no import of ``ItemParams``)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from catengine.validation import is_integer

DEFAULT_NODES = 9


@lru_cache(maxsize=64)
def _gh(n: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.hermite.hermgauss(n)
    x = np.sqrt(2.0) * x
    w = w / np.sqrt(np.pi)
    x.flags.writeable = False
    w.flags.writeable = False
    return x, w


def gauss_hermite_normal(n_nodes: int = DEFAULT_NODES) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of the n-point Gauss-Hermite rule for E[f(X)], X ~ Normal(0, 1)."""
    if not is_integer(n_nodes) or not 1 <= n_nodes <= 200:
        raise ValueError(f"n_nodes must be an integer in 1..200, got {n_nodes!r}")
    return _gh(int(n_nodes))
