"""Atomic file output: readers never see a partial file, and a failed write leaves nothing behind.

Every file the library writes (bank versions, response files, audit records and manifests,
simulated data) goes through :func:`atomic_output`.

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
