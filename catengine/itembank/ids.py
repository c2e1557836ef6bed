"""Item ids that name their benchmark (``math500/17``): matching an answer file's ids to a bank's,
and the error for answers keyed to another benchmark.

The shipped banks use ``<benchmark>/<k>``, ``k`` the item's position in the source dataset, so an
answer file made for another benchmark (``chembench/17``) cannot be matched to the wrong item
silently: :func:`foreign_ids_message` says which ids are foreign, to which benchmark they seem
keyed and which shipped bank holds that benchmark.

A file keyed by the benchmark's own ids (``0 .. 499``, as the source data is) is matched to the
bank's by :func:`map_item_ids`: explicitly with a prefix (``--item-prefix math500/``), or
automatically when the user named the bank, the bank's ids share one prefix, every id of the file
becomes a bank id by adding it and the file names no other benchmark. Bare ids are never read
against a bank that stood in by default: positions fit many benchmarks (``0 .. 39`` are AMC23's
items and the first forty of MATH500's), so the user must name the one they answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache


def namespace(item_id: str) -> str | None:
    """The benchmark part of ``"<benchmark>/<item>"`` (None for an id without one)."""
    head, sep, _ = str(item_id).partition("/")
    return head if sep and head else None


def bank_prefix(bank_ids) -> str | None:
    """The one ``"<benchmark>/"`` prefix that every id of a bank carries (None when the ids carry
    none, or not all the same one)."""
    spaces = {namespace(i) for i in bank_ids}
    if len(spaces) != 1 or None in spaces:
        return None
    return f"{next(iter(spaces))}/"


@dataclass(frozen=True)
class ItemIdMap:
    """How an answer file's item ids are matched to a bank's (:func:`map_item_ids`).

    ``mapping``: file id -> bank id, for the ids that change (all other ids are used as they are);
    ``prefix``: the prefix added; ``automatic``: True when it was added without being asked for.
    """

    mapping: dict[str, str] = field(default_factory=dict)
    prefix: str | None = None
    automatic: bool = False

    def apply(self, answers: dict) -> dict:
        """``answers`` (item id -> anything) keyed by the bank's ids, in the same order."""
        return {self.mapping.get(item, item): value for item, value in answers.items()}

    def note(self, source) -> str | None:
        """One line saying that the ids of ``source`` were read with the bank's prefix (None when
        nothing was mapped)."""
        if not self.mapping:
            return None
        pairs = list(self.mapping.items())
        first, last = pairs[0], pairs[-1]
        span = (f"{first[0]!r} .. {last[0]!r} as {first[1]!r} .. {last[1]!r}" if len(pairs) > 1
                else f"{first[0]!r} as {first[1]!r}")
        how = (f"; with that prefix every id of the file is one of the bank's and none names another benchmark "
               f"(--item-prefix {self.prefix} asks for this explicitly)" if self.automatic else "")
        return f"read {len(pairs)} item ids of {source} with the bank's prefix {self.prefix!r}: {span}{how}"


def map_item_ids(file_ids, bank_ids, *, prefix: str | None = None, source="the answer file",
                 assumed: str | None = None) -> ItemIdMap:
    """Match the item ids of an answer file (``source``, named in errors) to a bank's ids.

    With ``prefix`` (e.g. ``"math500/"``): every file id that is not a bank id becomes ``prefix +
    id`` where that is one (ids that are neither stay foreign, for the caller's error). Without
    it: if the bank's ids share one prefix (:func:`bank_prefix`), every file id is a bank id or
    becomes one with that prefix, and at least one needs it, the prefix is added automatically;
    otherwise nothing is mapped. An id given twice, once with the prefix and once without
    (``3`` and ``math500/3``), is a ValueError naming both and ``source``.

    ``assumed``: the id of a bank the user did not name (a default stood in for it). Without
    ``prefix``, bare file ids (no benchmark part) that are not its ids are then never mapped to
    its prefixed ids: they are a ValueError (:func:`bare_ids_message`) naming the assumed bank and saying that ``--bank``
    or ``--item-prefix`` must name the benchmark they answer.
    """
    file_ids = [str(i) for i in file_ids]
    in_bank = set(map(str, bank_ids))
    automatic = prefix is None
    if automatic and assumed is not None and bank_prefix(in_bank) is not None:
        bare = [i for i in file_ids if namespace(i) is None and i not in in_bank]
        if bare:
            raise ValueError(bare_ids_message(source, assumed, list(map(str, bank_ids)), bare))
    if automatic:
        prefix = bank_prefix(in_bank)
        if prefix is None:
            return ItemIdMap()
    elif not isinstance(prefix, str) or not prefix:
        raise ValueError(f"item prefix must be a non-empty string such as 'math500/', not {prefix!r}")
    mapping = {i: prefix + i for i in file_ids if i not in in_bank and prefix + i in in_bank}
    if automatic and len(mapping) != sum(i not in in_bank for i in file_ids):
        return ItemIdMap()  # some id maps to nothing (or names another benchmark): no silent guessing
    given = set(file_ids)
    both = next((i for i, target in mapping.items() if target in given), None)
    if both is not None:
        raise ValueError(f"{source}: item {both!r} and item {mapping[both]!r} are both given, and with the prefix "
                         f"{prefix!r} they are the same item of the bank; keep one of them")
    return ItemIdMap(mapping, prefix if mapping else None, automatic and bool(mapping))


def bare_ids_message(source, assumed: str, bank_ids, bare) -> str:
    """The error for bare item ids (``bare``: positions such as ``0 .. 39``, which name no benchmark)
    in ``source`` read against the bank ``assumed`` (ids ``bank_ids``), which the user did not name:
    which bank was assumed, that ``--bank`` or ``--item-prefix`` must name the benchmark, and the
    shipped banks whose items the ids are with their benchmark's prefix."""
    bare = [str(i) for i in bare]
    span = f"{bare[0]!r} .. {bare[-1]!r}" if len(bare) > 1 else repr(bare[0])
    bank_span = f"{bank_ids[0]!r} .. {bank_ids[-1]!r}" if bank_ids else "none"
    prefix = bank_prefix(bank_ids)
    message = (f"{source}: {len(bare)} item id{'s' if len(bare) != 1 else ''} ({span}) name{'s' if len(bare) == 1 else ''} "
               "no benchmark (bare positions fit many benchmarks), and no "
               f"--bank was given, so the default bank {assumed!r} was assumed ({len(bank_ids)} items, ids "
               f"{bank_span}); bare ids are read only against a bank you name: name the benchmark these answers "
               "are for with --bank (a shipped bank id or a bank directory)")
    message += (f" or --item-prefix (--item-prefix {prefix} reads them as items of {assumed!r})" if prefix
                else " or --item-prefix")
    holders = shipped_banks_for(bare)
    if holders:
        message += f"; with their benchmark's prefix they are item ids of the shipped {_named(holders)}"
    return message


def _shipped_ids() -> dict[str, tuple[str, ...]]:
    """Item ids of every shipped bank's latest version (bank id -> ids; a bank that cannot be read
    is left out: this only feeds hints in error messages). Read once per set of bank roots."""
    from catengine.itembank.shipped import shipped_bank_roots

    return _shipped_ids_under(tuple(str(root.resolve()) for root in shipped_bank_roots()))


@lru_cache(maxsize=4)
def _shipped_ids_under(roots: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    import xarray as xr

    from catengine.itembank.shipped import list_banks

    out = {}
    for card in list_banks():
        if card.get("error") or not card.get("path"):
            continue
        try:
            with xr.open_datatree(card["path"], engine="netcdf4", mask_and_scale=False) as tree:
                out[card["bank_id"]] = tuple(str(i) for i in tree["items"]["item"].values)
        except Exception:  # noqa: BLE001 - a hint is not worth an error of its own
            continue
    return out


def shipped_banks_for(item_ids, *, exclude: str | None = None) -> list[str]:
    """The shipped banks (ids, sorted) that hold all of ``item_ids``, as given or (for ids without
    a benchmark) with the bank's own prefix; ``exclude`` leaves one bank out."""
    item_ids = [str(i) for i in item_ids]
    found = []
    for bank_id, ids in _shipped_ids().items():
        if bank_id == exclude or not ids:
            continue
        ids_set, prefix = set(ids), bank_prefix(ids)
        if all(i in ids_set or (prefix and namespace(i) is None and prefix + i in ids_set) for i in item_ids):
            found.append(bank_id)
    return sorted(found)


def _named(banks: list[str]) -> str:
    return ", ".join(repr(b) for b in banks)


def foreign_ids_message(bank_id: str, bank_ids, foreign, *, limit: int = 5) -> str:
    """A message naming the first ``limit`` ids of ``foreign`` (not in the bank), what they look
    like and, where one holds them, the shipped bank they belong to."""
    foreign = [str(i) for i in foreign]
    bank_ids = list(bank_ids)
    shown = ", ".join(repr(i) for i in foreign[:limit]) + (f" and {len(foreign) - limit} more" if len(foreign) > limit else "")
    span = f"{bank_ids[0]!r} .. {bank_ids[-1]!r}" if bank_ids else "none"
    noun = "item id is" if len(foreign) == 1 else f"{len(foreign)} item ids are"
    message = f"{noun} not in bank {bank_id!r} ({len(bank_ids)} items, ids {span}): {shown}"
    ours = {namespace(i) for i in bank_ids[:1000]} - {None}
    theirs = sorted({namespace(i) for i in foreign} - {None} - ours)
    if theirs:
        message += (f"; they are keyed to benchmark {', '.join(map(repr, theirs))}, not "
                    f"{', '.join(map(repr, sorted(ours))) or 'this bank'}: use that benchmark's bank")
        keyed = [i for i in foreign if namespace(i) in theirs]
        holders = shipped_banks_for(keyed, exclude=bank_id)
        if holders:
            message += f" (shipped: {_named(holders)})"
    elif len(ours) == 1 and any(namespace(i) is None for i in foreign):
        prefix = next(iter(ours))
        bare = next(i for i in foreign if namespace(i) is None)
        ids = set(bank_ids)
        if f"{prefix}/{bare}" in ids:
            message += (f"; this bank's ids name their benchmark ({bare!r} would be {prefix + '/' + bare!r}): "
                        "key the answers by the bank's ids")
        unmapped = [i for i in foreign if namespace(i) is None and f"{prefix}/{i}" not in ids]
        holders = shipped_banks_for(foreign, exclude=bank_id) if unmapped else []
        if holders:
            message += (f"; {unmapped[0]!r} is not an item of this benchmark even with its prefix, and with "
                        f"their own benchmark's prefix these ids are item ids of the shipped {_named(holders)}")
    elif not ours and all(namespace(i) is None for i in foreign):
        holders = shipped_banks_for(foreign, exclude=bank_id)
        if holders:
            message += (f"; with their benchmark's prefix they are item ids of the shipped {_named(holders)}: "
                        "use the bank of the benchmark they answer")
    return message


__all__ = ["ItemIdMap", "bank_prefix", "bare_ids_message", "foreign_ids_message", "map_item_ids", "namespace", "shipped_banks_for"]
