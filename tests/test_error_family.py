"""One exception family: every exception class either package defines derives from
``catengine.errors.CatEngineError`` (alongside the builtin it specialises, so ``except ValueError``
keeps working), found by reading the sources, so optional integrations count too."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILTIN_EXCEPTIONS = {name for name, value in vars(builtins).items()
                      if isinstance(value, type) and issubclass(value, BaseException) and not issubclass(value, Warning)}


def _classes() -> dict[str, tuple[str, list[str]]]:
    """class name -> (where, base names) for every class in catengine/ and calibration/."""
    out = {}
    for package in ("catengine", "calibration"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    bases = [b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else "" for b in node.bases]
                    out.setdefault(node.name, (f"{path.relative_to(ROOT)}:{node.lineno}", bases))
    return out


def test_every_exception_class_is_a_catengine_error():
    classes = _classes()

    def is_exception(name, seen=()):
        if name in BUILTIN_EXCEPTIONS:
            return True
        if name not in classes or name in seen:
            return False
        return any(is_exception(b, (*seen, name)) for b in classes[name][1])

    def in_family(name, seen=()):
        if name == "CatEngineError":
            return True
        if name not in classes or name in seen:
            return False
        return any(in_family(b, (*seen, name)) for b in classes[name][1])

    exceptions = [name for name in classes if is_exception(name) and name != "CatEngineError"]
    mixins = {name for name in exceptions if name.startswith("_") and any(
        name in bases for _, bases in classes.values())}  # a private base shared by family members
    outside = [f"{name} ({classes[name][0]})" for name in exceptions if name not in mixins and not in_family(name)]
    assert len(exceptions) > 20
    assert not outside, "exception classes outside the CatEngineError family: " + ", ".join(outside)
