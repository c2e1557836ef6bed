"""Read a response file of any supported format into :class:`ResponseData` (every command's reader).

* :func:`load_responses` — a whole file (``calibration fit``, ``recalibrate``, audits);
* :func:`load_subject_answers` — one subject's answers (``catengine evaluate``), through the same
  readers, so both commands accept the same files and reject the same mistakes.

Every failure is a :class:`~catengine.errors.ResponseFileError` (a ValueError) naming the file
(and the line, column and value where there is one).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from catengine.errors import ResponseFileError
from catengine.responses.data import (
    MISSING,
    ResponseData,
    _CellError,
    _parse_correct,
    csv_rows,
    format_suffix,
    reading,
)

LONG_SUFFIXES = (".csv", ".jsonl", ".ndjson", ".json")


def _first_row(path: Path):
    for _, row in csv_rows(path):
        if row and any(cell.strip() for cell in row):
            return row
    return None


def _read_matrix(path: Path) -> ResponseData:
    """A headerless 0/1 matrix (rows = subjects); empty / NA / NaN = missing, anything else
    (-1 included: ambiguous in files) an error naming line, column and value."""
    rows = []
    width = None
    for line, row in csv_rows(path):
        if not row or all(cell.strip() == "" for cell in row):
            continue
        if width is None:
            width = len(row)
        elif len(row) != width:
            raise ResponseFileError(f"{path.name} line {line}: {len(row)} fields, but the first row has {width}",
                                    file=str(path), line=line)
        values = np.empty(width, dtype=np.int8)
        for c, text in enumerate(row):
            try:
                values[c] = _parse_correct(text)
            except _CellError:
                raise ResponseFileError(
                    f"{path.name} line {line}, column {c + 1}: {text!r} is not 0, 1 or missing (empty, NA, NaN; "
                    "-1 is rejected in files as ambiguous)", file=str(path), line=line, column=c + 1, value=text,
                ) from None
        rows.append(values)
    return ResponseData.from_arrays(np.vstack(rows))


def _read_csv(path: Path) -> tuple[ResponseData, str]:
    """A .csv[.gz]: long when the header names subject and item (and correct); a headerless 0/1 matrix
    (rows = subjects, e.g. PSN-IRT's percent_0.7.csv; empty/NaN = missing) when the first row is
    all numbers; otherwise wide (first column the subject id, header the item ids). Returns the
    data and its layout ("long", "matrix" or "wide")."""
    first = _first_row(path)
    if first is None:
        raise ResponseFileError(f"{path.name} is empty", file=str(path))
    if {"subject", "item"} <= {c.strip().lower() for c in first}:  # long (a missing 'correct' is named there)
        return ResponseData.from_long(path), "long"
    _refuse_partial_long_header(path, first, ("subject", "item"))
    if first[0].strip() and all(_is_number(c) for c in first):
        return _read_matrix(path), "matrix"
    return ResponseData.from_wide_csv(path), "wide"


#: header cells that only a long table has (a wide table's header holds item ids)
LONG_TABLE_COLUMNS = ("correct", "cot_tokens", "cot_length")


def _refuse_partial_long_header(path: Path, header, required) -> None:
    """A header that names long-table columns (correct, cot_tokens) but lacks one of ``required``
    is a long table with a missing column, not a wide table whose items are called 'correct'."""
    columns = {c.strip().lower() for c in header}
    named = [c for c in LONG_TABLE_COLUMNS if c in columns]
    missing = [c for c in required if c not in columns]
    if named and missing:
        raise ResponseFileError(
            f"{path.name}: the header names {', '.join(map(repr, named))} like a long table but has no "
            f"{' or '.join(map(repr, missing))} column; a long table needs the columns "
            f"{', '.join(required)}, correct[, cot_tokens] (a wide table's header is a row-label column, "
            "then the item ids)", file=str(path))


def _is_number(cell: str) -> bool:
    text = cell.strip().lower()
    if text in ("", "na", "nan"):
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True


def _check_exists(path: Path, cot) -> None:
    if not path.exists():
        raise FileNotFoundError(f"response file {path} does not exist")
    if cot is not None and not Path(cot).exists():
        raise FileNotFoundError(f"CoT file {cot} does not exist")


def load_responses(path, *, cot=None, wide: bool = False, items_as_rows: bool = False) -> ResponseData:
    """Read ``path`` by its suffix: ``.nc`` (ResponseData netCDF), ``.jsonl`` / ``.json`` (long
    table), ``.csv`` (long table with subject, item, correct[, cot_tokens]; a headerless 0/1 matrix;
    or a wide table); with ``wide=True`` (or when ``cot`` is given) a wide accuracy CSV (first
    column the subject id, header the item ids) plus an optional wide CoT CSV. Text files may be
    compressed (.gz, .bz2, .xz). ``items_as_rows``: the matrix (wide or headerless) holds one row
    per item and one column per LLM, and is transposed after reading (:meth:`ResponseData.transposed`).
    """
    path = Path(path)
    _check_exists(path, cot)
    data, layout = _load_responses(path, cot, wide)
    if items_as_rows:
        if layout not in ("wide", "matrix"):
            raise ResponseFileError(
                f"{path.name} is a {layout} file, which names each cell's subject and item: it has no rows "
                "to read as items, so --items-as-rows (items_as_rows=True) applies only to wide or headerless "
                "matrices", file=str(path))
        with reading(path):
            data = data.transposed()
    return data


def _load_responses(path, cot, wide) -> tuple[ResponseData, str]:
    """The data and its layout: "wide", "matrix" (headerless), "long" or "netCDF"."""
    with reading(path):
        if wide or cot is not None:
            return ResponseData.from_wide_csv(path, cot), "wide"
        suffix = format_suffix(path)
        if suffix == ".nc":
            return ResponseData.from_netcdf(path), "netCDF"
        if suffix == ".csv":
            return _read_csv(path)
        if suffix in LONG_SUFFIXES:
            return ResponseData.from_long(path), "long"
        raise ResponseFileError(
            f"cannot tell the format of {path.name}: use .csv/.jsonl/.json (long table), .nc (ResponseData netCDF), "
            "or a wide accuracy CSV with --wide (and --cot for CoT lengths)", file=str(path),
        )


def load_subject_answers(path, subject: str | None = None, cot=None) -> dict[str, tuple[int, float | None]]:
    """One subject's answers: item id -> (correct, CoT tokens or None), read by :func:`load_responses`'
    readers (``catengine evaluate``).

    Accepted besides every :func:`load_responses` format: long files (CSV, JSONL, JSON) without a
    subject column (one subject), and a JSON object item -> correct | {"correct", "cot_tokens"}.
    ``subject`` picks the row of a file with several subjects. Missing cells are left out.
    """
    path = Path(path)
    _check_exists(path, cot)
    default = subject if subject is not None else "subject"
    with reading(path):
        suffix = format_suffix(path)
        if cot is None and suffix in LONG_SUFFIXES and (suffix != ".csv" or _is_long_csv(path)):
            data = ResponseData.from_long(path, default_subject=default)
        else:
            if cot is None and suffix == ".csv":
                first = _first_row(path)
                if first is not None:
                    _refuse_partial_long_header(path, first, ("item",))
            data = load_responses(path, cot=cot)
        row = _subject_row(data, subject, path)
        correct = data.correct[row]
        cots = data.cot_length[row] if data.cot_length is not None else None
        out = {}
        for j, item in enumerate(data.item_ids):
            if correct[j] == MISSING:
                continue
            t = None if cots is None or np.isnan(cots[j]) else float(cots[j])
            out[item] = (int(correct[j]), t)
        return out


def _is_long_csv(path: Path) -> bool:
    first = _first_row(path)
    return first is not None and "item" in {c.strip().lower() for c in first}


def _subject_row(data: ResponseData, subject, path: Path) -> int:
    subjects = data.subject_ids
    if subject is None:
        if len(subjects) == 1:
            return 0
        raise ResponseFileError(
            f"{path.name} holds {len(subjects)} subjects: name one with --subject (e.g. {subjects[0]!r})", file=str(path)
        )
    if subject not in subjects:
        shown = ", ".join(map(repr, subjects[:5])) + (" ..." if len(subjects) > 5 else "")
        raise ResponseFileError(f"{path.name} has no row {subject!r} (no subject {subject!r}); its subjects: {shown}", file=str(path), value=subject)
    return subjects.index(subject)
