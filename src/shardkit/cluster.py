"""Run a pack's or remux's tasks on a Dask cluster: ``--executor dask --scheduler tcp://HOST:PORT``.

The work that a local run spreads over ``--jobs`` worker processes goes to the cluster instead,
as tasks: the row checks, one task per byte range of the metadata file
(:func:`shardkit.check.check_range`); the shards, one task each
(:func:`shardkit.writer.write_shard`); for remux, the source shards
(:func:`shardkit.remux.transform_shard`). Each is the function a local worker process runs,
with the same arguments. The client (the machine running ``pack`` or ``remux``) keeps what needs
the whole input at once: merging the sorted runs, finding duplicate keys, planning the shards,
and recording each result as it arrives. The output is therefore byte for byte what a local run
writes, and resuming works as it does locally.

Workers read the inputs and write into OUT_DIR themselves, so OUT_DIR and the input folders
must be on storage every worker sees at the same path (NFS, Lustre, a FUSE mount of an object
store). :meth:`Cluster.check_workers` proves that before any task is sent: the client writes a
random token under ``OUT_DIR/.shardkit`` and every worker must read it back.

A worker that dies takes its running tasks with it; the scheduler sends them to another worker
(up to ``distributed.scheduler.allowed-failures`` times, 3 by default). A shard is written
under a name of its own in ``.shardkit/tmp`` and renamed into place only when whole, so a
killed task leaves at most a partial file there, which the run removes when it ends.

``distributed`` is imported only here and only when asked for: ``pip install './shardkit[dask]'`` from a clone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from . import __version__
from .errors import ShardkitError, UsageError
from .store import ShardStore, UrlStore, filesystem_for, is_url

if TYPE_CHECKING:
    from .worker import WorkerPool

log = logging.getLogger(__name__)

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
R = TypeVar("R")

TOKEN_NAME = "cluster-token"
MIN_TASK_WINDOW = 8  # tasks submitted ahead when the cluster has few (or no) worker threads yet


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise UsageError(
            "--executor dask needs the Dask distributed scheduler: pip install './shardkit[dask]' (from a clone)"
        ) from None
    return distributed


class Cluster:
    """A Dask client, and the checks shardkit makes before it sends the cluster any work."""

    def __init__(self, client: Any, *, owned: bool = False) -> None:
        self.client = client
        self._owned = owned  # connected by us, so closed by us

    @classmethod
    def connect(cls, scheduler: str) -> Cluster:
        """Connect to ``tcp://HOST:PORT`` (any Dask address) or to the scheduler a JSON scheduler file names."""
        distributed = _import_distributed()
        address = scheduler
        if os.path.isfile(scheduler):  # what `dask scheduler --scheduler-file` writes
            try:
                with open(scheduler, encoding="utf-8") as f:
                    address = json.load(f)["address"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise UsageError(f'{scheduler} is not a Dask scheduler file (JSON with an "address"): {exc}') from None
        try:
            client = distributed.Client(address)
        except (OSError, ValueError, TypeError) as exc:
            raise UsageError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from None
        return cls(client, owned=True)

    def close(self) -> None:
        if self._owned:
            with contextlib.suppress(Exception):
                self.client.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def check_workers(self, work_dir: str, read_dirs: Iterable[str], store: ShardStore | None = None) -> int:
        """Fail with a message naming the worker and path unless every worker can do the work.

        Each connected worker must run this shardkit version (the bytes written depend on it),
        read a token the client has just written under ``work_dir`` (so it sees the same OUT_DIR,
        not a local folder of the same name), or at an OUT_DIR URL ``store`` (so it can reach
        it, with credentials), and see every folder in ``read_dirs``. Returns the number of
        workers checked; with none connected yet, the tasks wait for workers to join.
        """
        token = secrets.token_hex(16)
        remote_token = f".shardkit/{TOKEN_NAME}"
        if isinstance(store, UrlStore):
            token_path = f"{store.location}/{remote_token}"
            store.write_bytes(remote_token, token.encode())
        else:
            token_path = os.path.join(work_dir, TOKEN_NAME)
            with open(token_path, "w", encoding="utf-8") as f:
                f.write(token)
        try:
            views: dict[str, Any] = self.client.run(worker_view, token_path, sorted(set(read_dirs)), on_error="return")
        finally:
            if isinstance(store, UrlStore):
                store.remove_working_file(remote_token)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(token_path)
        if not views:
            log.warning("no Dask worker is connected yet: the tasks wait for workers to join, unchecked")
        problems = []
        for worker, view in sorted(views.items()):
            if isinstance(view, BaseException):
                problems.append(f"{worker}: cannot run shardkit: {type(view).__name__}: {view}")
                continue
            if view["version"] != __version__:
                problems.append(f"{worker}: runs shardkit {view['version']}, this client {__version__}")
            if view["token"] is None:
                problems.append(f"{worker}: cannot read {token_path}, so it does not share OUT_DIR with this client")
                if view.get("error"):
                    problems[-1] += f" ({view['error']})"
            elif view["token"] != token:
                problems.append(f"{worker}: {token_path} holds another token: its OUT_DIR is not this client's")
            problems.extend(f"{worker}: cannot see {path}" for path in view["missing"])
        if problems:
            raise UsageError(
                "the Dask workers cannot do this work:\n  "
                + "\n  ".join(problems[:20])
                + "\nEvery worker needs shardkit (the same version), the input at the same paths on shared"
                " storage, and OUT_DIR there too or, for an OUT_DIR URL, the credentials to reach it."
            )
        return len(views)

    def map_unordered(self, fn: Callable[[T], R], items: Tasks[T], names: list[str], what: str) -> Iterator[R]:
        """Run ``fn`` on every item as a cluster task; yield results as they finish.

        ``names`` name the tasks (shown on the Dask dashboard and in errors). Items are taken
        from ``items`` only as tasks are submitted, a window ahead of the workers (twice their
        threads), so a task's data (the rows of a shard written to a URL) is held for the tasks
        in flight, not for all of them. The first failed task stops the run: the tasks not yet
        finished are cancelled and its error is raised.
        """
        distributed = _import_distributed()
        run = secrets.token_hex(4)
        queue = iter(zip(items, names, strict=True))
        finished = distributed.as_completed()
        pending: dict[str, tuple[Any, str]] = {}

        def submit_next() -> None:
            task = next(queue, None)
            if task is not None:
                future = self.client.submit(fn, task[0], key=f"shardkit-{what}-{run}-{task[1]}", pure=False)
                pending[future.key] = (future, task[1])
                finished.add(future)

        for _ in range(max(2 * sum(self.client.nthreads().values()), MIN_TASK_WINDOW)):
            submit_next()
        try:
            for future in finished:
                _, name = pending.pop(future.key)
                try:
                    result = future.result()
                except distributed.KilledWorker as exc:
                    raise ShardkitError(
                        f"{name}: every worker that ran this task died ({exc});"
                        " look at the workers' logs (out of memory?), then re-run to resume"
                    ) from None
                yield result
                submit_next()
        finally:
            if pending:
                with contextlib.suppress(Exception):
                    self.client.cancel([future for future, _ in pending.values()])


class Tasks(Protocol[T_co]):
    """What :func:`run_tasks` takes: a list, or a sized iterable that makes each item when asked."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[T_co]: ...


def run_tasks(
    fn: Callable[[T], R],
    items: Tasks[T],
    names: list[str],
    what: str,
    *,
    jobs: int,
    cluster: Cluster | None,
    pool: WorkerPool | None = None,
) -> Iterator[R]:
    """``fn`` on every item, results as they finish: as tasks on ``cluster`` if given, else in
    ``jobs`` worker processes (:mod:`shardkit.worker`; ``pool``'s if given, started earlier by the
    caller), else (``jobs`` 1) here."""
    if cluster is not None:
        yield from cluster.map_unordered(fn, items, names, what)
        return
    if jobs <= 1 or len(items) <= 1:
        for item in items:
            yield fn(item)
        return
    if pool is not None:
        yield from pool.map_unordered(fn, items, names)
        return
    from .worker import WorkerPool

    with WorkerPool(min(jobs, len(items))) as new_pool:
        yield from new_pool.map_unordered(fn, items, names)


def worker_view(token_path: str, read_dirs: list[str]) -> dict[str, Any]:
    """Run on each worker by :meth:`Cluster.check_workers`: what this worker sees."""
    token: str | None = None
    error: str | None = None
    try:
        if is_url(token_path):  # an OUT_DIR URL: this worker's credentials and endpoint reach it
            fs, path = filesystem_for(token_path)
            token = fs.cat_file(path).decode()
        else:
            with open(token_path, encoding="utf-8") as f:
                token = f.read()
    except Exception as exc:  # whatever the filesystem raises: the worker cannot reach OUT_DIR
        error = f"{type(exc).__name__}: {exc}"
    return {
        "version": __version__,
        "token": token,
        "error": error,
        "missing": [path for path in read_dirs if not os.path.isdir(path)],
    }


@contextlib.contextmanager
def cluster_for(executor: str, scheduler: str | None, client: Any = None) -> Iterator[Cluster | None]:
    """The cluster a run uses: ``client`` if given, else a connection to ``scheduler``, else None (local)."""
    if client is not None:
        yield Cluster(client)
        return
    if executor == "local":
        if scheduler:
            raise UsageError("--scheduler is for --executor dask")
        yield None
        return
    if executor != "dask":
        raise UsageError(f"unknown executor {executor!r}: use local or dask")
    scheduler = scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS")
    if not scheduler:
        raise UsageError("--executor dask needs --scheduler tcp://HOST:PORT (or a scheduler file)")
    with Cluster.connect(scheduler) as cluster:
        yield cluster
