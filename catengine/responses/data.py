"""Response data: a subject (LLM) x item matrix of correctness and optional CoT lengths.

``correct`` is int8 with 1 = correct, 0 = incorrect, -1 = missing. ``cot_length`` (optional) is
float64 chain-of-thought length in tokens, NaN = missing. Missingness of the two is independent.

File formats (every reader raises ValueError naming the file line / row, column and value at fault):

* wide CSV (the LaRT data): :meth:`ResponseData.from_wide_csv` / :meth:`ResponseData.to_wide_csv`;
* long tables (CSV, JSONL, list of dicts, dict of columns): :meth:`ResponseData.from_long` /
  :meth:`ResponseData.to_long`;
* netCDF4 via xarray (imported lazily): :meth:`ResponseData.from_netcdf` /
  :meth:`ResponseData.to_netcdf` (atomic write, content sha256 recorded and checked on read).
"""

from __future__ import annotations

import bz2
import csv
import gzip
import hashlib
import lzma
import zlib
from contextlib import contextmanager
import io
import json
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from catengine.atomic import atomic_output
from catengine.errors import CatEngineError, ResponseFileError

MISSING = -1

#: Cell texts read as "missing" in CSV / JSONL files (compared case-insensitively, after stripping).
MISSING_TOKENS = frozenset({"", "na", "nan", "n/a", "null", "none"})

#: Column names of the long format (``from_long`` / ``to_long``).
LONG_COLUMNS = ("subject", "item", "correct", "cot_tokens")

_NETCDF_SCHEMA = "calibration.ResponseData"
_NETCDF_SCHEMA_VERSION = 1
_GROUP_VARIABLE = "subject_group"
_NETCDF_RESERVED = frozenset({"subject", "item", "correct", "cot_length", _GROUP_VARIABLE})


def _position(k: int) -> str:
    return f"position {k} (0-based)"


#: characters no id may hold: C0 and C1 control characters (NUL, tab, newline, escape, ...), DEL and
#: lone surrogates. netCDF cuts strings at a NUL and terminals and CSV files mangle the others, so an
#: id holding one would not survive a round trip through a bank or a response file.
_CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def control_character_problem(value: str, kind: str) -> str | None:
    """Why ``value`` (a ``kind`` id) is refused for a control character, or None."""
    match = _CONTROL_CHARACTERS.search(value)
    if match is None:
        return None
    return (f"{kind} id {value!r} contains the control character {match.group()!r} "
            f"(U+{ord(match.group()):04X}); ids must be printable text")


def _ids(values, n: int, kind: str, prefix: str, where=_position) -> tuple[str, ...]:
    """The ids (or ``prefix0, prefix1, ...``), checked: one per row / column, none empty, none
    twice, no control characters. ``where(k)`` says where id k is (a file reader passes its line
    and column)."""
    if values is None:
        return tuple(f"{prefix}{k}" for k in range(n))
    ids = tuple(str(v) for v in values)
    if len(ids) != n:
        raise ValueError(f"{len(ids)} {kind} ids given for {n} {kind}s (one id per {'row' if kind == 'subject' else 'column'})")
    check_controls = _CONTROL_CHARACTERS.search("".join(ids)) is not None  # the clean case in one pass
    seen: dict[str, int] = {}
    for k, v in enumerate(ids):
        if v == "":
            raise ValueError(f"{kind} id at {where(k)} is empty")
        if check_controls:
            problem = control_character_problem(v, kind)
            if problem:
                raise ValueError(f"{where(k)}: {problem}")
        if v in seen:
            raise ValueError(f"duplicate {kind} id {v!r} at {where(seen[v])} and {where(k)}")
        seen[v] = k
    return ids


def _empty_rows(correct: np.ndarray, cot: np.ndarray | None) -> np.ndarray:
    """Indices of the rows with no observed cell (neither a correctness value nor a CoT length)."""
    observed = correct != MISSING
    if cot is not None:
        observed = observed | ~np.isnan(cot)
    return np.flatnonzero(~observed.any(axis=1))


def _cell_name(variable: str, i: int, j: int, subject_ids, item_ids) -> str:
    """``subject 'm0', item 'q1': correct`` when the ids are known, else ``correct[0, 1]`` (0-based)."""
    if subject_ids is not None and item_ids is not None and i < len(subject_ids) and j < len(item_ids):
        return f"subject {str(subject_ids[i])!r}, item {str(item_ids[j])!r}: {variable}"
    return f"{variable}[{i}, {j}]"


def _validate_correct(correct, subject_ids=None, item_ids=None) -> np.ndarray:
    arr = np.asarray(correct)
    if arr.ndim != 2:
        raise ValueError(f"correct must be a 2-D subject x item matrix, got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"the response matrix is empty (shape {arr.shape})")
    if arr.dtype.kind == "f":
        filled = np.where(np.isnan(arr), MISSING, arr)
    elif arr.dtype.kind in "iub":
        filled = arr  # checked in its own dtype: no widened copy of a large int8 matrix
    else:
        raise ValueError(f"correct must be numeric (0/1, -1 or NaN = missing), got dtype {arr.dtype}")
    if filled.dtype.kind == "b":
        return np.ascontiguousarray(filled, dtype=np.int8)
    if filled.min() >= MISSING and filled.max() <= 1 and (filled.dtype.kind != "f" or np.all(filled == np.round(filled))):
        return np.ascontiguousarray(filled, dtype=np.int8)
    bad = ~np.isin(filled, (0, 1, MISSING))
    if bad.any():
        i, j = (int(x) for x in np.argwhere(bad)[0])
        raise ValueError(
            f"{_cell_name('correct', i, j, subject_ids, item_ids)} = {arr[i, j].item()!r} is not binary; allowed "
            "values are 0, 1 and -1 (or NaN) for missing"
        )
    return np.ascontiguousarray(filled, dtype=np.int8)


def _validate_cot(cot_length, shape, subject_ids=None, item_ids=None) -> np.ndarray | None:
    if cot_length is None:
        return None
    arr = np.asarray(cot_length, dtype=np.float64)
    if arr.shape != shape:
        raise ValueError(f"cot_length has shape {arr.shape} but correct has shape {shape}")
    bad = np.isinf(arr) | (arr < 0)
    if bad.any():
        i, j = (int(x) for x in np.argwhere(bad)[0])
        raise ValueError(
            f"{_cell_name('cot_length', i, j, subject_ids, item_ids)} = {arr[i, j].item()!r} is not a valid token "
            "count (must be finite and >= 0; NaN = missing)"
        )
    return np.ascontiguousarray(arr)


# ---------------------------------------------------------------------------------------- parsing
class _CellError(CatEngineError, ValueError):
    """A cell value that cannot be parsed (the caller adds where it is)."""


def _parse_correct(value) -> int:
    """One correctness cell: 0/1 (also 0.0/1.0, true/false) or missing (None, NaN, empty, NA)."""
    if value is None:
        return MISSING
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in MISSING_TOKENS:
            return MISSING
        if text in ("true", "false"):
            return int(text == "true")
        try:
            x = float(text)
        except ValueError:
            raise _CellError(value) from None
    elif isinstance(value, (int, float, np.integer, np.floating)):
        try:
            x = float(value)
        except OverflowError:  # a JSON integer with hundreds of digits
            raise _CellError(value) from None
    else:
        raise _CellError(value)
    if math.isnan(x):
        return MISSING
    if x == 0.0 or x == 1.0:
        return int(x)
    raise _CellError(value)


def _parse_cot(value) -> float:
    """One CoT-length cell: a finite token count >= 0, or missing (None, NaN, empty, NA) -> NaN."""
    if value is None:
        return math.nan
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in MISSING_TOKENS:
            return math.nan
        try:
            x = float(text)
        except ValueError:
            raise _CellError(value) from None
    elif isinstance(value, (bool, np.bool_)):
        raise _CellError(value)
    elif isinstance(value, (int, float, np.integer, np.floating)):
        try:
            x = float(value)
        except OverflowError:
            raise _CellError(value) from None
    else:
        raise _CellError(value)
    if math.isnan(x):
        return math.nan
    if not math.isfinite(x) or x < 0 or x > MAX_COT_TOKENS:
        raise _CellError(value)
    return x


_CORRECT_ALLOWED = "must be 0 or 1; allowed: 0, 1, 0.0, 1.0, true/false; empty, NA or NaN = missing; -1 is rejected in files as ambiguous"
#: CoT lengths above this many tokens are rejected as implausible (the engine's default limit too)
MAX_COT_TOKENS = 1e9
_COT_ALLOWED = f"a CoT length must be a finite token count >= 0 and <= {MAX_COT_TOKENS:g}; empty, NA or NaN = missing"
#: a long table's cells: name in messages -> (parser, what a bad value is, what is allowed)
_LONG_CELLS = {"correct": (_parse_correct, "is not binary", _CORRECT_ALLOWED),
               "cot_tokens": (_parse_cot, "is invalid", _COT_ALLOWED)}


def _long_cell(name: str, raw, where: str, sid: str, iid: str):
    """One cell of a long table's row, parsed; a bad value raises ValueError naming the row, subject and item."""
    parse, verdict, allowed = _LONG_CELLS[name]
    try:
        return parse(raw)
    except _CellError:
        raise ValueError(f"{where}: subject {sid!r}, item {iid!r}: {name} = {raw!r} {verdict} ({allowed})") from None


_DECOMPRESSORS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}


def read_text(path: Path) -> str:
    """The whole text of a (optionally .gz / .bz2 / .xz compressed) UTF-8 file.

    A truncated or corrupt compressed file, or bytes that are not UTF-8, raise
    :class:`ResponseFileError` naming the file (and, for bad bytes, the line, column and bytes).
    """
    path = Path(path)
    opener = _DECOMPRESSORS.get(path.suffix.lower(), open)
    try:
        with opener(path, "rb") as fh:
            data = fh.read()
    except (EOFError, gzip.BadGzipFile, zlib.error, lzma.LZMAError, OSError) as exc:
        if isinstance(exc, (FileNotFoundError, IsADirectoryError, PermissionError)):
            raise
        raise ResponseFileError(
            f"{path.name}: the {path.suffix or 'file'} file is truncated or corrupt ({type(exc).__name__}: {exc})",
            file=str(path),
        ) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        start = exc.start
        line_start = data.rfind(b"\n", 0, start) + 1
        line = data.count(b"\n", 0, start) + 1
        column = start - line_start + 1
        bad = data[start:exc.end]
        raise ResponseFileError(
            f"{path.name} line {line}, column {column} (counted in bytes): bytes {bad!r} are not "
            "UTF-8; save the file as UTF-8",
            file=str(path), line=line, column=column, value=bad,
        ) from None


def _bad_wide_cell(path: Path, line: int, subject: str, item: str, text: str, problem: str) -> ResponseFileError:
    """The error for the cell ``text`` of a wide file (row ``subject`` at ``line``, column ``item``)."""
    return ResponseFileError(f"{path.name} line {line}: subject {subject!r}, item {item!r}: {problem}",
                             file=str(path), line=line, column=item, value=text)


def open_text(path: Path):
    """The text of a file as a file-like object for the csv/json readers (see :func:`read_text`)."""
    return io.StringIO(read_text(path), newline="")


def csv_rows(path: Path):
    """(line number, row) of every row of a CSV file; a CSV-level error (a field longer than the
    csv module's limit, a NUL byte) raises ResponseFileError naming the file and line."""
    reader = csv.reader(open_text(path))
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            line = reader.line_num
            raise ResponseFileError(f"{path.name} line {line}: not a readable CSV row ({exc})", file=str(path), line=line) from None
        yield reader.line_num, row


@contextmanager
def reading(path):
    """Every failure while reading ``path`` leaves as a ResponseFileError naming the file: ours
    pass through; other ValueErrors get the file name; foreign exceptions (a reader bug or an
    input no check foresaw) are wrapped, never shown as a bare traceback."""
    name = Path(path).name
    try:
        yield
    except (ResponseFileError, FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except ValueError as exc:
        text = str(exc)
        raise ResponseFileError(text if name in text else f"{name}: {text}", file=str(path)) from None
    except (IndexError, KeyError, TypeError, AttributeError, OverflowError, RecursionError, UnicodeError,
            EOFError, OSError, csv.Error, zlib.error, lzma.LZMAError, MemoryError) as exc:
        raise ResponseFileError(f"{name}: cannot be read ({type(exc).__name__}: {exc})", file=str(path)) from None


def format_suffix(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in _DECOMPRESSORS:
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def _read_wide(path: Path):
    """Read a wide CSV: returns (item_ids, subject_ids, rows of cell strings, line numbers).

    Every problem is a ResponseFileError naming this file (so that a CoT file's problem is never
    blamed on the accuracy file), with the line and, for the header, the column."""
    def fail(message, **where):
        return ResponseFileError(f"{path.name} {message}", file=str(path), **where)

    header = header_line = None
    subjects, rows, lines = [], [], []
    for line_num, row in csv_rows(path):
        if not row or all(cell.strip() == "" for cell in row):
            continue  # blank line
        if header is None:
            header, header_line = [cell.strip() for cell in row], line_num
            if len(header) < 2:
                raise fail(f"line {line_num}: the header has no item columns "
                           "(expected: row-label column, then one column per item)", line=line_num)
            continue
        if len(row) != len(header):
            label = row[0].strip() if row else ""
            raise fail(f"line {line_num} (subject {label!r}): {len(row)} fields, "
                       f"but the header has {len(header)} (row label + {len(header) - 1} items)", line=line_num)
        subjects.append(row[0].strip())
        rows.append(row[1:])
        lines.append(line_num)
    if header is None:
        raise fail("is empty: no header and no data rows (the response matrix is empty)")
    if not rows:
        raise fail("has a header but no data rows (the response matrix is empty)")
    try:  # the ids' own check, located in this file
        _ids(header[1:], len(header) - 1, "item", "", where=lambda k: f"line {header_line}, column {k + 2}")
        _ids(subjects, len(subjects), "subject", "", where=lambda k: f"line {lines[k]}, column 1")
    except ValueError as exc:
        raise ResponseFileError(f"{path.name}: {exc}", file=str(path)) from None
    return tuple(header[1:]), subjects, rows, lines


def _first_difference(a: Sequence[str], b: Sequence[str]):
    """Position and the two labels where the sequences first differ (None = absent), or None."""
    for k in range(max(len(a), len(b))):
        x = a[k] if k < len(a) else None
        y = b[k] if k < len(b) else None
        if x != y:
            return k, x, y
    return None


#: how ``_check_same_labels`` names the labels of a wide file: kind -> (labels, position, unit, what must agree)
_WIDE_LABELS = {
    "item": ("item columns", "item column {} (counted after the row-label column)", "item columns", "the same header"),
    "subject": ("row labels", "data row {}", "rows", "the same subjects"),
}


def _check_same_labels(kind: str, first: Sequence[str], second: Sequence[str], first_path: Path, second_path: Path):
    """Raise ValueError at the first position where two wide files' item (or subject) labels differ."""
    diff = _first_difference(first, second)
    if diff is None:
        return
    k, x, y = diff
    labels, position, unit, agree = _WIDE_LABELS[kind]
    raise ValueError(
        f"{labels} differ between {first_path.name} and {second_path.name} at {position.format(k + 1)}: "
        f"{x!r} vs {y!r} ({len(first)} vs {len(second)} {unit}); both files need {agree} in the same order"
    )


def _index_of(keys, ids: tuple[str, ...], kind: str) -> np.ndarray:
    """Integer positions selected by ``keys``: ids (str), integer positions, or a boolean mask."""
    n = len(ids)
    if keys is None:
        return np.arange(n)
    if isinstance(keys, (str, int, np.integer)):
        keys = [keys]
    keys = list(keys)
    if keys and all(isinstance(k, (bool, np.bool_)) for k in keys):
        if len(keys) != n:
            raise ValueError(f"boolean {kind} mask has {len(keys)} entries, expected {n}")
        out = np.flatnonzero(np.asarray(keys, dtype=bool))
    else:
        lookup = {v: k for k, v in enumerate(ids)}
        out = np.empty(len(keys), dtype=np.intp)
        for pos, key in enumerate(keys):
            if isinstance(key, str):
                if key not in lookup:
                    raise ValueError(f"unknown {kind} id {key!r}")
                out[pos] = lookup[key]
            elif isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
                if not -n <= key < n:
                    raise ValueError(f"{kind} index {key} is out of range for {n} {kind}s")
                out[pos] = key % n
            else:
                raise ValueError(f"{kind} selector {key!r} is neither an id (str) nor an integer index")
        dup = _first_duplicate(out)
        if dup is not None:
            raise ValueError(f"{kind} {ids[dup]!r} is selected more than once")
    if out.size == 0:
        raise ValueError(f"the selection keeps no {kind} (the response matrix would be empty)")
    return out


def _first_duplicate(index: np.ndarray):
    seen = set()
    for k in index.tolist():
        if k in seen:
            return k
        seen.add(k)
    return None


def _long_records(source) -> Iterator[tuple[str, Mapping]]:
    """Normalise a long-table source into an iterator of (location, record).

    The location names the file line (CSV, JSONL; 1-based, the CSV header is line 1) or the row
    index (0-based) of an in-memory table, for error messages.
    """
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        kind = format_suffix(path)
        if kind == ".csv":
            return _csv_records(path)
        if kind in (".jsonl", ".ndjson"):
            return _jsonl_records(path)
        if kind == ".json":
            return _json_records(path)
        raise ValueError(
            f"cannot read a long table from {path.name!r}: unknown format {kind or '(no suffix)'!r}; "
            "allowed: .csv, .jsonl, .ndjson, .json (optionally .gz, .bz2, .xz)"
        )
    if isinstance(source, Mapping):
        cols = {str(k): list(v) for k, v in source.items()}
        lengths = {k: len(v) for k, v in cols.items()}
        if len(set(lengths.values())) > 1:
            first = next(iter(lengths))
            for k, n in lengths.items():
                if n != lengths[first]:
                    raise ValueError(
                        f"column {k!r} has {n} values but column {first!r} has {lengths[first]} "
                        "(all columns of a long table must have the same length)"
                    )
        n = next(iter(lengths.values()), 0)

        def gen():
            for r in range(n):
                yield f"row {r}", {k: v[r] for k, v in cols.items()}

        return gen()
    if isinstance(source, Iterable):

        def gen():
            for r, rec in enumerate(source):
                if not isinstance(rec, Mapping):
                    raise ValueError(f"row {r}: expected a mapping column -> value, got {type(rec).__name__}")
                yield f"row {r}", rec

        return gen()
    raise ValueError(
        f"from_long expects a path (.csv/.jsonl), a sequence of dicts or a mapping column -> values, "
        f"got {type(source).__name__}"
    )


def _csv_records(path: Path):
    header = None
    for line_num, row in csv_rows(path):
        if not row or all(cell.strip() == "" for cell in row):
            continue
        if header is None:
            header = [cell.strip() for cell in row]
            dup = [c for c in header if header.count(c) > 1]
            if dup:
                raise ValueError(f"{path.name} line {line_num}: duplicate column {dup[0]!r} in the header")
            continue
        if len(row) != len(header):
            raise ResponseFileError(
                f"{path.name} line {line_num}: {len(row)} fields, but the header has {len(header)}",
                file=str(path), line=line_num,
            )
        yield f"{path.name} line {line_num}", dict(zip(header, row))


def jsonl_objects(path: Path):
    """(line number, object) of every non-blank line of a JSON Lines file (``.gz`` read transparently);
    a line that is not a JSON object raises ValueError naming the file and line."""
    with open_text(path) as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ResponseFileError(
                    f"{path.name} line {lineno}: not valid JSON ({exc.msg} at column {exc.colno}); "
                    "the file may be truncated or corrupt", file=str(path), line=lineno, column=exc.colno,
                ) from None
            except (ValueError, RecursionError) as exc:  # integers beyond 4300 digits, nesting beyond the stack
                raise ResponseFileError(
                    f"{path.name} line {lineno}: JSON value too large or too deeply nested ({type(exc).__name__})",
                    file=str(path), line=lineno,
                ) from None
            if not isinstance(rec, dict):
                raise ValueError(f"{path.name} line {lineno}: expected a JSON object, got {type(rec).__name__}")
            yield lineno, rec


def _json_records(path: Path):
    """A JSON document: a list of long-table records, or one object item -> correct | {"correct", "cot_tokens"}."""
    text = read_text(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResponseFileError(f"{path.name} line {exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno})",
                                file=str(path), line=exc.lineno, column=exc.colno) from None
    except (ValueError, RecursionError) as exc:
        raise ResponseFileError(f"{path.name}: JSON value too large or too deeply nested ({type(exc).__name__})",
                                file=str(path)) from None
    if isinstance(doc, list):
        for r, rec in enumerate(doc):
            if not isinstance(rec, dict):
                raise ResponseFileError(f"{path.name} entry {r}: expected a JSON object, got {type(rec).__name__}",
                                        file=str(path), value=rec)
            yield f"{path.name} entry {r}", rec
    elif isinstance(doc, dict):
        for item, value in doc.items():
            rec = dict(value) if isinstance(value, dict) else {"correct": value}
            rec["item"] = item
            yield f"{path.name} item {item!r}", rec
    else:
        raise ResponseFileError(f"{path.name}: expected a JSON list of records or an object item -> answer, "
                                f"got {type(doc).__name__}", file=str(path))


def _jsonl_records(path: Path):
    for lineno, rec in jsonl_objects(path):
        yield f"{path.name} line {lineno}", rec


def _id_value(value, column: str, where: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise ValueError(f"{where}: {column} is missing (every row needs a {column} id)")
    if isinstance(value, bool) or not isinstance(value, (str, int, np.integer)):
        raise ValueError(
            f"{where}: {column} id {str(value)[:80]!r} is a {type(value).__name__}; ids are strings (or integers)"
        )
    text = str(value).strip()
    if text == "":
        raise ValueError(f"{where}: {column} is empty (every row needs a {column} id)")
    problem = control_character_problem(text, column)
    if problem:
        raise ValueError(f"{where}: {problem}")
    return text


def _format_cot(x: float) -> str:
    if math.isnan(x):
        return "NA"
    return str(int(x)) if x.is_integer() and abs(x) < 2**53 else repr(x)


def _same_cell(c1: int, t1: float, c2: int, t2: float) -> bool:
    return c1 == c2 and (t1 == t2 or (math.isnan(t1) and math.isnan(t2)))


def _cell_text(c: int, t: float, has_cot: bool) -> str:
    text = f"correct={'NA' if c == MISSING else c}"
    if has_cot:
        text += f", cot_tokens={_format_cot(t)}"
    return text


def _long_column_names(columns: Mapping[str, str] | None) -> tuple[str, str, str, str]:
    """The source names of the (subject, item, correct, cot_tokens) columns after the
    ``columns=`` renames (canonical -> source) of :meth:`ResponseData.from_long`."""
    names = dict(zip(LONG_COLUMNS, LONG_COLUMNS))
    if columns is not None:
        unknown = set(columns) - set(LONG_COLUMNS)
        if unknown:
            raise ValueError(f"columns= renames unknown canonical column(s) {sorted(unknown)}; allowed: {LONG_COLUMNS}")
        names.update({k: str(v) for k, v in columns.items()})
    return tuple(names[c] for c in LONG_COLUMNS)


def _fixed_index(ids, kind: str) -> dict[str, int] | None:
    """id -> position of a given id list (checked like any id list), or None."""
    if ids is None:
        return None
    ids = list(ids)
    ids = _ids(ids, len(ids), kind, "")
    return {v: k for k, v in enumerate(ids)}


class _LongCells:
    """The rows of a long table gathered into cells (:meth:`add`, one row at a time), then
    checked and pivoted to the (N, J) matrices (:meth:`pivot`); see :meth:`ResponseData.from_long`.

    ``cells``: (subject position, item position) -> (correct, cot, where); ``meta``: metadata
    column -> item position -> (text, where); ``has_cot``: some row so far had a CoT column.
    """

    def __init__(self, columns=None, metadata_columns=None, subject_ids=None, item_ids=None, default_subject=None):
        self.subject, self.item, self.correct, self.cot = _long_column_names(columns)
        self.canonical = {self.subject, self.item, self.correct, self.cot}
        self.cot_alias = "cot_length" if self.cot == "cot_tokens" else None
        if self.cot_alias:
            self.canonical.add(self.cot_alias)
        self.keep_meta = None if metadata_columns is None else {str(c) for c in metadata_columns}
        self.default_subject = default_subject
        self.subj_fixed = _fixed_index(subject_ids, "subject")
        self.item_fixed = _fixed_index(item_ids, "item")
        self.subj_index: dict[str, int] = dict(self.subj_fixed or {})
        self.item_index: dict[str, int] = dict(self.item_fixed or {})
        self.cells: dict[tuple[int, int], tuple[int, float, str]] = {}
        self.meta: dict[str, dict[int, tuple[str, str]]] = {}
        self.has_cot = False
        self.n_rows = 0

    def add(self, where: str, rec: Mapping) -> None:
        """One row (``where`` names it in errors): its cell, then its item metadata."""
        self.n_rows += 1
        rec = self._completed(where, rec)
        sid, iid, i, jj = self._positions(where, rec)
        c, t = self._values(where, rec, sid, iid)
        key = (i, jj)
        previous = self.cells.get(key)
        if previous is None:
            self.cells[key] = (c, t, where)
        elif not _same_cell(previous[0], previous[1], c, t):
            raise ValueError(
                f"conflicting duplicate rows for subject {sid!r}, item {iid!r}: "
                f"{_cell_text(previous[0], previous[1], self.has_cot)} ({previous[2]}) vs "
                f"{_cell_text(c, t, self.has_cot)} ({where})"
            )
        self._add_metadata(where, rec, jj, iid)

    def _completed(self, where: str, rec: Mapping) -> Mapping:
        """The row with the default subject and the cot_length alias filled in; a row without a
        required column raises."""
        if self.default_subject is not None and self.subject not in rec:
            rec = {**rec, self.subject: self.default_subject}
        if self.cot_alias and self.cot not in rec and self.cot_alias in rec:
            rec = {**rec, self.cot: rec[self.cot_alias]}
        for col in (self.subject, self.item, self.correct):
            if col not in rec:
                raise ValueError(
                    f"{where}: missing required column {col!r} (columns found: {sorted(map(str, rec))}); "
                    f"a long table needs {self.subject!r}, {self.item!r}, {self.correct!r} and optionally {self.cot!r}"
                )
        return rec

    def _positions(self, where: str, rec: Mapping) -> tuple[str, str, int, int]:
        """(subject id, item id, row, column) of the row; new ids are appended unless the ids are fixed."""
        sid = _id_value(rec[self.subject], "subject", where)
        iid = _id_value(rec[self.item], "item", where)
        for value, fixed, index, kind in (
            (sid, self.subj_fixed, self.subj_index, "subject"),
            (iid, self.item_fixed, self.item_index, "item"),
        ):
            if value not in index:
                if fixed is not None:
                    raise ValueError(f"{where}: {kind} {value!r} is not among the given {kind}_ids")
                index[value] = len(index)
        return sid, iid, self.subj_index[sid], self.item_index[iid]

    def _values(self, where: str, rec: Mapping, sid: str, iid: str) -> tuple[int, float]:
        """(correct, cot tokens or NaN) of the row, parsed."""
        c = _long_cell("correct", rec[self.correct], where, sid, iid)
        t = math.nan
        if self.cot in rec:
            self.has_cot = True
            t = _long_cell("cot_tokens", rec[self.cot], where, sid, iid)
        return c, t

    def _add_metadata(self, where: str, rec: Mapping, jj: int, iid: str) -> None:
        """The row's other (kept) columns as item metadata, which must be constant per item."""
        for col, value in rec.items():
            col = str(col)
            if col in self.canonical or (self.keep_meta is not None and col not in self.keep_meta):
                continue
            per_item = self.meta.setdefault(col, {})
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            text = str(value).strip()
            if text == "":
                continue
            seen = per_item.get(jj)
            if seen is None:
                per_item[jj] = (text, where)
            elif seen[0] != text:
                raise ValueError(
                    f"item metadata column {col!r} is not constant for item {iid!r}: {seen[0]!r} ({seen[1]}) "
                    f"vs {text!r} ({where}); item-level columns must be constant per item "
                    "(pass metadata_columns=[...] to keep only item-level columns)"
                )

    def pivot(self):
        """(correct, cot or None, item metadata) of the gathered cells; absent cells are missing.
        An empty table, or a requested metadata column that never appeared, raises."""
        if self.n_rows == 0:
            raise ValueError("the long table has no data rows (the response matrix is empty)")
        if self.keep_meta is not None:
            absent = sorted(self.keep_meta - set(self.meta))
            if absent:
                raise ValueError(f"metadata column {absent[0]!r} was requested but is not in the table")
        n, j = len(self.subj_index), len(self.item_index)
        correct = np.full((n, j), MISSING, dtype=np.int8)
        cot = np.full((n, j), np.nan) if self.has_cot else None
        for (i, jj), (c, t, _) in self.cells.items():
            correct[i, jj] = c
            if cot is not None:
                cot[i, jj] = t
        item_metadata = {
            col: [per_item.get(k, ("", ""))[0] for k in range(j)] for col, per_item in self.meta.items()
        }
        return correct, cot, item_metadata



@dataclass(frozen=True, eq=False)
class ResponseData:
    """Immutable subject x item response matrix.

    Attributes
    ----------
    correct : (N, J) int8 array, 1 correct, 0 incorrect, -1 missing (read-only).
    cot_length : (N, J) float64 array of CoT tokens with NaN = missing, or None (read-only).
    subject_ids, item_ids : tuples of unique non-empty strings.
    item_metadata : mapping field name -> (J,) array of strings (e.g. ``benchmark``).
    subject_groups : tuple of N non-empty strings or None: which rows are runs of the same LLM (e.g.
        its zero-shot and one-shot runs). Cross-fitted checks hold a group's rows out together, so
        that a held-out run's sibling never calibrates the bank it is checked against. None: every
        row is its own LLM. :meth:`grouped_by` derives the groups from the subject ids.
    """

    correct: np.ndarray
    cot_length: np.ndarray | None
    subject_ids: tuple[str, ...]
    item_ids: tuple[str, ...]
    item_metadata: dict = field(default_factory=dict)
    subject_groups: tuple[str, ...] | None = None

    def __post_init__(self):
        correct = _validate_correct(self.correct, self.subject_ids, self.item_ids)
        cot = _validate_cot(self.cot_length, correct.shape, self.subject_ids, self.item_ids)
        n, j = correct.shape
        subject_ids = _ids(self.subject_ids, n, "subject", "subject_")
        item_ids = _ids(self.item_ids, j, "item", "item_")
        empty_rows = _empty_rows(correct, cot)
        if empty_rows.size:
            k = int(empty_rows[0])
            raise ValueError(
                f"subject {subject_ids[k]!r} (row {k}, 0-based) has no observed response; "
                f"{empty_rows.size} all-missing row(s) in total — drop them before calibrating"
            )
        metadata = {}
        for key, values in dict(self.item_metadata).items():
            vals = np.asarray([str(v) for v in values], dtype=str)
            if vals.shape != (j,):
                raise ValueError(f"item metadata {key!r} has {vals.size} entries, expected {j} (one per item)")
            vals.flags.writeable = False
            metadata[str(key)] = vals
        groups = None
        if self.subject_groups is not None:
            groups = tuple(str(g) for g in self.subject_groups)
            if len(groups) != n:
                raise ValueError(f"subject_groups has {len(groups)} entries, expected {n} (one per subject)")
            empty = [k for k, g in enumerate(groups) if not g.strip()]
            if empty:
                raise ValueError(f"subject {subject_ids[empty[0]]!r} (row {empty[0]}) has an empty subject group")
            if _CONTROL_CHARACTERS.search("".join(groups)):
                k = next(k for k, g in enumerate(groups) if _CONTROL_CHARACTERS.search(g))
                raise ValueError(f"subject {subject_ids[k]!r} (row {k}): {control_character_problem(groups[k], 'subject group')}")
        correct.flags.writeable = False
        if cot is not None:
            cot = cot.copy() if cot is self.cot_length else cot
            cot.flags.writeable = False
        object.__setattr__(self, "correct", correct)
        object.__setattr__(self, "cot_length", cot)
        object.__setattr__(self, "subject_ids", subject_ids)
        object.__setattr__(self, "item_ids", item_ids)
        object.__setattr__(self, "item_metadata", metadata)
        object.__setattr__(self, "subject_groups", groups)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_arrays(cls, correct, cot_length=None, *, subject_ids=None, item_ids=None, item_metadata=None,
                    subject_groups=None):
        """Build from a (N, J) correctness matrix (0/1, -1 or NaN = missing) and optional CoT lengths."""
        return cls(correct, cot_length, subject_ids, item_ids, dict(item_metadata or {}),
                   None if subject_groups is None else tuple(subject_groups))

    @classmethod
    def from_wide_csv(cls, accuracy_csv, cot_csv=None) -> "ResponseData":
        """Read the wide (LaRT) format: one CSV of correctness and optionally one of CoT lengths.

        First column = row label = subject id; header = item ids (the header's first cell, the
        label column's name, is ignored). Empty cells and ``NA``/``NaN`` are missing; correctness
        cells are 0/1 (``0.0``/``1.0`` and ``true``/``false`` are accepted too). The CoT file must
        have the same row labels and item header in the same order. ``.gz`` files are read
        transparently. Raises ValueError naming the file, line, subject, item and value of the
        first bad cell, or the first row/column label where the two files disagree.
        """
        acc_path = Path(accuracy_csv)
        item_ids, subject_ids, rows, lines = _read_wide(acc_path)
        n, j = len(rows), len(item_ids)
        correct = np.empty((n, j), dtype=np.int8)
        cache: dict[str, int] = {}
        for r, row in enumerate(rows):
            for c, text in enumerate(row):
                value = cache.get(text)
                if value is None:
                    try:
                        value = _parse_correct(text)
                    except _CellError:
                        raise _bad_wide_cell(acc_path, lines[r], subject_ids[r], item_ids[c], text,
                                             f"correctness value {text!r} is not binary ({_CORRECT_ALLOWED})") from None
                    cache[text] = value
                correct[r, c] = value
        cot = None
        if cot_csv is not None:
            cot_path = Path(cot_csv)
            cot_items, cot_subjects, cot_rows, cot_lines = _read_wide(cot_path)
            _check_same_labels("item", item_ids, cot_items, acc_path, cot_path)
            _check_same_labels("subject", subject_ids, cot_subjects, acc_path, cot_path)
            cot = np.empty((n, j), dtype=np.float64)
            for r, row in enumerate(cot_rows):
                for c, text in enumerate(row):
                    try:
                        cot[r, c] = _parse_cot(text)
                    except _CellError:
                        raise _bad_wide_cell(cot_path, cot_lines[r], subject_ids[r], item_ids[c], text,
                                             f"CoT length {text!r} is invalid ({_COT_ALLOWED})") from None
        empty = _empty_rows(correct, cot)  # checked here too, to name the line
        if empty.size:
            r = int(empty[0])
            raise ResponseFileError(
                f"{acc_path.name} line {lines[r]}: subject {subject_ids[r]!r} has no observed response "
                f"({empty.size} such row(s) in total); drop them before calibrating",
                file=str(acc_path), line=lines[r], value=subject_ids[r])
        return cls.from_arrays(correct, cot, subject_ids=subject_ids, item_ids=item_ids)

    @classmethod
    def from_long(
        cls,
        table_or_path,
        *,
        columns: Mapping[str, str] | None = None,
        metadata_columns: Sequence[str] | None = None,
        subject_ids: Sequence[str] | None = None,
        item_ids: Sequence[str] | None = None,
        default_subject: str | None = None,
    ) -> "ResponseData":
        """Read a long table: one row per (subject, item) cell.

        ``table_or_path``: a ``.csv`` or ``.jsonl``/``.ndjson`` file (optionally ``.gz``; JSONL = one
        JSON object per line), a sequence of dicts, or a mapping column -> sequence of values.
        Required columns: ``subject``, ``item``, ``correct`` (0/1, true/false; None/empty/NA =
        missing); optional ``cot_tokens`` (its presence in any row makes the result carry CoT
        lengths). ``columns`` renames: ``{"subject": "model_name", ...}`` (canonical -> source).
        Every other column is item metadata (e.g. ``benchmark``) and must be constant per item
        (empty values are ignored); ``metadata_columns`` restricts which extra columns are kept.
        Subjects and items are ordered by first appearance unless ``subject_ids`` / ``item_ids``
        fix the order (and the universe: cells of unknown ids raise). Cells absent from the table
        are missing. Duplicate rows of one (subject, item) are accepted once when their values
        are identical; conflicting duplicates raise ValueError naming both. ``default_subject``:
        the subject of rows without a subject column (a one-subject answer file). A ``.json``
        file holds a list of such records, or one object item -> correct (or -> {"correct",
        "cot_tokens"}). ``cot_length`` is accepted as another name of ``cot_tokens``.
        """
        table = _LongCells(columns, metadata_columns, subject_ids, item_ids, default_subject)
        for where, rec in _long_records(table_or_path):
            table.add(where, rec)
        correct, cot, item_metadata = table.pivot()
        return cls.from_arrays(
            correct,
            cot,
            subject_ids=list(table.subj_index),
            item_ids=list(table.item_index),
            item_metadata=item_metadata,
        )

    @classmethod
    def from_netcdf(cls, path) -> "ResponseData":
        """Read a file written by :meth:`to_netcdf` (dims ``subject`` x ``item``).

        ``correct`` is read raw (``mask_and_scale=False``) so that -1 stays -1. When the file
        records ``responses_sha256``, the content read must hash to it (else ValueError).
        """
        import xarray as xr

        from catengine.errors import ItemBankSchemaError
        from catengine.itembank.guard import probe_bank_file

        path = Path(path)
        with reading(path):
            try:
                probe_bank_file(path, "netCDF4 response file")  # a damaged file can neither hang nor crash the caller
            except ItemBankSchemaError as exc:
                raise ResponseFileError(f"{path.name}: {'; '.join(exc.problems)}", file=str(path)) from None
            with xr.open_dataset(path, engine="netcdf4", mask_and_scale=False) as ds:
                ds = ds.load()
            return cls.from_dataset(ds, source=path.name)

    @classmethod
    def from_dataset(cls, ds, *, source: str = "dataset") -> "ResponseData":
        """Rebuild from an xarray Dataset made by :meth:`to_dataset` (checks the recorded sha256)."""
        if "correct" not in ds:
            raise ValueError(f"{source}: no 'correct' variable; not a ResponseData dataset")
        if set(ds["correct"].dims) != {"subject", "item"}:
            raise ValueError(f"{source}: 'correct' has dims {ds['correct'].dims}, expected ('subject', 'item')")
        correct = ds["correct"].transpose("subject", "item").values
        cot = None
        if "cot_length" in ds:
            cot = ds["cot_length"].transpose("subject", "item").values.astype(np.float64)
        metadata = {}
        for name, var in ds.data_vars.items():
            if name in _NETCDF_RESERVED:
                continue
            if var.dims == ("item",) and var.attrs.get("role") == "item_metadata":
                metadata[str(name)] = [str(v) for v in var.values]
        groups = None
        if _GROUP_VARIABLE in ds:
            groups = [str(v) for v in ds[_GROUP_VARIABLE].values]
        data = cls.from_arrays(
            correct,
            cot,
            subject_ids=[str(v) for v in ds["subject"].values],
            item_ids=[str(v) for v in ds["item"].values],
            item_metadata=metadata,
            subject_groups=groups,
        )
        recorded = ds.attrs.get("responses_sha256")
        if recorded is not None and recorded != data.sha256():
            raise ValueError(
                f"{source}: content hashes to {data.sha256()} but it records "
                f"responses_sha256={recorded}; the data was modified or is corrupt"
            )
        return data

    # ------------------------------------------------------------------ writers
    def to_dataset(self, *, attrs: Mapping | None = None):
        """An xarray Dataset (dims ``subject``, ``item``) holding everything; see :meth:`to_netcdf`.

        Variables: ``correct`` int8 (-1 missing), optional ``cot_length`` float64 (NaN missing),
        one string variable on ``item`` per item-metadata field (attr ``role = "item_metadata"``),
        ``subject_group`` on ``subject`` when the data has :attr:`subject_groups`.
        Attrs: ``schema``, ``schema_version``, ``responses_sha256``, ``n_subjects``, ``n_items``,
        ``has_cot`` plus ``attrs`` (str/int/float values, e.g. provenance). Encodings are set so
        that no fill values are written.
        """
        import xarray as xr

        clash = sorted(_NETCDF_RESERVED & set(self.item_metadata))
        if clash:
            raise ValueError(f"item metadata field {clash[0]!r} clashes with a reserved variable name; rename it")
        root = {
            "schema": _NETCDF_SCHEMA,
            "schema_version": _NETCDF_SCHEMA_VERSION,
            "responses_sha256": self.sha256(),
            "n_subjects": self.n_subjects,
            "n_items": self.n_items,
            "has_cot": int(self.has_cot),
            "description": "LLM (subject) x item responses: correct 1/0, -1 = missing; cot_length in tokens, NaN = missing",
        }
        for key, value in dict(attrs or {}).items():
            if key in root:
                raise ValueError(f"attr {key!r} is written by to_dataset itself and cannot be overridden")
            if isinstance(value, (bool, np.bool_)):
                value = int(value)
            if not isinstance(value, (str, int, float, np.integer, np.floating)):
                raise ValueError(f"attr {key!r} = {value!r}: netCDF attrs take only str, int or float")
            root[str(key)] = value
        data_vars = {
            "correct": (
                ("subject", "item"),
                np.asarray(self.correct),
                {"long_name": "response correctness", "flag_values": "1 correct, 0 incorrect, -1 missing"},
            )
        }
        if self.cot_length is not None:
            data_vars["cot_length"] = (
                ("subject", "item"),
                np.asarray(self.cot_length),
                {"long_name": "chain-of-thought length", "units": "tokens", "missing": "NaN"},
            )
        for key, values in self.item_metadata.items():
            data_vars[key] = (("item",), np.asarray(values, dtype=object), {"role": "item_metadata"})
        if self.subject_groups is not None:
            data_vars[_GROUP_VARIABLE] = (("subject",), np.asarray(self.subject_groups, dtype=object),
                                          {"long_name": "the LLM each row is a run of (rows of one group are held out together)"})
        ds = xr.Dataset(
            data_vars,
            coords={
                "subject": np.asarray(self.subject_ids, dtype=object),
                "item": np.asarray(self.item_ids, dtype=object),
            },
            attrs=root,
        )
        for name in ds.variables:
            ds[name].encoding["_FillValue"] = None
        return ds

    def to_netcdf(self, path, *, attrs: Mapping | None = None, overwrite: bool = True) -> Path:
        """Write :meth:`to_dataset` as a netCDF4 file atomically (temporary file + rename); returns the path."""
        path = Path(path)
        if not overwrite and path.exists():
            raise FileExistsError(f"{path} exists (pass overwrite=True to replace it)")
        ds = self.to_dataset(attrs=attrs)
        with atomic_output(path) as tmp:
            ds.to_netcdf(tmp, engine="netcdf4", format="NETCDF4")
        return path

    def to_wide_csv(self, accuracy_csv, cot_csv=None) -> None:
        """Write the wide (LaRT) format read by :meth:`from_wide_csv`; missing cells are ``NA``.

        Item metadata is not part of this format and is not written.
        """
        if cot_csv is not None and self.cot_length is None:
            raise ValueError("cot_csv given but this ResponseData has no CoT lengths")
        targets = [(accuracy_csv, lambda i, j: "NA" if self.correct[i, j] == MISSING else str(int(self.correct[i, j])))]
        if cot_csv is not None:
            targets.append((cot_csv, lambda i, j: _format_cot(float(self.cot_length[i, j]))))
        for target, cell in targets:
            buf = io.StringIO()
            writer = csv.writer(buf, lineterminator="\n")
            writer.writerow(["", *self.item_ids])
            for i, sid in enumerate(self.subject_ids):
                writer.writerow([sid, *(cell(i, j) for j in range(self.n_items))])
            with atomic_output(target) as tmp:  # a kill mid-write never leaves a truncated CSV
                tmp.write_text(buf.getvalue(), encoding="utf-8")

    def to_long(self, *, drop_missing: bool = False) -> list[dict]:
        """Long table as a list of dicts (subject, item, correct, [cot_tokens], item metadata).

        Missing values are ``None``. By default every cell is listed (subject-major, item order
        kept), so ``ResponseData.from_long(d.to_long())`` reproduces ``d`` exactly (same sha256);
        ``drop_missing=True`` leaves out cells with neither correctness nor CoT length.
        """
        rows = []
        meta = list(self.item_metadata.items())
        for i, sid in enumerate(self.subject_ids):
            for j, iid in enumerate(self.item_ids):
                c = int(self.correct[i, j])
                t = None if self.cot_length is None else float(self.cot_length[i, j])
                if t is not None and math.isnan(t):
                    t = None
                if drop_missing and c == MISSING and t is None:
                    continue
                row = {"subject": sid, "item": iid, "correct": None if c == MISSING else c}
                if self.cot_length is not None:
                    row["cot_tokens"] = t
                for key, values in meta:
                    row[key] = str(values[j])
                rows.append(row)
        return rows

    # ------------------------------------------------------------------ selection
    def subset(self, subjects=None, items=None) -> "ResponseData":
        """Rows/columns selected by ids (str), integer positions or a boolean mask, in the given order.

        ``None`` keeps all. Raises ValueError for unknown ids, out-of-range positions, repeats,
        an empty selection, or when a kept subject has no observed cell among the kept items.
        """
        rows = _index_of(subjects, self.subject_ids, "subject")
        cols = _index_of(items, self.item_ids, "item")
        cot = None if self.cot_length is None else self.cot_length[np.ix_(rows, cols)]
        return type(self).from_arrays(
            self.correct[np.ix_(rows, cols)],
            cot,
            subject_ids=[self.subject_ids[k] for k in rows],
            item_ids=[self.item_ids[k] for k in cols],
            item_metadata={k: v[cols] for k, v in self.item_metadata.items()},
            subject_groups=None if self.subject_groups is None else [self.subject_groups[k] for k in rows],
        )

    def transposed(self) -> "ResponseData":
        """The same answers with rows and columns swapped: for files that hold one row per item and
        one column per LLM (e.g. ChemBench's ``binary_matrix_items_x_models.csv.gz``). Raises
        ValueError when the data carries item metadata or LLM groups, which would have no meaning
        once the axes are swapped."""
        if self.item_metadata:
            raise ValueError(f"cannot transpose data with item metadata ({', '.join(sorted(self.item_metadata))}): "
                             "the columns would become LLMs")
        if self.subject_groups is not None:
            raise ValueError("cannot transpose data with LLM groups (subject_groups): the rows would become items")
        return type(self).from_arrays(
            self.correct.T.copy(), None if self.cot_length is None else self.cot_length.T.copy(),
            subject_ids=list(self.item_ids), item_ids=list(self.subject_ids))

    def grouped_by(self, pattern: str, *, ignore_case: bool = True) -> "ResponseData":
        """The same data with :attr:`subject_groups` derived from the subject ids: rows whose ids are
        equal once every match of the regular expression ``pattern`` is removed (and, with
        ``ignore_case``, case is folded) are runs of one LLM.

        ``data.grouped_by(r"_(zero|one)_shot$")`` groups ``Qwen_Qwen3_8B_zero_shot`` with
        ``Qwen_Qwen3_8B_one_shot`` (and ``microsoft_Phi_4_mini_instruct_one_shot`` with
        ``microsoft_phi_4_mini_instruct_zero_shot``). Raises ValueError for an invalid pattern or one that matches no
        subject id (a typo would silently leave every run its own LLM), and when removing it leaves
        an id empty.
        """
        import re

        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"invalid subject-group pattern {pattern!r}: {exc}") from None
        stripped = [regex.sub("", sid) for sid in self.subject_ids]
        if all(g == sid for g, sid in zip(stripped, self.subject_ids)):
            raise ValueError(f"the subject-group pattern {pattern!r} matches none of the {self.n_subjects} subject ids "
                             f"(e.g. {self.subject_ids[0]!r})")
        for sid, g in zip(self.subject_ids, stripped):
            if not g.strip():
                raise ValueError(f"the subject-group pattern {pattern!r} removes all of subject id {sid!r}")
        return replace(self, subject_groups=tuple(g.casefold() if ignore_case else g for g in stripped))

    @property
    def llm_groups(self) -> np.ndarray:
        """(N,) int array: the group index of every row (each row its own group without
        :attr:`subject_groups`), numbered by first appearance."""
        if self.subject_groups is None:
            return np.arange(self.n_subjects)
        first: dict[str, int] = {}
        return np.array([first.setdefault(g, len(first)) for g in self.subject_groups], dtype=np.int64)

    def select_subjects(self, *, include=None, exclude=None) -> "ResponseData":
        """The LLMs named in ``include`` (all when None) minus those in ``exclude``, in stored order.

        Both are iterables of subject ids (e.g. to hold an LLM out of a calibration). Unknown ids
        raise ValueError naming them, so a typo never silently keeps an LLM in.
        """
        known = set(self.subject_ids)
        keep = [True] * self.n_subjects
        for label, ids in (("include", include), ("exclude", exclude)):
            if ids is None:
                continue
            if isinstance(ids, str):
                raise TypeError(f"{label} must be an iterable of subject ids, not one string {ids!r}")
            ids = [str(v) for v in ids]
            unknown = [v for v in ids if v not in known]
            if unknown:
                shown = ", ".join(repr(v) for v in unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
                raise ValueError(f"{label}: {len(unknown)} unknown subject id(s): {shown} (the data has {self.n_subjects} subjects)")
            wanted = set(ids)
            for k, sid in enumerate(self.subject_ids):
                if (sid in wanted) != (label == "include"):
                    keep[k] = False
        if not any(keep):
            raise ValueError("no subject is left after include/exclude")
        if all(keep):
            return self
        return self.subset(subjects=np.flatnonzero(keep))

    # ------------------------------------------------------------------ properties
    @property
    def shape(self) -> tuple[int, int]:
        return self.correct.shape

    @property
    def n_subjects(self) -> int:
        return self.correct.shape[0]

    @property
    def n_items(self) -> int:
        return self.correct.shape[1]

    @property
    def has_cot(self) -> bool:
        return self.cot_length is not None

    @property
    def observed(self) -> np.ndarray:
        """Boolean (N, J) mask of observed correctness cells."""
        return self.correct != MISSING

    def missing_rate(self) -> float:
        return float(np.mean(self.correct == MISSING))

    def sha256(self) -> str:
        """Stable sha256 of the canonical content (ids, matrices, metadata); independent of file format."""
        h = hashlib.sha256()
        header = {
            "format": "ResponseData/1",
            "shape": list(self.shape),
            "subject_ids": list(self.subject_ids),
            "item_ids": list(self.item_ids),
            "has_cot": self.has_cot,
            "item_metadata": {k: v.tolist() for k, v in sorted(self.item_metadata.items())},
        }
        if self.subject_groups is not None:  # absent otherwise, so that ungrouped data keeps its hash
            header["subject_groups"] = list(self.subject_groups)
        h.update(json.dumps(header, sort_keys=True, separators=(",", ":")).encode())
        h.update(np.ascontiguousarray(self.correct, dtype="<i1").tobytes())
        if self.cot_length is not None:
            # canonical NaN so that different NaN payloads hash identically
            cot = np.where(np.isnan(self.cot_length), np.nan, self.cot_length)
            h.update(np.ascontiguousarray(cot, dtype="<f8").tobytes())
        return h.hexdigest()

    def __repr__(self) -> str:
        cot = "with CoT lengths" if self.has_cot else "no CoT"
        groups = "" if self.subject_groups is None else f", {len(set(self.subject_groups))} LLM groups"
        return (
            f"ResponseData({self.n_subjects} subjects x {self.n_items} items, "
            f"{100 * self.missing_rate():.1f}% missing, {cot}{groups})"
        )
