"""``shardkit.stream(decode_threads=N)``: decode the file column on N threads, rows in order.

datasets' own ``decode(num_threads=N)`` makes one asyncio task per row, and that bookkeeping runs
on the reading thread, under the GIL, where it costs more than reading the row: on two cores it
stopped well short of two cores' worth of decoding (docs/performance.md, "Training stream").
Here the unit of work is a batch of rows: the same datasets machinery (an async ``map``, whose
state counts the rows in flight, so an exact resume stays exact), one task per
:data:`DECODE_BATCH_ROWS` rows, at most ``N + 1`` batches in flight (the memory bound).
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import datasets

#: Rows one decode task takes.
DECODE_BATCH_ROWS = 64

_POOLS: dict[tuple[int, int], ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _pool(threads: int) -> ThreadPoolExecutor:
    """This process's pool of ``threads`` decode threads (a DataLoader worker makes its own: a
    pool's threads do not survive a fork)."""
    key = (os.getpid(), threads)
    with _POOLS_LOCK:
        if key not in _POOLS:
            _POOLS[key] = ThreadPoolExecutor(threads, thread_name_prefix="shardkit-decode")
        return _POOLS[key]


def _decode_all(feature: Any, values: list[Any]) -> list[Any]:
    return [feature.decode_example(value) for value in values]


#: The decode tasks of this process (a task of datasets' async map awaiting a batch's decoding).
_tasks: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()


async def _decode_batch(column: str, feature: Any, threads: int, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
    task = asyncio.current_task()
    if task is not None:
        _tasks.add(task)
    loop = asyncio.get_running_loop()
    return {column: await loop.run_in_executor(_pool(threads), _decode_all, feature, batch[column])}


@atexit.register
def _cancel_pending_decodes() -> None:
    """Cancel the decode tasks a stream left pending, at exit.

    datasets' async map cancels its tasks when an error ends it, not when its generator is closed
    (a ``break``, a stream left for the interpreter's exit): up to ``N + 1`` tasks stay pending in
    an event loop nobody runs, and asyncio prints "Task was destroyed but it is pending!" for each
    when they are collected at exit. Cancelled here, on their loop, they end quietly."""
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Task[Any]]] = {}
    for task in list(_tasks):
        if not task.done():
            by_loop.setdefault(task.get_loop(), []).append(task)
    for loop, pending in by_loop.items():
        if loop.is_running() or loop.is_closed():
            continue  # a loop still running (on another thread) or closed: not ours to drive
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))


def decode_on_threads(ds: datasets.IterableDataset, column: str, threads: int) -> datasets.IterableDataset:
    """``ds`` with ``column`` decoded on ``threads`` threads, in batches; ``ds`` unchanged if the
    column is not decoded (audio where datasets cannot decode it)."""
    from datasets.features.features import require_decoding

    features = ds.features
    if features is None or not require_decoding(features[column]):
        return ds
    decoded = ds.decode(False).map(
        partial(_decode_batch, column, features[column], threads),
        batched=True,
        batch_size=DECODE_BATCH_ROWS,
        features=features,
    )
    # How many tasks datasets' async map keeps running: its default (1,000 batches) would hold
    # that many batches of files in memory. datasets' own threaded decode sets the same field.
    mapped = decoded._ex_iterable
    if not hasattr(mapped, "max_num_running_async_map_functions_in_parallel"):
        return ds.decode(num_threads=threads)  # a datasets without that field: its own threaded decode
    mapped.max_num_running_async_map_functions_in_parallel = threads + 1
    return decoded
