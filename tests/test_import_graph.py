"""The import graph points one way: no circle between modules, no reaching into another package's
private ``_kernels`` or into any private module or name of the other of the two packages. Read from
the source with ``ast`` (function-level imports count too)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("catengine", "calibration")


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _is_package(name: str, modules) -> bool:
    return modules.get(name, Path()).name == "__init__.py"


def _imports(name: str, path: Path, modules) -> set[str]:
    """Modules (not packages) that ``name`` imports; ``from pkg import sub`` counts as ``pkg.sub``."""
    targets = set()
    package = name if _is_package(name, modules) else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in modules else base)
    return {t for t in targets if t in modules and not _is_package(t, modules) and t != name}


def _graph():
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items() if not _is_package(name, modules)}


def test_no_import_circle():
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "import circles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_graph_sees_a_circle_when_there_is_one():
    # guard against a checker that cannot fail: engine imports session, so an edge back closes one
    graph = _graph()
    assert "catengine.session.session" in graph["catengine.session.engine"]
    assert "catengine.session.bank_log" in graph["catengine.session.session"]


def test_no_module_imports_another_package_private_kernels():
    graph = _graph()
    offenders = []
    for name, targets in graph.items():
        for target in targets:
            if target.rpartition(".")[2] == "_kernels" and target.rpartition(".")[0] != name.rpartition(".")[0]:
                offenders.append(f"{name} imports {target}")
    assert not offenders, offenders


def test_catengine_widgets_do_not_drive_calibration():
    graph = _graph()
    for name, targets in graph.items():
        if name.startswith("catengine."):
            assert not any(t.startswith("calibration.") for t in targets), name
    for path in (ROOT / "catengine").rglob("*.py"):
        assert "import_module(\"calibration" not in path.read_text() and "import_module('calibration" not in path.read_text(), path


def _imported_names(path: Path, package: str) -> list[tuple[str, str]]:
    """(module, name) of every ``from module import name`` in ``path`` (relative imports resolved
    against ``package``; ``name`` is "" for a plain ``import module``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.extend((alias.name, "") for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            out.extend((base, alias.name) for alias in node.names)
    return out


def _private(module: str, name: str) -> bool:
    return any(part.startswith("_") and part != "__future__" for part in module.split(".")) or name.startswith("_")


def _inside(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_held_out_check_sits_below_the_audits():
    """``calibration.heldout`` (every default ``to_item_bank`` runs it) never imports the audits;
    the audits import the check's public names."""
    modules = _modules()

    def imports(name):
        package = name if _is_package(name, modules) else name.rpartition(".")[0]
        return {f"{module}.{imported}" if imported else module for module, imported in _imported_names(modules[name], package)}

    offenders = [f"{name} imports {t}" for name in modules if _inside(name, "calibration.heldout")
                 for t in imports(name) if _inside(t, "calibration.audit")]
    assert not offenders, offenders
    assert "calibration.heldout.replay_llms" in imports("calibration.audit.replay")  # the checker sees imports


def test_no_private_name_of_the_check_or_the_audits_is_imported_from_outside():
    """No module outside ``calibration.heldout`` / ``calibration.audit`` imports a private module or
    name of either, and the check imports no private name from outside itself."""
    modules = _modules()
    offenders = []
    for name, path in modules.items():
        package = name if _is_package(name, modules) else name.rpartition(".")[0]
        for module, imported in _imported_names(path, package):
            if not _private(module, imported):
                continue
            for guarded in ("calibration.heldout", "calibration.audit"):
                if _inside(module, guarded) and not _inside(name, guarded):
                    offenders.append(f"{name} imports {module}:{imported}")
            if _inside(name, "calibration.heldout") and not _inside(module, "calibration.heldout"):
                offenders.append(f"{name} imports {module}:{imported}")
    assert not offenders, offenders


def _cross_package_private_imports(name: str, imports) -> list[str]:
    """The imports of module ``name`` that reach a private module or name of the other package."""
    home = name.partition(".")[0]
    return [f"{name} imports {module}:{imported}" for module, imported in imports
            if module.partition(".")[0] in PACKAGES and module.partition(".")[0] != home and _private(module, imported)]


def test_no_private_name_crosses_between_the_two_packages():
    """``calibration`` uses ``catengine``'s public modules and names only (and ``catengine`` never
    imports ``calibration``): no private module (``catengine.models._fast_math``) or name."""
    modules = _modules()
    offenders = []
    for name, path in modules.items():
        package = name if _is_package(name, modules) else name.rpartition(".")[0]
        offenders += _cross_package_private_imports(name, _imported_names(path, package))
    assert not offenders, offenders


def test_the_check_sees_a_private_name_of_the_other_package():
    imports = [("catengine.models._fast_math", "horner"), ("catengine.models.kernels", "_private"),
               ("catengine.models.kernels", "exp_neg"), ("calibration.common", "Z95")]
    assert len(_cross_package_private_imports("calibration.methods.lart._kernels", imports)) == 2
