"""Finding item banks and reading their cards: the shipped banks and any under given directories.

Shipped banks live in the repository's ``item_banks/`` and are installed as package data
(``catengine/item_banks/``, copied there by ``setup.py`` when a wheel is built), so they are found
in a checkout, an editable install and a regular ``pip install``. Search order, first match of a
bank id wins:

1. the directories in the environment variable ``CATENGINE_BANKS`` (``os.pathsep``-separated);
2. the installed package data, ``<site-packages>/catengine/item_banks``;
3. the checkout's ``item_banks/`` beside the ``catengine`` package (source tree, editable install).

A *bank card* is the provenance a bank carries in its root attributes (``benchmark``, ``source``,
``license``, ``n_subjects``, ``calibration_method``, ``calibration_date``, ``replay_audit`` ...);
:func:`bank_card` returns it as a plain dict, JSON attributes decoded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from catengine.itembank.versions import _VERSION_FILE, list_versions

BANKS_ENV = "CATENGINE_BANKS"
#: card attributes stored as JSON strings
_JSON_CARD = ("source", "replay_audit", "interval_calibration")
_CARD_KEYS = ("benchmark", "description", "license", "n_subjects", "calibration_method", "calibration_date",
              "item_id_scheme", "created_at", "library_version")


def shipped_bank_roots() -> list[Path]:
    """Directories searched for shipped banks, in order (only existing ones)."""
    package = Path(__file__).resolve().parents[1]
    roots = [Path(p) for p in os.environ.get(BANKS_ENV, "").split(os.pathsep) if p.strip()]
    roots += [package / "item_banks", package.parent / "item_banks"]
    out = []
    for root in roots:
        if root.is_dir() and root.resolve() not in {r.resolve() for r in out}:
            out.append(root)
    return out


def _bank_directories(root: Path) -> list[Path]:
    """Every directory at or below ``root`` that holds bank versions (``<id>_v<N>.nc``); a bank file itself."""
    if root.is_file():
        return [root]
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        if any(_VERSION_FILE.match(name) for name in filenames):
            found.append(Path(dirpath))
    return found


def shipped_bank_directory(bank_id: str) -> Path | None:
    """The directory of the shipped bank ``bank_id`` (see the search order above), or None."""
    for root in shipped_bank_roots():
        candidate = root / bank_id
        if candidate.is_dir() and list_versions(candidate):
            return candidate
    return None


def _decode(value):
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def card_from_attrs(attrs: dict, *, path=None, n_items: int | None = None) -> dict:
    """A bank card (dict) from a bank's root attributes; missing card fields are None."""
    card = {
        "bank_id": attrs.get("bank_id"),
        "version": int(attrs["bank_version"]) if "bank_version" in attrs else None,
        "path": None if path is None else str(path),
        "response_model": attrs.get("response_model"),
        "n_items": n_items,
    }
    for key in _CARD_KEYS:
        value = attrs.get(key)
        card[key] = value.item() if hasattr(value, "item") else value
    for key in _JSON_CARD:
        card[key] = _decode(attrs.get(key))
    return card


def bank_card(bank) -> dict:
    """The card of an open :class:`~catengine.ItemBank` (see the module docstring)."""
    return card_from_attrs(bank.attrs, path=None if bank.source == "<memory>" else bank.source, n_items=bank.n_items)


def read_card(path) -> dict:
    """The card of the bank file ``path`` (or of the latest version in a bank directory), read lazily:
    only the root attributes and the item count, not the parameters or the stored responses."""
    import xarray as xr

    path = Path(path)
    if path.is_dir():
        versions = list_versions(path)
        if not versions:
            raise FileNotFoundError(f"directory {path} holds no item bank versions (<bank_id>_v<N>.nc)")
        path = versions[max(versions)]
    with xr.open_datatree(path, engine="netcdf4", mask_and_scale=False) as tree:
        attrs = dict(tree.attrs)
        n_items = int(tree["items"].sizes["item"]) if "items" in tree.children else None
    return card_from_attrs(attrs, path=path, n_items=n_items)


def list_banks(*directories, shipped: bool = True) -> list[dict]:
    """Cards of the latest version of every bank: the shipped ones (unless ``shipped=False``) and
    any at or below ``directories`` (a bank file given directly is listed as it is). A shipped id found in several roots is listed once (the first).
    A file that cannot be read is listed with its ``error``."""
    cards, seen_dirs, seen_shipped = [], set(), set()
    sources = [(root, True) for root in (shipped_bank_roots() if shipped else [])]
    for d in directories:
        d = Path(d)
        if not d.exists():
            raise FileNotFoundError(f"no directory {d}")
        sources.append((d, False))
    for root, is_shipped in sources:
        for directory in _bank_directories(root):
            key = directory.resolve()
            if key in seen_dirs or (is_shipped and directory.name in seen_shipped):
                continue
            seen_dirs.add(key)
            try:
                card = read_card(directory)
            except Exception as exc:  # noqa: BLE001 - a broken file is reported, the listing goes on
                card = card_from_attrs({"bank_id": directory.name}, path=directory)
                card["error"] = f"{type(exc).__name__}: {exc}"
            card["shipped"] = is_shipped
            if is_shipped:
                seen_shipped.add(directory.name)
            cards.append(card)
    return cards


__all__ = ["BANKS_ENV", "bank_card", "list_banks", "read_card", "shipped_bank_directory", "shipped_bank_roots"]
