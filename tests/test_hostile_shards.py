"""Hostile and damaged shards (issue 20): crafted ZIP and tar shards, refused by every reader.

Each case edits one shard of a packed dataset and makes the manifest agree with the new file's
size and sha256 (and its rows, where they change), so only the shard's structure gives it away.
Then ``shardkit verify --deep``, ``shardkit.stream`` and (ZIP) the template's loading script in
datasets 3.6 must each refuse it with one line naming the shard (and the member, where there is
one), and none may yield a file whose bytes differ from those packed.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import shardkit
from shardkit.cli import main
from shardkit.errors import ShardkitError
from shardkit.formats.parquet import encode_table, metadata_lines_table, read_metadata_table
from shardkit.formats.tar import crc_record, iter_tar_members, member_header
from shardkit.formats.zip import central_header, end_record, iter_members, local_header
from tests.support.corpus import REPO_ROOT, adding_up
from tests.support.packing import pack_example
from tests.support.readback import DS36_PYTHON, expected_rows

SCRIPTS = Path(sys.executable).parent
Members = list[tuple[bytes, bytes]]  # (raw name, data), in shard order


# --- crafting ----------------------------------------------------------------------------------------


def zip_bytes(
    members: Members,
    *,
    before: dict[int, bytes] | None = None,
    extra: dict[int, bytes] | None = None,
    central: Callable[[int, bytes], bytes] | None = None,
    tail: bytes = b"",
) -> bytes:
    """``members`` laid out as shardkit lays them out, but with ``before[i]`` ahead of member i,
    ``extra[i]`` as member i's local extra field, each central entry passed through ``central``,
    and ``tail`` after the end record. Entries give each member's true offset (zipfile reads it)."""
    out, entries = bytearray(), []
    for i, (name, data) in enumerate(members):
        out += (before or {}).get(i, b"")
        offset, crc, field_bytes = len(out), zlib.crc32(data), (extra or {}).get(i, b"")
        header = bytearray(local_header(name, len(data), crc))
        struct.pack_into("<H", header, 28, len(field_bytes))
        out += header + field_bytes + data
        entry = central_header(name, len(data), crc, offset)
        entries.append(central(i, entry) if central else entry)
    cd_offset = len(out)
    out += b"".join(entries)
    return bytes(out + end_record(len(entries), len(out) - cd_offset, cd_offset) + tail)


def local_offset(members: Members, index: int) -> int:
    """Where member ``index``'s local header starts in the shardkit layout."""
    return sum(30 + len(name) + len(data) for name, data in members[:index])


def with_field(entry: bytes, at: int, fmt: str, value: int) -> bytes:
    patched = bytearray(entry)
    struct.pack_into(fmt, patched, at, value)
    return bytes(patched)


def crc_forced(prefix: bytes, target: int) -> bytes:
    """``prefix`` plus 4 bytes making its CRC-32 ``target`` (CRC-32 is affine in those 32 bits)."""
    base = zlib.crc32(prefix + bytes(4))
    basis: list[tuple[int, int]] = []  # (CRC difference, bits of the 4 bytes giving it), top bits distinct
    for bit in range(32):
        value, combo = zlib.crc32(prefix + (1 << bit).to_bytes(4, "little")) ^ base, 1 << bit
        for b_value, b_combo in basis:
            if value ^ b_value < value:
                value, combo = value ^ b_value, combo ^ b_combo
        if value:
            basis = sorted([*basis, (value, combo)], reverse=True)
    want, combo = target ^ base, 0
    for b_value, b_combo in basis:
        if want ^ b_value < want:
            want, combo = want ^ b_value, combo ^ b_combo
    assert want == 0
    return prefix + combo.to_bytes(4, "little")


def tar_header(name: bytes, size: int, *, checksum: bool = True, **fields: bytes) -> bytes:
    """A ustar header as shardkit writes it, with the raw ``name`` and ``fields`` (by field name)
    as given, and (with ``checksum``) the checksum made right for them."""
    header = bytearray(member_header("x", size))
    header[0:100] = name.ljust(100, b"\0")
    for key, value in fields.items():
        start = {"size_field": 124, "type": 156, "linkname": 157, "uname": 265}[key]
        header[start : start + len(value)] = value
    if checksum:
        header[148:156] = b" " * 8
        header[148:156] = b"%06o\0 " % sum(header)
    return bytes(header)


def tar_bytes(members: Members, *, crc: bool = True, headers: dict[int, bytes] | None = None) -> bytes:
    """``members`` as shardkit writes them (with a CRC record each, unless not ``crc``), member i's
    header replaced by ``headers[i]``."""
    out = bytearray()
    for i, (name, data) in enumerate(members):
        if crc:
            out += crc_record(zlib.crc32(data))
        out += (headers or {}).get(i) or tar_header(name, len(data))
        out += data + bytes(-len(data) % 512)
    return bytes(out + bytes(1024))


def zip_members(shard: Path) -> Members:
    with open(shard, "rb") as f:
        return [(m.name.encode(), m.data) for m in iter_members(f)]


def tar_members(shard: Path) -> Members:
    with open(shard, "rb") as f:
        return [(m.name.encode(), m.data) for m in iter_tar_members(f)]


def key_of(name: bytes) -> str:
    return os.path.splitext(os.path.basename(name.decode()))[0]


def row_lines(ms: Members) -> bytes:
    """A ZIP shard's rows as JSON lines, from its metadata.parquet (or metadata.jsonl, before layout 4)."""
    name, data = ms[0]
    if name != b"metadata.parquet":
        return data
    return b"".join(json.dumps(row).encode() + b"\n" for row in read_metadata_table(data, None))


def rows_member(ms: Members, lines: bytes) -> tuple[bytes, bytes]:
    """The metadata member of the kind ``ms`` has, holding ``lines`` (a table of the same schema)."""
    name, data = ms[0]
    if name != b"metadata.parquet":
        return name, lines
    return name, encode_table(metadata_lines_table(lines, pq.read_schema(io.BytesIO(data))))


def with_row_renamed(lines: bytes, old: bytes, new: bytes) -> bytes:
    """Metadata lines with the row for file ``old`` naming ``new`` (JSON-escaped) instead."""
    return lines.replace(json.dumps(old.decode()).encode(), json.dumps(new.decode()).encode(), 1)


def set_shard(repo: Path, shard: str, data: bytes, rows: bytes | None = None) -> None:
    """Put ``data`` in place of ``shard``, and its metadata lines ``rows`` (if given) in metadata/;
    the manifest then agrees with both, so a reader must find the problem in the structure."""
    (repo / shard).write_bytes(data)
    manifest = json.loads((repo / "shards.json").read_text())
    entry = next(s for s in manifest["shards"] if s["file"] == shard)
    entry["bytes"], entry["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    # A crafted tar shard's rows are not where the writer's index put them: the record is one of
    # a shard packed before the index (read from its front), as verify would otherwise say.
    entry.pop("row_offsets", None), entry.pop("row_offsets_every", None)
    if rows is not None:
        (repo / entry["metadata"]).write_bytes(rows)
        entry["metadata_sha256"] = hashlib.sha256(rows).hexdigest()
    (repo / "shards.json").write_text(json.dumps(adding_up(manifest)))


@dataclass(frozen=True)
class Crafted:
    shard: bytes
    rows: bytes | None = None  # the shard's metadata lines, where the case changes them
    #: Files whose bytes the case changed consistently (every reader sees the new bytes), by key.
    changed: dict[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class Expect:
    """What each reader must say: the member it names (``{a}``, ``{b}``: the first and second
    file member; ``{j}``: the first .json of a tar shard; else the name itself) and a phrase of
    its message; ``stream_member=False`` where shardkit.stream names only the shard."""

    member: str | None
    verify: str
    stream: str
    script: str = ""
    stream_member: bool = True


# --- the ZIP cases: A is the first image member (index 1, after metadata.jsonl), B the second -----


def _hidden_b(ms: Members) -> bytes:
    """A local header and data for a member of B's name, size and CRC-32, but not B's bytes."""
    b_name, b = ms[2]
    fake = crc_forced((b"not the packed image " * len(b))[: len(b) - 4], zlib.crc32(b))
    return local_header(b_name, len(fake), zlib.crc32(fake)) + fake


def _zip_hidden_in_extra(ms: Members) -> Crafted:
    """B's central entry points into A's local extra field, where a hidden B hides: zipfile (and
    datasets) would read its bytes, a front-to-back walk B's."""
    hidden_at = local_offset(ms, 1) + 30 + len(ms[1][0])
    return Crafted(
        zip_bytes(
            ms, extra={1: _hidden_b(ms)}, central=lambda i, e: with_field(e, 42, "<I", hidden_at) if i == 2 else e
        )
    )


def _zip_hidden_in_data(ms: Members) -> Crafted:
    """The hidden B at the end of A's data (A's CRC made right): only the central directory
    tells, once the walk reaches it."""
    a_name, a = ms[1]
    new_a = a + _hidden_b(ms)
    hidden_at = local_offset(ms, 1) + 30 + len(a_name) + len(a)
    members = [ms[0], (a_name, new_a), *ms[2:]]
    return Crafted(
        zip_bytes(members, central=lambda i, e: with_field(e, 42, "<I", hidden_at) if i == 2 else e),
        changed={key_of(a_name): new_a},
    )


def _zip_wrong_offset(ms: Members) -> Crafted:
    return Crafted(zip_bytes(ms, central=lambda i, e: with_field(e, 42, "<I", local_offset(ms, 1)) if i == 2 else e))


def _zip_central_size(ms: Members) -> Crafted:
    def grow(i: int, e: bytes) -> bytes:
        return with_field(with_field(e, 20, "<I", len(ms[2][1]) + 1), 24, "<I", len(ms[2][1]) + 1) if i == 2 else e

    return Crafted(zip_bytes(ms, central=grow))


def _zip_central_crc(ms: Members) -> Crafted:
    return Crafted(
        zip_bytes(ms, central=lambda i, e: with_field(e, 16, "<I", zlib.crc32(ms[2][1]) ^ 1) if i == 2 else e)
    )


def _zip_central_name(ms: Members) -> Crafted:
    b_name = ms[2][0]
    other = b_name[:-5] + (b"0" if b_name[-5:-4] != b"0" else b"1") + b_name[-4:]  # another key, same length
    return Crafted(zip_bytes(ms, central=lambda i, e: e.replace(b_name, other) if i == 2 else e))


def _zip_after_end(ms: Members) -> Crafted:
    return Crafted(zip_bytes(ms, tail=b"appended after the end record"))


def _zip_between(ms: Members) -> Crafted:
    return Crafted(zip_bytes(ms, before={2: b"\0" * 64}))


def _zip_bad_utf8(ms: Members) -> Crafted:
    """One bit flipped in B's name in its local header: 'i' becomes 0xE9, not UTF-8 before 'm'."""
    shard = bytearray(zip_bytes(ms))
    shard[local_offset(ms, 2) + 30] ^= 0x80
    return Crafted(bytes(shard))


def _zip_renamed(new: bytes) -> Callable[[Members], Crafted]:
    """B stored under ``new``, and its row naming ``new`` too: only the name check stands."""

    def craft(ms: Members) -> Crafted:
        b_name = ms[2][0]
        rows = with_row_renamed(row_lines(ms), b_name, new)
        members = [rows_member(ms, rows), ms[1], (new, ms[2][1]), *ms[3:]]
        return Crafted(zip_bytes(members), rows=rows)

    return craft


def _zip_duplicate(ms: Members) -> Crafted:
    return Crafted(zip_bytes([*ms[:3], ms[2], *ms[3:]]))


def _zip_two_rows(ms: Members) -> Crafted:
    """B's row twice in the metadata member, the second with another caption."""
    lines = row_lines(ms).splitlines(keepends=True)
    row = json.loads(lines[1])
    rows = b"".join([*lines[:2], json.dumps({**row, "title": "a second row"}).encode() + b"\n", *lines[2:]])
    return Crafted(zip_bytes([rows_member(ms, rows), *ms[1:]]), rows=rows)


def _zip_deep_row(ms: Members) -> Crafted:
    """A's row nested 200,000 deep (CRC right): Python's parser would overflow. Only JSON lines
    can hold it: the shard is one of before layout 4, metadata.jsonl first (readers still read those)."""
    lines = row_lines(ms).splitlines(keepends=True)
    rows = b"".join([b"[" * 200_000 + b"\n", *lines[1:]])
    return Crafted(zip_bytes([(b"metadata.jsonl", rows), *ms[1:]]), rows=rows)


def _zip_jsonl_line(line: bytes) -> Callable[[Members], Crafted]:
    """A shard of before layout 4 (metadata.jsonl inside, which readers still read) whose second
    line is ``line``."""

    def craft(ms: Members) -> Crafted:
        lines = row_lines(ms).splitlines(keepends=True)
        rows = b"".join([lines[0], line + b"\n", *lines[2:]])
        return Crafted(zip_bytes([(b"metadata.jsonl", rows), *ms[1:]]), rows=rows)

    return craft


ZIP_CASES: dict[str, tuple[Callable[[Members], Crafted], Expect]] = {
    "metadata.jsonl line not UTF-8": (
        _zip_jsonl_line(b'{"file_name": "caf\xe9.jpg"}'),
        Expect(None, "metadata.jsonl line 2: not UTF-8", "metadata.jsonl is not UTF-8", "metadata.jsonl is not UTF-8"),
    ),
    "metadata.jsonl line in UTF-16": (
        _zip_jsonl_line('{"file_name": "x.jpg"}'.encode("utf-16")),
        Expect(None, "metadata.jsonl line 2: not UTF-8", "metadata.jsonl is not UTF-8", "metadata.jsonl is not UTF-8"),
    ),
    "metadata.jsonl line not an object": (
        _zip_jsonl_line(b'["file_name", "key"]'),
        Expect(
            None,
            "metadata.jsonl line 2: row is not an object",
            "metadata.jsonl line 2 is not a JSON object",
            "line 2 of metadata.jsonl is not a row",
        ),
    ),
    "metadata row nested 200,000 deep": (
        _zip_deep_row,
        Expect(None, "invalid JSON", "metadata.jsonl line 1 is not a JSON object", "nested too deep"),
    ),
    "hidden member in an extra field": (
        _zip_hidden_in_extra,
        Expect("{a}", "extra field length is", "extra field length is", "is not stored as shardkit stores it"),
    ),
    "hidden member inside another's data": (
        _zip_hidden_in_data,
        Expect("{b}", "does not match the member: its local header offset is", "local header offset", "does not match"),
    ),
    "wrong local offset in the directory": (
        _zip_wrong_offset,
        Expect("{b}", "local header offset is", "local header offset is", "does not match the member"),
    ),
    "directory size differs": (
        _zip_central_size,
        Expect("{b}", "compressed size is", "compressed size is", "does not match"),
    ),
    "directory CRC differs": (_zip_central_crc, Expect("{b}", "its CRC-32 is", "its CRC-32 is", "does not match")),
    "directory name differs": (
        _zip_central_name,
        Expect("{b}", "names another member than", "names another member than", "does not match"),
    ),
    "data after the end record": (
        _zip_after_end,
        Expect(None, "data after the end record", "data after the end record", "data after the end record"),
    ),
    "bytes between members": (
        _zip_between,
        Expect("{a}", "no local file header at offset", "no local file header at offset", "not a shardkit ZIP"),
    ),
    "invalid UTF-8 name": (
        _zip_bad_utf8,
        Expect(None, "is not valid UTF-8", "is not valid UTF-8", "is not UTF-8"),
    ),
    "NUL in a name": (
        _zip_renamed(b"images/x.jpg\0.exe"),
        Expect("images/x.jpg\\x00.exe", "unsafe member name", "unsafe member name", "unsafe member name"),
    ),
    "drive letter": (
        _zip_renamed(b"C:/x.jpg"),
        Expect("C:/x.jpg", "unsafe member name", "unsafe member name", "unsafe member name"),
    ),
    "parent folder": (
        _zip_renamed(b"../x.jpg"),
        Expect("../x.jpg", "unsafe member name", "unsafe member name", "unsafe member name"),
    ),
    "absolute name": (
        _zip_renamed(b"/x.jpg"),
        Expect("/x.jpg", "unsafe member name", "unsafe member name", "unsafe member name"),
    ),
    "duplicate member": (
        _zip_duplicate,
        Expect("{b}", "a second member of that name", "a second member of that name", "appears twice"),
    ),
    "two rows for one member": (
        _zip_two_rows,
        # shardkit.stream meets the extra row only after the last member: it names no member.
        Expect("{b}", "appears twice", "have no member", "has two rows for member", stream_member=False),
    ),
}


# --- the tar cases: A is the first file member (index 1, after its .json) ----------------------------


def _tar_header_case(**fields: bytes) -> Callable[[Members], Crafted]:
    def craft(ms: Members) -> Crafted:
        name, data = ms[1]
        return Crafted(tar_bytes(ms, headers={1: tar_header(name, len(data), **fields)}))

    return craft


def _tar_bad_checksum(ms: Members) -> Crafted:
    name, data = ms[1]
    return Crafted(tar_bytes(ms, headers={1: tar_header(name, len(data), checksum=False, uname=b"root")}))


def _tar_trailing(ms: Members) -> Crafted:
    return Crafted(tar_bytes(ms) + b"appended after the end blocks".ljust(512, b"\0"))


def _tar_flipped(ms: Members) -> Crafted:
    shard = bytearray(tar_bytes(ms))
    shard[2 * 1536 + len(ms[0][1]) + -len(ms[0][1]) % 512 + 100] ^= 0x01  # a byte of A's data
    return Crafted(bytes(shard))


def _tar_renamed(new: bytes) -> Callable[[Members], Crafted]:
    def craft(ms: Members) -> Crafted:
        json_name, line = ms[0]
        new_line = with_row_renamed(line, ms[1][0], new)
        members = [(json_name, new_line), (new, ms[1][1]), *ms[2:]]
        rows = b"".join(m[1] + b"\n" for m in members if m[0].endswith(b".json"))
        return Crafted(tar_bytes(members), rows=rows)

    return craft


def _tar_nul_in_name(ms: Members) -> Crafted:
    name, data = ms[1]
    return Crafted(tar_bytes(ms, headers={1: tar_header(name + b"\0.exe", len(data))}))


def _tar_duplicate(ms: Members) -> Crafted:
    return Crafted(tar_bytes([*ms[:2], ms[1], *ms[2:]]))


def _tar_two_rows(ms: Members) -> Crafted:
    members = [ms[0], ms[0], *ms[1:]]
    rows = b"".join(m[1] + b"\n" for m in members if m[0].endswith(b".json"))
    return Crafted(tar_bytes(members), rows=rows)


def _tar_no_crc_record(ms: Members) -> Crafted:
    """A's CRC record taken out: a member without one in a shard whose first member has one."""
    shard = tar_bytes(ms)
    start = 1536 + len(ms[0][1]) + -len(ms[0][1]) % 512
    return Crafted(shard[:start] + shard[start + 1024 :])


def _tar_deep_json(ms: Members) -> Crafted:
    """A's .json member nested 200,000 deep."""
    deep = b"[" * 200_000
    return Crafted(tar_bytes([(ms[0][0], deep), *ms[1:]]))


def _tar_json_as(data: bytes) -> Callable[[Members], Crafted]:
    """A's .json member holding ``data``."""

    def craft(ms: Members) -> Crafted:
        members = [(ms[0][0], data), *ms[1:]]
        return Crafted(tar_bytes(members), rows=b"".join(m[1] + b"\n" for m in members if m[0].endswith(b".json")))

    return craft


TAR_CASES: dict[str, tuple[Callable[[Members], Crafted], Expect]] = {
    "json member in UTF-16": (
        lambda ms: _tar_json_as(ms[0][1].decode().encode("utf-16"))(ms),
        Expect("{j}", "not a JSON object with a file_name", "is not a JSON object"),
    ),
    "json member not UTF-8": (
        lambda ms: _tar_json_as(ms[0][1].replace(b'"title":"', b'"title":"\xff', 1))(ms),
        Expect("{j}", "not a JSON object with a file_name", "is not a JSON object"),
    ),
    "json member not an object": (
        _tar_json_as(b'["file_name", "key"]'),
        Expect("{j}", "not a JSON object with a file_name", "is not a JSON object"),
    ),
    "json member nested 200,000 deep": (_tar_deep_json, Expect("{j}", "", "is not a JSON object")),
    "negative size": (
        _tar_header_case(size_field=b"-0000000001\0"),
        Expect("{a}", "is not 11 octal", "is not 11 octal"),
    ),
    "size not octal": (
        _tar_header_case(size_field=b"0000000009a\0"),
        Expect("{a}", "is not 11 octal", "is not 11 octal"),
    ),
    "bad header checksum": (_tar_bad_checksum, Expect("{a}", "header checksum mismatch", "header checksum mismatch")),
    "symbolic link": (
        _tar_header_case(type=b"2", linkname=b"../../../etc/passwd"),
        Expect("{a}", "is not a regular file", "is not a regular file"),
    ),
    "data after the end blocks": (
        _tar_trailing,
        Expect(None, "data after the end-of-archive blocks", "data after the end-of-archive blocks"),
    ),
    "flipped byte in a member's data": (
        _tar_flipped,
        Expect("{a}", "CRC mismatch: the bytes are not what was written", "CRC mismatch in member"),
    ),
    "member without its CRC record": (_tar_no_crc_record, Expect("{a}", "has no CRC record", "has no CRC record")),
    "NUL in a name": (_tar_nul_in_name, Expect("{a}", "holds a NUL", "holds a NUL")),
    "drive letter": (_tar_renamed(b"C:x.jpg"), Expect("C:x.jpg", "unsafe member name", "unsafe member name")),
    "parent folder": (_tar_renamed(b"../x.jpg"), Expect("../x.jpg", "unsafe member name", "unsafe member name")),
    "absolute name": (_tar_renamed(b"/x.jpg"), Expect("/x.jpg", "unsafe member name", "unsafe member name")),
    "duplicate member": (_tar_duplicate, Expect("{a}", "a second member of that name", "a second member of that name")),
    "two rows for one member": (
        _tar_two_rows,
        Expect("{j}", "a second member of that name", "a second member of that name"),
    ),
}


# --- packed datasets and the readers -------------------------------------------------------------------


def packed_example(tmp_path_factory: pytest.TempPathFactory, name: str, *options: str) -> Path:
    folder = tmp_path_factory.mktemp(name) / "yfcc-mini"
    result = pack_example(folder, *options, "-q")
    assert result.returncode == 0, result.stderr
    return folder


@pytest.fixture(scope="module")
def packed_tar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return packed_example(tmp_path_factory, "tar", "--format", "tar")


PACKED_SHA256 = {key: digest for key, digest, _ in expected_rows()}  # each file's bytes as packed, by key


def crafted_copy(
    packed: Path, dest: Path, fmt: str, craft: Callable[[Members], Crafted]
) -> tuple[Path, Crafted, Members]:
    """A copy of ``packed`` whose data/3.<fmt> is ``craft``'s; the members it started from."""
    repo = dest / "yfcc-mini"
    shutil.copytree(packed, repo, ignore=shutil.ignore_patterns("lock", ".shardkit"))
    shard = repo / "data" / f"3.{fmt}"
    members = zip_members(shard) if fmt == "zip" else tar_members(shard)
    # The crafting starts from exactly what pack wrote: the cases differ from it only where they say.
    assert (zip_bytes(members) if fmt == "zip" else tar_bytes(members)) == shard.read_bytes()
    crafted = craft(members)
    set_shard(repo, f"data/3.{fmt}", crafted.shard, crafted.rows)
    return repo, crafted, members


def member_named(expect: Expect, members: Members) -> str | None:
    if expect.member is None:
        return None
    names = {"{a}": members[1][0], "{b}": members[2][0], "{j}": members[0][0]}
    return names[expect.member].decode() if expect.member in names else expect.member


def assert_verify_refuses(repo: Path, shard: str, member: str | None, words: str) -> None:
    result = CliRunner().invoke(main, ["verify", str(repo), "--deep", "-q"], catch_exceptions=False)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stdout.splitlines() if words in line]
    assert lines, result.stdout
    assert lines[0].startswith(f"{shard}: ") and (member is None or member in lines[0]), lines[0]


def packed_digests(crafted: Crafted) -> dict[str, str]:
    """sha256 of each file's bytes as packed (or as the case changed them for every reader), by key."""
    return {**PACKED_SHA256, **{k: hashlib.sha256(v).hexdigest() for k, v in crafted.changed.items()}}


def assert_stream_refuses(repo: Path, shard: str, member: str | None, words: str, crafted: Crafted) -> None:
    """shardkit.stream raises naming the shard, and every row it yields first holds the packed bytes."""
    expected = packed_digests(crafted)
    ds = shardkit.stream(str(repo)).cast_column("image", datasets.Image(decode=False))
    with pytest.raises(ShardkitError) as caught:
        for row in ds:
            assert hashlib.sha256(row["image"]["bytes"]).hexdigest() == expected[row["key"]], row["key"]
    message = str(caught.value)
    assert "\n" not in message and f"{repo / shard}: " in message and words in message, message
    assert member is None or member in message, message


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(ZIP_CASES))
def test_hostile_zip_is_refused_by_verify_and_stream(packed_template: Path, tmp_path: Path, case: str) -> None:
    craft, expect = ZIP_CASES[case]
    repo, crafted, members = crafted_copy(packed_template, tmp_path, "zip", craft)
    member = member_named(expect, members)
    assert_verify_refuses(repo, "data/3.zip", member, expect.verify)
    assert_stream_refuses(repo, "data/3.zip", member if expect.stream_member else None, expect.stream, crafted)


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(TAR_CASES))
def test_hostile_tar_is_refused_by_verify_and_stream(packed_tar: Path, tmp_path: Path, case: str) -> None:
    craft, expect = TAR_CASES[case]
    repo, crafted, members = crafted_copy(packed_tar, tmp_path, "tar", craft)
    member = member_named(expect, members)
    assert_verify_refuses(repo, "data/3.tar", member, expect.verify)
    assert_stream_refuses(repo, "data/3.tar", member, expect.stream, crafted)


# --- the loading script in datasets 3.6: every ZIP case in one process ----------------------------------

SCRIPT_DRIVER = r"""
import hashlib, json, sys
import datasets
from datasets import load_dataset

results = {}
for case, loader in json.loads(sys.argv[1]).items():
    rows, error = [], None
    try:
        ds = load_dataset(loader, split="train", streaming=True, trust_remote_code=True, cache_dir=sys.argv[2])
        for row in ds.cast_column("image", datasets.Image(decode=False)):
            rows.append([row["key"], hashlib.sha256(row["image"]["bytes"]).hexdigest()])
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    results[case] = {"rows": rows, "error": error}
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def script_results(packed_template: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What the template's loading script did with each ZIP case, in datasets 3.6 (one process)."""
    root = tmp_path_factory.mktemp("script")
    loaders, crafted = {}, {}
    for number, (case, (craft, _)) in enumerate(sorted(ZIP_CASES.items())):
        repo, crafted[case], members = crafted_copy(packed_template, root / str(number), "zip", craft)
        loaders[case] = str(repo / "yfcc_mini_loader.py")
        crafted[case] = (crafted[case], members)
    results = script_outcomes(loaders, root / "cache")
    return {case: (results[case], *crafted[case]) for case in results}


def script_outcomes(loaders: dict[str, str], cache: Path) -> dict[str, Any]:
    """What each loading script (case -> its path) did in datasets 3.6, in one process: the
    train split's (key, sha256 of its file) rows until it stopped, and its error if any."""
    result = subprocess.run(
        [DS36_PYTHON, "-c", SCRIPT_DRIVER, json.dumps(loaders), str(cache)],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(ZIP_CASES))
def test_hostile_zip_is_refused_by_the_loading_script_in_datasets_3_6(
    script_results: dict[str, Any], case: str
) -> None:
    (outcome, crafted, members), expect = script_results[case], ZIP_CASES[case][1]
    error = outcome["error"]
    assert error is not None and error.startswith("ValueError: data/3.zip: ") and expect.script in error, error
    assert "\n" not in error
    member = member_named(expect, members)
    assert member is None or member in error, error
    expected = packed_digests(crafted)
    assert all(digest == expected[key] for key, digest in outcome["rows"])


# --- old shards, and remux ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_tar_shards_from_before_crc_records_still_verify_and_read(packed_tar: Path, tmp_path: Path) -> None:
    repo = tmp_path / "yfcc-mini"
    shutil.copytree(packed_tar, repo, ignore=shutil.ignore_patterns("lock", ".shardkit"))
    for shard in sorted((repo / "data").glob("*.tar")):
        set_shard(repo, f"data/{shard.name}", tar_bytes(tar_members(shard), crc=False))
    result = CliRunner().invoke(main, ["verify", str(repo), "--deep", "-q"], catch_exceptions=False)
    assert result.exit_code == 0 and result.stdout.rstrip().endswith(": OK"), result.stdout
    ds = shardkit.stream(str(repo)).cast_column("image", datasets.Image(decode=False))
    rows = {row["key"]: hashlib.sha256(row["image"]["bytes"]).hexdigest() for row in ds}
    assert rows == PACKED_SHA256


def test_a_crc_record_in_an_old_shard_is_refused(packed_tar: Path, tmp_path: Path) -> None:
    """The first member decides: a shard that starts without CRC records may not have one later."""

    start = 0

    def craft(ms: Members) -> Crafted:
        nonlocal start
        old = tar_bytes(ms, crc=False)
        start = 512 + len(ms[0][1]) + -len(ms[0][1]) % 512  # A's header
        return Crafted(old[:start] + crc_record(zlib.crc32(ms[1][1])) + old[start:])

    repo, _, _ = crafted_copy(packed_tar, tmp_path, "tar", craft)
    words = f"data/3.tar: a CRC record at offset {start}, in a shard whose first member has none"
    assert_verify_refuses(repo, "data/3.tar", None, words.split(": ", 1)[1])
    with pytest.raises(ShardkitError, match=words):
        list(shardkit.stream(str(repo)))


@pytest.mark.slow
@pytest.mark.parametrize(("fmt", "case"), [("zip", "hidden member inside another's data"), ("tar", "negative size")])
def test_remux_refuses_a_hostile_source_with_one_line(
    packed_template: Path, packed_tar: Path, tmp_path: Path, fmt: str, case: str
) -> None:
    craft = (ZIP_CASES if fmt == "zip" else TAR_CASES)[case][0]
    repo, _, _ = crafted_copy(packed_template if fmt == "zip" else packed_tar, tmp_path / "src", fmt, craft)
    result = subprocess.run(
        [
            str(SCRIPTS / "shardkit"),
            "remux",
            str(repo),
            str(tmp_path / "out"),
            "--map",
            "tests.remux_functions:slow_identity",
            "-q",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "REMUX_TEST_SLEEP": "0"},
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and f"data/3.{fmt}: " in lines[0], result.stderr


# --- a layout-4 ZIP's metadata.parquet ------------------------------------------------------------------


def _table_garbage(ms: Members) -> Crafted:
    return Crafted(zip_bytes([(b"metadata.parquet", b"PAR1 not a Parquet file PAR1"), *ms[1:]]))


def _table_column_dropped(ms: Members) -> Crafted:
    """A table without the manifest's ``title`` column (CRCs right, the same rows otherwise)."""
    table = read_metadata_table(ms[0][1], None)
    schema = pq.read_schema(io.BytesIO(ms[0][1]))
    schema = schema.remove(schema.get_field_index("title"))
    lines = b"".join(json.dumps({k: v for k, v in r.items() if k != "title"}).encode() + b"\n" for r in table)
    return Crafted(zip_bytes([(b"metadata.parquet", encode_table(metadata_lines_table(lines, schema))), *ms[1:]]))


@pytest.mark.parametrize(
    ("craft", "words"),
    [
        (_table_garbage, "metadata.parquet: "),
        (_table_column_dropped, "metadata.parquet: its columns are not those the manifest's features declare"),
    ],
    ids=["not Parquet", "a column dropped"],
)
def test_a_hostile_metadata_table_is_refused_by_verify_and_stream(
    packed_template: Path, tmp_path: Path, craft: Callable[[Members], Crafted], words: str
) -> None:
    repo, crafted, _ = crafted_copy(packed_template, tmp_path, "zip", craft)
    assert_verify_refuses(repo, "data/3.zip", None, words)
    assert_stream_refuses(repo, "data/3.zip", None, words, crafted)


def test_a_metadata_file_that_differs_from_the_table_inside_is_named_by_verify(
    packed_template: Path, tmp_path: Path
) -> None:
    """metadata/3.jsonl with one value changed, the manifest's sha256 made to agree: verify
    compares it with the shard's metadata.parquet, typed, and names the line."""

    def craft(ms: Members) -> Crafted:
        lines = row_lines(ms).splitlines(keepends=True)
        row = json.loads(lines[2])
        lines[2] = json.dumps({**row, "title": "not what the shard holds"}).encode() + b"\n"
        return Crafted(zip_bytes(ms), rows=b"".join(lines))

    repo, _, _ = crafted_copy(packed_template, tmp_path, "zip", craft)
    words = "differs from the metadata.parquet inside data/3.zip: line 3"
    assert_verify_refuses(repo, "metadata/3.jsonl", None, words)


# --- rows that do not agree with the manifest (issue 31) -------------------------------------------------
#
# Each case changes the rows of data/3.<fmt> (row 1 is B, the second) and builds the shard again as
# shardkit lays it out, CRCs and checksums right, its metadata/3.jsonl the same rows: only the rows
# give it away. Every reader refuses it with one line naming the shard and the row: verify --deep,
# shardkit.stream, remux (which reads through it) and, for ZIP shards, the loading script in
# datasets 3.6. A typed shard (a ZIP's metadata.parquet, a Parquet shard) cannot hold a value of
# another type than its columns': there the shard's columns differ from the features, and that is
# what the shard is refused for (its metadata/3.jsonl's row is what verify and the script name).

Rows = list[dict[str, Any]]
#: The shard kinds the row cases run on: ZIP (layout 4), ZIP of before layout 4 (metadata.jsonl
#: inside, still read), tar, Parquet.
ROW_FORMATS = ("zip", "zip-jsonl", "tar", "parquet")


@dataclass(frozen=True)
class RowCase:
    change: Callable[[Rows, Rows], Rows]  # (the shard's rows, data/4's rows) -> the crafted rows
    words: str  # a regular expression every reader's message matches
    formats: tuple[str, ...] = ROW_FORMATS
    script_words: str | None = None  # the loading script's, where they differ


def _member(fmt: str, key: str, ext: str = ".jpg") -> str:
    return f"images/{key[0:3]}/{key[3:6]}/{key}{ext}" if fmt.startswith("zip") else f"{key}{ext}"


ABSENT = object()


def _in_b(**fields: Any) -> Callable[[Rows, Rows], Rows]:
    """Row B with ``fields`` set (a field given ABSENT is taken out)."""

    def change(rows: Rows, _: Rows) -> Rows:
        b = {k: v for k, v in {**rows[1], **fields}.items() if v is not ABSENT}
        return [rows[0], b, *rows[2:]]

    return change


def _b_keyed(key_of_b: Callable[[str, Rows], str], *, rename: bool = True) -> Callable[[Rows, Rows], Rows]:
    """Row B with another key (and, with ``rename``, its member named for it)."""

    def change(rows: Rows, others: Rows) -> Rows:
        b = dict(rows[1])
        key = key_of_b(b["key"], others)
        if rename:
            b["file_name"] = b["file_name"].replace(b["key"], key)
        b["key"] = key
        return [rows[0], b, *rows[2:]]

    return change


def _swapped(rows: Rows, _: Rows) -> Rows:
    return [rows[0], rows[2], rows[1], *rows[3:]]


def _b_twice(rows: Rows, _: Rows) -> Rows:
    """B's key on C's row too, C's member named for it in another extension (not a second member)."""
    c = {**rows[2], "key": rows[1]["key"], "file_name": rows[1]["file_name"].replace(".jpg", ".png")}
    return [rows[0], rows[1], c, *rows[3:]]


def _last_dropped(rows: Rows, _: Rows) -> Rows:
    return rows[:-1]


ROW_CASES: dict[str, RowCase] = {
    "no key": RowCase(_in_b(key=ABSENT), r": no key$|key None is not 8 to 128"),
    "null key": RowCase(_in_b(key=None), r"key None is not 8 to 128 lowercase hex digits"),
    "no file_name": RowCase(
        _in_b(file_name=ABSENT), r"with a file_name|follows the row for None|its file has no name|with a 'file_name'"
    ),
    "key of 7 digits": RowCase(_b_keyed(lambda k, _: k[:7]), r"is not 8 to 128 lowercase hex digits"),
    "key of 129 digits": RowCase(
        _b_keyed(lambda k, _: (k * 5)[:129]),
        r"is not 8 to 128 lowercase hex digits",
        formats=("zip", "zip-jsonl", "parquet"),  # a tar member's name holds at most 100 bytes
    ),
    "uppercase hex key": RowCase(_b_keyed(lambda k, _: k.upper()), r"is not 8 to 128 lowercase hex digits"),
    "key outside the shard's prefix": RowCase(
        _b_keyed(lambda k, _: "f" + k[1:]), r"key f[0-9a-f]+ is not in this shard's (prefix|range)"
    ),
    "key of a row of another shard": RowCase(
        _b_keyed(lambda _, others: others[0]["key"]), r"key 4[0-9a-f]+ is not in this shard's (prefix|range)"
    ),
    "key that does not name its member": RowCase(
        _b_keyed(lambda k, _: k[:-1] + ("0" if k[-1] != "0" else "1"), rename=False),
        r"member '[^']*' is not where key [0-9a-f]+ belongs|is not above the previous",
    ),
    "keys not increasing": RowCase(_swapped, r"is not above the previous row's"),
    "one key twice in a shard": RowCase(_b_twice, r"is not above the previous row's|a second member of that name"),
    "a row fewer than the manifest records": RowCase(
        _last_dropped, r"rows?,? where the manifest records|members, the manifest says|rows, the manifest says"
    ),
    "int where string is declared": RowCase(
        _in_b(title=5), r"column 'title': (an integer|int) where the features declare string|its columns are not"
    ),
    "string where int64 is declared": RowCase(
        _in_b(photoid="364426"),
        r"column 'photoid': (a string|str) where the features declare int64|its columns are not",
    ),
    "bool where int64 is declared": RowCase(
        _in_b(marker=True), r"column 'marker': (a boolean|bool) where the features declare int64|its columns are not"
    ),
    "int where float64 is declared": RowCase(
        _in_b(latitude=5),
        r"column 'latitude': (an integer|int) where the features declare float64|its columns are not",
        # A typed table holds 5.0 (a manifest of before layout 4 lets rows hold 5: layout 1 wrote that).
        formats=("zip-jsonl", "tar"),
    ),
    "list where string is declared": RowCase(
        _in_b(title=["a"]), r"column 'title': (a list|list) where the features declare string|its columns are not"
    ),
    "object where string is declared": RowCase(
        _in_b(title={"a": 1}), r"column 'title': (an object|dict) where the features declare string|its columns are not"
    ),
    "NaN": RowCase(_in_b(latitude=float("nan")), r"column 'latitude': nan, which shardkit never packs|differ"),
    "infinity": RowCase(_in_b(longitude=float("inf")), r"column 'longitude': inf, which shardkit never packs|differ"),
    "integer over 64 bits": RowCase(
        _in_b(photoid=2**64),
        r"column 'photoid': 18446744073709551616, outside the 64-bit",
        formats=("tar", "zip-jsonl"),
    ),
    "a column the features do not declare": RowCase(
        _in_b(extra="x"), r"column 'extra', which the features do not declare|its columns are not"
    ),
}


def _shard_rows(repo: Path, fmt: str, stem: str = "3") -> tuple[Rows, list[bytes]]:
    """The rows of ``repo``'s data/<stem> shard (each with its file_name) and their files, in order."""
    shard = repo / "data" / f"{stem}.{fmt.split('-')[0]}"
    if fmt == "parquet":
        table = pq.read_table(shard).to_pylist()
        return [{"file_name": row.pop("image")["path"], **row} for row in table], [
            row["image"]["bytes"] for row in pq.read_table(shard).to_pylist()
        ]
    if fmt.startswith("zip"):
        ms = zip_members(shard)
        return [json.loads(line) for line in row_lines(ms).splitlines()], [data for _, data in ms[1:]]
    ms = tar_members(shard)
    return [json.loads(data) for name, data in ms if name.endswith(b".json")], [
        data for name, data in ms if not name.endswith(b".json")
    ]


def _inferred(rows: Rows) -> Any:
    """``rows`` as a table of the types pyarrow infers for each column (every row's columns). A
    column whose values cannot share a type keeps only those of row B's type (the others null):
    a typed shard holds B's value in a column of its type."""
    import pyarrow as pa

    columns: dict[str, Any] = {}
    for name in dict.fromkeys(k for row in rows for k in row):
        values = [row.get(name) for row in rows]
        try:
            columns[name] = pa.array(values)
        except (pa.ArrowException, OverflowError):
            kind = type(values[1])
            columns[name] = pa.array([v if type(v) is kind else None for v in values])
    return pa.table(columns)


def _fits(rows: Rows, schema: Any) -> bool:
    """Whether every value of ``rows`` has its column's type in ``schema`` as pyarrow infers it
    (a table of the schema would convert True to 1, or drop a column, without a word)."""
    import pyarrow as pa

    inferred = _inferred(rows).schema
    return set(inferred.names) <= set(schema.names) and all(
        pa.types.is_null(f.type) or f.type == schema.field(f.name).type for f in inferred
    )


def _typed(rows: Rows, schema: Any) -> Any:
    """``rows`` as a table of ``schema``, or of the types pyarrow infers where they do not fit it."""
    import pyarrow as pa

    return pa.Table.from_pylist(rows, schema=schema) if _fits(rows, schema) else _inferred(rows)


def _crafted_shard(fmt: str, rows: Rows, files: list[bytes], names: list[str], features: Any) -> bytes:
    """``rows`` and ``files`` as shardkit lays out a shard of ``fmt``; a row without a file_name
    keeps its member's name from ``names`` (the packed shard's)."""

    from shardkit.formats.parquet import ParquetShardWriter, arrow_schema, shard_table_schema

    members = [r["file_name"] if isinstance(r.get("file_name"), str) else n for r, n in zip(rows, names, strict=True)]
    lines = [json.dumps(row, ensure_ascii=False).encode() for row in rows]
    files_in = [(m.encode(), f) for m, f in zip(members, files, strict=True)]
    if fmt == "zip":
        return zip_bytes([(b"metadata.parquet", encode_table(_typed(rows, shard_table_schema(features)))), *files_in])
    if fmt == "zip-jsonl":
        return zip_bytes([(b"metadata.jsonl", b"".join(line + b"\n" for line in lines)), *files_in])
    if fmt == "tar":
        return tar_bytes(
            [
                m
                for line, (name, data) in zip(lines, files_in, strict=True)
                for m in ((name[:-4] + b".json", line), (name, data))
            ]
        )
    buffer = io.BytesIO()
    typed = [{"image": {"bytes": f, "path": r.get("file_name")}, **r} for r, f in zip(rows, files, strict=True)]
    typed = [{k: v for k, v in r.items() if k != "file_name"} for r in typed]
    if _fits(typed, arrow_schema(features)):  # as shardkit writes it
        writer = ParquetShardWriter(buffer, features)  # type: ignore[arg-type]
        for row, data in zip(rows, files, strict=True):  # (a row without a file_name: a null path)
            writer.add(json.dumps({"file_name": None, **row}), data)
        writer.close()
    else:  # with the types the rows have
        pq.write_table(_inferred(typed), buffer)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def packed_parquet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return packed_example(tmp_path_factory, "parquet", "--format", "parquet")


@pytest.fixture(scope="module")
def packed_kinds(packed_template: Path, packed_tar: Path, packed_parquet: Path) -> dict[str, Path]:
    return {"zip": packed_template, "zip-jsonl": packed_template, "tar": packed_tar, "parquet": packed_parquet}


def row_case_copy(packed: Path, dest: Path, fmt: str, case: RowCase) -> Path:
    """A copy of ``packed`` whose data/3 shard holds ``case``'s rows (the manifest agreeing with
    its bytes and with its metadata/3.jsonl, which holds the same rows)."""
    repo = dest / "yfcc-mini"
    shutil.copytree(packed, repo, ignore=shutil.ignore_patterns("lock", ".shardkit"))
    features = json.loads((repo / "shards.json").read_text())["features"]
    rows, files = _shard_rows(repo, fmt)
    crafted = case.change([dict(r) for r in rows], _shard_rows(repo, fmt, "4")[0])
    names = [r["file_name"] for r in rows][: len(crafted)]
    shard = _crafted_shard(fmt, crafted, files[: len(crafted)], names, features)
    lines = b"".join(json.dumps(row, ensure_ascii=False).encode() + b"\n" for row in crafted)
    set_shard(repo, f"data/3.{fmt.split('-')[0]}", shard, lines)
    return repo


ROW_PARAMS = [(fmt, case) for case, c in sorted(ROW_CASES.items()) for fmt in c.formats]


def one_line_refusal(message: str, shard: str, words: str) -> None:
    assert "\n" not in message and "Traceback" not in message, message
    assert shard in message and re.search(words, message), message


@pytest.mark.slow
@pytest.mark.parametrize(("fmt", "case"), ROW_PARAMS)
def test_a_row_that_does_not_agree_with_the_manifest_is_refused(
    packed_kinds: dict[str, Path], tmp_path: Path, fmt: str, case: str
) -> None:
    """verify --deep (its first line about the shard), shardkit.stream and remux: one line each,
    naming the shard and the row."""
    row_case = ROW_CASES[case]
    repo = row_case_copy(packed_kinds[fmt], tmp_path, fmt, row_case)
    shard = f"data/3.{fmt.split('-')[0]}"
    result = CliRunner().invoke(main, ["verify", str(repo), "--deep", "-q"], catch_exceptions=False)
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stdout.splitlines() if re.search(row_case.words, line)]
    assert lines and lines[0].startswith((f"{shard}: ", "metadata/3.jsonl: ")), result.stdout
    with pytest.raises(ShardkitError) as caught:
        for _ in shardkit.stream(str(repo)):
            pass
    one_line_refusal(str(caught.value), f"{repo / shard}: ", row_case.words)
    remuxed = CliRunner().invoke(
        main,
        [
            "remux",
            str(repo),
            str(tmp_path / "out"),
            "--map",
            "tests.remux_functions:slow_identity",
            "--jobs",
            "1",
            "-q",
        ],
        env={"REMUX_TEST_SLEEP": "0"},
    )
    assert remuxed.exit_code == 1, remuxed.output
    one_line_refusal(remuxed.stderr.strip(), f"{shard}: ", row_case.words)
    assert remuxed.stderr.startswith("error: ")


@pytest.fixture(scope="module")
def row_script_results(packed_template: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What the template's loading script did with each row case of a ZIP shard (layout 4: its
    rows read from metadata/3.jsonl; before: from metadata.jsonl inside), in datasets 3.6."""
    root = tmp_path_factory.mktemp("row-script")
    loaders = {}
    for number, (fmt, case) in enumerate(p for p in ROW_PARAMS if p[0].startswith("zip")):
        repo = row_case_copy(packed_template, root / str(number), fmt, ROW_CASES[case])
        loaders[f"{fmt} {case}"] = str(repo / "yfcc_mini_loader.py")
    return script_outcomes(loaders, root / "cache")


@pytest.mark.slow
@pytest.mark.parametrize(("fmt", "case"), [p for p in ROW_PARAMS if p[0].startswith("zip")])
def test_a_row_that_does_not_agree_with_the_manifest_is_refused_by_the_loading_script(
    row_script_results: dict[str, Any], fmt: str, case: str
) -> None:
    error = row_script_results[f"{fmt} {case}"]["error"]
    row_case = ROW_CASES[case]
    assert error is not None and error.startswith("ValueError: data/3.zip: "), error
    one_line_refusal(error, "data/3.zip: ", row_case.script_words or row_case.words)


@pytest.fixture(scope="module")
def packed_by_size(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example cut by size into shards named by where their keys start (data/0.zip, data/2a.zip...)."""
    return packed_example(tmp_path_factory, "by-size", "--target-shard-size", "300KB")


@pytest.mark.slow
def test_a_key_at_the_next_shards_name_is_refused(packed_by_size: Path, tmp_path: Path) -> None:
    """A shard's range ends below the next shard's name: the last row's key made the smallest key
    at that name (its member named for it) is refused by verify and stream, naming the row."""
    repo = tmp_path / "yfcc-mini"
    shutil.copytree(packed_by_size, repo, ignore=shutil.ignore_patterns("lock", ".shardkit"))
    manifest = json.loads((repo / "shards.json").read_text())
    first, after = manifest["shards"][0]["file"], manifest["shards"][1]["file"]
    next_name = after.rsplit("/", 1)[-1].split(".")[0]
    rows, files = _shard_rows(repo, "zip", first.rsplit("/", 1)[-1].split(".")[0])
    last = rows[-1]
    key = next_name.ljust(len(last["key"]), "0")
    rows[-1] = {**last, "key": key, "file_name": last["file_name"].replace(last["key"], key)}
    shard = _crafted_shard("zip", rows, files, [r["file_name"] for r in rows], manifest["features"])
    set_shard(repo, first, shard, b"".join(json.dumps(r).encode() + b"\n" for r in rows))
    words = f"key {key} is not in this shard's range: at or above its name .* and below '{next_name}'"
    result = CliRunner().invoke(main, ["verify", str(repo), "-q"], catch_exceptions=False)
    assert result.exit_code == 1 and re.search(
        f"^{first}: metadata.parquet line {len(rows)}: {words}", result.stdout, re.M
    )
    with pytest.raises(ShardkitError) as caught:
        for _ in shardkit.stream(str(repo)):
            pass
    one_line_refusal(str(caught.value), f"{repo / first}: row {len(rows)} (key {key}): ", words)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["zip", "tar", "parquet"])
def test_a_cut_piece_holds_its_rows_to_the_manifest_too(
    packed_kinds: dict[str, Path], tmp_path: Path, fmt: str
) -> None:
    """A rank reading rows 1 to 3 of a shard (a ZIP through its central directory, Parquet by row
    group) meets B's NaN as the whole-shard reader does, named by its row number in the shard."""
    from shardkit.location import Location
    from shardkit.shardrows import iter_shard

    repo = row_case_copy(packed_kinds[fmt], tmp_path, fmt, ROW_CASES["NaN"])
    location = Location(str(repo), "folder")
    assert len(list(iter_shard(location, f"data/3.{fmt}", "image", fmt, start=2, stop=4))) == 2
    with pytest.raises(ShardkitError) as caught:
        list(iter_shard(location, f"data/3.{fmt}", "image", fmt, start=1, stop=3))
    one_line_refusal(str(caught.value), f"{repo / 'data'}/3.{fmt}: row 2 (key ", r"column 'latitude': nan")
