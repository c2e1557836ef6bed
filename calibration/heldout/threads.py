"""Independent pieces of a calibration run side by side on threads.

The held-out check's refits, score-factor fits, fold replays and score sums are independent of each
other (each draws from its own random stream) and spend most of their time in compiled kernels
that release the GIL, so worker threads, one per core, finish them sooner and give exactly what
running them one after another gives: every result is read from its own future, in the order the
caller chooses. A pool has as many threads as the calling thread has numba threads (all cores
unless ``NUMBA_NUM_THREADS`` or ``numba.set_num_threads`` says fewer; an audit's worker processes
run one), never more than the cores the process may use.

Each worker thread runs numba kernels on one thread (``numba.set_num_threads`` is per thread):
the workers already keep the cores busy, and a parallel kernel whose region waits for a worker
descheduled by another task would stall. For the same reason BLAS (numpy's OpenBLAS) runs on one
thread while a pool is open (``threadpoolctl``; process-wide): two tasks calling a multithreaded
BLAS at once made its spinning threads take turns with the tasks themselves (measured on
MATH500: the score-factor cross-validation beside a SAEM refit took 1.7x as long). The kernels of
this package compute the same bits on one thread as on several (no reduction spans threads), so a
result does not depend on where it ran.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from catengine.closing import Closing

#: threads at most (None: no cap beyond the caller's numba threads and the cores it may use)
MAX_THREADS: int | None = None
#: a response matrix of at least this many cells: the calibration's pieces run one after another
#: in the caller's thread, each kernel on all of numba's threads (as a cBMM fit of that size does),
#: so that two refits never hold their working copies of a large matrix at once
MAX_POOLED_CELLS = 2_100_000


def threads_for(n_cells: int) -> int | None:
    """The ``max_threads`` of :class:`Workers` for a response matrix of ``n_cells`` cells: 1 from
    ``MAX_POOLED_CELLS`` on, else None (the default)."""
    return 1 if n_cells >= MAX_POOLED_CELLS else None


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_threads() -> int:
    """Worker threads of a default pool: the calling thread's numba thread count (numba's
    ``NUMBA_NUM_THREADS`` / ``numba.set_num_threads``: all cores unless limited, 1 in an audit's
    worker processes), at most ``available_cores()`` and ``MAX_THREADS``."""
    import numba

    n = min(numba.get_num_threads(), available_cores())
    return max(1, n if MAX_THREADS is None else min(n, int(MAX_THREADS)))


def _one_numba_thread() -> None:
    import numba

    numba.set_num_threads(1)


# BLAS's thread count is process-wide: the pools open at a time share one limit (the first sets it,
# the last restores what was there before the first), so pools that overlap in time (e.g. two
# checks run by the threads of a Dask worker) never leave BLAS limited
_blas_lock = threading.Lock()
_blas_users = 0
_blas_limit = None


def _limit_blas() -> None:
    global _blas_users, _blas_limit
    with _blas_lock:
        if _blas_users == 0:
            from threadpoolctl import threadpool_limits

            if _blas_limit is not None:  # left by a release that was interrupted half-way: undo it first
                _blas_limit.restore_original_limits()
                _blas_limit = None
            _blas_limit = threadpool_limits(limits=1, user_api="blas")
        _blas_users += 1


def _release_blas() -> None:
    global _blas_users, _blas_limit
    with _blas_lock:
        _blas_users = max(0, _blas_users - 1)
        if _blas_users == 0 and _blas_limit is not None:
            _blas_limit.restore_original_limits()
            _blas_limit = None


class Workers(Closing):
    """Worker threads (numba on one thread in each) for independent tasks: ``max_threads`` at most,
    by default :func:`default_threads`, never more than the available cores.

    ``submit(fn, *args)`` returns a :class:`concurrent.futures.Future`; tasks start in the order
    they were submitted, so a task may wait for the result of one submitted before it (that one has
    started, and never waits for a later one). With one thread (one core, one numba thread in the
    caller, or ``max_threads=1``) every task runs at once in the caller's thread, with the caller's
    numba threads. Use as a context manager: leaving it cancels the tasks not yet
    started (e.g. after an error) and waits for the running ones. However it is left (an error, a
    KeyboardInterrupt, even one that interrupts that wait), the BLAS limit is lifted once this pool
    no longer holds it; the worker threads' numba limit dies with them."""

    def __init__(self, max_threads: int | None = None):
        n = default_threads() if max_threads is None else min(int(max_threads), available_cores())
        self.n_threads = max(1, n)
        self._pool = None
        self._holds_blas = False
        if self.n_threads > 1:
            _limit_blas()
            self._holds_blas = True
            try:
                self._pool = ThreadPoolExecutor(self.n_threads, initializer=_one_numba_thread)
            except BaseException:
                self._give_back_blas()
                raise

    def submit(self, fn, *args, **kwargs) -> Future:
        if self._pool is not None:
            return self._pool.submit(fn, *args, **kwargs)
        done: Future = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by Future.result, as a pool would
            done.set_exception(exc)
        return done

    def close(self) -> None:
        """Cancel the tasks not yet started, wait for the running ones, lift the BLAS limit (also when
        the wait is interrupted). Closing twice is harmless."""
        pool, self._pool = self._pool, None
        try:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        finally:
            self._give_back_blas()

    def _give_back_blas(self) -> None:
        if self._holds_blas:
            self._holds_blas = False
            _release_blas()

