"""MkDocs hook: the API reference, one page per public module of ``catengine`` and ``calibration``.

A module is public when no part of its dotted name starts with ``_``. Each page is generated at
build time (``reference/<dotted name>.md``, holding ``::: <dotted name>``, which mkdocstrings
renders from the docstrings) and listed under "API reference" in the navigation, so that a new
module gets its page and a removed one loses it without editing ``mkdocs.yml``.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

PACKAGES = ("catengine", "calibration")
ROOT = Path(__file__).resolve().parents[2]


def public_modules() -> list[str]:
    """Dotted names of the public modules and packages, sorted (each package before its modules)."""
    names = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if parts[-1] == "__main__" or any(part.startswith("_") for part in parts):
                continue
            names.append(".".join(parts))
    return sorted(set(names), key=lambda name: name.split("."))


def _page(name: str) -> str:
    return f"reference/{name}.md"


def on_config(config, **kwargs):
    reference = []
    for package in PACKAGES:
        modules = [name for name in public_modules() if name == package or name.startswith(package + ".")]
        reference.append({package: [{name: _page(name)} for name in modules]})
    config["nav"] = [*(config["nav"] or []), {"API reference": reference}]
    return config


def on_files(files, config, **kwargs):
    for name in public_modules():
        files.append(File.generated(config, _page(name), content=f"# `{name}`\n\n::: {name}\n"))
    return files
