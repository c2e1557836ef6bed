"""Compile the library's cached numba kernels once, before the test workers need them.

``tests/conftest.py`` runs this at the start of an xdist run (in the controller only) as two
processes in parallel, and the workers start when both have finished. On a clean clone the numba
caches (``__pycache__/irt-*.nbi``, ``*.nbc`` beside each kernel module, ``catengine.numba_cache``) are empty; without this every
worker and every subprocess a test starts (CLI runs, notebook kernels, dask and audit workers)
compiles the kernels it meets at the same time as the others, each compile costing seconds. With
warm caches a process only loads what it finds (about 2 s here for every signature).

The kernels and their argument types are those the test suite compiles, listed in
``tests/numba_signatures.txt`` (``module:function<TAB>signature``, the slowest compiles first). The
list is a record, not a contract: an entry that no longer exists or no longer compiles is skipped,
and a kernel missing from it is compiled where it is first called, as without the warm-up.
Rewrite it from the caches after a full run with ``python tests/numba_warmup.py --record``.

The processes share the work through claim files: each walks the list in order and compiles the
functions that the other has not claimed yet (the heaviest first), so the two finish together
whatever the compile times on the machine.

    python tests/numba_warmup.py --claims DIR     compile (one of the workers)
    python tests/numba_warmup.py --record         rewrite tests/numba_signatures.txt from the caches
"""

from __future__ import annotations

import argparse
import glob
import importlib
import os
import pickle
import re
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SIGNATURES = HERE / "numba_signatures.txt"
#: the packages whose kernels are listed
PACKAGES = ("calibration", "catengine")


def read_signatures(path: Path = SIGNATURES) -> dict[str, list[str]]:
    """function ('module:qualname') -> its signatures, in the file's order."""
    out: dict[str, list[str]] = {}
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, sig = line.split("\t", 1)
        out.setdefault(name, []).append(sig)
    return out


def _type_namespace() -> dict:
    from numba.core import types

    ns = {name: getattr(types, name) for name in dir(types) if not name.startswith("_")}
    ns["bool"] = types.boolean
    return ns


def _named_tuples(module_name: str) -> dict:
    """name -> type constructor of the named tuples a kernel module defines (``typing.NamedTuple``
    arguments, e.g. ``catengine.session._replay_kernel.ReplayItems``): a signature names them by
    class, their fields' types by ``str()`` (``array(float64, 1d, C)``)."""
    from numba.core import types

    module = importlib.import_module(module_name)
    return {name: (lambda *tys, cls=obj: types.BaseTuple.from_types(tys, cls))
            for name, obj in vars(module).items()
            if isinstance(obj, type) and issubclass(obj, tuple) and hasattr(obj, "_fields")}


def parse_signature(text: str, ns: dict) -> tuple:
    """A numba argument-type tuple from its ``str()`` (e.g. ``(int64, Array(float64, 1, 'C', True, aligned=True))``;
    a named tuple's arrays as ``array(float64, 1d, C)``, its class found in ``ns``)."""
    text = re.sub(r"Literal\[int\]\((-?\d+)\)", r"IntegerLiteral(\1)", text)
    text = re.sub(r"Literal\[bool\]\((True|False)\)", r"BooleanLiteral(\1)", text)
    text = re.sub(r"omitted\(default=", "Omitted(", text)
    text = re.sub(r"(readonly )?array\((\w+), (\d+)d, ([CFA])\)",
                  lambda m: f"Array({m[2]}, {m[3]}, '{m[4]}', {bool(m[1])})", text)
    sig = eval(text, {"__builtins__": {"True": True, "False": False, "None": None}}, ns)  # noqa: S307 - our own file
    return sig if isinstance(sig, tuple) else (sig,)


def _dispatcher(name: str):
    module, qualname = name.split(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    # cBMM's kernels are a serial and a parallel dispatcher behind one function: the list names them
    # ``kernel`` (the serial one) and ``kernel.parallel``
    return getattr(obj, "serial", obj)


def _claim(claims: Path, name: str) -> bool:
    try:
        os.close(os.open(claims / re.sub(r"[^\w.-]", "_", name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def compile_listed(claims: Path, verbose: bool = False) -> tuple[int, int]:
    """Compile (or load from the cache) every listed function not claimed by another process;
    returns (signatures compiled or loaded, signatures skipped)."""
    ns = _type_namespace()
    done = skipped = 0
    for name, sigs in read_signatures().items():
        if not _claim(claims, name):
            continue
        t0 = time.perf_counter()
        try:
            disp = _dispatcher(name)
        except Exception as exc:  # noqa: BLE001 - a stale entry: the kernel moved or was removed
            skipped += len(sigs)
            if verbose:
                print(f"warm-up: skipped {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        local_ns = {**ns, **_named_tuples(name.split(":")[0])}
        for text in sigs:
            try:
                disp.compile(parse_signature(text, local_ns))
                done += 1
            except Exception as exc:  # noqa: BLE001 - a stale signature: compiled where first called instead
                skipped += 1
                if verbose:
                    print(f"warm-up: skipped {name}{text}: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
        if verbose:
            print(f"{time.perf_counter() - t0:7.2f} s  {name} ({len(sigs)})", file=sys.stderr)
    return done, skipped


def _index_files() -> list[Path]:
    cache_dir = os.environ.get("NUMBA_CACHE_DIR")
    if cache_dir:
        raise SystemExit("--record reads the in-tree caches (__pycache__ beside the sources): unset NUMBA_CACHE_DIR")
    return sorted(Path(p) for pkg in PACKAGES for p in glob.glob(str(ROOT / pkg / "**" / "__pycache__" / "irt-*.nbi"), recursive=True))


def record(path: Path = SIGNATURES) -> int:
    """Rewrite the list from the in-tree cache indexes of the current sources (keeps the order of
    the functions already listed; new ones go last). An index counts when its stamp is the one the
    kernel's cache computes now (``catengine.numba_cache``: the sources it reaches are unchanged)."""
    import numba

    from catengine.numba_cache import cache_stamp

    found: dict[str, list[str]] = {}
    tag = f".py{sys.version_info.major}{sys.version_info.minor}.nbi"
    for index in _index_files():
        if not index.name.endswith(tag):
            continue
        base = index.name[len("irt-"):]
        source = index.parent.parent / (base.split(".", 1)[0] + ".py")
        if not source.exists():
            continue
        with open(index, "rb") as f:
            version = pickle.load(f)
            data = f.read()
        if version != numba.__version__:
            continue
        stamp, overloads = pickle.loads(data)
        qualname = base[len(source.stem) + 1: -len(tag)].rsplit("-", 1)[0]
        name = f"{'.'.join(source.relative_to(ROOT).with_suffix('').parts)}:{qualname}"
        try:
            module, attrs = name.split(":")
            disp = importlib.import_module(module)
            for part in attrs.split("."):
                disp = getattr(disp, part)
            fresh = stamp == cache_stamp(getattr(disp, "serial", disp))
        except Exception:  # noqa: BLE001 - not reachable by name (e.g. a private copy of a helper)
            continue
        if fresh:
            found.setdefault(name, []).extend(sorted({str(key[0]) for key in overloads}))
    old = list(read_signatures(path))
    order = [n for n in old if n in found] + sorted(n for n in found if n not in old)
    lines = ["# numba kernels and argument types the test suite compiles (tests/numba_warmup.py --record);",
             "# module:function<TAB>signature, the slowest compiles first"]
    lines += [f"{name}\t{sig}" for name in order for sig in found[name]]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return sum(len(v) for v in found.values())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--claims", type=Path, help="directory of claim files shared by the warm-up processes")
    p.add_argument("--record", action="store_true", help="rewrite tests/numba_signatures.txt from the caches")
    p.add_argument("--verbose", action="store_true", help="print each function's compile time")
    args = p.parse_args(argv)
    if args.record:
        print(f"{record()} signatures written to {SIGNATURES}")
        return 0
    if args.claims is None:
        p.error("--claims DIR is required")
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. NumbaPerformanceWarning: the tests see them where they matter
        done, skipped = compile_listed(args.claims, args.verbose)
    print(f"numba warm-up: {done} signatures ready, {skipped} skipped, {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
