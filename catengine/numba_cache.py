"""``njit``: numba's ``njit`` whose ``cache=True`` keeps compiled kernels on disk for every process.

Every kernel of both packages is decorated with ``catengine.numba_cache.njit(cache=True, ...)``.
A process then loads what an earlier one compiled (tens of milliseconds a kernel) instead of
compiling it (up to seconds). Numba's own cache does most of the work (same directories: ``__pycache__``
beside the source, else the user's cache folder, or ``NUMBA_CACHE_DIR``; entries keyed by the
argument types, the CPU name and features and the numba version); this module adds what it lacks:

**Validity.** Numba checks only the source file of the cached function, so a kernel whose helper
(in another module) changed would keep running the old helper. Here an entry's stamp is the content
hash of every source file the kernel reaches (the modules of the compiled functions and intrinsics
it calls, transitively) and of the values of the globals it reads (numba freezes them into the
machine code). A pull, an upgrade or an edit anywhere in that closure makes the entry stale; a
second clone or install elsewhere has its own cache.

**Several processes at once** (xdist workers, an audit's or a study's processes). Numba rewrites a
function's index without a lock: two processes saving different signatures can both take data file
number 1, and the index can then name the other's machine code. Here the index and data are
written under an exclusive lock (``fcntl.flock`` on ``<entry>.lock`` beside them), each data file
records its stamp and argument types and is checked on load, and a process that misses the cache
waits (up to ``COMPILE_WAIT_SECONDS``) while another compiles the same function, then loads it.

**Parallel kernels** (``parallel=True``): numba compiles each ``prange`` loop into a separate
function (a "gufunc", optimised once) which the kernel's library links in and optimises again. A
process that compiled the kernel runs the gufunc compiled once; one that loads numba's cached
machine code runs the re-optimised copy, whose reductions LLVM may have reassociated differently
under ``fastmath``: a few ulps, which an iterative fit (SQUAREM) amplifies along flat directions.
The cache here also keeps the gufuncs' own machine code and loads it before the kernel, so a
loading process runs the bits that the compiling process ran, and a kernel cached in parallel
computes what its serial twin computes.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import time
import types
import warnings

import llvmlite.binding as ll
import numba
import numpy as np
from numba.core import caching, dispatcher, sigutils
from numba.core.compiler_lock import global_compiler_lock
from numba.core.runtime import rtsys

__all__ = ["COMPILE_WAIT_SECONDS", "cache_stamp", "njit"]

#: how long a process that misses the cache waits for another one compiling the same function
#: before compiling it itself
COMPILE_WAIT_SECONDS = 300.0
#: the packages whose source files and globals enter a kernel's stamp
_PACKAGES = ("catengine", "calibration")
#: prefix of this cache's files (numba's own cache of the same function, if any, keeps its names)
_PREFIX = "irt-"
#: symbol fragment of the functions numba outlines from ``prange`` loops
_GUFUNC = "__numba_parfor_gufunc_"
#: the layout of an entry's data: part of every stamp, so entries of another layout are stale
_FORMAT = 1
#: keeps the parallel kernels' gufunc libraries (loaded from the cache) alive
_LOADED_LIBRARIES: list = []


def njit(function=None, **options):
    """``numba.njit(**options)``; with ``cache=True`` the dispatcher uses this module's cache."""
    if function is None:
        return functools.partial(njit, **options)
    disp = numba.njit(**options)(function)
    if options.get("cache"):
        try:
            _use_shared_cache(disp, parallel=bool(options.get("parallel")))
        except Exception as exc:  # noqa: BLE001 - another numba's internals: its own cache still works
            warnings.warn(f"numba {numba.__version__}: {function.__qualname__} uses numba's own cache "
                          f"({type(exc).__name__}: {exc})", stacklevel=2)
            disp = numba.njit(**options)(function)
    return disp


def cache_stamp(disp) -> bytes:
    """The stamp the cache records for dispatcher ``disp`` (see the module's docstring)."""
    return _stamp(disp.py_func)


# ------------------------------------------------------------------------------------- stamp
@functools.lru_cache(maxsize=None)
def _file_digest(path: str, mtime_ns: int, size: int) -> bytes:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).digest()


def _digest_of_file(path: str) -> bytes:
    st = os.stat(path)
    return _file_digest(path, st.st_mtime_ns, st.st_size)


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _ours(obj) -> bool:
    module = getattr(obj, "__module__", None) or ""
    return module.split(".")[0] in _PACKAGES


def _value_digest(value) -> bytes | None:
    """A digest of a global numba would freeze into the machine code (None: not such a value)."""
    if isinstance(value, np.ndarray):
        return hashlib.sha256(f"{value.dtype.str}{value.shape}".encode() + np.ascontiguousarray(value).tobytes()).digest()
    if isinstance(value, (bool, int, float, complex, str, bytes, type(None))):
        return hashlib.sha256(repr(value).encode()).digest()
    if isinstance(value, tuple):
        parts = [_value_digest(v) for v in value]
        return None if any(p is None for p in parts) else hashlib.sha256(b"".join(parts)).digest()
    return None


def _callees(obj) -> list:
    """Python functions behind ``obj`` whose compiled code a kernel would include."""
    if isinstance(obj, dispatcher.Dispatcher):
        return [obj.py_func]
    defn = getattr(obj, "_defn", None)  # an @intrinsic
    if isinstance(defn, types.FunctionType):
        return [defn]
    if isinstance(obj, types.FunctionType) and _ours(obj):  # e.g. a register_jitable helper
        return [obj]
    return []


def _stamp(py_func) -> bytes:
    files: set[str] = set()
    values: list[bytes] = []
    seen: set[int] = set()
    stack = [py_func]
    while stack:
        func = stack.pop()
        if id(func) in seen:
            continue
        seen.add(id(func))
        files.add(os.path.abspath(func.__code__.co_filename))
        names = _code_names(func.__code__)
        refs = [(name, func.__globals__[name]) for name in sorted(names) if name in func.__globals__]
        refs += [(f"<cell {k}>", cell.cell_contents) for k, cell in enumerate(func.__closure__ or ())]
        for name, obj in refs:
            if isinstance(obj, types.ModuleType):
                if obj.__name__.split(".")[0] in _PACKAGES:  # K.kernel, K.CONSTANT
                    refs.extend((f"{obj.__name__}.{attr}", getattr(obj, attr)) for attr in sorted(names)
                                if hasattr(obj, attr) and not isinstance(getattr(obj, attr), types.ModuleType))
                continue
            callees = _callees(obj)
            if callees:
                stack.extend(callees)
                continue
            digest = _value_digest(obj)
            if digest is not None:
                values.append(name.encode() + b"=" + digest)
    h = hashlib.sha256(f"{_PREFIX}{_FORMAT}".encode())
    for path in sorted(files):
        h.update(os.path.basename(path).encode() + _digest_of_file(path))
    for v in sorted(values):
        h.update(v)
    return h.digest()


# ------------------------------------------------------------------------------------- locks
@contextlib.contextmanager
def _exclusive(path: str, wait: float | None = None):
    """An exclusive ``flock`` on ``path`` (created if absent) for the block; ``wait`` seconds at
    most (None: as long as it takes), after which the block runs without it. Where ``fcntl`` is
    missing (Windows) the block runs unlocked."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on the platforms the project tests
        yield False
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        yield False
        return
    try:
        deadline = None if wait is None else time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if deadline is None else fcntl.LOCK_NB))
                held = True
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    held = False
                    break
                time.sleep(0.05)
        yield held
    finally:
        os.close(fd)  # releases the lock


class _IndexDataCacheFile(caching.IndexDataCacheFile):
    """Numba's index and data files with a lazily computed stamp (the closure's modules must have
    been imported), and the path of the entry's lock."""

    def __init__(self, cache_path, filename_base, stamp_of):
        super().__init__(cache_path=cache_path, filename_base=filename_base, source_stamp=None)
        self._stamp_of = stamp_of
        self.lock_path = os.path.join(cache_path, f"{filename_base}.lock")

    @property
    def _source_stamp(self):
        return self._stamp_of()

    @_source_stamp.setter
    def _source_stamp(self, value):  # numba's __init__ assigns it
        pass

    def has(self, key) -> bool:
        return key in self._load_index()


# ------------------------------------------------------------------------------------- cache
class _CompileResultImpl(caching.CompileResultCacheImpl):
    """Numba's compile-result cache with this module's file names."""

    def get_filename_base(self, fullname, abiflags):
        return _PREFIX + super().get_filename_base(fullname, abiflags)


def _gufunc_libraries(library) -> list:
    """The libraries of ``library``'s linking closure that define the gufuncs of its ``prange``
    loops, in the order a compiling process added them to the JIT (dependencies first)."""
    out, seen = [], set()

    def visit(lib):
        for dep in lib._linking_libraries:
            if id(dep) in seen:
                continue
            seen.add(id(dep))
            visit(dep)
            if any(not fn.is_declaration and _GUFUNC in fn.name for fn in dep._final_module.functions):
                out.append(dep)

    visit(library)
    return out


def _object_code(lib) -> tuple:
    """``lib`` serialised as numba serialises a cached library: its machine code (the code the
    compiling process runs) and its module for linking."""
    if getattr(lib, "_object_caching_enabled", False) and getattr(lib, "_compiled_object", None) is not None:
        return lib.serialize_using_object_code()
    shared = lib._get_module_for_linking().as_bitcode()
    module = ll.parse_bitcode(lib._final_module.as_bitcode())  # emitting code may change the module
    return (str(lib.name), "object", (lib._codegen._tm.emit_object(module), shared))


class _ParallelCompileResultImpl(_CompileResultImpl):
    """Also keeps the gufunc libraries' machine code and loads it before the kernel's."""

    def check_cachable(self, cres):
        if not super().check_cachable(cres):
            return False
        try:
            _gufunc_libraries(cres.library)
        except AttributeError:  # another numba's internals: compile in every process instead
            warnings.warn(f"numba {numba.__version__}: the parallel kernel {cres.fndesc.qualname} is not cached",
                          stacklevel=2)
            return False
        return True

    def reduce(self, cres):
        libraries = []
        for lib in _gufunc_libraries(cres.library):
            names = [fn.name for fn in lib._final_module.functions
                     if not fn.is_declaration and fn.linkage == ll.Linkage.external and _GUFUNC in fn.name]
            libraries.append((tuple(names), _object_code(lib)))
        return tuple(libraries), super().reduce(cres)

    def rebuild(self, target_context, payload):
        libraries, inner = payload
        codegen = target_context.codegen()
        if any(codegen._engine.is_symbol_defined(name) for names, _ in libraries for name in names):
            return None  # a gufunc of the same name is loaded (another compile's): compile afresh
        for init in inner[7]:  # the kernel's reload_init (starts the threading layer the gufuncs call)
            init()
        _LOADED_LIBRARIES.extend(codegen.unserialize_library(lib) for _, lib in libraries)
        return super().rebuild(target_context, inner)


def _args_text(sig) -> str:
    return str(tuple(sigutils.normalize_signature(sig)[0]))


class SharedCache(caching.FunctionCache):
    """Numba's function cache with a closure-wide stamp, locked writes and checked loads."""

    _impl_class = _CompileResultImpl

    def __init__(self, py_func, parallel: bool = False):
        if parallel:
            self._impl_class = _ParallelCompileResultImpl
        super().__init__(py_func)
        self._stamp_value = None
        self._cache_file = _IndexDataCacheFile(self._cache_path, self._impl.filename_base, self.stamp)
        self._depth = 0  # nesting of compiling()
        self._locked = False  # this process holds the entry's lock

    def stamp(self) -> bytes:
        if self._stamp_value is None:
            self._stamp_value = _stamp(self._py_func)
        return self._stamp_value

    def _save_overload(self, sig, data):
        if not self._enabled or not self._impl.check_cachable(data):
            return
        self._impl.locator.ensure_cache_path()
        key = self._index_key(sig, data.codegen)
        payload = (self.stamp(), _args_text(sig), self._impl.reduce(data))
        if self._locked:
            self._cache_file.save(key, payload)
        else:  # the wait for the lock ran out, or a save outside compile()
            with _exclusive(self._cache_file.lock_path):
                self._cache_file.save(key, payload)

    def load_overload(self, sig, target_context):
        """Numba's ``load_overload`` with the runtime (NRT) started and the symbols machine code may
        link to defined, but without refreshing the target context: loading machine code needs
        none of the typing and lowering registries the refresh imports (0.2-0.4 s in a fresh
        process); a compile refreshes the context itself."""
        rtsys.initialize(target_context)
        import numba.cpython.hashing  # noqa: F401 - the one registry whose import defines symbols (hash secrets)

        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)

    def _load_overload(self, sig, target_context):
        if not self._enabled:
            return None
        key = self._index_key(sig, target_context.codegen())
        data = self._cache_file.load(key)
        if data is None:
            return None
        try:
            stamp, args, payload = data
        except (TypeError, ValueError):
            return None
        if stamp != self.stamp() or args != _args_text(sig):
            return None  # written by another version of the sources, or a stray entry
        return self._impl.rebuild(target_context, payload)

    def has(self, sig, target_context) -> bool:
        return self._enabled and self._cache_file.has(self._index_key(sig, target_context.codegen()))

    @contextlib.contextmanager
    def compiling(self):
        """The entry's lock, held while this process compiles the function and saves it (a
        function compiling itself for other types takes it once): others wait, then load it."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        with _exclusive(self._cache_file.lock_path, COMPILE_WAIT_SECONDS) as held:
            self._depth, self._locked = 1, held
            try:
                yield
            finally:
                self._depth, self._locked = 0, False


def _use_shared_cache(disp, parallel: bool) -> None:
    cache = SharedCache(disp.py_func, parallel=parallel)
    disp._cache = cache
    compile_one = disp.compile

    def compile(sig):
        args, _ = sigutils.normalize_signature(sig)
        if tuple(args) in disp.overloads:
            return compile_one(sig)
        with global_compiler_lock:  # one thread at a time, as numba compiles (reentrant: callees nest)
            if cache.has(sig, disp.targetctx):
                return compile_one(sig)
            with cache.compiling():
                return compile_one(sig)  # loads what another process compiled meanwhile, else compiles

    disp.compile = compile

