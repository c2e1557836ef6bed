"""The public surface: what ``import catengine`` offers resolves, covers the names the README and
the notebooks use, and no public class takes private constructor arguments."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import catengine

ROOT = Path(__file__).resolve().parents[1]


def test_every_top_level_export_resolves():
    missing = [name for name in catengine.__all__ if getattr(catengine, name, None) is None]
    assert not missing, missing


def test_the_exports_cover_what_the_readme_and_notebooks_import_from_catengine():
    texts = [(ROOT / "README.md").read_text(encoding="utf-8")]
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        texts += ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    used = set()
    for text in texts:
        for names in re.findall(r"^\s*from catengine import ([^\n(]+)", text, flags=re.M):
            used |= {n.strip() for n in names.split(",") if n.strip()}
    assert {"CATSession", "open_item_bank", "replay"} <= used
    assert used <= set(catengine.__all__), used - set(catengine.__all__)
    for name in ("default_selector_for", "default_stopping", "ResponseData", "load_responses", "replay",
                 "PairedSession", "UnknownItemError", "ItemAlreadyAnsweredError", "SessionLogError"):
        assert name in catengine.__all__, name


def test_no_public_class_takes_private_constructor_arguments():
    found = []
    for package in ("catengine", "calibration"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
                    continue
                for init in (n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"):
                    args = init.args
                    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)][1:]
                    found += [f"{path.relative_to(ROOT)}:{init.lineno} {node.name}({n})" for n in names if n.startswith("_")]
    assert not found, found


def test_the_api_index_lists_every_export_and_links_public_modules():
    """docs/api.md names every top-level export of both packages, each link opens a public module's
    reference page (docs/_hooks/api_reference.py generates one per public module), and every name
    it shows in backticks in a ``catengine`` or ``calibration`` section exists there."""
    import importlib
    import sys

    sys.path.insert(0, str(ROOT / "docs" / "_hooks"))
    from api_reference import public_modules

    import calibration

    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    shown = set(re.findall(r"`(\w+)`", text))
    for package in (catengine, calibration):
        assert set(package.__all__) <= shown, set(package.__all__) - shown
    links = set(re.findall(r"\(reference/([\w.]+)\.md\)", text))
    assert links and links <= set(public_modules()), links - set(public_modules())
    for module in links:  # each name linked to a module is that module's (or re-exported by it)
        for label in re.findall(r"\[(`[^\]]+`)\]\(reference/" + re.escape(module) + r"\.md\)", text):
            for one in (n.strip(" `") for n in label.split(",")):
                assert hasattr(importlib.import_module(module), one), (module, one)


def test_no_export_is_shadowed_by_a_submodule_of_the_same_name():
    """``package.name`` is the exported function or class whichever submodules were imported first
    (a submodule called like an export would replace it as an attribute of the package)."""
    import pkgutil

    import calibration

    for package in (catengine, calibration):
        submodules = {m.name for m in pkgutil.iter_modules(package.__path__)}
        assert not set(package.__all__) & submodules, set(package.__all__) & submodules
