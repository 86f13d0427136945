"""The card's load examples (its ``usage`` section): rendered at every pack from
:class:`.CardFacts`, and again by push, which knows the repo."""

from __future__ import annotations

from dataclasses import dataclass

from ..builtin import builder_name, builtin_loader
from ..formats import ShardFormat
from ..table import TABLE_NAME
from .facts import CardFacts
from .sections import label_column, py

#: The Hub namespace the template offers before one is given: never a repo to load from.
PLACEHOLDER_NAMESPACE = "your-username"


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
        """The usage marker's words: what push must know to render the examples again."""
        words = {"repo": self.repo or "", "revision": self.revision if self.revision != "main" else ""}
        words["builtin"] = "" if self.builtin else "no"
        return {k: v for k, v in words.items() if v}

    @property
    def on_hub(self) -> bool:
        return self.repo is not None

    @property
    def hub_base(self) -> str:
        """The repo's files as an ``hf://`` URL prefix (at the revision); "" before the push."""
        if self.repo is None:
            return ""
        return f"hf://datasets/{self.repo}{'@' + self.revision if self.revision != 'main' else ''}/"

    @property
    def script(self) -> bool:
        """The loading script reads these shards (datasets 3.6)."""
        return self.loader is not None and self.fmt.loading_script


def known_repo(repo: str | None) -> str | None:
    """``repo`` if it names a Hub repo to load from: not empty, nor the template's placeholder."""
    if not repo or "/" not in repo or repo.split("/", 1)[0] == PLACEHOLDER_NAMESPACE:
        return None
    return repo


def usage_of(facts: CardFacts, attrs: dict[str, str]) -> Usage:
    """The load examples' facts: what was packed, OUT_DIR's loading script and the usage
    marker's words (the repo and revision of the last push; whether the builtin loader works)."""
    splits = facts.splits
    return Usage(
        fmt=facts.fmt,
        splits=tuple(s.name for s in splits) if splits else ("train",),
        data_files=tuple(s.data_files for s in splits) if splits else (facts.fmt.data_files_pattern,),
        file_column=facts.file_column,
        label_column=label_column(facts.columns),
        loader=facts.loader,
        builtin=attrs.get("builtin") != "no",
        repo=known_repo(attrs.get("repo")),
        revision=attrs.get("revision") or "main",
    )


def usage_section(u: Usage) -> str:
    """How to load the dataset, fastest first, per datasets version; every example names the
    repo (or, before it is pushed, the folder it runs in) and the splits."""
    lines = ["## Load it", ""]
    if not u.on_hub:
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
    lines += _readers_table(u)
    lines += _stream_example(u)
    lines += _builtin_example(u) if u.builtin else _named_builder_example(u)
    lines += _script_example(u)
    lines += _table_example(u)
    if u.file_column == "audio":
        lines += [
            "",
            "Audio: datasets 5.x needs `torchcodec` (with torch and FFmpeg) to load audio through its builtin"
            " loaders, even undecoded; 3.6 decodes with `soundfile` and `librosa`. Without them `shardkit.stream`"
            " gives each file's bytes and path.",
        ]
    return "\n".join(lines) + "\n"


def _first_split(u: Usage) -> tuple[str, str]:
    """The split the examples load, and a comment naming the others."""
    first = u.splits[0] if u.splits else "train"
    others = [s for s in u.splits if s != first]
    return first, f"  # or {', '.join(py(s) for s in others)}" if others else ""


def _revision(u: Usage) -> str:
    return f", revision={py(u.revision)}" if u.on_hub and u.revision != "main" else ""


def _load_from(u: Usage) -> str:
    # Before the push, the folder the examples run in: datasets names a local dataset after its
    # folder, which "." has not, so it is given the folder's full path.
    return py(u.repo) if u.repo is not None else "os.getcwd()"


def _readers_table(u: Usage) -> list[str]:
    lines = [
        "| reader | datasets | units of work for DataLoader workers | requests |",
        "|---|---|---|---|",
        "| `shardkit.stream` | 3.6, 5.x | one per shard | one per shard |",
    ]
    if u.builtin:
        loader = builtin_loader(u.fmt)
        lines.append(f"| `load_dataset` | 3.6 to 5.x | {loader.units} | {loader.requests} |")
    if u.script:
        lines.append('| `load_dataset(..., revision="script")` | 3.6 only | one per shard | one per shard |')
    return [*lines, ""]


def _stream_example(u: Usage) -> list[str]:
    first, split_comment = _first_split(u)
    stream_from = py(u.repo) if u.repo is not None else '"."'
    lines = [
        "**Fastest**, in datasets 3.6 and 5.x: `shardkit.stream` reads each shard front to back in one request"
        " (shardkit is not on PyPI: `pip install ./shardkit` from a clone of its repository).",
        "",
        "```python",
        "import shardkit",
        "",
        f"ds = shardkit.stream({stream_from}, split={py(first)}{_revision(u)}){split_comment}",
    ]
    if u.label_column is not None:
        lines.append(f"names = ds.features[{py(u.label_column)}].names")
    lines += ["for row in ds:"]
    if u.label_column is not None:
        label = f"row[{py(u.label_column)}]"
        lines.append(f"    name = names[{label}] if {label} >= 0 else None  # -1: no label")
        lines.append(f'    print(row["key"], name, row[{py(u.file_column)}])')
    else:
        lines.append(f'    print(row["key"], row[{py(u.file_column)}])')
    return [*lines, "    break", "```", ""]


def _builtin_example(u: Usage) -> list[str]:
    first, split_comment = _first_split(u)
    builder, caveat = builder_name(u.fmt, u.file_column), builtin_loader(u.fmt).caveat
    return [
        f"**With datasets alone** (4 and 5; 3.6 too), its builtin `{builder}` loader, no script.{caveat}"
        " Leave out `streaming=True` to download the split first.",
        "",
        "```python",
        *([] if u.on_hub else ["import os", ""]),
        "from datasets import load_dataset",
        "",
        f"ds = load_dataset({_load_from(u)}, split={py(first)}{_revision(u)}, streaming=True){split_comment}",
        "```",
        "",
    ]


def _named_builder_example(u: Usage) -> list[str]:
    # load_dataset(repo) infers the builder from the shards' members and would pick the wrong
    # one (the note above says why); naming the builder skips the inference, and the types
    # still come out as packed (each shard's metadata.parquet carries the card's features).
    first, _ = _first_split(u)
    builder = builder_name(u.fmt, u.file_column)
    files = ", ".join(
        f"{py(split)}: {py(u.hub_base + pattern)}" for split, pattern in zip(u.splits, u.data_files, strict=True)
    )
    return [
        f"**With datasets alone** (3.6 to 5.x): `load_dataset` of the repo would choose another builder than"
        f" `{builder}` for these shards (see the note above); name it, with the shards of each split.",
        "",
        "```python",
        "from datasets import load_dataset",
        "",
        f"ds = load_dataset({py(builder)}, data_files={{{files}}}, split={py(first)}, streaming=True)",
        "```",
        "",
    ]


def _script_example(u: Usage) -> list[str]:
    if not u.script or u.loader is None:
        return []
    first, _ = _first_split(u)
    if u.on_hub:
        call = (
            f'load_dataset({_load_from(u)}, revision="script", split={py(first)}, streaming=True,'
            " trust_remote_code=True)"
        )
        where_script = "the loading script on the repo's `script` branch"
    else:
        call = f"load_dataset({py(f'./{u.loader}')}, split={py(first)}, trust_remote_code=True)"
        where_script = f"the loading script `{u.loader}`"
    return [
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


def _table_example(u: Usage) -> list[str]:
    table = u.hub_base + TABLE_NAME
    return [
        f"**Filter without downloading the files**: `{TABLE_NAME}` holds every row's metadata, typed (`__shard__`"
        " is the shard file the row is in).",
        "",
        "```python",
        "import duckdb",
        "",
        f"duckdb.sql({py(f'SELECT * FROM {_sql(table)} LIMIT 5')}).show()",
        "```",
    ]


def _sql(path: str) -> str:
    return "'" + path.replace("'", "''") + "'"
