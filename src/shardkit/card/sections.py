"""The card's sections shardkit writes, each a function of :class:`.CardFacts` (the license: of
the front matter, which is the user's): stats, features, layout, license. The load examples are
:mod:`.usage`'s."""

from __future__ import annotations

import html
import json
import re
from typing import Any

from ..builtin import builtin_loader
from ..plan import BY_SIZE
from ..schema import class_label_names
from ..table import TABLE_NAME
from .facts import CardFacts

#: How the card names each shard format.
FORMAT_WORDS = {"zip": "ZIP", "tar": "tar (webdataset)", "parquet": "Parquet"}
#: What a shard of each format holds, in the layout section.
LAYOUT_WORDS = {
    "zip": "inside, `metadata.parquet` first (the rows, typed as the card declares), then each file stored"
    " uncompressed at `images/<key[:3]>/<key[3:6]>/<key><ext>`",
    "tar": "inside, for each row `<key>.json` (its metadata) then `<key><ext>` (its file), the webdataset layout",
    "parquet": "one row per file, its bytes in a `{bytes, path}` column beside the metadata columns",
}
#: Shown in a ClassLabel's row of the features table; the front matter lists every name.
_SHOWN_LABELS = 20
_LICENSES_PAGE = "https://huggingface.co/docs/hub/repositories-licenses"
#: The front matter keys the license section says in words.
LICENSE_KEYS = {"license", "license_name", "license_link"}
#: A ``license_link`` the card shows as a link: a URL, or a path in the repo (LICENSE.md).
_LICENSE_LINK = re.compile(r"https?://\S+|[\w./-]+")


def human_size(n: float) -> str:
    """Bytes as the card shows them: ``15.0 KB``, ``1.7 MB`` (powers of 1000, as the Hub does)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n} B"


def cell(text: str) -> str:
    """Free text (a column or class name) safe in a markdown table cell, shown as written."""
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|")


def code(text: str) -> str:
    """``text`` as inline code in a table cell (a backtick in it, or a pipe, kept literal)."""
    text = " ".join(text.split()).replace("|", "\\|")
    fence = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def py(value: str) -> str:
    """A Python string literal (JSON's is one) for the examples."""
    return json.dumps(value, ensure_ascii=False)


def stats_section(facts: CardFacts) -> str:
    """What is in the dataset: rows, shards, format, each split's size, the preview."""
    words = FORMAT_WORDS[facts.fmt.name]
    lines = [
        f"{facts.rows:,} rows in {facts.shards} {words} shards ({human_size(facts.bytes)}), packed with shardkit.",
        "",
    ]
    if facts.splits:
        lines += ["| split | rows | shards | size |", "|---|---:|---:|---:|"]
        lines += [f"| {code(s.name)} | {s.rows:,} | {s.shards:,} | {human_size(s.bytes)} |" for s in facts.splits]
        lines.append("")
    if facts.builtin_note:
        lines += [f"**Note:** {facts.builtin_note}", ""]
    if facts.preview:
        lines += [f"![A sample of the images with their captions]({facts.preview})", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def _type_words(feature: dict[str, Any]) -> str:
    """A feature's type in words for the features table."""
    if (names := class_label_names(feature)) is not None:
        return f"ClassLabel ({len(names)} classes)"
    if "dtype" in feature:
        return cell(str(feature["dtype"]))
    if "struct" in feature:
        return "struct of " + ", ".join(f"{code(str(f['name']))}: {_type_words(f)}" for f in feature["struct"])
    inner = feature.get("list", feature.get("sequence"))
    if isinstance(inner, str):
        return f"list of {cell(inner)}"
    if isinstance(inner, list):
        return "list of " + _type_words({"struct": inner})
    if isinstance(inner, dict):
        return "list of " + _type_words(inner)
    return cell(json.dumps({k: v for k, v in feature.items() if k != "name"}))


def label_column(columns: list[dict[str, Any]]) -> str | None:
    """The first column of class labels, if there is one."""
    return next((str(f["name"]) for f in columns if class_label_names(f) is not None), None)


def features_section(facts: CardFacts) -> str:
    """The columns as a table: name, type, and a ClassLabel's names (the first 20 and a count)."""
    lines = ["## Features", "", "| column | type | values |", "|---|---|---|"]
    for feature in facts.columns:
        names = class_label_names(feature)
        values = ""
        if names is not None:
            values = ", ".join(f"`{i}` {cell(n)}" for i, n in enumerate(names[:_SHOWN_LABELS]))
            if len(names) > _SHOWN_LABELS:
                values += f", ... ({len(names) - _SHOWN_LABELS} more; all {len(names)} in `dataset_info` above)"
        lines.append(f"| {code(str(feature['name']))} | {_type_words(feature)} | {values} |")
    file_column = facts.file_column
    what = "an audio file" if file_column == "audio" else "an image"
    lines += [
        "",
        f"`{file_column}` is {what} (datasets decodes it; its bytes are the file as it was packed), `key` the"
        " row's id: lowercase hex, unique in the dataset, given in the metadata or the sha256 of the file.",
    ]
    if names_column := label_column(facts.columns):
        lines += [
            "",
            f"`{names_column}` holds class numbers; `ds.features[{py(names_column)}].names` gives their names,"
            f" `ds.features[{py(names_column)}].int2str(n)` the name of one; -1 is a row without a label"
            " (test for it: `names[-1]` is the last name).",
        ]
    if note := builtin_loader(facts.fmt).columns_note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def layout_section(facts: CardFacts) -> str:
    """The files of the repo and what each holds."""
    fmt, splits = facts.fmt, facts.splits
    words, inside = FORMAT_WORDS[fmt.name], LAYOUT_WORDS[fmt.name]
    split_folders = bool(splits) and any(s.data_files.startswith(f"data/{s.name}/") for s in splits)
    folder = "<split>/" if split_folders else ""
    lengths = sorted({s.prefix_length for s in splits} - {BY_SIZE})
    digits = "hex digit" if lengths == [1] else f"{' or '.join(map(str, lengths))} hex digits"
    lines = ["## Layout", ""]
    if lengths:
        shard_line = (
            f"- `data/{folder}<prefix>{fmt.suffix}`: {words} shards; `<prefix>` is the first"
            f" {digits} of each row's `key` (a group too big for one shard is cut into"
            f" `<prefix>-<part>{fmt.suffix}`); {inside}."
        )
    else:
        shard_line = (
            f"- `data/{folder}<start>{fmt.suffix}`: {words} shards of about equal size, each holding a range of"
            f" keys; `<start>` is where its range starts (`0`, then the shortest prefix of its first `key`), so a"
            f" row is in the last shard whose name sorts at or before its `key`; {inside}."
        )
    if split_folders:
        shard_line += " Splits: " + ", ".join(f"`data/{s.name}/`" for s in splits) + "."
    nested = [s for s in splits if "/*/" in s.data_files]
    if nested:  # (hubplan.nested: the Hub takes fewer than 10,000 entries in a folder)
        where = ", ".join(f"`{s.data_files.split('*', 1)[0]}`" for s in nested)
        shard_line += (
            f" In {where}, of 10,000 shards or more (the Hub takes fewer entries in a folder), each shard is in a"
            f" folder named by the first hex digits of its name (`3f/3f2a{fmt.suffix}`: two, or more where keys"
            " crowd a folder), and the rows of a folder's shards are in one metadata file (`metadata/.../3f.jsonl`),"
            " shard after shard, each shard's part its `metadata_range` in `shards.json`."
        )
    lines += [
        shard_line,
        f"- `metadata/{folder}<{'prefix' if lengths else 'start'}>.jsonl`: each shard's rows as JSON Lines, in the"
        " order of its files (the same rows as inside it).",
        f"- `{TABLE_NAME}`: every row's metadata as one typed table (`__shard__`: the shard file, `file_name`"
        " inside the shard, `key`, then every column).",
        "- `shards.json`: the manifest (rows, bytes, sha256, first and last key of every shard).",
    ]
    if facts.loader is not None and fmt.loading_script:
        lines.append(f"- `{facts.loader}`: the loading script for datasets 3.6.")
    return "\n".join(lines) + "\n"


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
        said = cell(str(name)) if name else "a license of its own"
        if isinstance(link, str) and _LICENSE_LINK.fullmatch(link):
            said = f"[{said}]({link})"
        lines.append(f"The data is published under {said}.")
    else:
        shown = " and ".join(f"`{cell(i)}`" for i in ids)
        lines.append(f"The data is published under {shown} ([the Hub's license ids]({_LICENSES_PAGE})).")
    return "\n".join(lines) + "\n"
