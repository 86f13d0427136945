"""Stage 5: keep the dataset card (README.md) and .gitattributes true to what was packed.

The card's YAML front matter is what makes ``load_dataset(OUT_DIR)`` work without a script:
``configs`` points the builtin loader at ``data/*.zip`` (or ``*.tar``, ``*.parquet``; and away
from ``metadata/`` and the manifest) and declares every column's type as inferred from all rows
(``features``, in the config, where every datasets version reads it, and in
``dataset_info.features`` for the Hub). An existing card keeps its text and every other key; only
those two keys are set (a ``configs`` path that is shardkit's pattern for another format is
changed to this one's).
"""

from __future__ import annotations

import hashlib
import html
import json
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote, unquote

import yaml

from .errors import UsageError
from .formats import FORMAT_NAMES, SHARD_SUFFIXES, ZIP, ShardFormat
from .location import MAX_SMALL_FILE_BYTES, read_upto
from .manifest import Manifest, SplitSummary, write_atomic
from .plan import BY_SIZE
from .schema import class_label_names
from .table import TABLE_NAME

log = logging.getLogger(__name__)
#: A ``data_files`` path shardkit writes: ``data/*.zip``, or a split's ``data/<split>/*.zip``.
_SHARDKIT_PATTERN = re.compile(rf"data/(?:[A-Za-z0-9_]{{1,64}}/)?\*\.(?:{'|'.join(FORMAT_NAMES)})")

GITATTRIBUTES_LINES = [
    *(f"*{suffix} filter=lfs diff=lfs merge=lfs -text" for suffix in SHARD_SUFFIXES),
    "*.jsonl filter=lfs diff=lfs merge=lfs -text",
    "*.jsonl.gz filter=lfs diff=lfs merge=lfs -text",
    "*.jpg filter=lfs diff=lfs merge=lfs -text",
    "*.jpeg filter=lfs diff=lfs merge=lfs -text",
    "*.png filter=lfs diff=lfs merge=lfs -text",
    "*.webp filter=lfs diff=lfs merge=lfs -text",
    "*.flac filter=lfs diff=lfs merge=lfs -text",
    "*.wav filter=lfs diff=lfs merge=lfs -text",
    "*.mp3 filter=lfs diff=lfs merge=lfs -text",
]


def _front_matter_end(text: str) -> int:
    """Where a card's YAML front matter ends: the index of the newline before its closing
    ``---`` (the YAML is ``text[4:end]``, the body ``text[end + 5:]``); -1 if it has none."""
    if not text.startswith("---\n"):
        return -1
    end = text.find("\n---\n", 3)
    if end == -1 and text.rstrip().endswith("\n---"):
        end = text.rstrip().rfind("\n---")
    return end


def split_front_matter(text: str) -> tuple[dict[str, Any], str]:
    """Split a card into its YAML mapping and the text after it."""
    end = _front_matter_end(text)
    if end == -1:
        return {}, text
    data = yaml.safe_load(text[4:end]) or {}
    if not isinstance(data, dict):
        raise ValueError("README.md front matter is not a YAML mapping")
    return data, text[end + 5 :]


# A top-level key line: `key:`, `"key":`, `key :` (not a comment, list item or indented line).
_TOP_LEVEL_KEY = re.compile(r"""^(["']?)([^\s#\-"'][^:"']*?)\1\s*:(?:\s|\Z)""")


def set_front_matter_keys(text: str, values: dict[str, Any]) -> str:
    """Set top-level keys of a card's YAML front matter; every other line stays byte for byte.

    A key's block (its line and the indented or ``- `` lines under it) is replaced by the new
    value's YAML, or appended at the end of the front matter; comments and blank lines that end
    a block stay. A card without front matter gets one in front of its text. Setting
    ``license`` (``license_name``, ``license_link``) rewrites shardkit's license section too,
    which says the same in words.

    Not huggingface_hub's ``DatasetCard``: it writes the whole YAML again from the parsed data
    (the user's comments, quoting, key order and line breaks would be lost); these are the
    user's lines, edited one key at a time.
    """
    end = _front_matter_end(text)
    front, body = (text[4 : end + 1], text[end + 5 :]) if end != -1 else ("", text)
    lines = front.splitlines(keepends=True)
    for key, value in values.items():
        dumped = yaml.safe_dump({key: value}, sort_keys=False, allow_unicode=True, width=1000)
        starts = [i for i, line in enumerate(lines) if (m := _TOP_LEVEL_KEY.match(line)) and m.group(2) == key]
        if not starts:
            lines.extend(dumped.splitlines(keepends=True))
            continue
        start = starts[0]
        stop = next((i for i in range(start + 1, len(lines)) if _TOP_LEVEL_KEY.match(lines[i])), len(lines))
        while stop > start + 1 and (not lines[stop - 1].strip() or lines[stop - 1].startswith("#")):
            stop -= 1  # a comment or blank line before the next key is the user's
        lines[start:stop] = dumped.splitlines(keepends=True)
    new_front = "".join(lines)
    data = yaml.safe_load(new_front)
    if not isinstance(data, dict):
        raise ValueError("README.md front matter is not a YAML mapping")
    if _LICENSE_KEYS & set(values) and _find_section(body, "license") is not None:
        body = set_section(body, "license", license_section(data))  # the license in words stays the key's
    return f"---\n{new_front}---\n{body}"


def split_data_files(fmt: ShardFormat, splits: list[SplitSummary] | None) -> list[dict[str, Any]]:
    """The ``data_files`` of shardkit's config: one entry per split."""
    if not splits:
        return [{"split": "train", "path": fmt.data_files_pattern}]
    return [{"split": s.name, "path": s.data_files} for s in splits]


def default_configs(fmt: ShardFormat = ZIP, splits: list[SplitSummary] | None = None) -> list[dict[str, Any]]:
    return [{"config_name": "default", "data_files": split_data_files(fmt, splits)}]


def _is_shardkit_config(config: Any) -> bool:
    """Whether a ``configs`` entry reads shardkit's shards only (its data_files are shardkit's)."""
    paths = _config_paths(config)
    return bool(paths) and all(isinstance(p, str) and _SHARDKIT_PATTERN.fullmatch(p) for p in paths)


def _config_entries(config: Any) -> list[Any]:
    """A ``configs`` entry's ``data_files`` as a list of entries (dicts with ``path``, or paths)."""
    files = config.get("data_files") if isinstance(config, dict) else None
    return files if isinstance(files, list) else [files]


def _config_paths(config: Any) -> list[Any]:
    """The paths a ``configs`` entry reads."""
    return [e.get("path") if isinstance(e, dict) else e for e in _config_entries(config)]


def _retarget_configs(configs: Any, fmt: ShardFormat, splits: list[SplitSummary] | None = None) -> Any:
    """Point every config that reads shardkit's shards (of any format, split or not) at these:
    one data_files entry per split."""
    if not isinstance(configs, list):
        return configs
    for config in configs:
        if isinstance(config, dict) and _is_shardkit_config(config):
            config["data_files"] = split_data_files(fmt, splits)
    return configs


def _with_features(configs: Any, fmt: ShardFormat, features: list[dict[str, Any]]) -> Any:
    """Declare ``features`` in every config that reads this format's shards.

    datasets' folder builders (imagefolder, audiofolder) ignore ``dataset_info.features``: with
    no features in the config they infer each column from ONE shard's metadata (a different
    one from run to run), so a column null throughout that shard, or a float column written as
    integers there, comes back with the wrong type or fails. Features given in the config
    reach the folder and parquet builders in datasets 3.6 to 5.x (``dataset_info.features``,
    when present, wins over them: the two are kept the same).
    """
    if not isinstance(configs, list):
        return configs
    for config in configs:
        if _is_shardkit_config(config):
            if fmt.config_features:
                config["features"] = features
            else:
                config.pop("features", None)
    return configs


def card_features(fmt: ShardFormat, features: list[dict[str, Any]], extensions: list[str]) -> list[dict[str, Any]]:
    """The features the card declares for ``fmt``'s builtin loader.

    ZIP (imagefolder) and Parquet: the file column, ``key``, then every field. tar
    (datasets' webdataset builder): one column per file extension (``jpg``...), ``json`` (the
    row's metadata line as a struct) and the builder's ``__key__`` and ``__url__``.
    """
    return fmt.card_features(features, extensions)


#: The card sections shardkit owns, each between ``<!-- shardkit:NAME -->`` and
#: ``<!-- /shardkit:NAME -->``, in the order a missing one is put in. Every pack rewrites them
#: (push rewrites ``usage`` too); the text around them is the user's and is never touched.
SECTIONS = ("stats", "features", "usage", "layout", "license")
#: A section's opening marker; ``usage`` records there, as ``key=value`` words, what push must
#: know to render it again (``repo``, ``revision``, ``builtin``; each value percent-encoded).
#: A marker is a line of its own: user text in a section (a column or class name, a value) is
#: never a whole line (one-line cells and JSON strings), so it can neither open nor close one.
_BEGIN = re.compile(r"^<!-- shardkit:(?P<name>[a-z]+)(?P<attrs>(?: [a-z]+=[^\s>]+)*) -->[ \t\r]*$", re.MULTILINE)
#: What a marker's word keeps as it is (a repo id, a branch name as usually spelled).
_ATTR_SAFE = "/._-+@"
#: A line of a section's content that would read as a marker: shown as text instead.
_MARKER_LIKE = re.compile(r"^<!--(?= /?shardkit:)", re.MULTILINE)
#: The Hub namespace the template offers before one is given: never a repo to load from.
PLACEHOLDER_NAMESPACE = "your-username"
#: Shown in a ClassLabel's row of the features table; the front matter lists every name.
_SHOWN_LABELS = 20
_LICENSES_PAGE = "https://huggingface.co/docs/hub/repositories-licenses"
_LICENSE_KEYS = {"license", "license_name", "license_link"}


def _end_marker(name: str) -> str:
    return f"<!-- /shardkit:{name} -->"


def _find_section(body: str, name: str) -> tuple[int, int, dict[str, str]] | None:
    """Where section ``name`` starts and ends in ``body`` (its marker lines included) and the
    words of its opening marker; None if it has no opening marker or no closing one after it."""
    for match in _BEGIN.finditer(body):
        if match.group("name") != name:
            continue
        end = re.compile(rf"^{re.escape(_end_marker(name))}[ \t\r]*$", re.MULTILINE).search(body, match.end())
        if end is None:
            return None
        attrs = {k: unquote(v) for k, v in (word.split("=", 1) for word in match.group("attrs").split())}
        return match.start(), end.end(), attrs
    return None


def _has_marker(body: str, name: str) -> bool:
    return any(m.group("name") == name for m in _BEGIN.finditer(body))


def is_shardkit_card(text: str) -> bool:
    """Whether a card has shardkit's sections (a marker line, not the words in a sentence)."""
    return _has_marker(text, "stats")


def _section(name: str, content: str, attrs: dict[str, str] | None = None) -> str:
    """The one writer of a section: its markers, each a line, around ``content``, in which no
    line can read as a marker (a name the user gave, say, that ends a line and starts another)."""
    words = "".join(f" {k}={quote(v, safe=_ATTR_SAFE)}" for k, v in (attrs or {}).items())
    if content and not content.endswith("\n"):
        content += "\n"
    content = _MARKER_LIKE.sub("&lt;!--", content)
    return f"<!-- shardkit:{name}{words} -->\n{content}{_end_marker(name)}"


def set_section(body: str, name: str, content: str, attrs: dict[str, str] | None = None) -> str:
    """``body`` with section ``name`` holding ``content``: replaced where it is, else put after
    the shardkit section before it in :data:`SECTIONS` (or before the one after it; or at the
    end of the card). Every other character of ``body`` stays as it was. A section whose
    opening marker has no closing one is left alone: where the user's text ends is unknown."""
    text = _section(name, content, attrs)
    found = _find_section(body, name)
    if found is not None:
        start, end, _ = found
        return body[:start] + text + body[end:]
    if _has_marker(body, name):
        return body
    order = SECTIONS.index(name)
    for before in reversed(SECTIONS[:order]):
        if (at := _find_section(body, before)) is not None:
            return body[: at[1]] + "\n\n" + text + body[at[1] :]
    for after in SECTIONS[order + 1 :]:
        if (at := _find_section(body, after)) is not None:
            return body[: at[0]] + text + "\n\n" + body[at[0] :]
    # A card shardkit did not write (--adopt): its text stays; shardkit's sections go after it.
    return body + ("" if body.endswith("\n") or not body else "\n") + "\n" + text + "\n"


def human_size(n: float) -> str:
    """Bytes as the card shows them: ``15.0 KB``, ``1.7 MB`` (powers of 1000, as the Hub does)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n} B"


def _cell(text: str) -> str:
    """Free text (a column or class name) safe in a markdown table cell, shown as written."""
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|")


def _code(text: str) -> str:
    """``text`` as inline code in a table cell (a backtick in it, or a pipe, kept literal)."""
    text = " ".join(text.split()).replace("|", "\\|")
    fence = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _py(value: str) -> str:
    """A Python string literal (JSON's is one) for the examples."""
    return json.dumps(value, ensure_ascii=False)


def stats_section(
    rows: int,
    shards: int,
    total_bytes: int,
    preview: str | None = None,
    fmt: ShardFormat = ZIP,
    builtin_loader_note: str | None = None,
    splits: list[SplitSummary] | None = None,
) -> str:
    """What is in the dataset: rows, shards, format, each split's size, the preview."""
    lines = [
        f"{rows:,} rows in {shards} {fmt.words} shards ({human_size(total_bytes)}), packed with shardkit.",
        "",
    ]
    if splits:
        lines += ["| split | rows | shards | size |", "|---|---:|---:|---:|"]
        lines += [f"| {_code(s.name)} | {s.rows:,} | {s.shards:,} | {human_size(s.bytes)} |" for s in splits]
        lines.append("")
    if builtin_loader_note:
        lines += [f"**Note:** {builtin_loader_note}", ""]
    if preview:
        lines += [f"![A sample of the images with their captions]({preview})", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def row_features(fmt: ShardFormat, features: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The columns of a row as shardkit.stream gives them, from the card's features
    (:func:`card_features` inverted: for tar, the file column and the fields inside ``json``)."""
    return fmt.row_features(features)


def _type_words(feature: dict[str, Any]) -> str:
    """A feature's type in words for the features table."""
    if (names := class_label_names(feature)) is not None:
        return f"ClassLabel ({len(names)} classes)"
    if "dtype" in feature:
        return _cell(str(feature["dtype"]))
    if "struct" in feature:
        return "struct of " + ", ".join(f"{_code(str(f['name']))}: {_type_words(f)}" for f in feature["struct"])
    inner = feature.get("list", feature.get("sequence"))
    if isinstance(inner, str):
        return f"list of {_cell(inner)}"
    if isinstance(inner, list):
        return "list of " + _type_words({"struct": inner})
    if isinstance(inner, dict):
        return "list of " + _type_words(inner)
    return _cell(json.dumps({k: v for k, v in feature.items() if k != "name"}))


def features_section(fmt: ShardFormat, features: list[dict[str, Any]]) -> str:
    """The columns as a table: name, type, and a ClassLabel's names (the first 20 and a count)."""
    columns = row_features(fmt, features)
    lines = ["## Features", "", "| column | type | values |", "|---|---|---|"]
    for feature in columns:
        names = class_label_names(feature)
        values = ""
        if names is not None:
            values = ", ".join(f"`{i}` {_cell(n)}" for i, n in enumerate(names[:_SHOWN_LABELS]))
            if len(names) > _SHOWN_LABELS:
                values += f", ... ({len(names) - _SHOWN_LABELS} more; all {len(names)} in `dataset_info` above)"
        lines.append(f"| {_code(str(feature['name']))} | {_type_words(feature)} | {values} |")
    file_column = str(columns[0]["name"]) if columns else "image"
    what = "an audio file" if file_column == "audio" else "an image"
    lines += [
        "",
        f"`{file_column}` is {what} (datasets decodes it; its bytes are the file as it was packed), `key` the"
        " row's id: lowercase hex, unique in the dataset, given in the metadata or the sha256 of the file.",
    ]
    if names_column := next((str(f["name"]) for f in columns if class_label_names(f) is not None), None):
        lines += [
            "",
            f"`{names_column}` holds class numbers; `ds.features[{_py(names_column)}].names` gives their names,"
            f" `ds.features[{_py(names_column)}].int2str(n)` the name of one; -1 is a row without a label"
            " (test for it: `names[-1]` is the last name).",
        ]
    if note := fmt.builtin_columns_note():
        lines += ["", note]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Usage:
    """What the load examples depend on. Rendered at every pack, and again by push, which knows
    the repo: the examples name the repo the card is published in, or before that the folder they
    run in."""

    fmt: ShardFormat
    splits: tuple[str, ...]
    file_column: str
    label_column: str | None = None
    loader: str | None = None  # the loading script at OUT_DIR's root (read by datasets 3.6; fmt.loading_script)
    builtin: bool = True  # False: datasets' builtin loader would open the shards with the wrong builder
    data_files: tuple[str, ...] = ()  # each split's shards, as the card's configs name them (in splits' order)
    repo: str | None = None  # NAMESPACE/NAME on the Hub; None before the first push
    revision: str = "main"

    @property
    def attrs(self) -> dict[str, str]:
        words = {"repo": self.repo or "", "revision": self.revision if self.revision != "main" else ""}
        words["builtin"] = "" if self.builtin else "no"
        return {k: v for k, v in words.items() if v}


def known_repo(repo: str | None) -> str | None:
    """``repo`` if it names a Hub repo to load from: not empty, nor the template's placeholder."""
    if not repo or "/" not in repo or repo.split("/", 1)[0] == PLACEHOLDER_NAMESPACE:
        return None
    return repo


def usage_section(u: Usage) -> str:
    """How to load the dataset, fastest first, per datasets version; every example names the
    repo (or, before it is pushed, the folder it runs in) and the splits."""
    on_hub = u.repo is not None
    # Before the push, the folder the examples run in: datasets names a local dataset after its
    # folder, which "." has not, so it is given the folder's full path.
    stream_from = _py(u.repo) if u.repo is not None else '"."'
    load_from = _py(u.repo) if u.repo is not None else "os.getcwd()"
    revision = f", revision={_py(u.revision)}" if on_hub and u.revision != "main" else ""
    first = u.splits[0] if u.splits else "train"
    others = [s for s in u.splits if s != first]
    split_comment = f"  # or {', '.join(_py(s) for s in others)}" if others else ""
    lines = ["## Load it", ""]
    if not on_hub:
        lines += [
            "Not on the Hub yet: run these examples inside this folder. `shardkit push` writes the repo's name"
            " into them.",
            "",
        ]
    lines += [
        "Each reader below gives every row with its file's bytes and each column's type as packed"
        + (f", in the splits {', '.join(f'`{s}`' for s in u.splits)}." if len(u.splits) > 1 else "."),
        "",
    ]
    script = u.loader is not None and u.fmt.loading_script
    lines += [
        "| reader | datasets | units of work for DataLoader workers | requests |",
        "|---|---|---|---|",
        "| `shardkit.stream` | 3.6, 5.x | one per shard | one per shard |",
    ]
    if u.builtin:
        lines.append(f"| `load_dataset` | 3.6 to 5.x | {u.fmt.builtin_units} | {u.fmt.builtin_requests} |")
    if script:
        lines.append('| `load_dataset(..., revision="script")` | 3.6 only | one per shard | one per shard |')
    lines += [
        "",
        "**Fastest**, in datasets 3.6 and 5.x: `shardkit.stream` reads each shard front to back in one request"
        " (shardkit is not on PyPI: `pip install ./shardkit` from a clone of its repository).",
        "",
        "```python",
        "import shardkit",
        "",
        f"ds = shardkit.stream({stream_from}, split={_py(first)}{revision}){split_comment}",
    ]
    if u.label_column is not None:
        lines.append(f"names = ds.features[{_py(u.label_column)}].names")
    lines += ["for row in ds:"]
    if u.label_column is not None:
        label = f"row[{_py(u.label_column)}]"
        lines.append(f"    name = names[{label}] if {label} >= 0 else None  # -1: no label")
        lines.append(f'    print(row["key"], name, row[{_py(u.file_column)}])')
    else:
        lines.append(f'    print(row["key"], row[{_py(u.file_column)}])')
    lines += ["    break", "```", ""]
    if u.builtin:
        builder, caveat = u.fmt.builtin_builder(u.file_column), u.fmt.builtin_caveat
        lines += [
            f"**With datasets alone** (4 and 5; 3.6 too), its builtin `{builder}` loader, no script.{caveat}"
            " Leave out `streaming=True` to download the split first.",
            "",
            "```python",
            *([] if on_hub else ["import os", ""]),
            "from datasets import load_dataset",
            "",
            f"ds = load_dataset({load_from}, split={_py(first)}{revision}, streaming=True){split_comment}",
            "```",
            "",
        ]
    else:
        # load_dataset(repo) infers the builder from the shards' members and would pick the wrong
        # one (the note above says why); naming the builder skips the inference, and the types
        # still come out as packed (each shard's metadata.parquet carries the card's features).
        builder = u.fmt.builtin_builder(u.file_column)
        base = f"hf://datasets/{u.repo}{'@' + u.revision if u.revision != 'main' else ''}/" if on_hub else ""
        files = ", ".join(
            f"{_py(split)}: {_py(base + pattern)}" for split, pattern in zip(u.splits, u.data_files, strict=True)
        )
        lines += [
            f"**With datasets alone** (3.6 to 5.x): `load_dataset` of the repo would choose another builder than"
            f" `{builder}` for these shards (see the note above); name it, with the shards of each split.",
            "",
            "```python",
            "from datasets import load_dataset",
            "",
            f"ds = load_dataset({_py(builder)}, data_files={{{files}}}, split={_py(first)}, streaming=True)",
            "```",
            "",
        ]
    if script and u.loader is not None:
        if on_hub:
            call = (
                f'load_dataset({load_from}, revision="script", split={_py(first)}, streaming=True,'
                " trust_remote_code=True)"
            )
            where_script = "the loading script on the repo's `script` branch"
        else:
            call = f"load_dataset({_py(f'./{u.loader}')}, split={_py(first)}, trust_remote_code=True)"
            where_script = f"the loading script `{u.loader}`"
        lines += [
            f"**datasets 3.6** (the last version that runs scripts): {where_script} reads each shard front to back"
            " in one request and gives DataLoader workers one shard each.",
            "",
            "```python",
            "from datasets import load_dataset",
            "",
            f"ds = {call}",
            "```",
            "",
        ]
    table = (
        f"hf://datasets/{u.repo}{'@' + u.revision if u.revision != 'main' else ''}/{TABLE_NAME}"
        if on_hub
        else TABLE_NAME
    )
    lines += [
        f"**Filter without downloading the files**: `{TABLE_NAME}` holds every row's metadata, typed (`__shard__`"
        " is the shard file the row is in).",
        "",
        "```python",
        "import duckdb",
        "",
        f"duckdb.sql({_py(f'SELECT * FROM {_sql(table)} LIMIT 5')}).show()",
        "```",
    ]
    if u.file_column == "audio":
        lines += [
            "",
            "Audio: datasets 5.x needs `torchcodec` (with torch and FFmpeg) to load audio through its builtin"
            " loaders, even undecoded; 3.6 decodes with `soundfile` and `librosa`. Without them `shardkit.stream`"
            " gives each file's bytes and path.",
        ]
    return "\n".join(lines) + "\n"


def _sql(path: str) -> str:
    return "'" + path.replace("'", "''") + "'"


def layout_section(fmt: ShardFormat, splits: list[SplitSummary] | None, loader: str | None) -> str:
    """The files of the repo and what each holds."""
    split_folders = bool(splits) and any(s.data_files.startswith(f"data/{s.name}/") for s in splits or [])
    folder = "<split>/" if split_folders else ""
    lengths = sorted({s.prefix_length for s in splits or []} - {BY_SIZE})
    digits = "hex digit" if lengths == [1] else f"{' or '.join(map(str, lengths))} hex digits"
    lines = ["## Layout", ""]
    if lengths:
        shard_line = (
            f"- `data/{folder}<prefix>{fmt.suffix}`: {fmt.words} shards; `<prefix>` is the first"
            f" {digits} of each row's `key` (a group too big for one shard is cut into"
            f" `<prefix>-<part>{fmt.suffix}`); {fmt.layout_words}."
        )
    else:
        shard_line = (
            f"- `data/{folder}<start>{fmt.suffix}`: {fmt.words} shards of about equal size, each holding a range of"
            f" keys; `<start>` is where its range starts (`0`, then the shortest prefix of its first `key`), so a"
            f" row is in the last shard whose name sorts at or before its `key`; {fmt.layout_words}."
        )
    if split_folders and splits:
        shard_line += " Splits: " + ", ".join(f"`data/{s.name}/`" for s in splits) + "."
    lines += [
        shard_line,
        f"- `metadata/{folder}<{'prefix' if lengths else 'start'}>.jsonl`: each shard's rows as JSON Lines, in the"
        " order of its files (the same rows as inside it).",
        f"- `{TABLE_NAME}`: every row's metadata as one typed table (`__shard__`: the shard file, `file_name`"
        " inside the shard, `key`, then every column).",
        "- `shards.json`: the manifest (rows, bytes, sha256, first and last key of every shard).",
    ]
    if loader is not None and fmt.loading_script:
        lines.append(f"- `{loader}`: the loading script for datasets 3.6.")
    return "\n".join(lines) + "\n"


#: A ``license_link`` the card shows as a link: a URL, or a path in the repo (LICENSE.md).
_LICENSE_LINK = re.compile(r"https?://\S+|[\w./-]+")


def license_section(front: dict[str, Any]) -> str:
    """The license the card's metadata declares, in words (the front matter is the user's)."""
    license_id = front.get("license")
    ids = [str(x) for x in license_id] if isinstance(license_id, list) else [str(license_id)] if license_id else []
    lines = ["## License", ""]
    if not ids:
        lines.append("This card declares no license (the `license` field of its metadata is empty).")
    elif ids == ["other"]:
        name = front.get("license_name")
        link = front.get("license_link")
        said = _cell(str(name)) if name else "a license of its own"
        if isinstance(link, str) and _LICENSE_LINK.fullmatch(link):
            said = f"[{said}]({link})"
        lines.append(f"The data is published under {said}.")
    else:
        shown = " and ".join(f"`{_cell(i)}`" for i in ids)
        lines.append(f"The data is published under {shown} ([the Hub's license ids]({_LICENSES_PAGE})).")
    return "\n".join(lines) + "\n"


# What shardkit before its card sections wrote after the stats of a card it made: replaced by
# the sections (it named no repo: `<namespace>` stood for it).
_OLD_LOAD_BLOCK = re.compile(
    r"\n\n## Load it\n\nFastest, one shard per shard file for DataLoader workers, datasets 3\.6 and 5\.x \(needs"
    r" shardkit, which is not on PyPI: `pip install \./shardkit` from a clone of its repository\):\n\n"
    r"```python\nimport shardkit\n\nds = shardkit\.stream\(\"<namespace>/(?P<title>[^\n]*)\"\)\n```\n\n"
    r"With datasets alone \(the builtin loader; types as declared above\):\n\n"
    r"```python\nfrom datasets import load_dataset\n\n"
    r"ds = load_dataset\(\"<namespace>/(?P=title)\", split=\"train\", streaming=True\)\n```\n\Z"
)


def minimal_body(title: str) -> str:
    """A new card's text: its title, then shardkit's sections (filled by :func:`update_card`)."""
    return f"\n# {title}\n\n" + "\n\n".join(_section(name, "") for name in SECTIONS) + "\n"


def loader_in(out_dir: str) -> str | None:
    """The loading script at OUT_DIR's root (the template's ``*_loader.py``), if there is one."""
    try:
        names = sorted(n for n in os.listdir(out_dir) if n.endswith(LOADER_SUFFIX))
    except FileNotFoundError:
        return None
    return names[0] if names else None


def usage_of(
    fmt: ShardFormat,
    columns: list[dict[str, Any]],
    splits: list[SplitSummary] | None,
    out_dir: str,
    attrs: dict[str, str],
) -> Usage:
    """The load examples' facts: what was packed (``columns``: the rows' features, see
    :func:`row_features`), OUT_DIR's loading script and the usage marker's words."""
    return Usage(
        fmt=fmt,
        splits=tuple(s.name for s in splits) if splits else ("train",),
        data_files=tuple(s.data_files for s in splits) if splits else (fmt.data_files_pattern,),
        file_column=str(columns[0]["name"]) if columns else "image",
        label_column=next((str(f["name"]) for f in columns if class_label_names(f) is not None), None),
        loader=loader_in(out_dir) if fmt.loading_script else None,
        builtin=attrs.get("builtin") != "no",
        repo=known_repo(attrs.get("repo")),
        revision=attrs.get("revision") or "main",
    )


def _read_card(path: str) -> tuple[str, str, bool]:
    """A card's text with ``\\n`` line ends, its UTF-8 mark (kept, outside the YAML) and whether
    it had ``\\r\\n`` line ends (it is written back with its own)."""
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    text = text[len(bom) :]
    crlf = "\r\n" in text and text.count("\r\n") == text.count("\n")
    return text.replace("\r\n", "\n"), bom, crlf


def _write_card(path: str, text: str, bom: str, crlf: bool) -> None:
    write_atomic(path, (bom + (text.replace("\n", "\r\n") if crlf else text)).encode("utf-8"))


def card_repo(out_dir: str) -> str | None:
    """The Hub repo OUT_DIR's card names in its load examples (``shardkit new``'s answers, or the
    last push); None if it names none."""
    try:
        text, _, _ = _read_card(os.path.join(out_dir, "README.md"))
    except FileNotFoundError:
        return None
    found = _find_section(text, "usage")
    return known_repo(found[2].get("repo")) if found else None


def name_repo(out_dir: str, repo_id: str, revision: str, manifest: Manifest) -> str | None:
    """Write ``repo_id`` (and a branch other than main) into the load examples of OUT_DIR's
    card, so that the card push publishes names the repo it is in; the next pack keeps it.
    Only shardkit's usage section changes. Returns the card's path if it changed; None if it
    named the repo already, or has no usage section (a card of an older shardkit: the next pack
    adds one)."""
    path = os.path.join(out_dir, "README.md")
    try:
        text, bom, crlf = _read_card(path)
    except FileNotFoundError:
        return None
    end = _front_matter_end(text)
    head, body = (text[: end + 5], text[end + 5 :]) if end != -1 else ("", text)
    found = _find_section(body, "usage")
    if found is None:
        return None
    fmt = manifest.options.shard_format
    # The manifest's features are the rows' as shardkit.stream gives them (for tar too).
    usage = usage_of(fmt, manifest.features, manifest.splits(), out_dir, found[2])
    usage = replace(usage, repo=repo_id, revision=revision)
    new_body = set_section(body, "usage", usage_section(usage), usage.attrs)
    if new_body == body:
        return None
    _write_card(path, head + new_body, bom, crlf)
    return path


_SIZE_CATEGORIES = [
    (10**3, "n<1K"),
    (10**4, "1K<n<10K"),
    (10**5, "10K<n<100K"),
    (10**6, "100K<n<1M"),
    (10**7, "1M<n<10M"),
    (10**8, "10M<n<100M"),
    (10**9, "100M<n<1B"),
    (10**10, "1B<n<10B"),
    (10**11, "10B<n<100B"),
    (10**12, "100B<n<1T"),
]


def size_category(rows: int) -> str:
    """The Hub's size category for a row count."""
    for bound, name in _SIZE_CATEGORIES:
        if rows < bound:
            return name
    return "n>1T"


LOADER_SUFFIX = "_loader.py"
FEATURES_BEGIN = "# shardkit:features-begin\n"
FEATURES_END = "# shardkit:features-end\n"

#: The template's loading script, whose reader code (everything after :data:`FEATURES_END`) a
#: pack puts in place of an earlier template's.
TEMPLATE_LOADER = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "templates",
    "hub-dataset",
    "{{cookiecutter.dataset_name}}",
    "{{cookiecutter.__loader_module}}.py",
)
#: The sha256 of the reader code of every earlier template (the commit that last changed it),
#: as :func:`_normalised_reader` gives it: the code as that template rendered it, with the one
#: line it put the dataset's pretty name in given back as the template wrote it. The code of the
#: template before this one must join this list whenever the template's reader code changes
#: (tests/test_loading_script.py checks this against the git history).
EARLIER_READERS = {
    "66e42d77f9e414f2efd480ae814e4353b02dc10544e9bf861606518e27b589cc": "8d384d8",
    "d3f60e1bbd59098a4943206105b61efe32526da1af55ac165a2f4543923131b5": "f27a2ff",
    "74d9c7680a342671b9f4fd9cc691783df272f525eecb138ee74f4a3e86ef69c3": "dca55b6",
    "73e0b1a754f3b274f74bf0c6f5b01ba060c27d60e609c693cf8c70d52439b00c": "2d45ce5",
    "fa1e0f9eeaace58f10cfea50c10b6dbba34f1efaebefb32aa58fbc9b2c534494": "f31e959",
    "f2ac91e8733954ff211125bbae4d52635d4e3955e12d076827867f3247b9c598": "eec3e39",
    "639ee6803661b5ba2b7605a96e3c68118e9c5694357c17fe8086d5fb1323a9d7": "2fc619f",
    "f54d3fdd289d201f8ab83c21cccee32c2a5219b92e3ff4d334c94ca3a292c42e": "25c66ef",
    "7e6204afec5b45ab211d002b39ac4e3374820f33f1d273d16703a9e1f1932417": "1403417",
    "b8e0d3bf8231732b6cd38da44659289caa2be27d983067a5e40ab82a356cbd82": "b5b75c3",
    "9631f1141235e995d554f82bf15ce383a04a122fa48d227d599400f2deda4a2d": "c9013c6",
}
#: The line of the earlier templates' reader code that held the pretty name (the class docstring),
#: as rendered (a name on one line, without a triple quote) and as the template wrote it.
_PRETTY_NAME_LINE = re.compile(r'^    """(?:(?!""")[^\n])*: ZIP shards packed by shardkit\."""\n', re.MULTILINE)
_PRETTY_NAME_TEMPLATE = '    """{{ cookiecutter.pretty_name }}: ZIP shards packed by shardkit."""\n'
#: The template's reader code begins with this marker and its version (from 7; the earlier ones had none).
_READER_MARKER = re.compile(r"^# shardkit:reader ([0-9]+)\b", re.MULTILINE)


def _normalised_reader(code: str) -> str:
    """Reader code as the template that rendered it wrote it (see :data:`EARLIER_READERS`)."""
    return _PRETTY_NAME_LINE.sub(lambda _: _PRETTY_NAME_TEMPLATE, code, count=1)


def reader_code(text: str) -> str | None:
    """A loading script's reader code: everything after its :data:`FEATURES_END` line; None
    without the features markers."""
    start, end = text.find(FEATURES_BEGIN), text.find(FEATURES_END)
    if start == -1 or end < start:
        return None
    return text[end + len(FEATURES_END) :]


def template_reader() -> str:
    """The reader code of shardkit's template (it holds no template variable: it is copied as it is)."""
    with open(TEMPLATE_LOADER, encoding="utf-8") as f:
        code = reader_code(f.read())
    if code is None or "{{" in code or "{%" in code or "{#" in code:
        raise RuntimeError(f"{TEMPLATE_LOADER}: no reader code after {FEATURES_END.strip()!r}, or a template tag in it")
    return code


def _reader_version(code: str) -> int:
    """The version its marker gives reader code; 0 without one (an earlier template's, or edited)."""
    found = _READER_MARKER.search(code)
    return int(found.group(1)) if found else 0


@dataclass
class LoaderUpdate:
    """What :func:`update_loaders` did to the loading scripts at OUT_DIR's root."""

    #: Every loading script whose features were written (it has the markers and is not outdated).
    written: list[str] = field(default_factory=list)
    #: Those whose reader code was an earlier template's, now the template's.
    upgraded: list[str] = field(default_factory=list)
    #: The scripts whose reader code was edited and is older than the template's: left as they are.
    outdated: list[str] = field(default_factory=list)

    def warnings(self, where: Callable[[str], str] = str) -> list[str]:
        """One line for each outdated script; ``where(path)`` names it (for an OUT_DIR URL: its URL)."""
        return [
            f"{where(path)}: its reader code (after {FEATURES_END.strip()!r}) was edited, so it was left as it is"
            " and datasets 3.6 may not read these shards with it; replace it with the template's (the same part"
            f" of {TEMPLATE_LOADER}), or take the script of a new `shardkit new` scaffold"
            for path in self.outdated
        ]


def update_loaders(out_dir: str, features: list[dict[str, Any]]) -> LoaderUpdate:
    """Write the features into every ``*_loader.py`` at OUT_DIR's root that has the markers, and
    bring its reader code up to date.

    The template's loading script declares its features between two marker comments; datasets
    3.6 then types every column as the card does. Everything after the end marker is shardkit's
    reader code: when it is byte for byte what an earlier template wrote (:data:`EARLIER_READERS`),
    it is replaced with the template's, which reads the shards this shardkit writes. Code edited
    by hand is kept: a script whose code is marked as the template's version or a later one
    (edited after it was brought up to date) gets its features; any other is left as it is, and
    the result names it (:attr:`LoaderUpdate.outdated`, :meth:`LoaderUpdate.warnings`).
    """
    result = LoaderUpdate()
    current: str | None = None
    for name in sorted(os.listdir(out_dir)):
        if not name.endswith(LOADER_SUFFIX):
            continue
        path = os.path.join(out_dir, name)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        code = reader_code(text)
        if code is None:
            continue
        current = template_reader() if current is None else current
        if code != current and hashlib.sha256(_normalised_reader(code).encode("utf-8")).hexdigest() in EARLIER_READERS:
            code = current
            result.upgraded.append(path)
        elif code != current and _reader_version(code) < _reader_version(current):
            result.outdated.append(path)  # edited: left as it is
            continue
        start = text.find(FEATURES_BEGIN)
        block = f'_FEATURES_JSON = r"""\n{json.dumps(features, ensure_ascii=False, indent=1)}\n"""\n'
        new = text[: start + len(FEATURES_BEGIN)] + block + FEATURES_END + code
        if new != text:
            write_atomic(path, new.encode("utf-8"))
        result.written.append(path)
    return result


def update_card(
    out_dir: str,
    *,
    features: list[dict[str, Any]],
    rows: int,
    shards: int,
    total_bytes: int,
    preview: str | None = None,
    fmt: ShardFormat = ZIP,
    name: str | None = None,
    builtin_loader_note: str | None = None,
    splits: list[SplitSummary] | None = None,
) -> str:
    """Create README.md, or set ``configs`` (if absent), ``size_categories``, ``dataset_info`` and
    shardkit's sections of the text (:data:`SECTIONS`). ``name`` titles a new card (default:
    ``out_dir``'s folder name); nothing else in the card depends on where the folder is or what it
    is called (a copy packs to the same bytes)."""
    path = os.path.join(out_dir, "README.md")
    title = name or os.path.basename(os.path.abspath(out_dir))
    # A folder name that is not UTF-8 (bytes Python holds as surrogates) titles the card with
    # U+FFFD in their place: the card is UTF-8 text.
    title = title.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    modality = str(features[0].get("dtype")) if features else ""
    try:
        text, bom, crlf = _read_card(path)
    except FileNotFoundError:
        # No pretty_name, license or tags: keys a new card leaves empty are the user's (or a
        # remux's, from its source) to set. set_front_matter_keys puts the front matter on.
        text, bom, crlf = minimal_body(title), "", False
    data, body = split_front_matter(text)
    other = {"image": "audio", "audio": "image"}.get(modality)
    tags = data.get("tags")
    if other and isinstance(tags, list) and other in tags and modality not in tags:
        log.warning(
            "%s says the dataset is %s (tags: %s) but the packed files are %s: edit its tags, task and description",
            path,
            other,
            ", ".join(map(str, tags)),
            modality,
        )
    new_body = _OLD_LOAD_BLOCK.sub("\n", body) if _find_section(body, "usage") is None else body
    found = _find_section(new_body, "usage")
    usage = usage_of(fmt, row_features(fmt, features), splits, out_dir, found[2] if found else {})
    usage = replace(usage, builtin=builtin_loader_note is None)
    stats = stats_section(rows, shards, total_bytes, preview, fmt, builtin_loader_note, splits)
    new_body = set_section(new_body, "stats", stats)
    new_body = set_section(new_body, "features", features_section(fmt, features))
    new_body = set_section(new_body, "usage", usage_section(usage), usage.attrs)
    new_body = set_section(new_body, "layout", layout_section(fmt, splits, usage.loader))
    new_body = set_section(new_body, "license", license_section(data))
    text = text[: len(text) - len(body)] + new_body  # body is what follows the front matter
    info = data.get("dataset_info")
    info = dict(info) if isinstance(info, dict) else {}
    info["features"] = features
    if splits:
        # What the Hub shows of each split: rows, and bytes (of its shards: the images are in
        # them, so they are what a reader downloads and about what Arrow holds).
        info["splits"] = [{"name": s.name, "num_bytes": s.bytes, "num_examples": s.rows} for s in splits]
        info["download_size"] = sum(s.bytes for s in splits)
        info["dataset_size"] = sum(s.bytes for s in splits)
    text = set_front_matter_keys(
        text,
        {
            "configs": _with_features(
                _retarget_configs(data.get("configs"), fmt, splits) or default_configs(fmt, splits), fmt, features
            ),
            "size_categories": [size_category(rows)],
            "dataset_info": info,
        },
    )
    _write_card(path, text, bom, crlf)
    return path


def ensure_gitattributes(out_dir: str) -> str:
    """Append the LFS rules shardkit's files need to .gitattributes; what is there stays byte for
    byte (its line endings too)."""
    path = os.path.join(out_dir, ".gitattributes")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raw = b""
    existing = raw.decode("utf-8", errors="surrogateescape").splitlines()
    missing = [line for line in GITATTRIBUTES_LINES if line not in existing]
    if missing:
        newline = b"\r\n" if b"\r\n" in raw else b"\n"
        joined = newline.join(line.encode("utf-8") for line in missing) + newline
        write_atomic(path, raw + (newline if raw and not raw.endswith(b"\n") else b"") + joined)
    return path


def read_utf8(path: str, limit: int = MAX_SMALL_FILE_BYTES) -> str:
    """A text file of OUT_DIR shardkit reads whole (its card, ``.gitignore``), as text; one line
    naming it if it is over ``limit`` bytes or not UTF-8. :class:`FileNotFoundError` if missing.
    (Open it only after :func:`shardkit.outdir.check_own_entries`: a FIFO would block here.)"""
    with open(path, "rb") as f:
        raw = read_upto(f, limit + 1)
    if len(raw) > limit:
        raise UsageError(f"{path}: more than {limit} bytes, far more than a {os.path.basename(path)} holds")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{path} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); save it as UTF-8"
        ) from None


def card_problem(out_dir: str) -> str | None:
    """Why shardkit cannot keep OUT_DIR's README.md true (None if it can), checked before a pack
    writes anything: it must be UTF-8 with YAML front matter that parses, and a ``configs``
    list must read the shards first (datasets picks the builder of every config from the first
    one's files, so shards behind another first config could not be loaded)."""
    path = os.path.join(out_dir, "README.md")
    try:
        text = read_utf8(path)
    except FileNotFoundError:
        return None
    except UsageError as exc:
        return str(exc)
    text = text.removeprefix("\ufeff").replace("\r\n", "\n")
    try:
        data, _ = split_front_matter(text)
        # shardkit's own edit, tried now on the values there: a card it cannot edit fails here,
        # not after every shard is written.
        keys: dict[str, Any] = {"configs": data.get("configs") or [], "size_categories": [], "dataset_info": {}}
        set_front_matter_keys(text, keys)
    except (yaml.YAMLError, ValueError) as exc:
        reason = str(exc).splitlines()[0]
        return f"{path}: its YAML front matter does not parse ({reason}); fix it, then run the command again"
    configs = data.get("configs")
    if isinstance(configs, list) and configs:
        first = configs[0] if isinstance(configs[0], dict) else {}
        paths = _config_paths(first)
        if not any(isinstance(p, str) and _SHARDKIT_PATTERN.fullmatch(p) for p in paths):
            return (
                f"{path}: its first config ({first.get('config_name')!r}) reads {paths}, not shardkit's"
                " data/*.<format>; datasets picks every config's builder from the first one's files, so the"
                " shards could not be loaded. Put a config for the shards first, or remove `configs`."
            )
    return None
