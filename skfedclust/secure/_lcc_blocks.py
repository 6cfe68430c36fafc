"""Blocks of work on threads, for the parties and the server of Lagrange coded computing.

A party computes its tiles, and the server decodes an exchange, on a
long-lived pool of threads (the compiled kernels release the GIL): joblib's
threading backend waits for its results in 10 ms sleeps, which a streamed
exchange of many small tiles would pay at every call. BLAS and OpenMP run on
one thread inside each worker, so that the threads do not oversubscribe the
cores.
"""

from __future__ import annotations

import threading

from joblib import effective_n_jobs
from threadpoolctl import threadpool_info

from ..federation import logger
from ..federation._runtime import _thread_controller, thread_pool


def _blocks(n, size):
    return [slice(a, min(a + size, n)) for a in range(0, n, size)]


def _block_workers(n_jobs):
    """Threads for the streamed blocks.

    ``n_jobs=None`` uses the cores BLAS would use anyway: one single-threaded
    BLAS per worker on small blocks beats one multi-threaded BLAS per block,
    and lets the reductions run in parallel too.
    """
    if n_jobs is not None:
        return effective_n_jobs(n_jobs)
    blas = [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]
    return max(blas, default=1)


def party_threads(n_jobs):
    """Threads each party uses for its tiles when the runtime runs it with ``n_jobs``.

    ``n_jobs=None`` runs the parties one after another in this process: each
    then uses the cores BLAS would use. Otherwise parties run side by side,
    one thread each.
    """
    if n_jobs is None or effective_n_jobs(n_jobs) == 1:
        return _block_workers(None)
    return 1


class _BlockProgress:
    """DEBUG lines of a long block stage: one per block done (thread-safe)."""

    def __init__(self, what, n_tasks):
        self.what = what
        self.n_tasks = n_tasks
        self.done = 0
        self._lock = threading.Lock()

    def tick(self, ra, rb):
        # Logged under the lock: the lines come in the order of their counts.
        with self._lock:
            self.done += 1
            logger.debug(
                "%s: block %d/%d (rows %d:%d x %d:%d)",
                self.what,
                self.done,
                self.n_tasks,
                ra.start,
                ra.stop,
                rb.start,
                rb.stop,
            )


def _run_blocks(task, tasks, n_jobs):
    """Run block tasks on threads (numpy and BLAS release the GIL)."""
    n_workers = min(_block_workers(n_jobs), max(len(tasks), 1))
    # One BLAS thread per worker: the workers occupy the cores, and a block is
    # too small for a multi-threaded BLAS to pay off.
    # the process-wide controller: scanning the libraries again for every
    # request would cost more than a small exchange
    with _thread_controller().limit(limits=1, user_api="blas"):
        if n_workers == 1:
            for args in tasks:
                task(*args)
            return
        # A long-lived pool: joblib's threading backend waits for its results
        # in 10 ms sleeps, a few percent of a round of many exchanges.
        for _ in thread_pool(n_workers).map(lambda arguments: task(*arguments), tasks):
            pass
