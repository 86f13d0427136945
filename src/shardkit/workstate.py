"""The files shardkit reads back from its own working folder (``OUT_DIR/.shardkit/``), each kind
checked as a whole here, once, as :func:`.manifest.parse_manifest` checks ``shards.json``.

A damaged one (not JSON, a field of the wrong type or out of range, a link, FIFO or folder in
its place) never gives a traceback. What it does depends on what the file is:

* ``state.json`` (pack) and ``remux/state.json`` record which run the folder holds: a re-run
  resumes only the same run, so guessing would mix two runs' shards. Refused with one line
  naming the file; ``--force`` reads no damaged state and starts afresh.
* ``done/<shard>.json`` (a shard written and checked), ``remux/parts/<split>.json`` (the batches
  of a source split transformed) and ``hashes.json`` (a cache of sha256s) only spare work: discarded with a
  warning naming the file; the shard is written (unless shards.json records it), the split
  transformed or the shard hashed again.

Nothing is read through a link or from a FIFO (which would hang): shardkit writes plain files
here (:func:`.manifest.write_atomic`), so anything else is damage.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
from typing import Any

from .errors import ShardkitError, shown_value
from .formats import FORMAT_NAMES, format_named
from .manifest import (
    MAX_MANIFEST_BYTES,
    ManifestShard,
    _checked_shards,
    _object,
    _sha256,
    _whole,
)
from .plan import BY_SIZE, FIRST_BOUNDARY, MAX_PREFIX_LENGTH

log = logging.getLogger(__name__)

#: The largest layout number a state may record (the formats' own are far below).
_MAX_LAYOUT = 1000


class DamagedStateError(ShardkitError):
    """A working file that records which run OUT_DIR holds is damaged (exit code 1)."""


def read_work_json(path: str) -> Any | None:
    """The JSON in the working file ``path``; None if there is none. A ValueError saying what is
    wrong if it is not a plain file of JSON (a link or FIFO is refused without being opened or read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError("a link, where shardkit writes a plain file") from None
        raise ValueError(f"cannot be read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError("not a plain file (a FIFO, folder or device), where shardkit writes one")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(MAX_MANIFEST_BYTES + 1)
        except OSError as exc:
            raise ValueError(f"cannot be read: {exc.strerror or exc}") from None
    if len(data) > MAX_MANIFEST_BYTES:
        raise ValueError(f"larger than {MAX_MANIFEST_BYTES} bytes, more than shardkit writes")
    try:
        return json.loads(data, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("not JSON shardkit wrote (nested too deep)") from None
    except UnicodeDecodeError:
        raise ValueError("not JSON (not UTF-8)") from None
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _check_state(data: Any) -> dict[str, Any]:
    """A pack ``state.json`` as shardkit writes it (older ones lack some fields: pack fills them in)."""
    state = _object(data, "the state")
    if "options" not in state:
        raise ValueError("it has no 'options'")
    if state.get("input_fingerprint") is not None:
        _sha256(state["input_fingerprint"], "input_fingerprint")
    options = _object(state["options"], "options")
    if options.get("prefix_length") is not None:
        _whole(options["prefix_length"], "options.prefix_length", BY_SIZE, MAX_PREFIX_LENGTH)
    for name in ("max_shard_bytes", "target_shard_bytes"):
        if options.get(name) is not None:
            _whole(options[name], f"options.{name}", 1, 2**63)
    if options.get("format", "zip") not in FORMAT_NAMES:
        raise ValueError(f"options.format is {shown_value(options['format'])}, not one of {', '.join(FORMAT_NAMES)}")
    if "layout" in state:
        _whole(state["layout"], "layout", 1, _MAX_LAYOUT)
    for split, length in _object(state.get("prefix_lengths", {}), "prefix_lengths").items():
        if length is not None:
            _whole(length, f"prefix_lengths[{split!r}]", BY_SIZE, MAX_PREFIX_LENGTH)
    for column, names in _object(state.get("labels", {}), "labels").items():
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError(f"labels[{shown_value(column)}] is not a list of class names")
    if not isinstance(state.get("split_folders", False), bool):
        raise ValueError(f"split_folders is {shown_value(state['split_folders'])}, not true or false")
    for split, starts in _object(state.get("boundaries", {}), "boundaries").items():
        if (
            not isinstance(starts, list)
            or not starts
            or not all(isinstance(s, str) for s in starts)
            or starts[0] != FIRST_BOUNDARY
            or starts != sorted(set(starts))
        ):
            raise ValueError(
                f"boundaries[{shown_value(split)}] is {shown_value(starts)}, not shard names sorted, unique and"
                f" starting at {FIRST_BOUNDARY!r}"
            )
    return state


def read_pack_state(path: str, *, force: bool) -> dict[str, Any] | None:
    """The run recorded in pack's ``state.json`` at ``path``, checked; None if there is none. A
    damaged one is refused (:class:`DamagedStateError`), or with ``force`` ignored with a warning."""
    return _read_state(path, _check_state, force=force)


def read_remux_state(path: str, *, force: bool) -> dict[str, Any] | None:
    """The settings recorded in remux's ``state.json`` (compared whole with the new ones), checked
    to be a JSON object; as :func:`read_pack_state` otherwise."""
    return _read_state(path, lambda data: _object(data, "the state"), force=force)


def _read_state(path: str, check: Any, *, force: bool) -> dict[str, Any] | None:
    try:
        data = read_work_json(path)
        return None if data is None else dict(check(data))
    except ValueError as exc:
        if force and os.path.isdir(path) and not os.path.islink(path):  # a rename cannot replace it
            raise DamagedStateError(
                f"{path}: a folder, where shardkit keeps a file of its own; move it out of the way, then re-run"
            ) from None
        if force:
            log.warning("%s: damaged (%s); ignored: --force starts afresh", path, exc)
            return None
        raise DamagedStateError(
            f"{path}: damaged ({exc}), so shardkit cannot tell which run this folder holds;"
            " re-run with --force to start afresh (only files shardkit wrote are replaced)"
        ) from None


def read_remux_batch(path: str) -> dict[str, Any] | None:
    """A remux batch a worker finished (it may have been killed before the batch was committed):
    its first row in the split, its counts, its metadata lines, its columns. None if there is
    none, or (with a warning) if damaged: the batch is transformed again."""
    try:
        data = read_work_json(path)
        if data is None:
            return None
        batch = _object(data, "the batch")
        for name in ("first", "rows_in", "rows_out"):
            _whole(batch.get(name), name, 0, 2**63)
        if not isinstance(batch.get("lines"), str):
            raise ValueError("lines is not text")
        _column_lists(batch)
        return batch
    except ValueError as exc:
        log.warning("%s: damaged (%s); ignored: its batch is transformed again", path, exc)
        return None


def _column_lists(record: dict[str, Any]) -> None:
    """Refuse a remux record whose ``columns`` or ``not_labels`` is not a list of column names."""
    for name in ("columns", "not_labels"):
        if not isinstance(record.get(name), list) or not all(isinstance(c, str) for c in record[name]):
            raise ValueError(f"{name} is not a list of column names")


def read_done_records(done_dir: str) -> dict[str, ManifestShard]:
    """Pack's done records in ``done_dir`` by path, each checked as a manifest's shard entry; a
    damaged one is left out with a warning (its shard is written again)."""
    try:
        names = sorted(os.listdir(done_dir))
    except (FileNotFoundError, NotADirectoryError):
        return {}
    records: dict[str, ManifestShard] = {}
    for name in names:
        path = os.path.join(done_dir, name)
        try:
            data = _object(read_work_json(path), "the record")
            file = data.get("file")
            suffix = file.rsplit(".", 1)[-1] if isinstance(file, str) else ""
            if suffix not in FORMAT_NAMES:
                raise ValueError(f"file is {shown_value(file)}, not a shard's name")
            fmt = format_named(suffix)
            records[path] = _checked_shards([data], fmt, fmt.max_bytes, placed=False)[0]
        except ValueError as exc:
            log.warning("%s: damaged (%s); ignored: its shard is written again unless shards.json has it", path, exc)
    return records


def read_hash_cache(path: str) -> dict[str, list[str]]:
    """``hashes.json``'s entries (file -> [stamp, sha256]); a damaged one is discarded with a warning."""
    try:
        data = _object(read_work_json(path) or {}, "the cache")
        for rel, entry in data.items():
            if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)):
                raise ValueError(f"the entry of {shown_value(rel)} is {shown_value(entry)}, not [stamp, sha256]")
            _sha256(entry[1], f"the sha256 of {shown_value(rel)}")
        return data
    except ValueError as exc:
        log.warning("%s: damaged (%s); discarded: files are hashed again", path, exc)
        return {}


def read_remux_progress(path: str) -> dict[str, Any] | None:
    """A remux split's progress record, checked: the batches done and their counts, the length
    of the part file that holds their metadata, where the source was read to after them (a JSON
    value, or null), whether the split is finished. None (with a warning) if damaged, or if
    there is none."""
    try:
        data = read_work_json(path)
        if data is None:
            return None
        record = _object(data, "the record")
        for name in ("batches", "rows_in", "rows_out", "part_bytes"):
            _whole(record.get(name), name, 0, 2**63)
        _column_lists(record)
        if not isinstance(record.get("finished"), bool):
            raise ValueError("finished is not true or false")
        if "position" not in record or not isinstance(record["position"], dict | type(None)):
            raise ValueError("no position (an object, or null)")
        return record
    except ValueError as exc:
        log.warning("%s: damaged (%s); ignored: its split starts over (finished batches are kept)", path, exc)
        return None
