"""``shardkit head``: the first rows of a packed dataset's split, as a person or a script reads them.

Where the dataset is (a folder, an http(s) URL, a Hub id) is :meth:`.location.Location.parse`'s,
as for ``shardkit.stream``; the rows are read as every reader reads them
(:func:`.shardrows.iter_shard`, each held to the manifest), from the split's first shards only,
and from each only the rows shown (a ZIP's central directory and the members shown, a Parquet
shard's first row groups; a tar shard front to back until the last row shown).

Of a row's file only its header is parsed: an image's size, mode and format with Pillow
(``Image.open`` reads no pixel), an audio file's duration, rate and channels with soundfile.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import posixpath
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from . import summarytext
from .card import human_size
from .errors import ShardkitError, UsageError, one_line, redact
from .location import Location
from .manifest import Manifest
from .outdir import check_parent_exists
from .schema import class_label_names
from .shardrows import iter_shard, read_manifest_from

#: How much of a value one line shows.
STRING_CHARS = 60
LIST_ITEMS = 5
VALUE_CHARS = 100
#: The features are listed on lines of at most this many characters.
HEADER_WIDTH = 100
#: EXIF's orientation tag: 1 is upright; 2-8 a viewer turns or mirrors the stored pixels.
_ORIENTATION_TAG = 0x0112
_EXTENSION = re.compile(r"\.[A-Za-z0-9]{1,16}")


@dataclass(frozen=True)
class FileInfo:
    """A row's file as its header describes it; never its bytes."""

    kind: str  # "image" or "audio": the dataset's modality
    path: str  # its name inside the shard
    size: int
    sha256: str
    format: str | None = None  # Pillow's or libsndfile's name, lower case: "jpeg", "png", "wav", "flac"
    width: int | None = None
    height: int | None = None
    mode: str | None = None  # Pillow's: "RGB", "L", "RGBA", "I;16", "P", "CMYK"...
    orientation: int | None = None  # EXIF orientation when it is not 1 (the pixels are stored turned)
    seconds: float | None = None
    sample_rate: int | None = None
    channels: int | None = None
    problem: str | None = None  # why the header does not parse (then only size and sha256 are known)

    @property
    def extension(self) -> str:
        """The file's extension as packed (``.jpg``), from its name in the shard."""
        return posixpath.splitext(self.path)[1]

    def to_json(self) -> dict[str, Any]:
        """What ``--json`` gives for the file column: every field known, none of the bytes."""
        fields = {
            "path": self.path,
            "bytes": self.size,
            "sha256": self.sha256,
            "format": self.format,
            **(
                {"width": self.width, "height": self.height, "mode": self.mode}
                if self.kind == "image"
                else {"seconds": self.seconds, "sample_rate": self.sample_rate, "channels": self.channels}
            ),
        }
        if self.orientation is not None:
            fields["orientation"] = self.orientation
        if self.problem is not None:
            fields["problem"] = self.problem
        return fields

    def text(self) -> str:
        """``<image 640x480 RGB jpeg 123.0 KB>``, ``<audio 3.2 s 16000 Hz 1 ch flac 51.2 KB>``."""
        size = human_size(self.size)
        if self.problem is not None:
            return f"<{self.kind} {self.extension or '(no extension)'} {size}: {one_line(self.problem)}>"
        if self.kind == "image":
            turned = f" EXIF orientation {self.orientation}" if self.orientation is not None else ""
            return f"<image {self.width}x{self.height} {self.mode} {self.format} {size}{turned}>"
        return f"<audio {self.seconds:.1f} s {self.sample_rate} Hz {self.channels} ch {self.format} {size}>"


def describe_file(kind: str, path: str, data: bytes) -> FileInfo:
    """``data``'s size, sha256 and header: Pillow's size, mode and format for an image (no pixel
    is decoded), soundfile's duration, rate and channels for audio."""
    known: dict[str, Any] = {"kind": kind, "path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    try:
        known.update(_image_header(data) if kind == "image" else _audio_header(data))
    except Exception as exc:  # whatever a decoder raises for a file it does not read: shown, not fatal
        known["problem"] = _header_problem(kind, exc)
    return FileInfo(**known)


def _header_problem(kind: str, exc: Exception) -> str:
    """Why a decoder did not read a header, without the file object's repr its message may hold."""
    if type(exc).__name__ == "UnidentifiedImageError":
        reason = "not an image type it knows"
    else:  # soundfile's error_string is libsndfile's reason alone ("Format not recognised.")
        reason = str(getattr(exc, "error_string", None) or exc).rstrip(".")
    reader = "Pillow" if kind == "image" else "soundfile"
    return f"{reader} cannot read its header: {reason[:120]}"


def _image_header(data: bytes) -> dict[str, Any]:
    from PIL import Image

    with warnings.catch_warnings():  # a large image's header is shown, never decoded
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        with Image.open(io.BytesIO(data)) as image:
            # Image's own getexif: PNG's decodes the whole image to look for an eXIf chunk after the
            # pixels; this one reads what the header held.
            orientation = Image.Image.getexif(image).get(_ORIENTATION_TAG)
            return {
                "width": image.width,
                "height": image.height,
                "mode": image.mode,
                "format": (image.format or "?").lower(),
                "orientation": orientation if isinstance(orientation, int) and orientation != 1 else None,
            }


def _audio_header(data: bytes) -> dict[str, Any]:
    import soundfile

    info = soundfile.info(io.BytesIO(data))
    return {
        "seconds": float(info.duration),
        "sample_rate": int(info.samplerate),
        "channels": int(info.channels),
        "format": str(info.format).lower(),
    }


@dataclass(frozen=True)
class HeadRow:
    """One row shown: its number in the split (from 1), its shard, its columns in the features'
    order (the file column as a :class:`FileInfo`), and its file's bytes (for ``--save-images``)."""

    number: int
    shard: str
    key: str
    values: dict[str, Any]
    data: bytes

    @property
    def file(self) -> FileInfo:
        return next(v for v in self.values.values() if isinstance(v, FileInfo))


@dataclass(frozen=True)
class Head:
    """A dataset opened for ``head``: where it is, its manifest and the split shown."""

    target: str  # as the user wrote it
    location: Location
    manifest: Manifest
    split: str

    @property
    def split_rows(self) -> int:
        return sum(s.rows for s in self.manifest.shards_of(self.split))

    def rows(self, count: int) -> Iterator[HeadRow]:
        """The split's first ``count`` rows, in the order readers get them, reading only the
        shards (and, within the last, the rows) they come from."""
        manifest, column = self.manifest, self.manifest.modality
        number = 0
        for shard in manifest.shards_of(self.split):
            if number >= count:
                return
            stop = min(shard.rows, count - number)
            rows = iter_shard(self.location, shard.file, column, manifest.options.format, manifest, start=0, stop=stop)
            try:
                for row in rows:
                    number += 1
                    yield self._row(number, shard.file, row)
            finally:
                rows.close()

    def _row(self, number: int, shard: str, row: dict[str, Any]) -> HeadRow:
        column = self.manifest.modality
        file = row[column]
        data = bytes(file["bytes"])
        declared = [str(f["name"]) for f in self.manifest.features]
        values = {
            name: describe_file(column, str(file.get("path") or ""), data) if name == column else row.get(name)
            for name in declared + [c for c in row if c not in declared]
        }
        return HeadRow(number, shard, str(row["key"]), values, data)


def open_head(target: str, *, split: str | None = None, revision: str | None = None) -> Head:
    """The dataset at ``target`` (a packed folder, an http(s) URL, a Hub id ``ns/name`` or
    ``hf://datasets/ns/name[@rev]``), resolved as ``shardkit.stream`` resolves it, and its split
    ``split`` (by default ``train``, else its first). Its manifest is read and checked; no shard is."""
    location = Location.parse(target, revision=revision)
    if revision is not None and not location.has_revisions:
        raise UsageError(f"--revision is for a dataset on the Hub; {one_line(target)} is not one")
    manifest = read_manifest_from(location)
    names = [s.name for s in manifest.splits()]
    chosen = split if split is not None else "train" if "train" in names or not names else names[0]
    manifest.shards_of(chosen)  # a split that is not there: the UsageError naming those that are
    return Head(target, location, manifest, chosen)


# --- text --------------------------------------------------------------------------------------


def header_lines(head: Head, count: int) -> list[str]:
    """What the text output starts with: a line naming the dataset, its format, the split and how
    many of its rows are shown, and the other splits; then the features (their types as the card
    declares them), on lines of :data:`HEADER_WIDTH`."""
    manifest = head.manifest
    shown = min(count, head.split_rows)
    others = [f"{s.name} {s.rows}" for s in manifest.splits() if s.name != head.split]
    other_text = f"; other splits: {', '.join(others)}" if others else ""
    shards = manifest.shards_of(head.split)
    size = human_size(sum(s.bytes for s in shards))
    where = redact(one_line(head.target))
    return [
        f"{where}: {manifest.options.format} shards, split {head.split}: {shown} of {head.split_rows} rows shown"
        f" ({summarytext.shards(len(shards))}, {size}{other_text})",
        *_wrapped("features:", [f"{one_line(str(f['name']))} ({type_text(f)})" for f in manifest.features]),
    ]


def _wrapped(first: str, items: list[str]) -> list[str]:
    """``first`` then ``items``, comma-separated, on lines of :data:`HEADER_WIDTH` (longer only
    for one long item), each item whole on one line, the lines after the first indented."""
    lines = [first]
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else "")
        if len(lines[-1]) + 1 + len(piece) > HEADER_WIDTH and lines[-1].strip() not in ("", first):
            lines.append(" ")
        lines[-1] += " " + piece
    return lines


def type_text(feature: dict[str, Any]) -> str:
    """A feature's type, short: ``int64``, ``ClassLabel: ant, cat, dog``, ``list of string``, ``struct a, b``."""
    names = class_label_names(feature)
    if names is not None:
        listed = ", ".join(one_line(n) for n in names[:LIST_ITEMS])
        return f"ClassLabel: {listed}" + (f", … {len(names)} names" if len(names) > LIST_ITEMS else "")
    if isinstance(feature.get("dtype"), str):
        return str(feature["dtype"])
    if "list" in feature:
        inner = feature["list"]
        return "list of " + (inner if isinstance(inner, str) else type_text(inner))
    if isinstance(feature.get("struct"), list):
        return "struct " + ", ".join(one_line(str(f.get("name"))) for f in feature["struct"])
    return one_line(json.dumps({k: v for k, v in feature.items() if k != "name"}))


def row_lines(head: Head, row: HeadRow) -> list[str]:
    """One row as text: a line naming it and its shard, then a line per column, each value on one line."""
    labels = {f["name"]: class_label_names(f) for f in head.manifest.features}
    width = min(max((len(one_line(c)) for c in row.values), default=0), 24)
    lines = [f"row {row.number} ({row.shard})"]
    for column, value in row.values.items():
        names = labels.get(column)
        if isinstance(value, FileInfo):
            text = value.text()
        elif names is not None and isinstance(value, int) and not isinstance(value, bool):
            text = f"{value} ({one_line(names[value]) if 0 <= value < len(names) else 'no label'})"
        else:
            text = value_text(value)
        lines.append(f"  {one_line(column):<{width}}  {text}")
    return lines


def value_text(value: Any) -> str:
    """A value on one line, as JSON writes it, shortened: strings cut at :data:`STRING_CHARS`
    (with ``…`` and their length), lists at :data:`LIST_ITEMS` items, the whole at :data:`VALUE_CHARS`;
    control characters escaped, so a value cannot forge a line of the output."""
    text = one_line(_short(value))
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 1] + "…"


def _short(value: Any) -> str:
    if isinstance(value, str):
        if len(value) <= STRING_CHARS:
            return json.dumps(value, ensure_ascii=False)
        return json.dumps(value[:STRING_CHARS] + "…", ensure_ascii=False) + f" ({len(value)} chars)"
    if isinstance(value, list):
        items = [_short(v) for v in value[:LIST_ITEMS]]
        more = [f"… {len(value)} items"] if len(value) > LIST_ITEMS else []
        return "[" + ", ".join(items + more) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k), ensure_ascii=False)}: {_short(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    return json.dumps(value)  # None, bools, numbers: null, true, 3, 0.5


# --- JSON --------------------------------------------------------------------------------------


def row_json(row: HeadRow) -> dict[str, Any]:
    """One row for ``--json``: every column's value as readers get it (a class label its number),
    the file column as :meth:`FileInfo.to_json` (never the bytes)."""
    return {c: v.to_json() if isinstance(v, FileInfo) else v for c, v in row.values.items()}


# --- saving files ------------------------------------------------------------------------------


class SavedFiles:
    """``--save-images DIR``: each row's file written as ``DIR/<key><ext>``. DIR is created if its
    parent exists; a file already there with the same bytes is left as it is, one with other bytes
    (or a link, or a folder) is refused with one line. A run that fails or is interrupted removes
    the files it wrote, so the folder is as it was."""

    def __init__(self, folder: str) -> None:
        self.folder = os.path.abspath(folder)
        self.created: list[str] = []
        self.made_folder = False
        self.saved = 0

    def __enter__(self) -> SavedFiles:
        if os.path.lexists(self.folder) and not os.path.isdir(self.folder):
            raise UsageError(f"--save-images {self.folder}: it exists and is not a folder")
        if not os.path.isdir(self.folder):
            check_parent_exists(self.folder, "--save-images")
            os.mkdir(self.folder)
            self.made_folder = True
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if exc is None:
            return
        for path in self.created:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if self.made_folder:
            with contextlib.suppress(OSError):
                os.rmdir(self.folder)

    def save(self, row: HeadRow) -> str:
        """Write ``row``'s file; return its path."""
        ext = row.file.extension
        name = row.key + ext
        # Keys and extensions are checked by every reader; a name holding a separator would write
        # outside DIR all the same, so it is refused here too.
        if not re.fullmatch(r"[0-9a-f]{8,128}", row.key) or (ext and not _EXTENSION.fullmatch(ext)):
            raise ShardkitError(f"{row.shard}: row {row.key!r} names its file {one_line(name)!r}; not saved")
        path = os.path.join(self.folder, name)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except FileExistsError:
            if os.path.islink(path) or not os.path.isfile(path) or _read(path) != row.data:
                raise ShardkitError(
                    f"{path} exists with other bytes than row {row.key} of {row.shard}: not overwritten"
                    " (save to another folder, or remove it)"
                ) from None
            self.saved += 1
            return path
        self.created.append(path)
        with os.fdopen(fd, "wb") as f:
            f.write(row.data)
        self.saved += 1
        return path


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()
