"""Append-per-replication result store: one small netCDF file per (replication, cell).

Layout of an output directory::

    <dir>/audit.json               manifest: audit kind, configuration, seed, dimensions
    <dir>/records/<name>.nc        one record = one replication of one cell (e.g. one method at
                                   one sample size); its key is in the file's ``key`` attribute

Every record is written to a temporary file in the same directory and moved into place with
``os.replace`` (atomic on POSIX), so a record is either complete or absent: an interrupted audit is
resumed by running it again, which skips the records that exist. A record that flags a failed
computation (``failed`` = 1) is stored as ``<name>.failed.nc`` and does not count as done: a rerun
retries it (and a success replaces it). :meth:`ResultStore.load`
assembles all records into one ``xarray.Dataset`` with dims ``("replication", *cell dims, *record
dims)``; cells not (yet) computed hold NaN and ``done = False``.

The manifest pins the configuration: reopening a directory with a different configuration raises
instead of silently mixing incompatible results. :class:`MemoryStore` is the same interface
without files (``out=None``).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np

from catengine.atomic import atomic_output
from catengine.errors import CatEngineError

__all__ = ["MemoryStore", "ResultStore", "StoreMismatchError", "assemble", "record_name"]

MANIFEST = "audit.json"
RECORDS = "records"
_UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]+")


class StoreMismatchError(CatEngineError, ValueError):
    """An output directory holds results of a different audit configuration."""


def _canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_json_default)


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable: {obj!r}")


def record_name(key: dict) -> str:
    """File name of a record: readable parts plus a short hash of the canonical key (unique)."""
    digest = hashlib.sha256(_canonical(key).encode()).hexdigest()[:10]
    parts = [f"r{int(key['replication']):04d}"]
    parts += [_UNSAFE.sub("_", f"{k}={v}") for k, v in key.items() if k != "replication"]
    stem = "__".join(parts)[:150]
    return f"{stem}__{digest}.nc"


FAILED_SUFFIX = ".failed.nc"


def record_failed(record) -> bool:
    """Whether a record flags its computation as failed (``failed`` = 1): such records are kept
    for the report but do not count as done, so a rerun retries them."""
    flag = record.get("failed") if hasattr(record, "get") else None
    return flag is not None and int(np.asarray(flag.values).max(initial=0)) == 1


def _failed_name(name: str) -> str:
    return name[: -len(".nc")] + FAILED_SUFFIX


class _BaseStore:
    def __init__(self, layout: dict):
        #: {"kind", "cell_dims": {name: [values]}, "record_dims": {name: [values]}, "replications"}
        self.layout = layout

    def load(self):
        return assemble(self.layout, self._records(), attrs=self.attrs())

    def attrs(self) -> dict:
        return {}


class MemoryStore(_BaseStore):
    """Records kept in memory (``out=None``); the same interface as :class:`ResultStore`."""

    def __init__(self, layout: dict, config: dict):
        super().__init__(layout)
        self.config = config
        self._data: dict[str, object] = {}

    def done(self) -> set[str]:
        return {name for name, record in self._data.items() if not record_failed(record)}

    def write(self, key: dict, record) -> None:
        record = record.copy()
        record.attrs["key"] = _canonical(key)
        self._data[record_name(key)] = record

    def _records(self):
        return list(self._data.values())

    def attrs(self) -> dict:
        return {"config": _canonical(self.config)}


class ResultStore(_BaseStore):
    """A directory of per-record netCDF files with a manifest (see the module docstring)."""

    def __init__(self, directory, layout: dict, config: dict):
        super().__init__(layout)
        self.directory = Path(directory)
        self.records_dir = self.directory / RECORDS
        self.records_dir.mkdir(parents=True, exist_ok=True)
        self.config = config
        manifest = self.directory / MANIFEST
        wanted = {"config": json.loads(_canonical(config)), "layout": json.loads(_canonical(layout))}
        if manifest.exists():
            stored = json.loads(manifest.read_text())
            if stored.get("config") != wanted["config"]:
                diff = sorted(
                    k for k in set(stored.get("config", {})) | set(wanted["config"])
                    if stored.get("config", {}).get(k) != wanted["config"].get(k)
                )
                raise StoreMismatchError(
                    f"{self.directory} holds results of a different audit configuration (differs in: "
                    f"{', '.join(diff)}); use a fresh --out directory or the same settings to resume"
                )
            # the layout may grow (more replications); cells and record dims must agree
            if stored.get("layout", {}).get("cell_dims") != wanted["layout"]["cell_dims"] or \
                    stored.get("layout", {}).get("record_dims") != wanted["layout"]["record_dims"]:
                raise StoreMismatchError(f"{self.directory} holds results with different dimensions")
        _atomic_write_text(manifest, json.dumps(wanted, indent=1, sort_keys=True))

    @classmethod
    def open(cls, directory) -> "ResultStore":
        """Open an existing output directory read-only (its configuration from the manifest)."""
        manifest = cls.read_manifest(directory)
        store = cls.__new__(cls)
        _BaseStore.__init__(store, manifest["layout"])
        store.directory = Path(directory)
        store.records_dir = store.directory / RECORDS
        store.config = manifest["config"]
        return store

    @classmethod
    def read_manifest(cls, directory) -> dict:
        path = Path(directory) / MANIFEST
        if not path.exists():
            raise FileNotFoundError(f"{directory} is not an audit output directory (no {MANIFEST})")
        return json.loads(path.read_text())

    def path_for(self, key: dict) -> Path:
        return self.records_dir / record_name(key)

    def done(self) -> set[str]:
        """Names of the records computed successfully; a failed record (stored as
        ``<name>.failed.nc``) is not done, so a rerun computes it again."""
        return {p.name for p in self.records_dir.glob("*.nc") if not p.name.endswith(FAILED_SUFFIX)}

    def write(self, key: dict, record) -> Path:
        """Write one record atomically (temporary file in the same directory, then ``os.replace``).
        A failed record goes to ``<name>.failed.nc``; a later success replaces it."""
        path = self.path_for(key)
        failed_path = path.with_name(_failed_name(path.name))
        if record_failed(record):
            path = failed_path
        record = record.copy()
        record.attrs["key"] = _canonical(key)
        with atomic_output(path) as tmp:
            record.to_netcdf(tmp, engine="netcdf4")
        if path != failed_path:
            failed_path.unlink(missing_ok=True)  # the retry succeeded: the failure is history
        return path

    def _records(self):
        import xarray as xr

        out = []
        names = {p.name for p in self.records_dir.glob("*.nc")}
        for path in sorted(self.records_dir.glob("*.nc")):
            if path.name.endswith(FAILED_SUFFIX) and path.name[: -len(FAILED_SUFFIX)] + ".nc" in names:
                continue  # a retry succeeded and its failed predecessor was not removed yet
            with xr.open_dataset(path, engine="netcdf4") as ds:
                out.append(ds.load())
        return out

    def attrs(self) -> dict:
        return {"config": _canonical(self.config), "store": str(self.directory)}


def _atomic_write_text(path: Path, text: str) -> None:
    with atomic_output(path) as tmp:
        tmp.write_text(text)


def assemble(layout: dict, records, *, attrs: dict | None = None):
    """Combine records into one Dataset with dims (replication, *cell dims, *record dims).

    Numeric variables become float64 (NaN where a record is absent), string variables object
    arrays ("" where absent); ``done`` (bool) marks the records present.
    """
    import xarray as xr

    cell_order = layout.get("cell_order") or list(layout["cell_dims"])
    record_order = layout.get("record_order") or list(layout["record_dims"])
    cell_dims = {k: list(layout["cell_dims"][k]) for k in cell_order}
    record_dims = {k: list(layout["record_dims"][k]) for k in record_order}
    n_rep = int(layout["replications"])
    dims = ("replication", *cell_dims, *record_dims)
    shape = (n_rep, *(len(v) for v in cell_dims.values()), *(len(v) for v in record_dims.values()))
    index = {name: {_canonical(v): k for k, v in enumerate(values)} for name, values in cell_dims.items()}
    n_cell = len(cell_dims)
    arrays: dict[str, np.ndarray] = {}
    var_dims: dict[str, tuple] = {}
    var_attrs: dict[str, dict] = {}
    done = np.zeros(shape[: 1 + n_cell], dtype=bool)
    for rec in records:
        key = json.loads(rec.attrs["key"])
        rep = int(key["replication"])
        if rep >= n_rep:
            continue
        try:
            pos = (rep, *(index[name][_canonical(key[name])] for name in cell_dims))
        except KeyError:
            continue  # a record of a cell outside this layout
        done[pos] = True
        for name, var in rec.data_vars.items():
            if name not in arrays:
                extra = tuple(var.dims)
                unknown = [d for d in extra if d not in record_dims]
                if unknown:
                    raise ValueError(f"record variable {name!r} has dims {unknown} not declared in the layout")
                vshape = (*shape[: 1 + n_cell], *(len(record_dims[d]) for d in extra))
                if var.dtype.kind in "OSU":
                    arrays[name] = np.full(vshape, "", dtype=object)
                else:
                    arrays[name] = np.full(vshape, np.nan, dtype=np.float64)
                var_dims[name] = ("replication", *cell_dims, *extra)
                var_attrs[name] = dict(var.attrs)
            values = var.values
            if arrays[name].dtype == object:
                flat = [v.decode() if isinstance(v, bytes) else str(v) for v in np.asarray(values, dtype=object).ravel()]
                if np.ndim(values) == 0:
                    arrays[name][pos] = flat[0]
                else:
                    arrays[name][pos] = np.array(flat, dtype=object).reshape(np.shape(values))
            else:
                arrays[name][pos] = values
    coords = {"replication": np.arange(n_rep)}
    for name, values in {**cell_dims, **record_dims}.items():
        coords[name] = np.asarray(values, dtype=object if any(isinstance(v, str) for v in values) else None)
    data_vars = {name: (var_dims[name], arrays[name], var_attrs[name]) for name in arrays}
    data_vars["done"] = (("replication", *cell_dims), done, {"long_name": "record computed"})
    ds = xr.Dataset(data_vars, coords=coords, attrs={"audit": layout["kind"], **(attrs or {})})
    return ds.transpose(*[d for d in dims if d in ds.dims])
