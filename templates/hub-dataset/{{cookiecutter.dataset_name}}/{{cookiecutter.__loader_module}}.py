"""Loading script for {{ cookiecutter.pretty_name }}, for datasets 3.6 and earlier.

datasets 4 and later do not run scripts; they load this repository through README.md's
`configs` and ignore this file (its name is not the repository's name). datasets 3.6 users
load it with the repository's script revision (see README.md), or locally with

    load_dataset("path/to/{{ cookiecutter.__loader_module }}.py", trust_remote_code=True)

It reads `shards.json`, then each shard's rows from its `metadata/<name>.jsonl` (shards of
shardkit before layout 4 hold them as their first member, `metadata.jsonl`), and walks each ZIP
shard front to back from ONE `open()`: no request per image, so streaming over HTTP costs a few
requests per shard. A shard must be exactly what shardkit writes (its central directory listing
the members walked, nothing hidden or trailing), so this script and datasets' own ZIP readers
never see different bytes. Only `open`, `os.path`, `json`, `struct` and `zlib` touch the data,
so the same code runs streaming and not, on local paths and URLs. Every shard is one unit of
work (`n_shards` = number of shards), so DataLoader workers and `split_dataset_by_node` split
the dataset by shard.

`data_dir=` points the script at a copy of the repository elsewhere (a folder or a URL).

Everything after `# shardkit:features-end` is shardkit's reader code: `pack-shards` replaces it
with the template's newer version while it is as a template wrote it, and leaves it alone (with
a warning) once it was edited.
"""

_DESCRIPTION = {{ cookiecutter.description | tojson }}
_HOMEPAGE = {{ cookiecutter.homepage | tojson }}
_LICENSE = {{ cookiecutter.license | tojson }}
_CITATION = {{ cookiecutter.citation | tojson }}
_FILE_COLUMN = {{ cookiecutter.modality | tojson }}

# The features below are written by `pack-shards` from every packed row; do not edit by hand.
# shardkit:features-begin
_FEATURES_JSON = r"""
[]
"""
# shardkit:features-end

# shardkit:reader 12: from here to the end, shardkit's reader code (see the module docstring). It
# imports what it uses here, so that it runs below the lines above of any template's version.
import json
import os
import re
import struct
import zlib

import datasets

# data/[<split>/][<folder>/]<hex>[-<part>].zip: named by where the shard's keys start (1 to 128
# hex digits), or by a key prefix and a part number (--prefix-length); a split of more shards
# than a Hub folder holds has each in a folder named by its name's first hex digits (padded with
# 0s), e.g. data/train/3f/3f2a.zip (shardkit.manifest.shard_place).
_SHARD_NAME = re.compile(r"^data/((?:[A-Za-z0-9_]{1,64}/){0,2}([0-9a-f]{1,128})(?:-[0-9]{1,6})?)\.zip\Z")
_NESTED_FOLDER = re.compile(r"^[0-9a-f]{2,8}\Z")
# A member name is a plain relative path: no control character (NUL...), backslash or colon
# (a Windows path or drive, "C:/x.jpg"), no leading "/", no empty, "." or ".." part.
_UNSAFE_NAME = re.compile(r"[\x00-\x1f\x7f\\:]|^/|//|/$|(?:^|/)\.\.?(?:/|$)")
_LOCAL = struct.Struct("<IHHHHHIIIHH")
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")
_END = struct.Struct("<IHHHHIIH")
_LOCAL_SIG, _CENTRAL_SIG, _END_SIG = b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06"
# A shard's first member: its rows as a table (layout 4 on; its rows are then read from the
# shard's metadata/<name>.jsonl, the same rows as JSON lines, which `shardkit verify` compares
# with the table), or as JSON lines (shards of shardkit before layout 4).
_METADATA_TABLE = "metadata.parquet"
_METADATA_LINES = "metadata.jsonl"
# The column `pack-shards --keep-source-path` adds: each row's input file name.
_SOURCE_PATH = "source_path"
_SOURCE_SHOWN_CHARS = 1000
# shards.json as shardkit writes it (a copy of the checks of shardkit.manifest.checked_manifest
# this script needs: it imports nothing of shardkit). Anything else is refused in one line
# naming the file, before any shard is read.
_MAX_MANIFEST_BYTES = 256 << 20
_HEX64 = re.compile(r"^[0-9a-f]{64}\Z")
_KEY = re.compile(r"^[0-9a-f]{8,128}\Z")
_SHARD_FIELDS = {"file", "metadata", "rows", "bytes", "sha256", "metadata_sha256", "first_key", "last_key"}
_DTYPES = {"string", "int64", "float64", "bool"}
_MAX_NESTING = 64
_MAX_PREFIX_LENGTH = 6
_LAYOUT = 4  # the newest layout this script reads
_FIELDS = {
    "format", "key_scheme", "layout", "member_template", "metadata_member", "prefix_length", "max_shard_bytes",
    "target_shard_bytes", "input_fingerprint", "modality", "totals", "splits", "features", "metadata_table",
    "metadata_table_sha256", "shards",
}  # fmt: skip
_KEY_SCHEME = "hex: the row's 'key' (8-128 lowercase hex digits), else sha256(file bytes)[:32]"
_MEMBER_TEMPLATE = "images/{key[0:3]}/{key[3:6]}/{key}{ext}"
_MAX_NAME_CHARS = 10_000
# What no column name holds (shardkit.rowrules.CONTROL_RE), and what no text holds.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _shown(value):
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _whole(value, where, low, high):
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{where} is {_shown(value)}, not a whole number from {low} to {high}")
    return value


def _text(value, where, pattern, words):
    if not isinstance(value, str) or not pattern.match(value):
        raise ValueError(f"{where} is {_shown(value)}, not {words}")
    return value


def _check_type(spec, where, depth, top):
    """One feature's type, as shardkit's schema writes it: a dtype, a class label, a list or a struct."""
    if depth > _MAX_NESTING:
        raise ValueError(f"{where} nests deeper than {_MAX_NESTING} levels")
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in ("dtype", "list", "struct"):
        raise ValueError(f"{where} is not one of dtype, list or struct")
    kind, inner = next(iter(spec.items()))
    if kind == "dtype" and isinstance(inner, dict) and top:
        label = inner.get("class_label") if list(inner) == ["class_label"] else None
        names = label.get("names") if isinstance(label, dict) and list(label) == ["names"] else None
        if not isinstance(names, dict) or list(names) != [str(i) for i in range(len(names))] or not names:
            raise ValueError(f"{where} has dtype {_shown(inner)}, not a class label's names")
        values = list(names.values())
        if not all(isinstance(n, str) for n in values) or len(set(values)) != len(values):
            raise ValueError(f"{where}'s class names are not distinct strings")
    elif kind == "dtype" and (not isinstance(inner, str) or inner not in _DTYPES):
        raise ValueError(f"{where} has dtype {_shown(inner)}, not one of {', '.join(sorted(_DTYPES))}")
    elif kind == "struct" or (kind == "list" and isinstance(inner, list)):
        _check_fields(inner, f"{where}.{kind}", depth + 1, set())
    elif kind == "list" and isinstance(inner, str):
        _check_type({"dtype": inner}, f"{where}.list", depth + 1, False)
    elif kind == "list" and not (isinstance(inner, dict) and "list" in inner):
        raise ValueError(f"{where}.list is {_shown(inner)}, not a dtype, a list of fields or a list")
    elif kind == "list":
        _check_type(inner, f"{where}.list", depth + 1, False)


def _check_fields(fields, where, depth, names, top=False):
    if not isinstance(fields, list):
        raise ValueError(f"{where} is not a list of features")
    for feature in fields:
        name = feature.get("name") if isinstance(feature, dict) else None
        if not isinstance(name, str) or name in names:
            raise ValueError(f"{where} has a feature without a name, or a second one named {_shown(name)}")
        if not name or len(name) > _MAX_NAME_CHARS or _CONTROL.search(name):
            words = "empty, too long or with a control character"
            raise ValueError(f"{where} has a feature named {_shown(name)}: {words}")
        names.add(name)
        _check_type({k: v for k, v in feature.items() if k != "name"}, f"{where} {name!r}", depth, top)


def _checked_manifest(data):
    """The parsed shards.json, if it is one shardkit writes (format, layout, options, features,
    shards, totals and splits): the checks of shardkit.manifest.checked_manifest this script needs."""
    if not isinstance(data, dict):
        raise ValueError("the manifest is not an object")
    for name in ("format", "prefix_length", "max_shard_bytes", "target_shard_bytes", "input_fingerprint"):
        if name not in data:
            raise ValueError(f"the manifest has no {name!r}: not a shardkit manifest")
    if set(data) - _FIELDS:
        raise ValueError(f"the manifest has a field shardkit does not write: {_shown(sorted(set(data) - _FIELDS)[0])}")
    if data["format"] != "shardkit.zip/1":
        raise ValueError(f"format is {_shown(data['format'])}, not shardkit.zip/1 (the shards this script reads)")
    layout = data.get("layout")  # recorded from layout 4 on
    if layout is not None and (type(layout) is not int or layout != _LAYOUT):
        raise ValueError(f"layout is {_shown(layout)}, not {_LAYOUT}, the layout shardkit writes")
    member = _METADATA_LINES if layout is None else _METADATA_TABLE
    written_as = {"key_scheme": _KEY_SCHEME, "member_template": _MEMBER_TEMPLATE, "metadata_member": member}
    for name, written in written_as.items():
        if name in data and data[name] != written:
            raise ValueError(f"{name} is {_shown(data[name])}, not {written!r}, what shardkit writes")
    prefix_length = _whole(data["prefix_length"], "prefix_length", 0, _MAX_PREFIX_LENGTH)
    cap = _whole(data["max_shard_bytes"], "max_shard_bytes", 131, 0xFFFFFFFF)
    _whole(data["target_shard_bytes"], "target_shard_bytes", 1, cap)
    _text(data["input_fingerprint"], "input_fingerprint", _HEX64, "a sha256 (64 lowercase hex digits)")
    modality = data.get("modality")
    if modality not in ("image", "audio"):
        raise ValueError(f"modality is {_shown(modality)}, not one of audio, image")
    features = data.get("features")
    heads = [{"name": modality, "dtype": modality}, {"name": "key", "dtype": "string"}]
    if not isinstance(features, list) or features[:2] != heads:
        raise ValueError(f"features is not a list of features beginning with {heads[0]} and {heads[1]}")
    _check_fields(features[2:], "features", 1, {modality, "key"}, top=True)
    if data.get("metadata_table") not in (None, _METADATA_TABLE):
        raise ValueError(f"metadata_table is {_shown(data['metadata_table'])}, not {_METADATA_TABLE!r}")
    if data.get("metadata_table_sha256") is not None:
        _text(data["metadata_table_sha256"], "metadata_table_sha256", _HEX64, "a sha256 (64 lowercase hex digits)")
    shards = data.get("shards")
    if not isinstance(shards, list) or not shards:
        raise ValueError("shards is not a list of shards")
    sums, seen, folders, ends = {}, set(), set(), {}
    for index, shard in enumerate(shards):
        optional = {"split", "input_sha256", "metadata_range"}
        if not isinstance(shard, dict) or not _SHARD_FIELDS <= set(shard) <= _SHARD_FIELDS | optional:
            raise ValueError(f"shards[{index}] is not a shard's record (its fields are not shardkit's)")
        name = shard["file"]
        # Follow nothing but shardkit's own names (no "../", no URL), for the shard and its rows.
        split = shard.get("split", "train")  # manifests from before splits: every shard is train
        if not isinstance(split, str):
            raise ValueError(f"shards[{index}].split is {_shown(split)}, not a split's name")
        match = _SHARD_NAME.match(name) if isinstance(name, str) else None
        in_split_folder = _split_folder(match, split) if match else None
        if in_split_folder is None:
            raise ValueError(
                f"shards[{index}].file is {_shown(name)}, not data/[<split>/][<folder>/]<hex prefix>.zip"
                f" for a shard of split {_shown(split)}"
            )
        at = f"shard {name!r}"
        if name in seen:
            raise ValueError(f"{at} is named twice")
        if not in_split_folder and split != "train":
            raise ValueError(f"{at} is in the folder of another split than {_shown(split)}")
        folders.add(in_split_folder)
        # A nested shard's rows are its part of its folder's metadata file (metadata_range).
        nested = match.group(1).count("/") > int(in_split_folder)
        metadata = f"metadata/{match.group(1).rsplit('/', 1)[0] if nested else match.group(1)}.jsonl"
        if shard["metadata"] != metadata:
            raise ValueError(f"{at} has metadata {_shown(shard['metadata'])}, not {metadata!r}")
        part = shard.get("metadata_range")
        if nested != (part is not None) or part is not None and not (
            isinstance(part, list)
            and len(part) == 2
            and all(type(v) is int for v in part)
            and 0 <= part[0] < part[1] <= 1 << 40  # (shardkit.manifest.MAX_METADATA_PART_END)
        ):
            raise ValueError(f"{at} has metadata_range {_shown(part)}: a nested shard's [start, end], else none")
        if part is not None:  # a folder's parts fill its file in order (shardkit.manifest._check_metadata_parts)
            if part[0] != ends.get(metadata, 0):
                raise ValueError(f"{at}: metadata_range starts at {part[0]}, where the part before it ends")
            ends[metadata] = part[1]
        rows = _whole(shard["rows"], f"{at}: rows", 1, 0xFFFE)
        size = _whole(shard["bytes"], f"{at}: bytes", 1, cap)
        for field in ("sha256", "metadata_sha256") + (("input_sha256",) if shard.get("input_sha256") else ()):
            _text(shard[field], f"{at}: {field}", _HEX64, "a sha256 (64 lowercase hex digits)")
        first = _text(shard["first_key"], f"{at}: first_key", _KEY, "a key (8 to 128 lowercase hex digits)")
        last = _text(shard["last_key"], f"{at}: last_key", _KEY, "a key (8 to 128 lowercase hex digits)")
        if not (first == last if rows == 1 else first < last):
            raise ValueError(f"{at} has {rows} row(s) from key {first} to {last}: its keys must ascend")
        counts = sums.setdefault(split, [0, 0, 0])
        counts[0], counts[1], counts[2] = counts[0] + rows, counts[1] + 1, counts[2] + size
        seen.add(name)
    if len(folders) > 1:
        raise ValueError("some shards are in a split's folder and some are not")
    _check_counts(data, sums, prefix_length)
    return data


def _split_folder(match, split):
    """Whether a shard's path (its _SHARD_NAME match) is in its split's folder, True or False;
    None where its folders are not the planner's (shardkit.manifest.shard_place)."""
    folders = match.group(1).split("/")[:-1]
    in_split_folder = bool(folders) and folders[0] == split
    nested = folders[1:] if in_split_folder else folders
    if len(nested) > 1:
        return None
    if nested and not (_NESTED_FOLDER.match(nested[0]) and match.group(2).ljust(8, "0").startswith(nested[0])):
        return None
    return in_split_folder


def _check_counts(data, sums, prefix_length):
    """totals and splits add up to the shards (shardkit.manifest._checked_splits)."""
    if "totals" in data:
        whole = {k: sum(c[i] for c in sums.values()) for i, k in enumerate(("rows", "shards", "bytes"))}
        found = data["totals"]
        if found != whole or any(type(v) is not int for v in found.values()):
            raise ValueError(f"totals is {_shown(found)}, but the shards add up to {whole}")
    splits = data.get("splits")
    if splits is None:
        return
    if not isinstance(splits, dict) or set(splits) != set(sums):
        raise ValueError(f"splits is {_shown(splits)}, but the shards are in {sorted(sums)}")
    for name, found in splits.items():
        length = found.get("prefix_length") if isinstance(found, dict) else None
        _whole(length, f"splits[{name!r}].prefix_length", 0, _MAX_PREFIX_LENGTH)
        expected = dict(zip(("rows", "shards", "bytes"), sums[name]), prefix_length=length)
        if found != expected or any(type(v) is not int for v in found.values()):
            raise ValueError(f"splits[{name!r}] is {_shown(found)}, but its shards add up to {expected}")


def _check_key_ranges(manifest):
    """Each shard's keys are within what its name says (its key prefix, or from its name to the
    next shard's), and no two shards of a split overlap (shardkit.plan.key_ranges)."""
    lengths = {name: split["prefix_length"] for name, split in (manifest.get("splits") or {}).items()}
    by_split = {}
    for shard in manifest["shards"]:
        by_split.setdefault(shard.get("split", "train"), []).append(shard)
    for split, shards in by_split.items():
        stems = sorted(_SHARD_NAME.match(s["file"]).group(1).rsplit("/", 1)[-1] for s in shards)
        after = dict(zip(stems, stems[1:]))  # by size: a shard's keys end where the next name starts
        by_prefix = lengths.get(split, manifest["prefix_length"]) != 0
        for shard in shards:
            stem = _SHARD_NAME.match(shard["file"]).group(1).rsplit("/", 1)[-1]
            high = after.get(stem)
            for key in (shard["first_key"], shard["last_key"]):
                if by_prefix:
                    holds = key.startswith(stem.split("-")[0])
                else:
                    holds = key >= stem and (high is None or key < high)
                if not holds:
                    raise ValueError(f"shard {shard['file']!r} has key {key}, outside what its name says it holds")
        ordered = sorted(shards, key=lambda s: s["first_key"])
        for a, b in zip(ordered, ordered[1:]):
            if b["first_key"] <= a["last_key"]:
                raise ValueError(
                    f"the keys of shards {a['file']!r} and {b['file']!r} overlap: rows would not be unique"
                )


def _read_manifest(path, where):
    """shards.json at `path` (`where` names it in messages: its path or URL), checked as a whole."""
    with open(path, "rb") as f:
        data = f.read(_MAX_MANIFEST_BYTES + 1)
    try:
        if len(data) > _MAX_MANIFEST_BYTES:
            raise ValueError(f"larger than {_MAX_MANIFEST_BYTES} bytes, more than any shardkit manifest")
        if data.startswith(b"\xef\xbb\xbf"):
            raise ValueError("not a shardkit manifest (it begins with a byte order mark)")
        try:  # decoded strictly: json.loads(bytes) takes UTF-16 and UTF-8-encoded surrogates too
            manifest = json.loads(data.decode("utf-8"), object_pairs_hook=_one_of_each, parse_constant=_not_a_number)
        except RecursionError:
            raise ValueError("not a shardkit manifest (nested too deep)") from None
        except ValueError as exc:
            raise ValueError(f"not a shardkit manifest (not JSON: {exc})") from None
        _check_key_ranges(_checked_manifest(manifest))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return manifest


def _not_a_number(name):
    raise ValueError(f"{name} is not a JSON number")


def _one_of_each(pairs):
    for name, value in pairs:  # every string shards.json holds is an object's name or in its value
        for text in (name, *(value if isinstance(value, list) else (value,))):
            if isinstance(text, str) and _SURROGATE.search(text):
                raise ValueError(f"{_shown(text)} holds a lone surrogate, not text")
    found = dict(pairs)
    if len(found) != len(pairs):
        raise ValueError("a name appears twice in one object")
    return found


def _readable_root(folder):
    """The real folder a local dataset's files may resolve into (shardkit.location.readable_root):
    the folder itself, or for a Hugging Face cache snapshot (<repo>/snapshots/<revision>, whose
    files link to ../../blobs/) the repo's cache folder. A link elsewhere is refused."""
    real = os.path.realpath(folder)
    parent = os.path.dirname(real)
    if os.path.basename(parent) == "snapshots" and os.path.isdir(os.path.join(os.path.dirname(parent), "blobs")):
        real = os.path.dirname(parent)
    return os.path.join(real, "")


def _inside(path, root):
    """`path`, if it is not a link out of the dataset folder `root` (a URL streamed is not on this disk)."""
    if root is None or "://" in path:
        return path
    real = os.path.realpath(path)
    if not real.startswith(root):
        raise ValueError(
            f"{path}: a link to {real!r}, outside the dataset folder {root.rstrip(os.sep)!r};"
            " shardkit reads only the dataset's own files"
        )
    return path
# What every row obeys (a copy of shardkit.rowcheck's rules: this script cannot import shardkit):
# its key (_KEY, above), its file's extension, the 64-bit integers, and the Python types of each feature's values.
_EXT = re.compile(r"^\.[A-Za-z0-9]{1,16}\Z")
_INT64 = (-(2**63), 2**63 - 1)
_SCALARS = {"string": (str,), "int64": (int,), "float64": (float,), "bool": (bool,), "binary": (bytes,)}


def _source_note(source):
    """" (source 'photos/2019/x.jpg')" after a member's name in a message about its row, when the
    row has a source_path; "" otherwise. A copy of shardkit.errors.source_note (this script uses
    only the standard library and datasets): the same words as `shardkit verify` and
    shardkit.stream. Quoted with repr: the path is data, and must not forge a line of output."""
    if not isinstance(source, str):
        return ""
    more = "..." if len(source) > _SOURCE_SHOWN_CHARS else ""
    return f" (source {source[:_SOURCE_SHOWN_CHARS]!r}{more})"


def _local_header(name, size, crc):
    """The local header shardkit writes: stored, UTF-8 name, sizes and CRC up front, 1980-01-01."""
    return _LOCAL.pack(0x04034B50, 20, 0x800, 0, 0, 33, crc, size, size, len(name), 0) + name


def _central_entry(name, size, crc, offset):
    """The central directory entry shardkit writes for the same member (Unix, mode 0644)."""
    fields = (0x02014B50, 0x314, 20, 0x800, 0, 0, 33, crc, size, size, len(name), 0, 0, 0, 0, 0o100644 << 16, offset)
    return _CENTRAL.pack(*fields) + name


def _read_up_to(f, n):
    data = f.read(n)
    while len(data) < n:
        more = f.read(n - len(data))
        if not more:
            break
        data += more
    return data


def _read_exact(f, n, shard, what):
    data = _read_up_to(f, n)
    if len(data) < n:
        raise ValueError(f"{shard}: truncated inside {what}")
    return data


def _members(f, shard, sources):
    """(name, bytes) of each member, front to back, CRC-checked, names checked.

    A shard must be exactly what shardkit writes: each header as shardkit makes it, members back
    to back, then a central directory listing exactly those members at their offsets, the end
    record, and nothing after it. zipfile (and so datasets' own builders) reads a member through
    the central directory, this function through its local header: both then see the same bytes.
    `sources` (member name -> source_path), which the caller fills once it has read the rows,
    names a member's input file in a message about it.
    """
    offset, directory, seen, name = 0, [], set(), None
    while True:
        sig = _read_exact(f, 4, shard, "a record (no central directory)")
        if sig != _LOCAL_SIG:
            break
        header = sig + _read_exact(f, _LOCAL.size - 4, shard, "a header")
        fields = _LOCAL.unpack(header)
        crc, size, name_len = fields[6], fields[8], fields[9]
        raw = _read_exact(f, name_len, shard, "a member name")
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{shard}: member name {raw!r} at offset {offset} is not UTF-8") from None
        if not name or _UNSAFE_NAME.search(name):
            raise ValueError(f"{shard}: refusing unsafe member name {name!r}")
        if header + raw != _local_header(raw, size, crc):
            raise ValueError(
                f"{shard}: member {name!r}{_source_note(sources.get(name))} is not stored as shardkit stores it"
                " (compressed, a data descriptor, an extra field or other header fields)"
            )
        if name in seen:
            raise ValueError(f"{shard}: member {name!r}{_source_note(sources.get(name))} appears twice")
        if offset > 0xFFFFFFFF:
            where = f"{shard}: member {name!r}{_source_note(sources.get(name))}"
            raise ValueError(f"{where} starts past 4 GiB, which a shardkit ZIP never does")
        seen.add(name)
        data = _read_exact(f, size, shard, f"member {name!r}")
        if zlib.crc32(data) != crc:
            raise ValueError(f"{shard}: CRC mismatch in member {name!r}{_source_note(sources.get(name))}")
        directory.append(_central_entry(raw, size, crc, offset))
        yield name, data
        offset += len(header) + len(raw) + size
    if sig not in (_CENTRAL_SIG, _END_SIG):
        after = f" after member {name!r}" if name is not None else ""
        raise ValueError(f"{shard}: not a shardkit ZIP (found {sig!r} at offset {offset}{after}, not a member)")
    cd_size = sum(len(entry) for entry in directory)
    end = _END.pack(0x06054B50, 0, 0, len(directory), len(directory), cd_size, offset, 0)
    found = sig + _read_up_to(f, cd_size + len(end) - 4)
    at = 0
    for entry in directory:
        if found[at : at + len(entry)] != entry:
            name = entry[_CENTRAL.size :].decode("utf-8")
            raise ValueError(
                f"{shard}: the central directory entry of member {name!r}{_source_note(sources.get(name))}"
                " does not match the member (zipfile would not read the bytes this script read)"
            )
        at += len(entry)
    if found[at:] != end:
        raise ValueError(f"{shard}: the central directory lists other members, or its end record is not shardkit's")
    if f.read(1):
        raise ValueError(f"{shard}: data after the end record")


def _rows(data, shard, where, sources):
    """The rows of JSON lines `data` (bytes; `where` names them in messages: metadata.jsonl, or the
    shard's metadata/<name>.jsonl), by member name (their file_name, taken out of each row).
    Fills `sources` (member name -> source_path) for messages."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{shard}: {where} is not UTF-8") from None
    rows = {}
    # Split at "\n" only: splitlines() also splits inside values holding U+2028.
    for number, line in enumerate(text.removesuffix("\n").split("\n") if text else [], 1):
        try:
            row = json.loads(line)
        except RecursionError:
            raise ValueError(f"{shard}: a {where} row is nested too deep") from None
        except ValueError:
            raise ValueError(f"{shard}: line {number} of {where} is not a JSON row") from None
        file_name = row.get("file_name") if isinstance(row, dict) else None
        if not isinstance(file_name, str):
            raise ValueError(f"{shard}: line {number} of {where} is not a row with a file_name")
        del row["file_name"]
        if file_name in rows:
            raise ValueError(f"{shard}: {where} has two rows for member {file_name!r}")
        rows[file_name] = row
        if _SOURCE_PATH in row:
            sources[file_name] = row[_SOURCE_PATH]
    return rows


def _kind(value):
    return "null" if value is None else type(value).__name__


def _value_check(feature, int_floats):
    """Why a value does not fit `feature` (the card's YAML form), as words; None if it does. A
    null fits any feature but a class label (shardkit writes -1 for "no label")."""
    dtype = feature.get("dtype")
    if isinstance(dtype, dict) and "class_label" in dtype:
        count = len(dtype["class_label"].get("names") or ())

        def label(value):
            if type(value) is not int or not -1 <= value < count:
                return f"{value!r}, not a class label's index (-1 to {count - 1})"
            return None

        return label
    if "struct" in feature:
        fields = {f["name"]: _value_check(f, int_floats) for f in feature["struct"]}

        def struct(value):
            if value is None:
                return None
            if type(value) is not dict:
                return f"{_kind(value)} where the features declare an object"
            for name, item in value.items():
                problem = fields[name](item) if name in fields else "a field the features do not declare"
                if problem is not None:
                    return f"field {name!r}: {problem}"
            return None

        return struct
    if "list" in feature:
        inner = feature["list"]
        inner = {"dtype": inner} if isinstance(inner, str) else {"struct": inner} if isinstance(inner, list) else inner
        item_check = _value_check(inner, int_floats)

        def items(value):
            if value is None:
                return None
            if type(value) is not list:
                return f"{_kind(value)} where the features declare a list"
            for number, item in enumerate(value):
                problem = item_check(item)
                if problem is not None:
                    return f"item {number}: {problem}"
            return None

        return items
    types = _SCALARS.get(dtype, ())
    if dtype == "float64" and int_floats:
        types = (float, int)

    def scalar(value):
        if value is None:
            return None
        if type(value) not in types:
            return f"{_kind(value)} where the features declare {dtype}"
        if type(value) is int and not _INT64[0] <= value <= _INT64[1]:
            return f"{value}, outside the 64-bit integers"
        if type(value) is float and value - value != 0.0:
            return f"{value}, which shardkit never packs"
        return None

    return scalar


def _key_ranges(manifest):
    """Each shard's keys, by file: (its range by name: low, high or None, by prefix; the first and
    last key shards.json records; whether a float column may hold whole numbers, as shards before
    layout 4 may; its rows). _check_key_ranges has checked that the recorded keys lie in each
    shard's range and that a split's shards do not overlap: with each row's key checked against
    them, no key is in two shards, and no reader needs to remember the keys it has read."""
    by_split = {}
    for shard in manifest["shards"]:
        by_split.setdefault(shard.get("split", "train"), {})[shard["file"]] = shard
    ranges = {}
    for split, shards in by_split.items():
        by_prefix = (manifest.get("splits") or {}).get(split, {}).get("prefix_length", manifest["prefix_length"]) != 0
        stems = sorted((name.rsplit("/", 1)[-1].rsplit(".", 1)[0], name) for name in shards)
        for (stem, name), high in zip(stems, [stem for stem, _ in stems[1:]] + [None]):
            shard, low = shards[name], stem.split("-")[0] if by_prefix else stem
            int_floats = "layout" not in manifest
            ranges[name] = (low, high, by_prefix, shard["first_key"], shard["last_key"], int_floats, shard["rows"])
    return ranges


def _row_problem(row, member, keys, previous, checks):
    """Why a row (its member's name `member`, the previous row's key `previous`) does not agree
    with shards.json and the features (`checks`: column -> value check); None if it does."""
    key = row.get("key")
    if not isinstance(key, str) or not _KEY.match(key):
        return f"key {key!r} is not 8 to 128 lowercase hex digits" if "key" in row else "no key"
    low, high, by_prefix, first, last = keys[:5]
    if not (key.startswith(low) if by_prefix else low <= key and (high is None or key < high)):
        return f"key {key} is not in this shard's range ({low!r} to {high!r})"
    if not first <= key <= last:
        return f"key {key} is not within the shard's keys in shards.json ({first}..{last})"
    if previous is not None and key <= previous:
        return f"key {key} is not above the previous row's ({previous})"
    ext = os.path.splitext(member)[1]
    if not _EXT.match(ext) or member != f"images/{key[0:3]}/{key[3:6]}/{key}{ext}":
        return f"its member {member!r} is not where key {key} belongs"
    if checks is None:
        return None
    for column in row:
        if column != "key" and column not in checks:
            return f"column {column!r}, which the features do not declare"
    for column, check in checks.items():
        problem = check(row.get(column))
        if problem is not None:
            return f"column {column!r}: {problem}"
    return None


class ShardkitZipConfig(datasets.BuilderConfig):
    pass


class ShardkitZip(datasets.GeneratorBasedBuilder):
    """The dataset's ZIP shards, packed by shardkit (see the module docstring)."""

    VERSION = datasets.Version("1.0.0")
    BUILDER_CONFIG_CLASS = ShardkitZipConfig
    BUILDER_CONFIGS = [ShardkitZipConfig(name="default", version=datasets.Version("1.0.0"))]

    def _info(self):
        spec = json.loads(_FEATURES_JSON)
        features = datasets.Features._from_yaml_list(spec) if spec else None
        return datasets.DatasetInfo(
            description=_DESCRIPTION,
            features=features,
            homepage=_HOMEPAGE,
            license=_LICENSE,
            citation=_CITATION,
        )

    def _location(self, relative):
        base = self.config.data_dir
        return os.path.join(base, relative) if base else relative

    def _split_generators(self, dl_manager):
        location = self._location("shards.json")
        manifest_file = dl_manager.download(location)
        # A local file is the dataset's own (or datasets' downloaded copy): none is read through
        # a link out of its folder.
        local = "://" not in manifest_file
        root = _readable_root(os.path.dirname(os.path.abspath(manifest_file))) if local else None
        where = manifest_file if manifest_file.endswith("shards.json") else location
        manifest = _read_manifest(_inside(manifest_file, root), where)
        splits = {}  # split -> its shards and their metadata files (and parts), in the manifest's order
        for shard in manifest["shards"]:
            rows = (shard["metadata"], shard.get("metadata_range"))
            splits.setdefault(shard.get("split", "train"), []).append((shard["file"], rows))
        # Shards before layout 4 hold their rows (the manifest's metadata_member): their metadata
        # files are not fetched.
        rows_outside = manifest.get("metadata_member") != _METADATA_LINES
        ranges = _key_ranges(manifest)
        generators = []
        for split, shards in splits.items():
            paths = [_inside(p, root) for p in dl_manager.download([self._location(name) for name, _ in shards])]
            if rows_outside:
                metadata = dl_manager.download([self._location(rows) for _, (rows, _) in shards])
                metadata = [(_inside(p, root), rows, part) for p, (_, (rows, part)) in zip(metadata, shards)]
            else:
                metadata = [None] * len(shards)
            # Lists of equal length: datasets makes one shard of work per ZIP.
            kwargs = {"paths": paths, "names": [name for name, _ in shards], "metadata": metadata}
            kwargs["keys"] = [ranges[name] for name, _ in shards]
            generators.append(datasets.SplitGenerator(name=datasets.NamedSplit(split), gen_kwargs=kwargs))
        return generators

    def _generate_examples(self, paths, names, metadata, keys):
        spec = json.loads(_FEATURES_JSON)
        for path, shard, beside, shard_keys in zip(paths, names, metadata, keys):
            # Every row held to shards.json and the features (datasets would turn an int into the
            # string a feature declares, and drop a column it does not declare, without a word).
            columns = [f for f in spec if f["name"] not in (_FILE_COLUMN, "key")]
            checks = {f["name"]: _value_check(f, shard_keys[5]) for f in columns} if spec else None
            previous, count = None, 0
            with open(path, "rb") as f:
                rows = where = None
                sources = {}  # member name -> source_path, for messages (filled from the rows)
                for name, data in _members(f, shard, sources):
                    if rows is None:
                        if name == _METADATA_LINES:  # before layout 4: the rows, inside
                            where = name
                            rows = _rows(data, shard, where, sources)
                        elif name == _METADATA_TABLE and beside is not None:
                            rows, where = _rows_beside(beside, shard, sources)
                        elif name == _METADATA_TABLE:
                            raise ValueError(
                                f"{shard}: the first member is {name!r}, but shards.json says its shards"
                                f" begin with {_METADATA_LINES}"
                            )
                        else:
                            raise ValueError(
                                f"{shard}: the first member is {name!r}, not {_METADATA_TABLE} or {_METADATA_LINES}"
                            )
                        continue
                    row = rows.pop(name, None)
                    if row is None:
                        raise ValueError(f"{shard}: member {name!r} has no row in {where}")
                    problem = _row_problem(row, name, shard_keys, previous, checks)
                    if problem is not None:
                        raise ValueError(f"{shard}: member {name!r}{_source_note(sources.get(name))}: {problem}")
                    previous = row["key"]
                    count += 1
                    row[_FILE_COLUMN] = {"path": name, "bytes": data}
                    yield row["key"], row
                if rows:
                    missing = ", ".join(f"{name!r}{_source_note(sources.get(name))}" for name in sorted(rows)[:3])
                    raise ValueError(f"{shard}: {len(rows)} row(s) in {where} have no member, e.g. {missing}")
                if count != shard_keys[6]:
                    raise ValueError(f"{shard}: {count} rows, where the manifest records {shard_keys[6]}")


def _rows_beside(metadata, shard, sources):
    """A shard's rows from its metadata file beside it (the same rows as JSON lines), or a
    nested shard's from its part of its folder's file; and how messages name them."""
    path, where, part = metadata
    with open(path, "rb") as lines:
        if part is None:
            return _rows(lines.read(), shard, where, sources), where
        start, end = part
        lines.seek(start)
        data = lines.read(end - start)
    where = f"{where} (bytes {start} to {end})"
    if len(data) != end - start:
        raise ValueError(f"{shard}: {where} is past the end of the file")
    return _rows(data, shard, where, sources), where
