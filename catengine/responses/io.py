"""Read a response file of any supported format into :class:`calibration.ResponseData`."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from calibration.data import ResponseData, format_suffix, open_text

LONG_SUFFIXES = (".csv", ".jsonl", ".ndjson")


def _read_csv(path: Path) -> ResponseData:
    """A .csv[.gz]: long when the header names subject, item and correct; a headerless 0/1 matrix
    (rows = subjects, e.g. PSN-IRT's percent_0.7.csv; empty/NaN = missing) when the first row is
    all numbers; otherwise wide (first column the subject id, header the item ids)."""
    with open_text(path) as fh:
        first = next(csv.reader(fh), None)
    if first is None:
        raise ValueError(f"{path.name} is empty")
    if {"subject", "item", "correct"} <= {c.strip().lower() for c in first}:
        return ResponseData.from_long(path)
    if first[0].strip() and all(_is_number(c) for c in first):
        with open_text(path) as fh:
            matrix = np.genfromtxt(fh, delimiter=",", dtype=np.float64, ndmin=2)
        return ResponseData.from_arrays(matrix)
    return ResponseData.from_wide_csv(path)


def _is_number(cell: str) -> bool:
    text = cell.strip().lower()
    if text in ("", "na", "nan"):
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True


def load_responses(path, *, cot=None, wide: bool = False) -> ResponseData:
    """Read ``path`` by its suffix: ``.nc`` (ResponseData netCDF), ``.jsonl`` (long table),
    ``.csv`` (long table with subject, item, correct[, cot_tokens]; a headerless 0/1 matrix; or
    a wide table); with ``wide=True`` (or when ``cot`` is given) a wide accuracy CSV (first
    column the subject id, header the item ids) plus an optional wide CoT CSV.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"response file {path} does not exist")
    if cot is not None and not Path(cot).exists():
        raise FileNotFoundError(f"CoT file {cot} does not exist")
    if wide or cot is not None:
        return ResponseData.from_wide_csv(path, cot)
    suffix = format_suffix(path)
    if suffix == ".nc":
        return ResponseData.from_netcdf(path)
    if suffix == ".csv":
        return _read_csv(path)
    if suffix in LONG_SUFFIXES:
        return ResponseData.from_long(path)
    raise ValueError(
        f"cannot tell the format of {path.name}: use .csv/.jsonl (long table), .nc (ResponseData netCDF), "
        "or a wide accuracy CSV with --wide (and --cot for CoT lengths)"
    )
