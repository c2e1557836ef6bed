"""Input checks and shape helpers shared by the response-model modules (``logistic``, ``lart``,
``response_models``, ``expected_information``). No import of ``ItemParams``: ``params`` imports the
response-model objects, which use these.

Shapes: ``theta`` is a float or an array of any shape S; per-item outputs have shape S + (n,),
summed outputs shape S (numpy floats for scalar input). ``items`` is an integer index array into
the bank (``None``: every item, in bank order).
"""

from __future__ import annotations

import numpy as np


def _as_theta(theta, name: str = "theta") -> tuple[np.ndarray, tuple[int, ...]]:
    """Flat contiguous float64 copy of ``theta`` and its original shape; rejects non-finite values."""
    arr = np.asarray(theta, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(arr.reshape(-1)))
    if bad.size:
        raise ValueError(f"{name} must be finite; flat position {int(bad[0])} holds {arr.reshape(-1)[bad[0]]}")
    return np.ascontiguousarray(arr.reshape(-1)), arr.shape


def _as_items(params, items) -> np.ndarray:
    """Validated int64 index array (``None``: all items)."""
    n = params.n_items
    if items is None:
        return np.arange(n, dtype=np.int64)
    idx = np.asarray(items)
    if idx.ndim == 0:
        idx = idx.reshape(1)
    if idx.ndim != 1:
        raise ValueError(f"items must be a one-dimensional index array, got shape {idx.shape}")
    if idx.size == 0:
        return np.zeros(0, dtype=np.int64)
    if idx.dtype == bool or not np.issubdtype(idx.dtype, np.integer):
        raise TypeError(f"items must hold integer item indices, got dtype {idx.dtype}")
    bad = np.flatnonzero((idx < 0) | (idx >= n))
    if bad.size:
        raise ValueError(f"item index {int(idx[bad[0]])} is out of range for a bank of {n} items (0..{n - 1})")
    return idx.astype(np.int64)


def _as_responses(responses, n_items: int) -> np.ndarray:
    """float64 array of 0/1 answers, one per selected item."""
    y = np.asarray(responses)
    if y.ndim == 0:
        y = y.reshape(1)
    if y.ndim != 1 or y.shape[0] != n_items:
        raise ValueError(f"responses must be a vector with one 0/1 answer per item ({n_items}), got shape {y.shape}")
    yf = y.astype(np.float64)
    bad = np.flatnonzero((yf != 0.0) & (yf != 1.0))
    if bad.size:
        raise ValueError(f"responses must be 0 or 1; position {int(bad[0])} holds {y[bad[0]]!r}")
    return np.ascontiguousarray(yf)


def _vec(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x[idx], dtype=np.float64)


def _per_item(out2d: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return out2d.reshape(shape + (out2d.shape[1],))


def _summed(col: np.ndarray, shape: tuple[int, ...]):
    col = col.reshape(shape)
    return col[()] if col.ndim == 0 else col
