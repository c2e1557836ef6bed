"""Run audit tasks on a Dask cluster (``dask[distributed]``, the optional ``[distributed]`` extra).

Imported only when an audit is given ``scheduler=...``: the rest of ``calibration`` never imports
dask. A scheduler is

* ``"local"`` -- a :class:`distributed.LocalCluster` of ``n_workers`` processes with one thread
  each, started here and closed when the audit ends;
* ``"tcp://host:port"`` (any ``"<protocol>://..."`` address) -- an existing scheduler;
* the path of a scheduler file (``dask scheduler --scheduler-file PATH``) -- the same;

An address or file is checked before any record: an empty or malformed scheduler file, or an
address where nothing answers within :data:`CONNECT_TIMEOUT_S` seconds (connection refused, no such
host), is an error naming it and the reason;
* a :class:`distributed.Client` -- used as it is and left open.

Each record is one task. Tasks are submitted in a bounded window (a few per worker thread, so an
interrupt cancels little and the scheduler never holds the whole grid), their results stream back
as they finish and this process -- the client -- writes each into the audit's store at once. The
store therefore lives on the client's disk (shared or local, the workers never touch it) and an
interrupted audit resumes exactly as with the local process pool: the records written are skipped.

Results do not depend on the backend: a record's random streams come from its key
(:func:`calibration.common.stream`), never from the worker or the order of completion.

Faults: a worker process that dies (killed, out of memory) loses its running task; the scheduler
reruns the task on another worker (up to ``distributed.scheduler.allowed-failures`` times, default
3). Only one result per record ever reaches the client, so nothing is written twice. A task
that keeps killing its workers is left unwritten and reported at the end (a rerun retries it). A
record whose computation raises is stored as failed by the task function itself, as with the pool.
"""

from __future__ import annotations

import contextlib
import sys
import time
import uuid
from pathlib import Path

__all__ = ["connect", "dashboard_link", "run_on_dask"]

#: tasks kept queued per worker thread (enough to keep every worker busy, few enough to cancel fast)
TASKS_PER_THREAD = 2
#: seconds between looks at the cluster's size
WINDOW_RECHECK_S = 5.0
#: seconds to wait for a scheduler to accept a connection (distributed's own default is 30)
CONNECT_TIMEOUT_S = 5.0


def _import_distributed():
    try:
        import distributed
    except ImportError as exc:  # pragma: no cover - the test extra installs it
        raise ImportError(
            "the Dask backend needs dask[distributed]: pip install 'irt-llm-eval[distributed]'"
        ) from exc
    return distributed


def _is_client(obj) -> bool:
    distributed = sys.modules.get("distributed")
    return distributed is not None and isinstance(obj, distributed.Client)


@contextlib.contextmanager
def connect(scheduler, n_workers: int = 2):
    """Yield a ``distributed.Client`` for ``scheduler`` (see the module docstring).

    A LocalCluster or a Client opened here is closed on exit; a Client passed in is left open.
    """
    if _is_client(scheduler):
        yield scheduler
        return
    if not isinstance(scheduler, (str, Path)) or not str(scheduler).strip():
        raise TypeError(
            "scheduler must be 'local', a scheduler address such as 'tcp://host:8786', the path of a "
            f"scheduler file, or a distributed.Client; got {scheduler!r}"
        )
    distributed = _import_distributed()
    text = str(scheduler).strip()
    if text == "local":
        if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
            raise ValueError(f"--scheduler local needs n_workers >= 1 worker processes, got {n_workers!r}")
        import logging

        with distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                                      silence_logs=logging.ERROR) as cluster, distributed.Client(cluster) as client:
            yield client
        return
    if "://" in text:
        address, source = text, f"scheduler {text}"
    else:
        path = Path(text)
        if not path.is_file():
            raise ValueError(
                f"scheduler {text!r} is neither 'local', an address such as 'tcp://host:8786', nor an existing "
                "scheduler file"
            )
        address = scheduler_file_address(path)
        source = f"scheduler {address} (from the scheduler file {path})"
    check_reachable(address, source)
    try:
        client = distributed.Client(address, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        raise ConnectionError(f"cannot connect to the Dask {source} within {CONNECT_TIMEOUT_S:g} s: "
                              f"{_reason(exc)}") from None
    with client:
        yield client


def scheduler_file_address(path: Path) -> str:
    """The scheduler address a scheduler file (``dask scheduler --scheduler-file PATH``) holds;
    ValueError naming the file when it is empty, not JSON, or lacks an address."""
    import json

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"scheduler file {path} cannot be read ({type(exc).__name__}: {exc})") from None
    if not text.strip():
        raise ValueError(f"scheduler file {path} is empty (is the scheduler still starting? it writes the file once "
                         "it listens)")
    try:
        info = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"scheduler file {path} is not a scheduler file: not JSON ({exc})") from None
    address = info.get("address") if isinstance(info, dict) else None
    if not isinstance(address, str) or "://" not in address:
        raise ValueError(f"scheduler file {path} is not a scheduler file: it has no \"address\" such as "
                         f"\"tcp://host:8786\" (got {address!r})")
    return address


def _reason(exc: BaseException) -> str:
    """The innermost cause of a connection failure, e.g. 'ConnectionRefusedError: ...'."""
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__
    return f"{type(exc).__name__}: {exc}"


def check_reachable(address: str, source: str) -> None:
    """For a ``tcp://host:port`` address: fail fast, naming the reason (connection refused, no such
    host, timed out after :data:`CONNECT_TIMEOUT_S`), when nothing listens there."""
    import socket
    from urllib.parse import urlsplit

    if not address.startswith("tcp://"):
        return  # other protocols (tls, ucx, inproc): distributed itself tries, within the timeout
    try:
        parts = urlsplit(address)
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ValueError(f"{source}: not a valid address ({exc})") from None
    if not host or port is None:
        raise ValueError(f"{source}: the address needs a host and a port, such as tcp://host:8786")
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        reason = "connection refused (is the scheduler running?)" if isinstance(exc, ConnectionRefusedError) else \
            f"timed out after {CONNECT_TIMEOUT_S:g} s" if isinstance(exc, (TimeoutError, socket.timeout)) else \
            f"{type(exc).__name__}: {exc}"
        raise ConnectionError(f"cannot connect to the Dask {source}: {reason}") from None


def _has_bokeh() -> bool:
    import importlib.util

    return importlib.util.find_spec("bokeh") is not None


def dashboard_link(client) -> str | None:
    """The Dask dashboard's URL if the scheduler serves one, else None.

    Without bokeh on the scheduler the dashboard port answers only "Dask needs bokeh", so that
    counts as none.
    """
    try:
        services = client.scheduler_info().get("services", {})
        if "dashboard" not in services or not client.run_on_scheduler(_has_bokeh):
            return None
    except Exception:  # pragma: no cover - an unreachable scheduler fails later, with a clearer error
        return None
    return client.dashboard_link


def _worker_threads(client) -> int:
    try:
        return int(sum(client.nthreads().values()))
    except Exception:  # pragma: no cover
        return 0


def _call(fn, payload):
    """The task as it runs on a worker: one numba thread per worker thread, then the record."""
    from calibration.audit.worker import init_worker as _init_worker

    _init_worker()
    return fn(payload)


def run_on_dask(todo, fn, store, scheduler, *, n_workers: int, bar, counts: dict, desc: str) -> None:
    """Run ``fn(payload)`` for every ``(key, payload)`` of ``todo`` on ``scheduler``; write each
    finished record into ``store`` from this process. ``counts["ran"]`` counts the records written."""
    from calibration.audit.store import record_name

    distributed = _import_distributed()
    with connect(scheduler, n_workers) as client:
        link = dashboard_link(client)
        if link:
            print(f"{desc}: Dask dashboard at {link}", file=sys.stderr)
        threads = _worker_threads(client)
        # the window follows the cluster (workers may join or leave during a long study)
        window = {"size": max(4, TASKS_PER_THREAD * threads), "checked": time.monotonic()}
        if bar is not None:
            bar.set_postfix_str(f"Dask, {threads} worker thread(s)", refresh=False)
        run_id = uuid.uuid4().hex[:8]
        prefix = desc.replace(" ", "-")
        keys = {}
        queue = iter(todo)
        pending = distributed.as_completed([], with_results=False)
        lost = []

        def submit_more():
            if time.monotonic() - window["checked"] > WINDOW_RECHECK_S:
                window["size"] = max(4, TASKS_PER_THREAD * _worker_threads(client))
                window["checked"] = time.monotonic()
            if pending.count() >= window["size"]:
                return
            for key, payload in queue:
                # readable in the dashboard; unique per run so another audit's result is never reused
                name = f"{prefix}-{record_name(key)[:-3]}-{run_id}"
                future = client.submit(_call, fn, payload, key=name, pure=False)
                keys[future.key] = key
                pending.add(future)
                if pending.count() >= window["size"]:
                    return

        try:
            submit_more()
            for future in pending:
                key = keys.pop(future.key)
                try:
                    record = future.result()
                except distributed.KilledWorker:
                    lost.append(record_name(key))  # retried on other workers and killed them too
                else:
                    store.write(key, record)
                    counts["ran"] += 1
                    if bar is not None:
                        bar.update(1)
                future.release()
                submit_more()
        except BaseException:
            # interrupted (or the store failed): cancel what is queued or running; written records stay
            with contextlib.suppress(Exception):
                client.cancel(list(pending.futures))
            raise
    if lost:
        from calibration.audit.worker import RecordsLostError

        raise RecordsLostError(
            f"{len(lost)} record(s) killed every worker that ran them ({', '.join(lost[:5])}"
            f"{', ...' if len(lost) > 5 else ''}); the other records are stored -- run the audit again to retry them"
        )
