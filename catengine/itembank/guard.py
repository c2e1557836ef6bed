"""A guard around reading a bank file: a damaged file can neither hang the caller nor crash it.

Some bit-damaged HDF5 files send the netCDF/HDF5 C library into an endless loop inside
``netCDF4.Dataset()`` (it holds the GIL: a thread cannot be interrupted). So the first time a
file is opened in a process, a *probe* reads it completely (every group, attribute and variable)
in a forked child process with a deadline; only a file the probe read cleanly is then opened in
the caller (:func:`open_datatree_guarded`). A probe that times out or crashes becomes a named
:class:`~catengine.errors.ItemBankSchemaError`. A file that passed is remembered by (device,
inode, size, modification time), so re-opening it costs no probe (bank versions are immutable).
The first open reads the file twice (child, then caller): about +0.1 s for a small bank.

A cheap pre-check spares the probe: ``write_item_bank`` stamps every version with the sha256 of
its bytes in an extended file attribute (``user.catengine.sha256``; no extra file, invisible to
directory listings). When the stamp is present and the bytes still hash to it, the file is exactly
what the library wrote and is opened directly (hashing costs ~1 ms per MB); otherwise (no stamp:
an older bank, a copied or received file, a file system without extended attributes; or a
mismatch) the probe runs.

Forking is safe only in a single-threaded process: a child forked while another thread holds a
lock (a Jupyter kernel's ZMQ threads, a Dask worker's pool, numba's thread pool, HDF5's own
mutex) can deadlock or crash. So the fork is used only when the process has one thread; otherwise,
and where ``os.fork`` is unavailable, the probe runs :func:`read_everything` in a fresh
``python -c`` subprocess that imports netCDF4 only (about 0.3 s slower, same guarantee). ``PROBE_TIMEOUT`` (seconds) bounds it; set ``CATENGINE_BANK_PROBE=0`` to skip the
probe for trusted files.

The probe process dies with its caller (:func:`die_with_parent`): a caller killed while a probe
reads a looping file leaves no reader process behind.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import select
import subprocess
import sys
import time
from pathlib import Path

from catengine.errors import ItemBankSchemaError

#: seconds a probe may take before the file is declared unreadable (a 30,000-item bank reads in < 1 s)
PROBE_TIMEOUT = 30.0
#: size, in bytes, above which the timeout grows (1 s more per 20 MB)
_SIZE_STEP = 20_000_000

_verified: dict[tuple, bool] = {}


XATTR = "user.catengine.sha256"


def file_sha256(path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def stamp_file_hash(path) -> bool:
    """Record the sha256 of ``path``'s bytes in its extended attribute (False where unsupported).
    Call it before the file is made read-only."""
    try:
        os.setxattr(path, XATTR, file_sha256(path).encode("ascii"))
    except (OSError, AttributeError):  # no xattr support (file system or platform): the probe runs instead
        return False
    return True


def _matches_stamp(path: Path) -> bool:
    try:
        recorded = os.getxattr(path, XATTR)
    except (OSError, AttributeError):
        return False
    return recorded == file_sha256(path).encode("ascii")


def _identity(path: Path) -> tuple:
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def read_everything(path: str) -> None:
    """Open ``path`` with netCDF4 and touch every group, attribute and variable (the probe's work)."""
    import netCDF4

    with netCDF4.Dataset(path, "r") as root:
        root.set_auto_maskandscale(False)
        stack = [root]
        while stack:
            group = stack.pop()
            for name in group.ncattrs():
                group.getncattr(name)
            for var in group.variables.values():
                for name in var.ncattrs():
                    var.getncattr(name)
                var[...]
            stack.extend(group.groups.values())


def thread_count() -> int:
    """Threads of this process, native ones included (Linux: /proc/self/task; elsewhere Python's count)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading

        return threading.active_count()


def _choose_probe():
    """The fork probe in a single-threaded process with ``os.fork``; the subprocess probe otherwise."""
    return _probe_fork if hasattr(os, "fork") and thread_count() == 1 else _probe_subprocess


def _probe_fork(path: str, timeout: float, what: str = "netCDF4 file") -> str | None:
    read_fd, write_fd = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # child: read the file, report, exit without running any cleanup of the parent's
        os.close(read_fd)
        code = 0
        try:
            die_with_parent(parent, timeout)
            read_everything(path)
        except BaseException as exc:  # noqa: BLE001 - everything is reported to the parent
            code = 1
            try:
                os.write(write_fd, f"{type(exc).__name__}: {exc}".encode("utf-8", "replace")[:2000])
            except OSError:
                pass
        os._exit(code)
    os.close(write_fd)
    try:
        message = b""
        poller = select.poll()  # not select.select: it fails for descriptors above 1024
        poller.register(read_fd, select.POLLIN | select.POLLHUP)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                return f"reading it did not finish within {timeout:.0f} s (the file is damaged: its structure loops)"
            if poller.poll(max(1, int(left * 1000))):
                chunk = os.read(read_fd, 4096)
                if not chunk:
                    break  # the child closed the pipe: it exited
                message += chunk
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(read_fd)
    if os.WIFSIGNALED(status):
        return f"reading it crashed the reader (signal {os.WTERMSIG(status)}; the file is damaged)"
    if os.WEXITSTATUS(status) != 0:
        return f"cannot be read as a {what} ({message.decode('utf-8', 'replace')})"
    return None


def die_with_parent(parent: int, timeout: float) -> None:
    """Make this probe process end when its parent ``parent`` does, even while it is stuck in the
    netCDF library holding the GIL (no Python code runs then, so no thread could notice):

    * Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` - the kernel kills it the moment the parent dies
      (checked against a parent that died before the call);
    * everywhere: ``SIGALRM`` with its default action (end the process) after ``timeout`` + 5 s,
      so an orphan cannot outlive the deadline its parent would have enforced.

    Runs in the probe process itself (the forked child, or the ``python -c`` subprocess, which
    gets this function's source), so it imports only the standard library."""
    import os
    import signal

    signal.signal(signal.SIGALRM, signal.SIG_DFL)  # not the parent's Python handler: it could never run
    signal.alarm(int(timeout) + 5)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # no usable libc: the alarm still bounds the orphan's life
            pass
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _probe_subprocess(path: str, timeout: float, what: str = "netCDF4 file") -> str | None:
    # the reader's own source, run without importing this package (a fast start)
    code = (f"import sys\n{inspect.getsource(die_with_parent)}\n{inspect.getsource(read_everything)}\n"
            "die_with_parent(int(sys.argv[2]), float(sys.argv[3]))\nread_everything(sys.argv[1])")
    try:
        proc = subprocess.run([sys.executable, "-c", code, path, str(os.getpid()), repr(float(timeout))],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"reading it did not finish within {timeout:.0f} s (the file is damaged: its structure loops)"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["crashed"])[-1]
        return f"cannot be read as a {what} ({last})"
    return None


def _load_tree(path: str):
    import xarray as xr

    with xr.open_datatree(path, engine="netcdf4", mask_and_scale=False) as tree:
        return tree.load()


def open_datatree_guarded(path, what: str = "netCDF4 item bank"):
    """The file's DataTree, loaded under the guard the first time (see the module docstring)."""
    path = Path(path)
    probe_bank_file(path, what)
    try:
        return _load_tree(str(path))
    except Exception as exc:  # noqa: BLE001 - whatever the netCDF stack raises, the error names the file
        raise ItemBankSchemaError(str(path), [f"cannot be read as a {what} ({type(exc).__name__}: {exc})"]) from None


def _check_signature(path: Path, what: str) -> tuple:
    try:
        key = _identity(path)
        with open(path, "rb") as fh:
            magic = fh.read(8)
    except OSError as exc:
        raise ItemBankSchemaError(str(path), [f"cannot be read ({type(exc).__name__}: {exc})"]) from None
    if magic != b"\x89HDF\r\n\x1a\n" and magic[:4] not in (b"CDF\x01", b"CDF\x02", b"CDF\x05"):
        raise ItemBankSchemaError(str(path), [f"cannot be read as a {what}: not a netCDF file (its first bytes are {magic!r})"])
    return key


def _remember(key: tuple) -> None:
    if len(_verified) > 4096:
        _verified.clear()
    _verified[key] = True


def probe_bank_file(path, what: str = "netCDF4 item bank") -> None:
    """Raise ItemBankSchemaError naming ``path`` unless a guarded child process reads it cleanly."""
    path = Path(path)
    key = _check_signature(path, what)
    if key in _verified or os.environ.get("CATENGINE_BANK_PROBE", "1") == "0":
        return
    if _matches_stamp(path):  # byte-identical to what write_item_bank wrote: nothing to fear
        _remember(key)
        return
    import netCDF4  # noqa: F401 - imported once here, not in every forked child (the caller needs it next)

    problem = _choose_probe()(str(path), PROBE_TIMEOUT + key[2] / _SIZE_STEP, what)
    if problem is not None:
        raise ItemBankSchemaError(str(path), [problem])
    _remember(key)
