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
import logging
import os
import threading
from collections.abc import Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from .closeatexit import close_at_exit

if TYPE_CHECKING:
    import datasets

log = logging.getLogger(__name__)
T = TypeVar("T")

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


#: The event loops in which the iteration whose row is being read decodes (:func:`settled` sets it
#: around each row; a decode task, made then, carries it in its context).
_reading: ContextVar[set[asyncio.AbstractEventLoop] | None] = ContextVar("shardkit_decode_loops", default=None)


async def _decode_batch(column: str, feature: Any, threads: int, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
    loop = asyncio.get_running_loop()
    loops = _reading.get()
    if loops is not None:
        loops.add(loop)
    return {column: await loop.run_in_executor(_pool(threads), _decode_all, feature, batch[column])}


def decodes_here(iterable: Any) -> bool:
    """Whether one of datasets' examples iterables is the map :func:`decode_on_threads` made."""
    function = getattr(iterable, "function", None)
    return isinstance(function, partial) and function.func is _decode_batch


def settled(rows: Iterator[T]) -> Iterator[T]:
    """``rows``, an iteration of a dataset that decodes here, whose decode tasks are cancelled when
    it is closed (a ``break``, an iterator dropped, the interpreter's exit).

    datasets' async map cancels its tasks when an error ends it, not when its generator is closed:
    up to ``N + 1`` tasks stayed pending in an event loop nobody runs, and asyncio printed "Task
    was destroyed but it is pending!" for each when the garbage collector freed them. Cancelled
    on their loop (which datasets made for that map alone), they end quietly."""
    return close_at_exit(_settle(rows))


def _settle(rows: Iterator[T]) -> Generator[T, None, None]:
    loops: set[asyncio.AbstractEventLoop] = set()
    try:
        while True:
            reading = _reading.set(loops)
            try:
                row = next(rows)
            except StopIteration:
                return
            finally:
                _reading.reset(reading)
            yield row
    finally:
        close = getattr(rows, "close", None)
        if close is not None:
            close()
        for loop in loops:
            if loop.is_running() or loop.is_closed():
                continue  # a loop running (on another thread) or closed: not ours to drive
            pending = list(asyncio.all_tasks(loop))
            for task in pending:
                task.cancel()
            if pending:
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
