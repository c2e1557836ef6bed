"""Griffe extension for the API reference: the docstrings of ``catengine`` and ``calibration`` are
reST-flavoured plain text, rendered here as Markdown.

* ``:role:`target``` (``:func:``, ``:class:``, ``:mod:``, ``:meth:``, ``:attr:``, ``:data:``,
  ``:exc:``) becomes a cross-reference when ``target`` is a dotted ``catengine.`` /
  ``calibration.`` path (so that a stale one fails ``mkdocs build --strict``), else a code span (a
  leading ``~`` dropped);
* index notation such as ``full[selector][scoring]`` or ``[theta_i, 1][theta_i, 1]'`` outside
  code spans stays text: the ``[`` after ``]`` (or ``] ``) is escaped, so Markdown does not read it as a reference link.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from griffe import Extension

_CODE = re.compile(r"(``.+?``|`[^`\n]+`)")
_INDEX = re.compile(r"\](\s*)\[")  # "][" or "] [": Markdown's reference-link syntax
_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|exc|obj|const):`~?([^`]+)`")


def _lazy_exports() -> dict[str, str]:
    """``catengine.<name>`` -> ``<module>.<name>`` for the names ``catengine/__init__.py`` loads
    lazily (its ``_LAZY`` table, read without importing the package)."""
    tree = ast.parse((Path(__file__).resolve().parents[2] / "catengine" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_LAZY" for t in node.targets):
            return {f"catengine.{name}": f"{module}.{name}" for name, module in ast.literal_eval(node.value).items()}
    return {}


_LAZY = _lazy_exports()


def _role(match) -> str:
    """A role naming a ``catengine`` / ``calibration`` object by its dotted path becomes a
    cross-reference (a stale one fails the strict build); any other role a code span."""
    target = match.group(1).strip()
    if re.fullmatch(r"(catengine|calibration)(\.\w+)+", target):
        return f"[``{target}``][{_LAZY.get(target, target)}]"
    return f"``{target}``"


def plain_text_to_markdown(text: str) -> str:
    """``text`` with reST roles as code spans and ``][`` outside code spans escaped."""
    parts = _CODE.split(text)
    text = "".join(part if k % 2 else _INDEX.sub(r"]\1\\[", part) for k, part in enumerate(parts))
    return _ROLE.sub(_role, text)


class PlainTextDocstrings(Extension):
    def on_instance(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain_text_to_markdown(obj.docstring.value)
