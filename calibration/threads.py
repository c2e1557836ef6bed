"""Independent pieces of a calibration run side by side on threads.

The interval check's fold replays and score sums are independent of each other (each fold draws
from its own random stream) and spend most of their time in compiled kernels that release the
GIL, so two threads finish them sooner on a machine with two cores, and give exactly what running
them one after another gives: the results are returned in task order.
"""

from __future__ import annotations

import os

#: threads at most (and never more than the machine's cores)
MAX_THREADS = 2


def in_threads(work, tasks) -> list:
    """``[work(t) for t in tasks]``, run on up to ``MAX_THREADS`` threads, results in task order."""
    tasks = list(tasks)
    n = min(MAX_THREADS, os.cpu_count() or 1, len(tasks))
    if n <= 1:
        return [work(t) for t in tasks]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(work, tasks))
