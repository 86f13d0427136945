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

import json
import logging
import os
import re
from typing import Any

import yaml

from .formats import ZIP, ShardFormat
from .manifest import SplitSummary, write_atomic

log = logging.getLogger(__name__)
#: A ``data_files`` path shardkit writes: ``data/*.zip``, or a split's ``data/<split>/*.zip``.
_SHARDKIT_PATTERN = re.compile(r"^data/(?:[A-Za-z0-9_]{1,64}/)?\*\.(?:zip|tar|parquet)$")
_FORMAT_WORDS = {"zip": "ZIP", "tar": "tar (webdataset)", "parquet": "Parquet"}

GITATTRIBUTES_LINES = [
    "*.zip filter=lfs diff=lfs merge=lfs -text",
    "*.tar filter=lfs diff=lfs merge=lfs -text",
    "*.parquet filter=lfs diff=lfs merge=lfs -text",
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
_TOP_LEVEL_KEY = re.compile(r"""^(["']?)([^\s#\-"'][^:"']*?)\1\s*:(?:\s|$)""")


def set_front_matter_keys(text: str, values: dict[str, Any]) -> str:
    """Set top-level keys of a card's YAML front matter; every other line stays byte for byte.

    A key's block (its line and the indented or ``- `` lines under it) is replaced by the new
    value's YAML, or appended at the end of the front matter; comments and blank lines that end
    a block stay. A card without front matter gets one in front of its text.
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
    return bool(paths) and all(isinstance(p, str) and _SHARDKIT_PATTERN.match(p) for p in paths)


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
    if fmt.name != "tar":
        return features
    file_dtype = features[0]["dtype"]
    line = [{"name": "file_name", "dtype": "string"}, *features[1:]]
    return [
        *({"name": ext.lstrip("."), "dtype": file_dtype} for ext in extensions),
        {"name": "json", "struct": line},
        {"name": "__key__", "dtype": "string"},
        {"name": "__url__", "dtype": "string"},
    ]


#: How many ZIPs, and members of each, datasets lists to choose the builder for ``data/*.zip``
#: (``infer_module_for_data_files_list_in_archives``): 10 archives in 3.6 to 5.x; the first 200
#: members of each (sorted) in 3.6 and 4.0, all of them in 5.x.
_INFERENCE_ARCHIVES = 10
_INFERENCE_MEMBER_LIMITS = (200, None)


def builtin_zip_builder(shard_members: list[list[str]]) -> str:
    """The builder ``load_dataset(repo)`` picks for ZIP shards, as datasets 3.6 to 5.x decide it.

    ``shard_members``: each shard's member names, shards in name order. datasets counts every
    dotted suffix of the member names of the first 10 ZIPs and takes the most common (on a tie,
    the one seen first, members sorted by name); ``metadata.jsonl`` counts as ``.jsonl``, and no
    card setting can override the choice. So a dataset whose media are spread over several
    extensions, with few rows per shard, can be opened with the ``json`` builder. Returns
    "json" if any of those versions would pick it, else "imagefolder" or "audiofolder".
    """
    from collections import Counter

    from .metadata import AUDIO_EXTENSIONS

    picks = set()
    for limit in _INFERENCE_MEMBER_LIMITS:
        counts: Counter[str] = Counter()
        for members in shard_members[:_INFERENCE_ARCHIVES]:
            for name in sorted(members)[:limit]:
                counts.update("." + part.lower() for part in name.rsplit("/", 1)[-1].split(".")[1:])
        if counts:
            picks.add(counts.most_common(1)[0][0])
    if ".jsonl" in picks:
        return "json"
    return "audiofolder" if picks & AUDIO_EXTENSIONS else "imagefolder"


STATS_BEGIN = "<!-- shardkit:stats -->"
STATS_END = "<!-- /shardkit:stats -->"


def stats_section(
    rows: int,
    shards: int,
    total_bytes: int,
    preview: str | None = None,
    fmt: ShardFormat = ZIP,
    builtin_loader_note: str | None = None,
) -> str:
    """The card text shardkit owns: rewritten on every pack, between two HTML comments."""
    picture = f"\n![A sample of the images with their captions]({preview})\n" if preview else ""
    note = f"\n**Note:** {builtin_loader_note}\n" if builtin_loader_note else ""
    return (
        f"{STATS_BEGIN}\n{rows:,} rows in {shards} {_FORMAT_WORDS[fmt.name]} shards ({total_bytes / 1e6:,.1f} MB),"
        f" packed with shardkit.\n{note}{picture}"
        f"{STATS_END}"
    )


def replace_stats(body: str, section: str) -> str:
    """Swap the shardkit-owned section in a card body; leave a body without markers alone."""
    start, end = body.find(STATS_BEGIN), body.find(STATS_END)
    if start == -1 or end < start:
        return body
    return body[:start] + section + body[end + len(STATS_END) :]


def minimal_body(title: str, section: str) -> str:
    """A new card's text: how to load it, the fast reader first (one shard per shard file)."""
    return (
        f"\n# {title}\n\n{section}\n\n"
        "## Load it\n\n"
        "Fastest, one shard per shard file for DataLoader workers, datasets 3.6 and 5.x (needs shardkit,"
        " which is not on PyPI: `pip install ./shardkit` from a clone of its repository):\n\n"
        f'```python\nimport shardkit\n\nds = shardkit.stream("<namespace>/{title}")\n```\n\n'
        "With datasets alone (the builtin loader; types as declared above):\n\n"
        "```python\nfrom datasets import load_dataset\n\n"
        f'ds = load_dataset("<namespace>/{title}", split="train", streaming=True)\n'
        "```\n"
    )


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


def update_loaders(out_dir: str, features: list[dict[str, Any]]) -> list[str]:
    """Write the features into every ``*_loader.py`` at OUT_DIR's root that has the markers.

    The template's loading script declares its features between two marker comments; datasets
    3.6 then types every column as the card does.
    """
    updated = []
    for name in sorted(os.listdir(out_dir)):
        if not name.endswith(LOADER_SUFFIX):
            continue
        path = os.path.join(out_dir, name)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        start, end = text.find(FEATURES_BEGIN), text.find(FEATURES_END)
        if start == -1 or end < start:
            continue
        block = f'_FEATURES_JSON = r"""\n{json.dumps(features, ensure_ascii=False, indent=1)}\n"""\n'
        new = text[: start + len(FEATURES_BEGIN)] + block + text[end:]
        if new != text:
            write_atomic(path, new.encode("utf-8"))
        updated.append(path)
    return updated


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
    """Create README.md, or set ``configs`` (if absent), ``size_categories``, ``dataset_info.features``
    and the stats section. ``name`` titles a new card (default: ``out_dir``'s folder name)."""
    path = os.path.join(out_dir, "README.md")
    section = stats_section(rows, shards, total_bytes, preview, fmt, builtin_loader_note)
    try:
        with open(path, encoding="utf-8", newline="") as f:
            text = f.read()
    except FileNotFoundError:
        title = name or os.path.basename(os.path.abspath(out_dir))
        # A folder name that is not UTF-8 (bytes Python holds as surrogates) titles the card
        # with U+FFFD in their place: the card is UTF-8 text.
        title = title.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        text = minimal_body(title, section)  # set_front_matter_keys puts the front matter on
    bom = "\ufeff" if text.startswith("\ufeff") else ""  # Notepad's UTF-8 mark: kept, outside the YAML
    text = text[len(bom) :]
    crlf = "\r\n" in text and text.count("\r\n") == text.count("\n")
    text = text.replace("\r\n", "\n")  # edited with \n, written back with the card's own line ends
    data, body = split_front_matter(text)
    modality = str(features[0].get("dtype")) if features else ""
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
    if STATS_BEGIN in body:
        new_body = replace_stats(body, section)
    else:  # a card shardkit did not write (--adopt): its text stays; shardkit's section goes after it
        new_body = body + ("" if body.endswith("\n") or not body else "\n") + "\n" + section + "\n"
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
    write_atomic(path, (bom + (text.replace("\n", "\r\n") if crlf else text)).encode("utf-8"))
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


def card_problem(out_dir: str) -> str | None:
    """Why shardkit cannot keep OUT_DIR's README.md true (None if it can), checked before a pack
    writes anything: it must be UTF-8 with YAML front matter that parses, and a ``configs``
    list must read the shards first (datasets picks the builder of every config from the first
    one's files, so shards behind another first config could not be loaded)."""
    path = os.path.join(out_dir, "README.md")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"{path} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); save it as UTF-8"
    text = text.removeprefix("\ufeff").replace("\r\n", "\n")
    try:
        data, _ = split_front_matter(text)
        # shardkit's own edit, tried now on the values there: a card it cannot edit fails here,
        # not after every shard is written.
        keys: dict[str, Any] = {"configs": data.get("configs") or [], "size_categories": [], "dataset_info": {}}
        set_front_matter_keys(text, keys)
    except (yaml.YAMLError, ValueError) as exc:
        reason = str(exc).splitlines()[0]
        return f"{path}: its YAML front matter does not parse ({reason}); fix it, then pack again"
    configs = data.get("configs")
    if isinstance(configs, list) and configs:
        first = configs[0] if isinstance(configs[0], dict) else {}
        paths = _config_paths(first)
        if not any(isinstance(p, str) and _SHARDKIT_PATTERN.match(p) for p in paths):
            return (
                f"{path}: its first config ({first.get('config_name')!r}) reads {paths}, not shardkit's"
                " data/*.<format>; datasets picks every config's builder from the first one's files, so the"
                " shards could not be loaded. Put a config for the shards first, or remove `configs`."
            )
    return None
