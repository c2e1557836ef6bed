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
