"""A thread pool that does not hang the process when a read never returns.

``with ThreadPoolExecutor()`` waits for every thread on the way out, also on Ctrl-C: one read
stuck on a hung network mount (or a FIFO) then blocks the exit forever. This pool waits only
when the block ends normally; on an exception it cancels what has not started and leaves.

Its threads also block SIGINT and SIGTERM. The kernel may deliver a process-wide signal to any
thread that does not block it, and Python runs handlers only in the main thread: a Ctrl-C
landing on a reader stuck in ``open()`` would leave the main thread asleep in a lock wait,
never told.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor


def _block_stop_signals() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})


@contextlib.contextmanager
def interruptible_pool(max_workers: int, name: str) -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=name, initializer=_block_stop_signals)
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
