"""Item ids that name their benchmark (``math500/17``) and the error for answers keyed to another one.

The shipped banks use ``<benchmark>/<k>``, ``k`` the item's position in the source dataset, so an
answer file made for another benchmark (``chembench/17``) or with bare positions (``17``) cannot
be matched to the wrong item silently: :func:`foreign_ids_message` says which ids are foreign and
to which benchmark they seem keyed.
"""

from __future__ import annotations


def namespace(item_id: str) -> str | None:
    """The benchmark part of ``"<benchmark>/<item>"`` (None for an id without one)."""
    head, sep, _ = str(item_id).partition("/")
    return head if sep and head else None


def foreign_ids_message(bank_id: str, bank_ids, foreign, *, limit: int = 5) -> str:
    """A message naming the first ``limit`` ids of ``foreign`` (not in the bank) and what they look like."""
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
    elif len(ours) == 1 and any(namespace(i) is None for i in foreign):
        prefix = next(iter(ours))
        bare = next(i for i in foreign if namespace(i) is None)
        if f"{prefix}/{bare}" in set(bank_ids):
            message += (f"; this bank's ids name their benchmark ({bare!r} would be {prefix + '/' + bare!r}): "
                        "key the answers by the bank's ids")
    return message


__all__ = ["foreign_ids_message", "namespace"]
