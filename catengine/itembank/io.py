"""Reading and writing item banks: one netCDF4 file per version, never overwritten.

Layout: ``<directory>/<bank_id>_v<N>.nc``. Writing goes to a temporary file in the same directory
and is then hard-linked to its final name, which fails if that name exists, so a version is never
overwritten even by two writers racing; a failed write leaves nothing behind
(:func:`catengine.atomic.atomic_output`). The temporary file is read back with every check of
:func:`open_item_bank` before it gets its final name: a version that would not open is never
published.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

import xarray as xr

from catengine.atomic import atomic_output, remove_stale_temp_files
from catengine.errors import ItemBankSchemaError, ItemBankVersionExistsError
from catengine.itembank.bank import ItemBank
from catengine.itembank.guard import open_datatree_guarded, stamp_file_hash
from catengine.itembank.schema import CHECKSUM_ATTR, checksum_problems, content_sha256, name_problem
from catengine.itembank.versions import _VERSION_FILE, list_versions
from catengine.validation import is_integer

def _resolve(path_or_dir, version) -> Path:
    path = Path(path_or_dir)
    if path.is_file():
        if version not in ("latest", None):
            raise ValueError(f"version={version!r} given together with a file path {path}; pass the bank directory instead")
        return path
    if not path.exists():
        shipped = _shipped(path_or_dir)
        if shipped is None:
            raise FileNotFoundError(f"no item bank at {path} (and no shipped bank of that id; `catengine banks` lists them)")
        path = shipped
    versions = list_versions(path)
    if not versions:
        raise FileNotFoundError(f"directory {path} holds no item bank versions (<bank_id>_v<N>.nc)")
    if version in ("latest", None):
        return versions[max(versions)]
    if not is_integer(version):
        raise ValueError(f"version must be 'latest' or an int, got {version!r}")
    if version not in versions:
        raise FileNotFoundError(f"{path} has no version {version}; available: {sorted(versions)}")
    return versions[version]


def _shipped(name) -> Path | None:
    """The shipped bank directory for a bare bank id such as ``"math500_lart"`` (not a path), else None."""
    text = str(name)
    if not text or any(sep in text for sep in ("/", "\\", os.sep)) or text.startswith("."):
        return None
    from catengine.itembank.shipped import shipped_bank_directory

    return shipped_bank_directory(text)


def open_item_bank(path_or_dir, version="latest", *, content=None) -> ItemBank:
    """Open and validate an item bank file, or a version (default the latest) from a bank directory.

    ``content`` (a JSON-lines file of the questions, one ``problem`` or ``question`` per line) attaches
    the question texts that a bank ships only as hashes (``amc23_lart``): each text is verified
    against the item's recorded sha256, and the error names every item that does not match.

    A bare bank id that is not an existing path (``open_item_bank("math500_lart")``) opens the
    shipped bank of that id (``catengine banks`` lists them; see ``catengine.itembank.shipped``).

    Raises :class:`ItemBankSchemaError` listing every problem when the file is not a valid bank
    (truncated, not netCDF, missing variables, NaN parameters, unknown schema version, ...).
    """
    bank = _read_checked(_resolve(path_or_dir, version))
    return bank if content is None else bank.with_content_file(content)


def _read_checked(path: Path) -> ItemBank:
    """The bank in ``path`` with every check of :func:`open_item_bank` (schema, checksums, name)."""
    # read under a guard: a damaged file that would hang or crash the netCDF library is refused
    tree = open_datatree_guarded(path)
    try:
        bank = ItemBank(tree, source=str(path))
        problems = checksum_problems(tree)
    except ItemBankSchemaError:
        raise
    except Exception as exc:  # noqa: BLE001 - a value no check foresaw: still a named error
        raise ItemBankSchemaError(str(path), [f"invalid content ({type(exc).__name__}: {exc})"]) from None
    match = _VERSION_FILE.match(path.name)
    if match:
        if match["bank_id"] != bank.bank_id:
            problems.append(f"file name says bank_id {match['bank_id']!r} but the file says {bank.bank_id!r}")
        if int(match["version"]) != bank.version:
            problems.append(f"file name says version {match['version']} but the file says bank_version {bank.version}")
    if problems:
        raise ItemBankSchemaError(str(path), problems)
    if CHECKSUM_ATTR not in tree.attrs:
        import warnings

        from catengine.errors import BankChecksumWarning

        warnings.warn(f"{path}: this bank records no content checksum ({CHECKSUM_ATTR}), so damage to its parameters "
                      f"cannot be detected; `catengine banks upgrade {path}` writes a checksummed new version",
                      BankChecksumWarning, stacklevel=3)
    return bank


def upgrade_item_bank(path_or_dir, directory=None) -> Path:
    """Write the latest version of the bank at ``path_or_dir`` (a file, a bank directory or a shipped
    id) again as a new version in the current schema, with its content checksum; returns the new
    file. ``directory`` (default: the bank's own) receives it; the old version stays as it was."""
    import warnings

    from catengine.errors import BankChecksumWarning
    from catengine.itembank.schema import SCHEMA_VERSION

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BankChecksumWarning)
        bank = open_item_bank(path_or_dir)
    target = Path(directory) if directory is not None else Path(bank.source).parent
    tree = bank.to_datatree()
    tree.attrs.pop(CHECKSUM_ATTR, None)
    tree.attrs["schema_version"] = SCHEMA_VERSION  # every later schema reads what an earlier one wrote
    upgraded = ItemBank(tree, source=bank.source)
    return write_item_bank(upgraded, target, parent=bank.version if target.resolve() == Path(bank.source).parent.resolve()
                           else None)


def _encoding(tree: xr.DataTree) -> dict:
    encoding = {}
    for node in tree.subtree:
        variables = list(node.ds.variables)
        if variables:
            encoding[node.path] = {name: {"_FillValue": None} for name in variables}
    return encoding


def write_item_bank(bank: ItemBank, directory, *, version: int | None = None, parent: int | None = None) -> Path:
    """Write ``bank`` as a new version in ``directory`` and return the new file's path.

    By default the new version is one more than the latest on disk (pass ``version`` to choose it;
    an existing version raises :class:`ItemBankVersionExistsError`). ``parent_version`` records the
    lineage truthfully: ``parent`` when given (recalibration passes the version it linked to), else
    the version the bank was opened from if it came from disk, else 0 - a fresh fit is a new lineage
    root, not a child of whatever happens to be stored in the same directory. The write is atomic
    and never replaces an existing file.
    """
    if not isinstance(bank, ItemBank):
        raise TypeError(f"write_item_bank expects an ItemBank, got {type(bank).__name__}")
    problem = name_problem(bank.bank_id, "bank_id")
    if problem:  # never reached for a validated bank; the file name must stay inside directory
        raise ValueError(problem)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(directory)
    versions = list_versions(directory)
    for existing in versions.values():
        stored_id = _VERSION_FILE.match(existing.name)["bank_id"]
        if stored_id != bank.bank_id:
            raise ValueError(f"{directory} holds bank {stored_id!r}; refusing to write bank {bank.bank_id!r} there")
    latest = max(versions, default=0)
    if version is None:
        new_version = latest + 1
    elif not is_integer(version) or version < 1:
        raise ValueError(f"version must be a positive int, got {version!r}")
    elif version in versions:
        raise ItemBankVersionExistsError(f"{versions[version]} already exists; bank versions are never overwritten")
    else:
        new_version = version
    if parent is None:
        parent = bank.version if 0 < bank.version < new_version else 0
    elif isinstance(parent, bool) or not isinstance(parent, int) or parent < 0 or parent >= new_version:
        raise ValueError(f"parent must be an int in [0, {new_version}), got {parent!r}")
    elif parent and parent not in versions:
        raise ValueError(f"parent version {parent} is not stored in {directory}")
    stamped = bank.replace_attrs(
        bank_version=new_version,
        parent_version=parent,
        written_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    stamped = stamped.replace_attrs(**{CHECKSUM_ATTR: content_sha256(stamped.to_datatree())})
    final = directory / f"{bank.bank_id}_v{new_version}.nc"
    if final.resolve().parent != directory.resolve():
        raise ValueError(f"bank_id {bank.bank_id!r} would write outside {directory}")
    tree = stamped.to_datatree()
    try:
        # read-only for everyone; linked into place, which refuses to overwrite
        with atomic_output(final, overwrite=False, mode=0o444, fsync=True) as tmp:
            tree.to_netcdf(tmp, engine="netcdf4", encoding=_encoding(tree))
            stamp_file_hash(tmp)  # lets open_item_bank skip its guard probe (catengine.itembank.guard)
            _verify_read_back(tmp, final, stamped)  # publish only what reads back as written
    except FileExistsError:
        raise ItemBankVersionExistsError(f"{final} already exists; bank versions are never overwritten") from None
    _fsync_dir(directory)
    return final


def _verify_read_back(written: Path, final: Path, bank: ItemBank) -> None:
    """Raise ItemBankSchemaError naming ``final`` unless the file ``written`` opens as
    :func:`open_item_bank` would open ``final`` and holds ``bank``'s identity; the caller then
    never publishes it, so a version that fails its own read-back is never the latest."""
    try:
        back = _read_checked(written)
        problems = []
        if back.bank_id != bank.bank_id or back.version != bank.version:
            problems.append(f"reads back as bank {back.bank_id!r} v{back.version}, "
                            f"not {bank.bank_id!r} v{bank.version}")
    except ItemBankSchemaError as exc:
        problems = list(exc.problems) if getattr(exc, "problems", None) else [str(exc)]
    if problems:
        raise ItemBankSchemaError(str(final), [
            "not written: the new version failed its own read-back, so the latest version is unchanged",
            *problems,
        ])


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
