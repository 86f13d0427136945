"""Read ``shardkit.stream`` in a process of its own, for the exact-resume tests.

    python -m tests.stream_resume first  CASES STATES   # read, save states at rows, then get killed
    python -m tests.stream_resume resume CASES STATES   # load each state in a fresh stream, read on

CASES is a JSON file: a list of cases, each ``{"name", "source", "seed", "rank", "world_size",
"epoch", "points", "loader"}``. ``first`` reads each case from its start and at each row count in
``points`` writes ``{case, point, state, rows so far}`` as a line of STATES (flushed at once),
then, in the middle of the last case, sends itself SIGKILL with its streams open: a job killed
mid-read. ``resume`` loads every saved state into a new stream (``set_epoch`` first, as a
training loop does), reads to the end, and also reads each case uninterrupted; it prints
``{name: {"full": rows, "resumed": {point: rows}}}`` as JSON.

``loader``: 0 reads the dataset itself; N > 0 reads it through torchdata's StatefulDataLoader
with N workers, batch size 4, the points counting batches. A row is [key, sha256 of the file's
bytes, the other fields as sorted JSON, their types], so bytes, values and types are compared.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any

import shardkit


def row_digest(row: dict[str, Any]) -> list[Any]:
    row = dict(row)
    data = row.pop("image")["bytes"]
    types = {k: type(v).__name__ for k, v in sorted(row.items())}
    return [row["key"], hashlib.sha256(data).hexdigest(), json.dumps(row, sort_keys=True), types]


def _digest_batch(batch: dict[str, Any]) -> dict[str, Any]:
    """A batch of rows as digests (a DataLoader's workers hand over batches of these)."""
    rows = [dict(zip(batch, values, strict=True)) for values in zip(*batch.values(), strict=True)]
    return {"digest": [json.dumps(row_digest(row)) for row in rows]}


def dataset(case: dict[str, Any]) -> Any:
    ds = shardkit.stream(
        case["source"], shuffle_seed=case["seed"], rank=case["rank"], world_size=case["world_size"]
    ).decode(False)
    if case["loader"]:
        ds = ds.map(_digest_batch, batched=True, batch_size=8, remove_columns=list(ds.features))
    ds.set_epoch(case["epoch"])
    return ds


def reader(case: dict[str, Any], ds: Any) -> tuple[Any, Iterator[list[Any]]]:
    """What is read and checkpointed (the dataset, or a StatefulDataLoader over it), and its rows."""
    if not case["loader"]:
        return ds, (row_digest(row) for row in ds)
    from torchdata.stateful_dataloader import StatefulDataLoader

    loader = StatefulDataLoader(ds, batch_size=4, num_workers=case["loader"])

    def rows() -> Iterator[list[Any]]:  # a function: iter(loader) only once asked, after load_state_dict
        for batch in loader:
            yield from (json.loads(d) for d in batch["digest"])

    return loader, rows()


def _batches(case: dict[str, Any], rows: Iterator[list[Any]]) -> Iterator[list[list[Any]]]:
    """What a point counts: rows, or a DataLoader's batches of 4."""
    if not case["loader"]:
        for row in rows:
            yield [row]
        return
    batch: list[list[Any]] = []
    for row in rows:  # the loader's batches flattened: regroup by 4 (the last may be short)
        batch.append(row)
        if len(batch) == 4:
            yield batch
            batch = []
    if batch:
        yield batch


def first(cases: list[dict[str, Any]], states_file: str) -> None:
    with open(states_file, "w") as out:
        for number, case in enumerate(cases):
            last = number == len(cases) - 1
            source, rows = reader(case, dataset(case))
            seen: list[list[Any]] = []
            points = set(case["points"])
            for count, batch in enumerate(_batches(case, rows), 1):
                seen.extend(batch)
                if count in points:
                    line = {"case": case["name"], "point": count, "state": source.state_dict(), "rows": seen}
                    out.write(json.dumps(line) + "\n")
                    out.flush()
                    os.fsync(out.fileno())
                if last and count == max(points) + 1:
                    os.kill(os.getpid(), signal.SIGKILL)  # killed mid-read, streams open
    raise SystemExit("not killed: the last case had fewer rows than its last point")


def resume(cases: list[dict[str, Any]], states_file: str) -> None:
    by_name = {case["name"]: case for case in cases}
    out: dict[str, Any] = {name: {"full": None, "resumed": {}} for name in by_name}
    with open(states_file) as f:
        for line in f:
            saved = json.loads(line)
            case = by_name[saved["case"]]
            ds = dataset(case)
            source, rows = reader(case, ds)
            source.load_state_dict(saved["state"])
            out[saved["case"]]["resumed"][saved["point"]] = saved["rows"] + list(rows)
    for name, case in by_name.items():
        out[name]["full"] = list(reader(case, dataset(case))[1])
    print(json.dumps(out))


if __name__ == "__main__":
    mode, cases_file, states = sys.argv[1:4]
    with open(cases_file) as f:
        loaded = json.load(f)
    {"first": first, "resume": resume}[mode](loaded, states)
