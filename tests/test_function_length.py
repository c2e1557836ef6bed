"""No function or method in catengine/ or calibration/ is longer than 100 lines (issue 47), so each
step can be read and tested alone. Compiled kernels are exempt: numba needs a kernel's loops in one
function to compile them together. Read from the source with ``ast``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("catengine", "calibration")
MAX_LINES = 100
KERNEL_MODULES = ("_kernels.py", "_replay_kernel.py")
KERNEL_DECORATOR_WORDS = ("njit", "jit", "parallel", "_serial_and_parallel")


def _decorator_name(node: ast.expr) -> str:
    return ast.unparse(node.func if isinstance(node, ast.Call) else node)


def _is_kernel(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(word in _decorator_name(d) for d in fn.decorator_list for word in KERNEL_DECORATOR_WORDS)


def _functions(tree: ast.AST, prefix: str = ""):
    """(qualified name, node) of every function and method, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def _long_functions():
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name in KERNEL_MODULES:
                continue
            for name, fn in _functions(ast.parse(path.read_text(encoding="utf-8"))):
                length = fn.end_lineno - fn.lineno + 1
                if length > MAX_LINES and not _is_kernel(fn):
                    out.append((length, f"{path.relative_to(ROOT)}:{fn.lineno} {name}"))
    return sorted(out, reverse=True)


def test_kernel_exemption_reads_the_decorators():
    tree = ast.parse("@njit(cache=True)\ndef a(): pass\n@numba.jit\ndef b(): pass\n"
                     "@_serial_and_parallel\ndef c(): pass\n@staticmethod\ndef d(): pass\n")
    assert [_is_kernel(fn) for _, fn in _functions(tree)] == [True, True, True, False]


def test_no_function_is_longer_than_100_lines():
    offenders = _long_functions()
    assert not offenders, (f"{len(offenders)} function(s) longer than {MAX_LINES} lines (split them into steps "
                           "that can be read and tested alone):\n" + "\n".join(f"  {n:4d} lines  {where}" for n, where in offenders))


def test_no_command_module_is_over_300_lines():
    """The command-line layer stays thin: every module of ``catengine/cli/`` and ``calibration/cli/``
    and every command module registered from a package (``commands.py``, ``*_command.py``) is at
    most 300 lines."""
    modules = [*(ROOT / "catengine" / "cli").glob("*.py"), *(ROOT / "calibration" / "cli").glob("*.py"),
               *(ROOT / "catengine").rglob("commands.py"), *(ROOT / "catengine").rglob("*_command.py")]
    assert len(modules) >= 15
    long = {str(p.relative_to(ROOT)): n for p in modules if (n := len(p.read_text(encoding="utf-8").splitlines())) > 300}
    assert not long, long
