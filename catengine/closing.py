"""``with x:`` for the objects that hold a resource until ``x.close()`` (a log, a connection, threads)."""

from __future__ import annotations

from typing import Self


class Closing:
    """Mixin: ``with x:`` gives ``x`` itself and calls ``x.close()`` on leaving, an exception included
    (which it does not suppress). The class defines ``close``."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
