"""A thread pool that does not hang the process when a read never returns.

``with ThreadPoolExecutor()`` waits for every thread on the way out, also on Ctrl-C: one read
stuck on a hung network mount (or a FIFO) then blocks the exit forever. This pool waits only
when the block ends normally; on an exception it cancels what has not started and leaves.

Its threads also block SIGINT and SIGTERM. The kernel may deliver a process-wide signal to any
thread that does not block it, and Python runs handlers only in the main thread: a Ctrl-C
landing on a reader stuck in ``open()`` would leave the main thread asleep in a lock wait,
never told.

:func:`call_interruptibly` runs a whole call that way, for a library that waits on threads of
its own: the main thread only waits for the result, and Ctrl-C ends that wait at once.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


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


def call_interruptibly(fn: Callable[[threading.Event], T], name: str) -> T:
    """``fn()``, run in a thread of its own while the calling thread waits for its result.

    huggingface_hub uploads in a ``with ThreadPoolExecutor()`` block, which joins every upload on
    the way out, also on Ctrl-C: called from the main thread, a push to a Hub that stopped
    answering could not be interrupted. Here the main thread's wait ends at the first Ctrl-C,
    since it is the one thread that takes SIGINT: ``fn``'s thread blocks it, and so do the
    threads ``fn`` starts (a thread inherits its creator's signal mask). ``fn`` may still be
    running when the KeyboardInterrupt leaves: it gets an event, set then, to check between
    steps and stop at the next (the CLI exits without waiting for it; a library caller's
    process would otherwise go on uploading).
    """
    stop = threading.Event()
    with interruptible_pool(1, name) as pool:
        try:
            return pool.submit(fn, stop).result()
        except BaseException:
            stop.set()
            raise
