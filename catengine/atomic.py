"""Atomic file output: readers never see a partial file, and a failed write leaves nothing behind.

Every file the library writes (bank versions, response files, audit records and manifests,
simulated data) goes through :func:`atomic_output`.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: what open() would give a new file (mkstemp itself creates 0600)
DEFAULT_MODE = 0o666 & ~_umask()


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
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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
