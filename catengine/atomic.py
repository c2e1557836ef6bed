"""Atomic file output: readers never see a partial file, and a failed write leaves nothing behind.

Every file the library writes (bank versions, response files, audit records and manifests,
simulated data) goes through :func:`atomic_output`. :func:`exclusive_lock` makes a longer
read-modify-write step (a recalibration of a bank directory) single-writer.

Temporary files are named ``.<final name>.<host>-<pid>.<random>.tmp``. A writer killed with
SIGKILL cannot remove its own; :func:`remove_stale_temp_files` (run by every ``atomic_output``
for its target, and by ``write_item_bank`` for the whole bank directory) removes those whose
writer, on this host, is no longer running. A live writer's file is never touched; files of
other hosts are left alone.
"""

from __future__ import annotations

import os
import re
import socket
import tempfile
from contextlib import contextmanager
from pathlib import Path

from catengine.errors import CatEngineError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: locks are not taken
    fcntl = None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: what open() would give a new file (mkstemp itself creates 0600)
DEFAULT_MODE = 0o666 & ~_umask()


def _host_tag() -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname())[:40] or "host"


_TEMP_FILE = re.compile(r"^\.(?P<target>.+)\.(?P<host>[A-Za-z0-9_]+)-(?P<pid>[0-9]+)\.[^.]+\.tmp$")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # exists (another user's) or cannot tell: keep the file
    return True


def remove_stale_temp_files(directory, target: str | None = None) -> list[Path]:
    """Remove the temporary files of killed writers in ``directory`` (only ``target``'s if given):
    those made on this host by a process that no longer exists. Returns the removed paths."""
    removed = []
    host = _host_tag()
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        match = _TEMP_FILE.match(name)
        if not match or match["host"] != host or (target is not None and match["target"] != target):
            continue
        pid = int(match["pid"])
        if pid == os.getpid() or _pid_alive(pid):
            continue
        path = Path(directory) / name
        try:
            path.unlink()
        except OSError:
            continue
        removed.append(path)
    return removed


@contextmanager
def atomic_output(path, *, overwrite: bool = True, mode: int | None = None, fsync: bool = False):
    """Yield a temporary path in ``path``'s directory; when the block succeeds, move it to ``path``.

    ``overwrite=True`` uses ``os.replace``. ``overwrite=False`` hard-links instead, which fails
    with ``FileExistsError`` rather than replace an existing file, even when two writers race.
    ``mode`` sets the final permissions (default: as ``open`` would, under the umask); ``fsync``
    flushes the data to disk first. On any error, including KeyboardInterrupt, the temporary file
    is removed and ``path`` is left as it was.
    """
    path = Path(path)
    remove_stale_temp_files(path.parent, path.name)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.{_host_tag()}-{os.getpid()}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        if fsync:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        os.chmod(tmp, DEFAULT_MODE if mode is None else mode)
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class LockHeldError(CatEngineError, OSError):
    """Another process holds the lock of :func:`exclusive_lock`; the message names it."""


def _lock_holder_text(fd: int) -> str:
    """Who holds a lock file, from the pid and host its holder wrote into it."""
    try:
        text = os.pread(fd, 200, 0).decode("ascii", "replace").split()
    except OSError:
        text = []
    if len(text) >= 2 and text[0].isdigit():
        return f"process {text[0]} on host {text[1]}"
    return "another process (it has not written its pid yet)"


@contextmanager
def exclusive_lock(path, *, what: str, advice: str = ""):
    """Hold an exclusive operating-system lock (``flock``) on the file ``path`` for the block.

    The lock file is created for the block, holds the holder's pid and host, and is removed when
    the block ends (a taker checks, once locked, that the name still points at the file it locked,
    so removal cannot let two holders in). A second taker, in this process or another, gets
    :class:`LockHeldError` at once: "<what> is in use by process <pid> on host <host> (lock file
    <path>)", then ``advice``. The OS releases the lock of a killed process (its file stays and is
    simply locked again). On a file system without ``flock`` the block runs unlocked.
    """
    path = Path(path)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, DEFAULT_MODE)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _lock_holder_text(fd)
            os.close(fd)
            raise LockHeldError(f"{what} is in use by {holder} (lock file {path})"
                                + (f"; {advice}" if advice else "")) from None
        except OSError:  # no flock on this file system: run unlocked rather than refuse
            pass
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder before us removed the file after we opened it: take the new one
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {_host_tag()}\n".encode("ascii"), 0)
        yield path
    finally:
        try:
            path.unlink()  # still locked: a taker that opened it finds the name gone and retries
        except OSError:
            pass
        os.close(fd)  # closing releases the lock
