"""The check of a subject or item id that arrives from outside (``Engine``, ``catengine serve``)."""

from __future__ import annotations

from catengine.responses.readers import id_length_problem


def id_problem(value: str, kind: str) -> str | None:
    """Why the string ``value``, a ``kind`` id (e.g. "subject"), is refused, or None: longer than
    ``MAX_ID_LENGTH`` characters, or not valid Unicode (a lone surrogate, which no log or reply can
    encode). The message quotes only the id's first 40 characters."""
    problem = id_length_problem(value, kind)
    if problem:
        return problem
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        shown = f"{value[:40]!r}{'...' if len(value) > 40 else ''}"
        return f"{kind} id {shown} is not valid Unicode (a lone surrogate)"
    return None


def checked_id(value: str, kind: str, error: type[Exception]) -> str:
    """``value`` unchanged when :func:`id_problem` finds nothing wrong with it, else ``error``
    (the caller's exception class) raised with the problem."""
    problem = id_problem(value, kind)
    if problem:
        raise error(problem)
    return value
