"""Append-only JSONL session logs: one JSON object per line, flushed per line.

Events (every line has ``"event"``; all but the header name the ``"subject"``):

* ``header``  — first line: format, version, bank identity (id, version, source, fingerprint) and
  the engine configuration (selector, estimator, stopping, exposure as registry configs);
* ``open``    — a session starts: the subject's random generator state before any draw;
* ``propose`` — the engine proposed an item: item id, criterion value, generator state before the
  selection draw;
* ``propose_batch`` — the engine proposed a batch (``CATSession.next_items(k)``): ``k``, the
  items and their criterion values in selection order, generator state before the selection;
* ``record``  — an answer: item, correct, CoT length, whether the engine had proposed it, and the
  estimate after it (for readers in other languages; resume recomputes and compares it);
* ``exclude`` — an item was made unavailable to the subject;
* ``score``   — a reported full-benchmark score (``CATSession.predicted_score(record=True)``): the
  step it was computed at and the ``ScoreEstimate`` as a dict (derived data: resume skips it).

Reading: a line that does not parse (or lacks required fields) is an error, except the LAST line,
which may have been torn by a crash: it is reported with a :class:`CorruptLogWarning` and skipped,
and resuming moves those bytes to ``<log>.corrupt`` before appending again.
"""

from __future__ import annotations

import io
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: logs are written unlocked
    fcntl = None

from catengine.session.errors import CorruptLogWarning, SessionLogError, SessionLogLockedError

LOG_FORMAT = "catengine.session-log"
LOG_VERSION = 1
_REQUIRED = {
    "header": ("format", "version", "bank", "config"),
    "open": ("subject", "rng"),
    "propose": ("subject", "item", "rng"),
    "propose_batch": ("subject", "items", "rng"),
    "record": ("subject", "item", "correct", "estimate"),
    "exclude": ("subject", "item"),
    "score": ("subject", "score"),
    "note": ("subject",),
}


def rng_state_to_json(rng: np.random.Generator) -> dict:
    """The bit generator state as JSON-able data (arrays -> lists)."""

    def conv(v):
        if isinstance(v, dict):
            return {k: conv(x) for k, x in v.items()}
        if isinstance(v, np.ndarray):
            return {"__array__": v.tolist(), "dtype": str(v.dtype)}
        if isinstance(v, np.generic):
            return v.item()
        return v

    return conv(rng.bit_generator.state)


def rng_state_from_json(state: dict) -> dict:
    def conv(v):
        if isinstance(v, dict):
            if "__array__" in v:
                return np.asarray(v["__array__"], dtype=v["dtype"])
            return {k: conv(x) for k, x in v.items()}
        return v

    return conv(state)


def restore_rng(state: dict) -> np.random.Generator:
    """A Generator whose bit generator has the logged state."""
    st = rng_state_from_json(state)
    name = st.get("bit_generator", "PCG64")
    bitgen_cls = getattr(np.random, name, None)
    if bitgen_cls is None:
        raise SessionLogError(f"unknown bit generator {name!r} in session log")
    bg = bitgen_cls()
    bg.state = st
    return np.random.Generator(bg)


def _lock_holder(path: Path) -> str:
    """Who holds the flock on ``path``: "process <pid>" from /proc/locks (Linux), else "another writer"."""
    try:
        st = os.stat(path)
        wanted = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) < 6 or parts[1] != "FLOCK":
                    continue
                dev = parts[5].split(":")
                if len(dev) == 3 and (int(dev[0], 16), int(dev[1], 16), int(dev[2])) == wanted:
                    return f"process {parts[4]}"
    except (OSError, ValueError):
        pass
    return "another writer"


class LogWriter:
    """Appends JSON lines to a file, one ``write`` system call per line (optionally fsync-ed).

    * One writer per log: an exclusive OS lock (``flock``) on the file is taken when the writer
      opens it and held until :meth:`close` (or the process ends); a second writer, in this
      process or another, gets :class:`SessionLogLockedError` naming the holder's pid.
    * A line is either fully in the file or not at all: nothing is buffered in Python, and a
      write that fails part-way (disk full, file too large) is cut back off the file before the
      error is raised, so the next line cannot carry a stale copy.
    """

    def __init__(self, path, *, fsync: bool = False, must_be_new: bool = True):
        self.path = Path(path)
        if must_be_new and self.path.exists() and self.path.stat().st_size > 0:
            raise FileExistsError(f"session log {self.path} already exists; resume it or choose a new file")
        self._fh = io.FileIO(self.path, "a")  # O_APPEND, unbuffered: write() is one os.write
        try:
            if fcntl is not None:
                fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._fh.close()
            raise SessionLogLockedError(
                f"session log {self.path} is in use by {_lock_holder(self.path)}: one writer per log "
                "(stop it, or resume the log once it has exited)"
            ) from None
        except OSError:  # a file system without flock: keep going unlocked rather than refuse to log
            pass
        self._size = os.fstat(self._fh.fileno()).st_size
        if must_be_new and self._size > 0:
            self.close()
            raise FileExistsError(f"session log {self.path} already exists; resume it or choose a new file")
        self._fsync = bool(fsync)

    def write(self, event: dict) -> None:
        data = (json.dumps(event, allow_nan=False, separators=(",", ":")) + "\n").encode("utf-8")
        fd = self._fh.fileno()
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            if self._fsync:
                os.fsync(fd)
        except BaseException:
            self._cut_back()
            raise
        self._size += len(data)

    def _cut_back(self) -> None:
        """Remove a partly written line (the log must end with the last complete one)."""
        try:
            os.ftruncate(self._fh.fileno(), self._size)
        except OSError:
            pass

    def sync_size(self) -> None:
        """Re-read the file size (after the log was cut, e.g. a torn tail moved aside)."""
        self._size = os.fstat(self._fh.fileno()).st_size

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()  # closing the file releases the lock

    @property
    def closed(self) -> bool:
        return self._fh.closed


@dataclass
class LogContents:
    """A parsed log: the header, the events in order, and where the valid bytes end."""

    path: Path
    header: dict
    events: list[dict] = field(default_factory=list)
    valid_bytes: int = 0
    #: the 1-based line number of each event (same order as ``events``)
    lines: list[int] = field(default_factory=list)
    corrupt_tail: bytes = b""


def _check_event(obj) -> str | None:
    if not isinstance(obj, dict):
        return "not a JSON object"
    ev = obj.get("event")
    if ev not in _REQUIRED:
        return f"unknown event {ev!r}"
    missing = [k for k in _REQUIRED[ev] if k not in obj]
    if missing:
        return f"{ev} event lacks {missing}"
    return None


def read_log(path) -> LogContents:
    """Parse a session log (see module docstring for how corruption is handled)."""
    path = Path(path)
    data = path.read_bytes()
    if not data:
        raise SessionLogError(f"session log {path} is empty")
    lines = data.split(b"\n")
    ends_with_newline = data.endswith(b"\n")
    if ends_with_newline:
        lines = lines[:-1]
    offsets = []
    pos = 0
    for ln in lines:
        offsets.append(pos)
        pos += len(ln) + 1
    events = []
    line_numbers = []
    valid_end = 0
    corrupt_tail = b""
    for k, raw in enumerate(lines):
        is_last = k == len(lines) - 1
        problem = None
        obj = None
        if is_last and not ends_with_newline:
            problem = "line is not terminated (torn write)"
        else:
            try:
                obj = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as exc:
                problem = f"not valid JSON ({type(exc).__name__}: {exc})"
            else:
                problem = _check_event(obj)
        if problem is None and k == 0 and obj.get("event") != "header":
            problem = "the first line must be the header"
        if problem is not None:
            if is_last and k > 0:
                preview = raw[:120].decode("utf-8", "replace")
                warnings.warn(
                    f"{path}:{k + 1}: the last line of the session log is corrupt ({problem}) and was skipped: {preview!r}",
                    CorruptLogWarning,
                    stacklevel=3,
                )
                corrupt_tail = data[offsets[k]:]
                break
            raise SessionLogError(f"{path}:{k + 1}: corrupt session log line ({problem}); only a torn last line can be skipped")
        events.append(obj)
        line_numbers.append(k + 1)
        valid_end = offsets[k] + len(raw) + 1
    header = events[0]
    if header.get("format") != LOG_FORMAT:
        raise SessionLogError(f"{path} is not a catengine session log (format {header.get('format')!r})")
    if header.get("version") != LOG_VERSION:
        raise SessionLogError(f"{path} has session-log version {header.get('version')!r}; this library reads {LOG_VERSION}")
    return LogContents(path=path, header=header, events=events[1:], valid_bytes=valid_end, corrupt_tail=corrupt_tail,
                       lines=line_numbers[1:])


def quarantine_corrupt_tail(contents: LogContents) -> None:
    """Move a skipped corrupt last line to ``<log>.corrupt`` and cut it from the log, so appending can resume."""
    if not contents.corrupt_tail:
        return
    side = contents.path.with_name(contents.path.name + ".corrupt")
    with open(side, "ab") as fh:
        fh.write(contents.corrupt_tail + (b"" if contents.corrupt_tail.endswith(b"\n") else b"\n"))
    with open(contents.path, "r+b") as fh:
        fh.truncate(contents.valid_bytes)
    contents.corrupt_tail = b""
