"""Attributes of a package that load on first use (PEP 562), for ``__init__`` modules.

    __getattr__, __dir__ = lazy_attributes(__name__, {"ItemBank": "catengine.itembank"}, __all__)

or, for a package whose public names are exactly its lazy ones,

    __all__, __getattr__, __dir__ = lazy_package(__name__, {"ItemBank": "catengine.itembank"})

Keeps the import of a package cheap: the module behind a name is imported when the name is first
read, and the value is then cached in the package's namespace.
"""

from __future__ import annotations

import sys
from importlib import import_module


def lazy_attributes(package: str, lazy: dict[str, str], names) -> tuple:
    """``(__getattr__, __dir__)`` for ``package``: ``lazy`` maps an attribute to its module."""

    def __getattr__(name):
        if name in lazy:
            value = getattr(import_module(lazy[name]), name)
            setattr(sys.modules[package], name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__


def lazy_package(package: str, lazy: dict[str, str]) -> tuple:
    """``(__all__, __getattr__, __dir__)`` for ``package`` whose public names are the keys of ``lazy``
    (in order), each loaded on first use as :func:`lazy_attributes` does."""
    names = list(lazy)
    return (names, *lazy_attributes(package, lazy, names))
