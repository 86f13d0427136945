"""A thread pool that does not hang the process when a read never returns.

``with ThreadPoolExecutor()`` waits for every thread on the way out, also on Ctrl-C: one read
stuck on a hung network mount (or a FIFO) then blocks the exit forever. This pool waits only
when the block ends normally; on an exception it cancels what has not started and leaves.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor


@contextlib.contextmanager
def interruptible_pool(max_workers: int, name: str) -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=name)
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
