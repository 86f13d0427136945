"""Loading script for {{ cookiecutter.pretty_name }}, for datasets 3.6 and earlier.

datasets 4 and later do not run scripts; they load this repository through README.md's
`configs` and ignore this file (its name is not the repository's name). datasets 3.6 users
load it with the repository's script revision (see README.md), or locally with

    load_dataset("path/to/{{ cookiecutter.__loader_module }}.py", trust_remote_code=True)

It reads `shards.json`, then walks each ZIP shard front to back from ONE `open()`: no request
per image, so streaming over HTTP costs a few requests per shard. Only `open`, `os.path`,
`json`, `struct` and `zlib` touch the data, so the same code runs streaming and not, on local
paths and URLs. Every shard is one unit of work (`n_shards` = number of shards), so DataLoader
workers and `split_dataset_by_node` split the dataset by shard.

`data_dir=` points the script at a copy of the repository elsewhere (a folder or a URL).
"""

import json
import os
import re
import struct
import zlib

import datasets

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

_SHARD_NAME = re.compile(r"^data/[0-9a-f]{1,16}(-[0-9]{1,6})?\.zip$")
_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")
_LOCAL_SIG = 0x04034B50
_END_SIGS = (0x02014B50, 0x06054B50)  # central directory, end record: no more members


def _read_exact(f, n, shard, what):
    data = f.read(n)
    while len(data) < n:
        more = f.read(n - len(data))
        if not more:
            raise ValueError(f"{shard}: truncated inside {what}")
        data += more
    return data


def _members(f, shard):
    """(name, bytes) of each stored member, front to back, CRC-checked, names checked."""
    while True:
        sig_bytes = f.read(4)
        if len(sig_bytes) < 4:
            raise ValueError(f"{shard}: truncated, no central directory")
        (sig,) = struct.unpack("<I", sig_bytes)
        if sig in _END_SIGS:
            return
        if sig != _LOCAL_SIG:
            raise ValueError(f"{shard}: not a shardkit ZIP (found 0x{sig:08x} where a member should start)")
        header = _LOCAL_HEADER.unpack(sig_bytes + _read_exact(f, _LOCAL_HEADER.size - 4, shard, "a header"))
        flags, method, crc, size, name_len, extra_len = header[2], header[3], header[6], header[8], header[9], header[10]
        name = _read_exact(f, name_len, shard, "a member name").decode("utf-8" if flags & 0x800 else "cp437")
        if name.startswith("/") or "\\" in name or ".." in name.split("/"):
            raise ValueError(f"{shard}: refusing unsafe member name {name!r}")
        if flags & 0x08 or method != 0:
            raise ValueError(f"{shard}: member {name!r} is compressed or has a data descriptor")
        if extra_len:
            _read_exact(f, extra_len, shard, "an extra field")
        data = _read_exact(f, size, shard, f"member {name!r}")
        if zlib.crc32(data) != crc:
            raise ValueError(f"{shard}: CRC mismatch in member {name!r}")
        yield name, data


class ShardkitZipConfig(datasets.BuilderConfig):
    pass


class ShardkitZip(datasets.GeneratorBasedBuilder):
    """{{ cookiecutter.pretty_name }}: ZIP shards packed by shardkit."""

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
        manifest_file = dl_manager.download(self._location("shards.json"))
        with open(manifest_file, encoding="utf-8") as f:
            manifest = json.load(f)
        names = [shard["file"] for shard in manifest["shards"]]
        for name in names:  # follow nothing but shardkit's own shard names (no "../", no URL)
            if not _SHARD_NAME.match(name):
                raise ValueError(f"shards.json names {name!r}, not a shard (data/<hex prefix>.zip)")
        if len(set(names)) != len(names):
            raise ValueError("shards.json names a shard twice")
        paths = dl_manager.download([self._location(name) for name in names])
        # Two lists of equal length: datasets makes one shard of work per ZIP.
        return [datasets.SplitGenerator(name=datasets.Split.TRAIN, gen_kwargs={"paths": paths, "names": names})]

    def _generate_examples(self, paths, names):
        for path, shard in zip(paths, names):
            with open(path, "rb") as f:
                rows = None
                for name, data in _members(f, shard):
                    if rows is None:
                        if name != "metadata.jsonl":
                            raise ValueError(f"{shard}: the first member is {name!r}, not metadata.jsonl")
                        rows = {}
                        for line in data.decode("utf-8").splitlines():
                            row = json.loads(line)
                            rows[row.pop("file_name")] = row
                        continue
                    row = rows.pop(name, None)
                    if row is None:
                        raise ValueError(f"{shard}: member {name!r} has no row in metadata.jsonl")
                    row[_FILE_COLUMN] = {"path": name, "bytes": data}
                    yield row["key"], row
                if rows:
                    missing = sorted(rows)[:3]
                    raise ValueError(f"{shard}: {len(rows)} row(s) in metadata.jsonl have no member, e.g. {missing}")
