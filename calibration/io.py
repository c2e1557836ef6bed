"""Read a response file of any supported format into :class:`calibration.ResponseData`."""

from __future__ import annotations

from pathlib import Path

from calibration.data import ResponseData

LONG_SUFFIXES = (".csv", ".jsonl", ".ndjson")


def _suffix(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def load_responses(path, *, cot=None, wide: bool = False) -> ResponseData:
    """Read ``path`` by its suffix: ``.nc`` (ResponseData netCDF), ``.csv``/``.jsonl`` (long table:
    subject, item, correct[, cot_tokens]); with ``wide=True`` (or when ``cot`` is given) a wide
    accuracy CSV (first column the subject id, header the item ids) plus an optional wide CoT CSV.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"response file {path} does not exist")
    if cot is not None and not Path(cot).exists():
        raise FileNotFoundError(f"CoT file {cot} does not exist")
    if wide or cot is not None:
        return ResponseData.from_wide_csv(path, cot)
    suffix = _suffix(path)
    if suffix == ".nc":
        return ResponseData.from_netcdf(path)
    if suffix in LONG_SUFFIXES:
        return ResponseData.from_long(path)
    raise ValueError(
        f"cannot tell the format of {path.name}: use .csv/.jsonl (long table), .nc (ResponseData netCDF), "
        "or a wide accuracy CSV with --wide (and --cot for CoT lengths)"
    )
