"""Run audit tasks in parallel over replications, seeded independently of the number of workers.

Seeding: the audit's ``rng`` gives a root ``np.random.SeedSequence``; replication ``r`` uses
``root.spawn(R)[r]`` and every stream inside it (data of a cell, a method's own randomness, ...) is
the child with spawn key ``(r, *tags)`` (``calibration.common.stream``), tags being integers or strings (hashed
with CRC-32). A task's randomness therefore depends only on its own coordinates -- not on the
worker that runs it, the order of completion, nor on which other cells the audit contains -- so
``n_workers=1`` and ``n_workers=2`` give identical results, and a resumed audit recomputes a
missing record exactly.

Execution: with ``scheduler`` given (``"local"``, a scheduler address or file, or a
``distributed.Client``) the tasks run on Dask (:mod:`calibration.audit.dask_backend`, imported
only then). Otherwise ``n_workers <= 1`` runs in this process; else a ``ProcessPoolExecutor`` with the
"spawn" start method (safe with numba's threading layers) whose workers use one numba thread each
(two workers on two cores). Each finished task is written to the store by this process at once;
a ``KeyboardInterrupt`` cancels what has not started and re-raises, leaving every written record
intact; the worker processes are terminated at once (their unfinished tasks are recomputed on
resume). Progress is shown with ``tqdm.auto``.
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

import numpy as np

from calibration.audit.worker import RecordsLostError, init_worker as _init_worker
from catengine.validation import is_integer

__all__ = ["RecordsLostError", "as_seed_sequence", "run_tasks"]


def as_seed_sequence(rng) -> np.random.SeedSequence:
    """Root SeedSequence from ``rng``: an int, a SeedSequence, a Generator (128 bits drawn from it),
    or None (fresh OS entropy)."""
    if isinstance(rng, np.random.SeedSequence):
        return rng
    if isinstance(rng, np.random.Generator):
        return np.random.SeedSequence([int(v) for v in rng.integers(0, 2**32, size=4, dtype=np.uint64)])
    if rng is None or (is_integer(rng) and rng >= 0):
        return np.random.SeedSequence(rng)
    raise TypeError(f"rng must be a non-negative int, a numpy Generator or SeedSequence, or None, got {rng!r}")


def _call(fn, payload):
    return fn(payload)


def run_tasks(tasks, fn, store, *, n_workers: int = 2, progress: bool | None = None, desc: str = "audit",
              scheduler=None) -> dict:
    """Run ``fn(payload)`` for every ``(key, payload)`` whose record is not in ``store`` yet.

    ``scheduler``: None (the local process pool of ``n_workers``), or a Dask scheduler -- ``"local"``
    (a LocalCluster of ``n_workers`` processes), ``"tcp://host:port"``, a scheduler file's path,
    or a ``distributed.Client``; results and the store are the same whatever the backend.

    ``fn`` must be a module-level function (it is sent to worker processes by reference) that
    returns the record (an ``xarray.Dataset``); it should catch its own errors and return a record
    flagging the failure. Returns ``{"total", "skipped", "ran"}`` counts.

    ``progress``: True / False show / hide the bar; None (the default) shows it only where it can
    be seen, a terminal or a notebook (:func:`catengine.console.progress_bar_visible`).
    """
    from calibration.audit.store import record_name

    if not is_integer(n_workers) or n_workers < 0:
        raise ValueError(f"n_workers must be an integer >= 0 (0 or 1: run in this process), got {n_workers!r}")
    existing = store.done()
    todo = [(key, payload) for key, payload in tasks if record_name(key) not in existing]
    counts = {"total": len(tasks), "skipped": len(tasks) - len(todo), "ran": 0}
    if not todo:
        return counts
    bar = None
    if progress is None:
        from catengine.console import progress_bar_visible

        progress = progress_bar_visible()
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(tasks), initial=counts["skipped"], desc=desc, unit="task", smoothing=0.1)
    try:
        if scheduler is not None:
            from calibration.audit.dask_backend import run_on_dask

            run_on_dask(todo, fn, store, scheduler, n_workers=int(n_workers), bar=bar, counts=counts, desc=desc)
        elif n_workers <= 1 or len(todo) == 1:
            for key, payload in todo:
                store.write(key, fn(payload))
                counts["ran"] += 1
                if bar is not None:
                    bar.update(1)
        else:
            _run_pool(todo, fn, store, int(n_workers), bar, counts)
    finally:
        if bar is not None:
            bar.close()
    return counts


def _run_pool(todo, fn, store, n_workers, bar, counts) -> None:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    executor = ProcessPoolExecutor(max_workers=min(n_workers, len(todo)), mp_context=ctx, initializer=_init_worker)
    # keep at most a few tasks queued per worker so an interrupt cancels promptly
    window = 2 * n_workers
    pending = {}
    it = iter(todo)
    try:
        for key, payload in it:
            pending[executor.submit(_call, fn, payload)] = key
            if len(pending) >= window:
                break
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                key = pending.pop(fut)
                store.write(key, fut.result())  # a KeyboardInterrupt raised in a worker re-raises here
                counts["ran"] += 1
                if bar is not None:
                    bar.update(1)
            for key, payload in it:
                pending[executor.submit(_call, fn, payload)] = key
                if len(pending) >= window:
                    break
    except BaseException:
        # interrupted (or the store failed): drop what is queued and stop the workers now --
        # whatever they are computing would be discarded anyway, and numba kernels only notice
        # a Ctrl-C when they return. Records already written stay intact.
        processes = list((getattr(executor, "_processes", None) or {}).values())
        executor.shutdown(wait=False, cancel_futures=True)
        for proc in processes:
            try:
                proc.terminate()
            except Exception:  # pragma: no cover - already gone
                pass
        raise
    executor.shutdown(wait=True)

