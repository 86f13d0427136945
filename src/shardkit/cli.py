"""The command line: a thin layer over the library. ``pack-shards`` is ``shardkit pack``.

Exit codes: 0 ok, 1 failure (with a message), 2 usage error, 130 interrupted (Ctrl-C).
Progress goes to stderr; ``--json`` prints one summary object on stdout.
"""

from __future__ import annotations

# First of all: a Ctrl-C while the modules below load gives one line, not a traceback.
from .interrupt import interrupt_raises  # isort: split

import atexit
import contextlib
import errno
import functools
import gc
import json
import logging
import os
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypedDict, TypeVar

import click

# What the options need (their choices and defaults), and no more: each command loads its stage
# when it runs, so `shardkit --help` stays quick (tests/test_cli_types.py checks what it loads).
from . import __version__
from .errors import ShardkitError, UsageError, one_line, redact, redact_log_records
from .formats import FORMAT_NAMES
from .plan import DEFAULT_MAX_SHARD_BYTES
from .pushconfig import FILES_PER_COMMIT, SCRIPT_BRANCH, PushConfig
from .scaffold import TEMPLATE_DIR

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .pack import ExecutorName, OnProblem, PackConfig, PackSummary, ShardFormatName
    from .progress import TqdmProgress
    from .push import PushSummary
    from .remux import RemuxSummary
    from .remuxconfig import ImageFormatName, RemuxConfig
    from .scaffold import Question
    from .verify import VerifyReport

_T = TypeVar("_T")
#: A command's function: click calls it with each parameter by name (keyword-only here).
_Callback = Callable[..., None]
_Decorator = Callable[[_Callback], _Callback]

_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


# No type arguments: ParamType takes none at run time in click 8.1, the oldest supported.
class ByteSize(click.ParamType):  # type: ignore[type-arg]
    """A size such as 1GB, 500MB, 256MiB or 1000000 (decimal units: 1 GB = 10**9 bytes)."""

    name = "size"

    def convert(self, value: str | int, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(value))
        if not match or match.group(2).lower() not in _UNITS:
            self.fail(f"{value!r} is not a size (examples: 1GB, 500MB, 256MiB, 1000000)", param, ctx)
        return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def _size_text(n: int) -> str:
    """A size as ByteSize reads it, in the largest decimal unit that holds it whole: ``1GB``."""
    for unit in ("TB", "GB", "MB", "KB"):
        if n and n % _UNITS[unit.lower()] == 0:
            return f"{n // _UNITS[unit.lower()]}{unit}"
    return str(n)


class FolderOrUrl(click.Path):
    """An existing folder, or an fsspec URL (s3://bucket/name) passed on as it is; with
    ``hub_ids``, also a Hub dataset id (ns/name) that names no folder here, as shardkit.stream
    takes it (:func:`~shardkit.location.bare_hub_id`)."""

    def __init__(self, *, hub_ids: bool = False) -> None:
        super().__init__(exists=True, file_okay=False)
        self.hub_ids = hub_ids

    def convert(self, value: str | os.PathLike[str], param: click.Parameter | None, ctx: click.Context | None) -> str:
        from .location import bare_hub_id, is_url

        if isinstance(value, str) and (is_url(value) or (self.hub_ids and bare_hub_id(value))):
            return value
        return os.fsdecode(super().convert(value, param, ctx))  # str already: no path_type was given


def _check_parents(*folders: tuple[str | None, str]) -> None:
    """Refuse (exit code 2, one line) a folder given on the command line (``(path, what)``) whose
    parent folder does not exist: a command makes the folder it is given, not a chain of folders
    from a typo (``-o /nonexistent/dir/out``). URLs and folders left out (None) are not looked at."""
    from .location import is_url, local_path
    from .outdir import check_parent_exists

    for path, what in folders:
        if path and not is_url(path) and not os.path.exists(local_path(path)):
            _run(functools.partial(check_parent_exists, local_path(path), what), resumes=False)


@functools.cache
def _no_last_collection_at_exit() -> None:
    """At exit the interpreter collects every object once more; with datasets imported (remux)
    that is most of the time from the last line printed to the exit. Frozen objects are left out
    of it: memory goes back to the system anyway, the exit handlers still run (logging, temp
    files, multiprocessing), and shardkit closes and syncs what it writes where it writes it.
    What it skips is ``__del__`` of objects in reference cycles, which Python never promises at
    exit. Set when a command runs, never on import: a program that imports the CLI keeps its exit."""
    atexit.register(gc.freeze)


def _run(action: Callable[[], _T], *, resumes: bool = True) -> _T:
    """Run a library call, turning its errors into messages and exit codes. ``resumes``: a re-run
    of the command takes up where an interrupted one stopped (so Ctrl-C's message says so)."""
    _no_last_collection_at_exit()
    try:
        with interrupt_raises():
            return action()
    except KeyboardInterrupt:
        _say("interrupted; re-run the same command to resume" if resumes else "interrupted")
        _exit_now(130)
    except UsageError as exc:
        _say(f"error: {exc}")  # a ShardkitError's message is redacted as it is made
        sys.exit(2)
    except ShardkitError as exc:
        _say(f"error: {exc}")
        sys.exit(1)
    except OSError as exc:  # disk full, permission denied...: one line naming the file, not a traceback
        where = f"{exc.filename}: " if exc.filename else ""
        fix = ""
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            fix = "; free some space, then re-run the same command (finished shards are kept)"
        _say(one_line(redact(f"error: {where}{exc.strerror or exc}{fix}")))
        sys.exit(1)
    except EOFError as exc:  # a truncated compressed file read by a library: else click says "Aborted!"
        _say(f"error: {exc or 'unexpected end of data'} (a truncated file?)")
        sys.exit(1)


def _say(message: str) -> None:
    """``message`` on stderr, on a line of its own: a progress bar the error stopped ends first."""
    from .progress import end_bars

    end_bars()
    click.echo(message, err=True)


def _exit_now(code: int) -> NoReturn:
    """Exit without joining threads: a reader stuck on a hung mount must not hold up Ctrl-C.

    Partial files are already removed by then (the writer cleans up as the exception passes).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _setup_logging() -> None:
    """Warnings and errors on stderr, -q or not: -q silences progress and the summary, never
    what a user must know (a layout a reader would refuse, rows left out)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    redact_log_records()


def _echo_json(data: dict[str, object]) -> None:
    """``--json``'s one object on stdout, redacted as every message is (a URL may carry a password)."""
    click.echo(redact(json.dumps(data)))


def _progress(quiet: bool, as_json: bool) -> TqdmProgress:
    """Bars on stderr, unless -q, or --json with stderr not a terminal (a script reads the JSON)."""
    from .progress import TqdmProgress

    return TqdmProgress(disable=quiet or (not sys.stderr.isatty() and as_json))


push_options: list[_Decorator] = [
    click.option("--private", is_flag=True, help="Create the repo private (an existing repo keeps its visibility)."),
    click.option("--revision", default="main", show_default=True, help="Branch to push to (created if missing)."),
    click.option(
        "--token",
        default=None,
        help="Hugging Face token with write access [default: HF_TOKEN, else the `hf auth login` token]. Never"
        " printed; other users can see command lines (ps), so prefer HF_TOKEN or the login.",
    ),
    click.option(
        "--script-branch",
        default=SCRIPT_BRANCH,
        show_default=True,
        help="Branch that also carries the loading script as <name>.py, for datasets 3.x "
        '(load_dataset(repo, revision="script", trust_remote_code=True)).',
    ),
    click.option("--no-script-branch", is_flag=True, help="Do not publish the loading script branch."),
    click.option(
        "--files-per-commit",
        type=click.IntRange(2),
        default=FILES_PER_COMMIT,
        show_default=True,
        help="Files per commit (the Hub advises under 100 for uploads over HTTP).",
    ),
    click.option(
        "--include",
        multiple=True,
        metavar="PATTERN",
        help="Also publish these files of the folder (a path or pattern like 'docs/*.md'; repeatable). Only"
        " shardkit's files go up otherwise: shards, metadata, card, .gitattributes, manifest, preview, loader.",
    ),
]


class PushOptions(TypedDict):
    """``push_options`` as click passes them, by parameter name (``shardkit push`` and ``pack --push``)."""

    private: bool
    revision: str
    token: str | None
    script_branch: str
    no_script_branch: bool
    files_per_commit: int
    include: tuple[str, ...]


executor_options: list[_Decorator] = [
    click.option(
        "--executor",
        type=click.Choice(["local", "dask"]),
        default="local",
        show_default=True,
        help="local: worker processes on this machine (--jobs). dask: one task per shard on the Dask cluster"
        " at --scheduler; the input, and OUT_DIR unless it is a URL, must be on storage every worker sees"
        " at the same paths.",
    ),
    click.option(
        "--scheduler",
        metavar="ADDRESS|FILE",
        default=None,
        help="With --executor dask: the scheduler's address (tcp://HOST:PORT) or its scheduler file"
        " [default: DASK_SCHEDULER_ADDRESS].",
    ),
]


class ExecutorOptions(TypedDict):
    """``executor_options`` as click passes them (pack and remux)."""

    executor: ExecutorName
    scheduler: str | None


work_dir_option = click.option(
    "--work-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="With an OUT_DIR URL: the local folder for the run's working files and a copy of the"
    " repo's small files; keep it to resume  [default: ~/.cache/shardkit/work/<hash of the URL>]",
)

pack_options: list[_Decorator] = [
    click.argument("images_dir", type=click.Path(exists=True, file_okay=False)),
    click.argument("meta_jsonl", type=click.Path(exists=True, dir_okay=False)),
    click.option(
        "-o",
        "--out-dir",
        required=True,
        type=click.Path(file_okay=False),
        help="Dataset repo root to write data/, metadata/, shards.json and README.md into: a folder,"
        " or an fsspec URL such as s3://bucket/name (needs the protocol's package, e.g. s3fs).",
    ),
    work_dir_option,
    click.option(
        "--format",
        "shard_format",
        type=click.Choice(FORMAT_NAMES),
        default="zip",
        show_default=True,
        help="zip: imagefolder, the datasets 3.x script and shardkit.stream read it. "
        "tar: webdataset layout (<key>.json + <key>.jpg), datasets' webdataset builder reads it. "
        "parquet: files embedded, typed columns, datasets' parquet builder reads it. "
        "docs/reference.md compares them.",
    ),
    click.option(
        "--max-shard-size",
        type=ByteSize(),
        default=_size_text(DEFAULT_MAX_SHARD_BYTES),  # as text, so --help shows "1GB"
        show_default=True,
        help="Hard cap: no shard file is larger (headers, central directory and the rows' metadata included).",
    ),
    click.option(
        "--target-shard-size",
        type=ByteSize(),
        default=None,
        show_default="half of --max-shard-size",
        help="Shards land near this size: each split is cut into round(split size / target) shards (at least"
        " one), named by where their keys start; a key is in the last shard whose name sorts at or before it.",
    ),
    click.option(
        "--prefix-length",
        type=click.IntRange(1, 6),
        default=None,
        help="Name shards by this many hex digits of the key instead (data/3f.zip holds the keys that start with"
        " 3f; a group over the cap is cut into 3f-00, 3f-01...). Small splits then make small shards.",
    ),
    click.option(
        "-j",
        "--jobs",
        type=click.IntRange(1),
        default=os.cpu_count() or 1,
        show_default="all cores",
        help="Shards written (and metadata ranges checked) at once, each in its own process (--executor local).",
    ),
    click.option(
        "--read-threads",
        type=click.IntRange(1),
        default=8,
        show_default=True,
        help="Threads per job reading input files ahead of the writer.",
    ),
    click.option(
        "--read-buffer",
        type=ByteSize(),
        default="16MiB",
        show_default=True,
        help="Read-ahead buffer per job; files larger than half of it are copied in chunks.",
    ),
    click.option(
        "--on-error",
        type=click.Choice(["stop", "skip"]),
        default="stop",
        show_default=True,
        help="stop: any bad row stops the run before a shard is written. "
        "skip: bad rows go to a rejects file and the rest is packed.",
    ),
    click.option(
        "--on-duplicate",
        type=click.Choice(["stop", "skip"]),
        default="stop",
        show_default=True,
        help="Rows with the key of an earlier row (without keys: files with the same bytes, common in "
        "scraped data). stop: they are bad rows. skip: the first is packed, the others are left out and "
        "listed in a warning.",
    ),
    click.option(
        "--rejects",
        type=click.Path(dir_okay=False),
        default=None,
        help="Where --on-error skip writes bad rows [default: OUT_DIR/.shardkit/rejects.jsonl]. Never the"
        " input, a file in IMAGES_DIR or OUT_DIR, or a file that is not a rejects file.",
    ),
    click.option(
        "--keep-source-path",
        is_flag=True,
        help="Publish each row's file_name as given (its path under IMAGES_DIR) as a 'source_path' column,"
        " to trace a published row back to its input file. Off by default: paths can carry private names.",
    ),
    click.option(
        "--class-label",
        metavar="COLUMN",
        default=None,
        help="Publish this column of class names (strings) as a ClassLabel: integers, with the names in the"
        " card (ds.features[COLUMN].names). Names are numbered in sorted order; a later pack into the same"
        " OUT_DIR keeps the numbers already published and numbers new names after them (--force numbers"
        " them afresh, with a warning). A null (no label) is published as -1, datasets' number for no label.",
    ),
    click.option(
        "--check-images",
        is_flag=True,
        help="Decode every image (Pillow) and audio file (soundfile) while checking;"
        " one that does not decode is a bad row.",
    ),
    click.option(
        "--force",
        is_flag=True,
        help="Replace output in OUT_DIR that shardkit wrote from other input or options (never other files).",
    ),
    click.option(
        "--update",
        is_flag=True,
        help="The input changed (rows added, removed or edited): rewrite only the shards whose rows changed;"
        " every other shard stays byte for byte, so `shardkit push` uploads only what changed.",
    ),
    click.option(
        "--adopt",
        is_flag=True,
        help="Pack into a repo shardkit did not make (e.g. a clone of a Hub dataset): only shardkit's keys and"
        " section of README.md change, LFS lines are added to .gitattributes, other files stay as they are.",
    ),
    click.option(
        "--dry-run",
        is_flag=True,
        help="Check the input and print the schema (columns, types, class names), splits and shard plan;"
        " write nothing.",
    ),
    *executor_options,
    click.option(
        "--no-fsync", is_flag=True, help="Skip fsync before each shard's rename (faster, not power-loss safe)."
    ),
    click.option("-q", "--quiet", is_flag=True, help="No progress bars or summary (warnings, errors: stderr)."),
    click.option("--json", "as_json", is_flag=True, help="Print one JSON summary object on stdout."),
    click.option(
        "--push",
        "push_repo",
        metavar="NAMESPACE/NAME",
        default=None,
        help="After packing, push OUT_DIR to this dataset repo on the Hub (see `shardkit push --help`).",
    ),
    *push_options,
]


class PackOptions(PushOptions, ExecutorOptions):
    """``pack_options`` as click passes them: ``shardkit pack``'s and ``pack-shards``' parameters."""

    images_dir: str
    meta_jsonl: str
    out_dir: str
    work_dir: str | None
    shard_format: ShardFormatName
    max_shard_size: int
    target_shard_size: int | None
    prefix_length: int | None
    jobs: int
    read_threads: int
    read_buffer: int
    on_error: OnProblem
    on_duplicate: OnProblem
    rejects: str | None
    keep_source_path: bool
    class_label: str | None
    check_images: bool
    force: bool
    update: bool
    adopt: bool
    dry_run: bool
    no_fsync: bool
    quiet: bool
    as_json: bool
    push_repo: str | None


def _with_options(options: list[_Decorator]) -> _Decorator:
    def decorate(f: _Callback) -> _Callback:
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


def _push_config(out_dir: str, repo: str, work_dir: str | None, options: PushOptions) -> PushConfig:
    """The push options (shared by push and pack --push) as the library's config."""
    return PushConfig(
        out_dir=out_dir,
        repo_id=repo,
        private=options["private"],
        revision=options["revision"],
        token=options["token"],
        script_branch=None if options["no_script_branch"] else options["script_branch"],
        files_per_commit=options["files_per_commit"],
        work_dir=work_dir,
        include=options["include"],
    )


def _print_push(summary: PushSummary) -> None:
    from .card import human_size

    if summary.commits:
        click.echo(
            f"pushed {summary.uploaded_files} files ({human_size(summary.uploaded_bytes)}) to {summary.url} in"
            f" {summary.commits} commits, {summary.seconds:.1f} s"
            + (f"; {summary.skipped_files} files were already there" if summary.skipped_files else "")
            + (f"; deleted {summary.deleted_files} old shard files" if summary.deleted_files else "")
        )
    else:
        click.echo(f"{summary.url} is up to date ({summary.skipped_files} files already there)")
    click.echo(f"commit: {summary.commit} ({summary.revision})")
    click.echo(f'stream it: load_dataset("{summary.repo_id}", streaming=True)')
    # A stream reads one split: with several, the hint names the first, as the card's usage does.
    split = f", split={summary.splits[0]!r}" if len(summary.splits) > 1 else ""
    click.echo(f'  or, one datasets shard per shard file: shardkit.stream("{summary.repo_id}"{split})')
    if summary.script_branch:
        click.echo(
            f'datasets 3.x: load_dataset("{summary.repo_id}", revision="{summary.script_branch}",'
            " trust_remote_code=True)"
        )


def _pack_command(**options: Unpack[PackOptions]) -> None:
    """Pack IMAGES_DIR (files) and META_JSONL (one JSON object per line) into shards.

    Each row needs "file_name", the file's path relative to IMAGES_DIR. An optional "key"
    (8-128 lowercase hex digits) names the row; without it the key is sha256(file)[:32].
    Every other field is published as is. Each split is cut into shards near
    --target-shard-size, named by where their key range starts (data/0.zip, data/7fe.zip...: a
    key is in the last shard whose name sorts at or before it). Rows go to
    images/<key[:3]>/<key[3:6]>/<key><ext> inside a ZIP, after its metadata.parquet (the rows,
    typed); metadata/<name>.jsonl beside holds them as JSON Lines (--format tar: <key>.json and
    <key><ext>; --format parquet: one row per file). An optional "split" (train, validation,
    test...: 1 to 64 ASCII letters, digits or _, not "all") gives each split its own folder,
    data/<split>/, and its own entry in the card; when some rows have one, every row needs one.

    With an OUT_DIR URL or --push, a connection or an answer that brings no data for
    SHARDKIT_NETWORK_TIMEOUT seconds (default 60) fails the run; re-run to resume (limits:
    docs/guarantees.md).
    """
    from .location import is_url
    from .pack import pack

    out_dir, work_dir = options["out_dir"], options["work_dir"]
    _check_parents((out_dir, "OUT_DIR"), (work_dir if is_url(out_dir) else None, "--work-dir"))
    push_config = _pack_push_config(options)  # before hours of packing, not after
    _setup_logging()
    config = _pack_config(options)
    progress = _progress(options["quiet"], options["as_json"])
    summary = _run(lambda: pack(config, progress=progress))
    pushed = None
    if push_config is not None and not summary.dry_run:
        from .push import push

        pushed = _run(lambda: push(push_config, progress=progress))
    _print_pack(summary, pushed, quiet=options["quiet"], as_json=options["as_json"])


def _pack_push_config(options: PackOptions) -> PushConfig | None:
    """``--push``'s config (None without it), once its repo id is checked; an OUT_DIR URL is
    refused (exit code 2): ``shardkit push`` takes one."""
    push_repo, out_dir = options["push_repo"], options["out_dir"]
    if not push_repo:
        return None
    from .location import is_url
    from .push import check_repo_id  # (a pack alone never loads push)

    _run(lambda: check_repo_id(push_repo))
    if is_url(out_dir):
        click.echo("error: --push needs a local OUT_DIR; push the URL with `shardkit push URL --repo ...`", err=True)
        sys.exit(2)
    return _push_config(out_dir, push_repo, options["work_dir"], options)


def _pack_config(options: PackOptions) -> PackConfig:
    """pack's options as the library's config."""
    from .pack import PackConfig

    return PackConfig(
        images_dir=options["images_dir"],
        metadata_path=options["meta_jsonl"],
        out_dir=options["out_dir"],
        max_shard_bytes=options["max_shard_size"],
        target_shard_bytes=options["target_shard_size"],
        prefix_length=options["prefix_length"],
        jobs=options["jobs"],
        read_threads=options["read_threads"],
        prefetch_bytes=options["read_buffer"],
        on_error=options["on_error"],
        on_duplicate=options["on_duplicate"],
        rejects_path=options["rejects"],
        force=options["force"],
        adopt=options["adopt"],
        dry_run=options["dry_run"],
        fsync=not options["no_fsync"],
        check_images=options["check_images"],
        keep_source_path=options["keep_source_path"],
        class_label=options["class_label"],
        update=options["update"],
        format=options["shard_format"],
        executor=options["executor"],
        scheduler=options["scheduler"],
        work_dir=options["work_dir"],
    )


def _print_pack(summary: PackSummary, pushed: PushSummary | None, *, quiet: bool, as_json: bool) -> None:
    """pack's result: the bad rows skipped (on stderr, whatever the format, so it is never
    missed), then ``--json``'s object, or (unless -q) the summary in words."""
    from .summarytext import dry_run_lines, pack_line

    if summary.rejected_rows:
        rejects = summary.rejects_file
        where = f"; see {one_line(rejects)}" if rejects else " (a dry run: --rejects FILE lists them)"
        click.echo(f"skipped {summary.rejected_rows} bad rows{where}", err=True)
    if as_json:
        data = summary.to_json()
        if pushed is not None:
            data["push"] = pushed.to_json()
        _echo_json(data)
        return
    if quiet:
        return
    if summary.dry_run:
        click.echo("schema (the card's features):")
        for feature in summary.features:
            click.echo(f"  {feature.get('name', '?'):<24} {_feature_type(feature)}")
        for line in dry_run_lines(summary):
            click.echo(line)
        click.echo("dry run: nothing written")
    else:
        click.echo(pack_line(summary))
        if len(summary.splits) > 1 or any(s["name"] != "train" for s in summary.splits):
            click.echo("splits: " + ", ".join(f"{s['name']} {s['rows']} rows" for s in summary.splits))
        click.echo(f"manifest: {one_line(str(summary.manifest))}")
    if pushed is not None:
        _print_push(pushed)


def _feature_type(feature: dict[str, object]) -> str:
    """A feature's type as the card's YAML gives it, on one line: ``string``, ``{"list": "int64"}``..."""
    from .schema import class_label_names

    rest = {k: v for k, v in feature.items() if k != "name"}
    if list(rest) == ["dtype"] and isinstance(rest["dtype"], str):
        return rest["dtype"]
    if (names := class_label_names(feature)) is not None:
        return f"ClassLabel: {', '.join(f'{i}={n}' for i, n in enumerate(names[:20]))}" + (
            f", ... ({len(names)} names)" if len(names) > 20 else ""
        )
    return json.dumps(rest, separators=(", ", ": "))


class _WorkflowGroup(click.Group):
    """Lists the commands in the order they are used, not alphabetically."""

    ORDER = ("new", "pack", "verify", "head", "push", "remux")

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.commands, key=lambda n: (self.ORDER.index(n) if n in self.ORDER else len(self.ORDER), n))


@click.group(cls=_WorkflowGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="shardkit")
def main() -> None:
    """shardkit: author large image and audio datasets for the Hugging Face Hub."""


# One function behind `shardkit pack` and `pack-shards`: each decoration makes its own options.
pack_cmd = main.command("pack")(_with_options(pack_options)(_pack_command))


@main.command("push")
@click.argument("out_dir", type=FolderOrUrl())
@work_dir_option
@click.option("--repo", required=True, metavar="NAMESPACE/NAME", help="Dataset repo on the Hub (created if missing).")
@_with_options(push_options)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or summary (warnings, errors: stderr).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON summary object on stdout.")
def push_cmd(
    *, out_dir: str, work_dir: str | None, repo: str, quiet: bool, as_json: bool, **options: Unpack[PushOptions]
) -> None:
    """Upload OUT_DIR (packed by pack-shards: a folder, or the URL it packed to) to a dataset repo
    on the Hugging Face Hub.

    Every shard is checked against shards.json first (at a URL: its size; the Hub checks each
    upload's sha256, and shards pass through this machine's temp folder 8 at a time). Shards go up in commits of at most
    --files-per-commit files; the manifest and card go last, so the repo never names a shard it
    does not hold. Files the repo already has are skipped: re-run the same command to resume an
    interrupted push. Set HF_ENDPOINT to push to another Hub server.

    A request that gets or takes no data for SHARDKIT_NETWORK_TIMEOUT seconds (default 60) fails
    the push; a re-run resumes. Ctrl-C stops it at once.
    """
    from .location import is_url
    from .push import push

    _check_parents((work_dir if is_url(out_dir) else None, "--work-dir"))
    _setup_logging()
    config = _push_config(out_dir, repo, work_dir, options)
    progress = _progress(quiet, as_json)
    summary = _run(lambda: push(config, progress=progress))
    if as_json:
        _echo_json(summary.to_json())
    elif not quiet:
        _print_push(summary)


class RemuxOptions(ExecutorOptions):
    """``shardkit remux``'s parameters as click passes them."""

    source: str
    out_dir: str
    work_dir: str | None
    fn: str
    config_name: str | None
    split: str | None
    revision: str | None
    batch_size: int
    jobs: int
    seed: int
    no_decode: bool
    image_format: ImageFormatName
    quality: int
    shard_format: ShardFormatName
    max_shard_size: int
    target_shard_size: int | None
    force: bool
    adopt: bool
    quiet: bool
    as_json: bool


@main.command("remux")
@click.argument("source")
@click.argument("out_dir", type=click.Path(file_okay=False))
@work_dir_option
@click.option(
    "--map",
    "fn",
    required=True,
    metavar="MODULE:FUNCTION",
    help="The per-batch function (what a batch holds: above): a module in the current folder or an installed"
    " package (my_transforms:augment), or a file (path/to/my_transforms.py:augment).",
)
@click.option("--config", "config_name", default=None, help="Source dataset config (load_dataset's name).")
@click.option(
    "--split",
    default=None,
    metavar="NAME",
    show_default="every split",
    help="Remux this split of the source alone. Without it every split is read, and each output row goes"
    " to the split of its source row (or the `split` the function returns).",
)
@click.option("--revision", default=None, help="Source revision (branch, tag or commit) on the Hub.")
@click.option(
    "--batch-size", type=click.IntRange(1), default=64, show_default=True, help="Rows per call of the function."
)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(1),
    default=os.cpu_count() or 1,
    show_default="all cores",
    help="Worker processes, each transforming one batch at a time (--executor local); 1: in this process.",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of the per-row seeds passed to the function."
)
@click.option("--no-decode", is_flag=True, help='Pass images as {"bytes", "path"} dicts instead of PIL images.')
@click.option(
    "--image-format",
    type=click.Choice(["jpeg", "png", "webp"]),
    default="jpeg",
    show_default=True,
    help="How returned PIL images are encoded (bytes returned as bytes are kept as they are).",
)
@click.option("--quality", type=click.IntRange(1, 100), default=90, show_default=True, help="JPEG/WebP quality.")
@click.option(
    "--format",
    "shard_format",
    type=click.Choice(FORMAT_NAMES),
    default="zip",
    show_default=True,
    help="Output shard format, as for pack.",
)
@click.option(
    "--max-shard-size",
    type=ByteSize(),
    default=_size_text(DEFAULT_MAX_SHARD_BYTES),
    show_default=True,
    help="Hard cap per shard, as for pack.",
)
@click.option(
    "--target-shard-size", type=ByteSize(), default=None, show_default="half of --max-shard-size", help="As for pack."
)
@click.option(
    "--force",
    is_flag=True,
    help="Start over when OUT_DIR holds other output or an unfinished remux with other settings"
    " (an edited --map file among them).",
)
@click.option("--adopt", is_flag=True, help="As for pack: OUT_DIR may be a repo shardkit did not make.")
@_with_options(executor_options)
@click.option("-q", "--quiet", is_flag=True, help="No progress bars or summary (warnings, errors: stderr).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON summary object on stdout.")
def remux_cmd(**options: Unpack[RemuxOptions]) -> None:
    """Stream SOURCE through a per-batch function straight into new shards in OUT_DIR.

    SOURCE is a Hub dataset id, a local dataset folder, a shardkit output (folder or repo, read
    one shard per file), or data files (a path, glob or URL ending in .parquet, .tar, .arrow,
    .jsonl or .csv). Nothing is materialised: this process reads the source in batches, in
    order, and each batch is transformed by one of --jobs worker processes. The output is packed
    as pack-shards packs (hash-prefixed shards, manifest, card). A killed run resumes: re-run the
    same command.

    The function is called as fn(batch), or fn(batch, seeds) if it takes a second parameter. A
    batch is a dict of lists, one list per source column, up to --batch-size rows (fewer at the end
    of a piece of the source): the image column as PIL images ({"bytes", "path"} dicts with
    --no-decode), a ClassLabel column as ints (its names are in the source's features), other
    columns as datasets gives them. seeds is one int per row, derived from --seed and the row, so a
    rerun gives the same bytes. The function returns a dict of lists too, with any number of rows:
    exactly one image (or audio) column, which must keep the source's name; other columns may be
    added or dropped. A `key` column sets each row's key, a `split` column the split it goes to.

    \b
    Example (my_transforms.py in the current folder; --map my_transforms:augment):
        import random
        from PIL import ImageOps
        def augment(batch, seeds):
            images = []
            for image, seed in zip(batch["image"], seeds):
                flip = random.Random(seed).random() < 0.5
                images.append(ImageOps.mirror(image) if flip else image)
            return {**batch, "image": images}

    The output keeps what the source says of its data: its splits (data/<split>/; a source that
    is train alone gives data/*.zip), its first ClassLabel column as a ClassLabel with the same
    names and numbers (other ClassLabel columns keep their class names as strings; the function
    sees the numbers), and the license, pretty_name, language, task_categories, task_ids and tags
    of its card (keys OUT_DIR's card already sets are kept, with a warning where they differ).

    Reading a shardkit source at a URL or on the Hub, and writing to an OUT_DIR URL, fail after
    SHARDKIT_NETWORK_TIMEOUT seconds (default 60) without data (other sources: datasets' own timeouts).
    """
    from .location import is_url
    from .remux import remux
    from .tasks import keep_freed_memory

    out_dir, work_dir = options["out_dir"], options["work_dir"]
    _check_parents((out_dir, "OUT_DIR"), (work_dir if is_url(out_dir) else None, "--work-dir"))
    _setup_logging()
    config = _remux_config(options)
    progress = _progress(options["quiet"], options["as_json"])
    keep_freed_memory()  # this process reads the source (and with --jobs 1 transforms it)
    summary = _run(lambda: remux(config, progress=progress))
    if options["as_json"]:
        _echo_json(summary.to_json())
    elif not options["quiet"]:
        _print_remux(summary)


def _remux_config(options: RemuxOptions) -> RemuxConfig:
    """remux's options as the library's config."""
    from .remuxconfig import RemuxConfig

    return RemuxConfig(
        source=options["source"],
        out_dir=options["out_dir"],
        fn=options["fn"],
        config_name=options["config_name"],
        split=options["split"],
        revision=options["revision"],
        batch_size=options["batch_size"],
        jobs=options["jobs"],
        seed=options["seed"],
        decode=not options["no_decode"],
        image_format=options["image_format"],
        quality=options["quality"],
        format=options["shard_format"],
        max_shard_bytes=options["max_shard_size"],
        target_shard_bytes=options["target_shard_size"],
        force=options["force"],
        adopt=options["adopt"],
        executor=options["executor"],
        scheduler=options["scheduler"],
        work_dir=options["work_dir"],
    )


def _print_remux(summary: RemuxSummary) -> None:
    """remux's summary in words: what was transformed, then what was packed."""
    from .summarytext import pack_line

    packed = summary.pack
    click.echo(
        f"remuxed {summary.rows_in} rows from {summary.source_shards} source shards"
        + (f" (splits {', '.join(summary.splits)})" if len(summary.splits) > 1 else "")
        + f" into {summary.rows_out} rows in {summary.transform_seconds:.1f} s"
        + (f" ({summary.resumed_rows} rows transformed by an earlier run)" if summary.resumed_rows else "")
    )
    click.echo(f"{pack_line(packed)}; manifest: {packed.manifest}")


SHOWN_PROBLEMS = 1000


@main.command("verify")
@click.argument("out_dir", type=FolderOrUrl(hub_ids=True))
@click.option("--deep", is_flag=True, help="Also decode every image (Pillow) and audio file (soundfile).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar; problems and the summary still print.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON report on stdout (every problem).")
def verify_cmd(*, out_dir: str, deep: bool, quiet: bool, as_json: bool) -> None:
    """Check OUT_DIR (a folder, the URL pack wrote to, or a Hub dataset: hf://datasets/NS/NAME, or
    NS/NAME when no folder of that name is here; HF_ENDPOINT is honoured) against its
    shards.json: every shard's size, sha256, ZIP structure and CRCs;
    the rows inside each shard (metadata.parquet, typed), metadata/ and the members agreeing one
    to one; the cap; keys unique and in the shard their name says; nothing in data/ or
    metadata/ that the manifest does not name.

    Each problem is printed with its file and member. Exit code 0 if none, 1 if any. At a URL,
    a read that gets no data for SHARDKIT_NETWORK_TIMEOUT seconds (default 60) is an error.
    """
    from .verify import verify

    _setup_logging()
    progress = _progress(quiet, as_json)
    report = _run(lambda: verify(out_dir, deep=deep, progress=progress), resumes=False)
    if as_json:
        _echo_json(report.to_json())
    else:
        _print_verify(report, out_dir)
    sys.exit(0 if report.ok else 1)


def _print_verify(report: VerifyReport, given: str) -> None:
    """verify's report in words: each problem (the first SHOWN_PROBLEMS), then one summary line."""
    from .card import human_size
    from .summarytext import rows, shards

    for problem in report.problems[:SHOWN_PROBLEMS]:
        click.echo(problem.format())
    if len(report.problems) > SHOWN_PROBLEMS:
        click.echo(f"... and {len(report.problems) - SHOWN_PROBLEMS} more (--json lists them all)")
    what = f"{shards(report.shards)}, {rows(report.rows)}, {human_size(report.bytes)}"
    if report.deep:
        what += f", {report.decoded} files decoded" + (
            f" ({report.not_decoded} of a type with no decoder here)" if report.not_decoded else ""
        )
    verdict = "OK" if report.ok else f"{len(report.problems)} problem(s)"
    click.echo(f"verified {what} in {report.seconds:.1f} s: {verdict}{_read_from_hub(given, report.out_dir)}")
    if report.advice:
        click.echo(report.advice)


def _read_from_hub(given: str, read: str) -> str:
    """`` (the Hub dataset me/x at <endpoint>: no folder me/x here)`` when a bare id was read from
    the Hub; '' otherwise (a folder of that name wins, and is read without a word)."""
    if read.startswith("hf://") and not given.startswith("hf://"):
        from huggingface_hub import constants

        return f" (the Hub dataset {given} at {constants.ENDPOINT}, {read}: no folder {given} here)"
    return ""


@main.command("new")
@click.argument("answers", nargs=-1, metavar="[KEY=VALUE]...")
@click.option(
    "-o",
    "--output-dir",
    type=click.Path(file_okay=False),
    default=".",
    show_default=True,
    help="Where to create the dataset repo folder (made if missing; its parent must exist).",
)
@click.option("--no-input", is_flag=True, help="Ask nothing: defaults plus the KEY=VALUE answers given.")
@click.option(
    "--template",
    default=TEMPLATE_DIR,
    show_default="the template shipped with shardkit",
    help="A cookiecutter template path or git URL.",
)
@click.option(
    "--directory", default=None, help="The template's folder inside a git repository (e.g. templates/hub-dataset)."
)
@click.option(
    "--overwrite", is_flag=True, help="Write into an existing folder of the same name (never one pack-shards wrote)."
)
def new_cmd(
    *, answers: tuple[str, ...], output_dir: str, no_input: bool, template: str, directory: str | None, overwrite: bool
) -> None:
    """Scaffold a dataset repo: card with `configs`, .gitattributes, loading script for datasets 3.6.

    Same questions and answers as `cookiecutter templates/hub-dataset`. Each question is asked
    once and each answer checked when it is given (a bad one is asked again, with the reason);
    at the end the command that makes the same repo without questions is printed, e.g.

    \b
        shardkit new --no-input dataset_name=yfcc-mini namespace=me license=cc-by-4.0

    The KEY=VALUE answers, by key: dataset_name, namespace, pretty_name, modality (image,
    audio), description, license (a Hub license id: cc-by-4.0, cc0-1.0, mit, other...),
    task_category (one of the modality's tasks), language (codes, comma-separated), homepage (an http(s) link),
    citation. Those given are not asked, and are checked before anything is asked or written;
    --no-input needs namespace=. A template given by git URL asks its own questions.
    """
    from .scaffold import load_questions, next_steps, rerun_command

    _check_parents((output_dir, "-o"))
    extra = _given_answers(answers)
    questions = load_questions(template, directory)
    asked: dict[str, str] | None = None  # every answer, once shardkit asked the questions
    options = {
        "-o": None if output_dir == "." else output_dir,
        "--template": None if template == TEMPLATE_DIR else template,
        "--directory": directory,
    }
    if questions is not None:  # a local template: shardkit asks its questions, cookiecutter none
        extra, asked = _answer_questions(
            questions,
            extra,
            options,
            template=template,
            directory=directory,
            output_dir=output_dir,
            no_input=no_input,
            overwrite=overwrite,
        )
    # So that nothing typed is lost, even when generating fails: the command that makes the same repo.
    flags = ("--no-input", "--overwrite") if overwrite else ("--no-input",)
    rerun = rerun_command(asked, options, flags) if asked is not None else None
    into_it = rerun_command(asked, options, flags=("--no-input", "--overwrite")) if asked is not None else None
    path = _generate(
        template,
        extra,
        directory=directory,
        output_dir=output_dir,
        no_input=no_input or questions is not None,  # a remote template asks its own questions
        overwrite=overwrite,
        rerun=rerun,
        into_it=into_it,
    )
    drop_template_bytecode(path)
    click.echo(path)
    if rerun:
        click.echo(f"to make this repo again without the questions:\n  {rerun}", err=True)
    click.echo("\n".join(next_steps(path)), err=True)  # stdout stays the path, for scripts


def _given_answers(answers: tuple[str, ...]) -> dict[str, str]:
    """The KEY=VALUE answers given to ``shardkit new``, by key (anything else is a usage error)."""
    given: dict[str, str] = {}
    for answer in answers:
        key, sep, value = answer.partition("=")
        if not sep or not key:
            raise click.UsageError(f"answers are KEY=VALUE, got {answer!r}")
        given[key] = value
    return given


def _answer_questions(
    questions: dict[str, Any],
    given: dict[str, str],
    options: dict[str, str | None],
    *,
    template: str,
    directory: str | None,
    output_dir: str,
    no_input: bool,
    overwrite: bool,
) -> tuple[dict[str, str], dict[str, str] | None]:
    """A local template's answers, as cookiecutter is to get them, and those asked (None with
    --no-input): ``given`` checked first (a bad one: exit code 2; a repo folder that is taken:
    exit code 1, before any question), then every other question asked and each answer checked
    as it is typed. Ctrl-C: exit code 130, with the command that goes on from the answers given."""
    from .scaffold import Interrupted, answer_problems, folder_problem, interview, load_rules, rerun_command, verbatim

    rules = load_rules(template, directory)
    problems = answer_problems(questions, given, no_input=no_input, rules=rules)
    if problems:
        for problem in problems:
            click.echo(f"error: {problem}", err=True)
        click.echo("nothing was created", err=True)
        sys.exit(2)

    def name_taken(key: str, name: str) -> list[str]:
        """The repo folder is OUTPUT_DIR/dataset_name: one that exists is refused at the name."""
        taken = folder_problem(os.path.normpath(os.path.join(output_dir, name)), overwrite=overwrite)
        return [taken] if key == "dataset_name" and taken else []

    name = given.get("dataset_name", questions.get("dataset_name") if no_input else None)
    if isinstance(name, str) and (taken := name_taken("dataset_name", name)):
        click.echo(f"error: {taken[0]}", err=True)  # before any question is asked
        sys.exit(1)
    if no_input:
        return {key: verbatim(value, questions) for key, value in given.items()}, None
    try:
        with interrupt_raises():  # Ctrl-C reaches the questions: they tell what was answered
            asked = interview(
                questions, given, rules, _ask, lambda line: click.echo(f"error: {line}", err=True), name_taken
            )
    except Interrupted as stop:
        # asks the remaining questions
        go_on = rerun_command(stop.answers, options, flags=("--overwrite",) if overwrite else ())
        so_far = f"; to go on from the answers given: {go_on}" if stop.answers else ""
        click.echo(f"\nstopped: nothing was created{so_far}", err=True)
        sys.exit(130)
    return {key: verbatim(value, questions) for key, value in asked.items()}, asked


def _generate(
    template: str,
    answers: dict[str, str],
    *,
    directory: str | None,
    output_dir: str,
    no_input: bool,
    overwrite: bool,
    rerun: str | None,
    into_it: str | None,
) -> str:
    """cookiecutter makes the repo from ``answers``; its path. A refusal is one line and exit code
    1, with the command that makes the same repo (``rerun``; ``into_it``, into an existing folder)."""
    from cookiecutter.exceptions import CookiecutterException, FailedHookException, OutputDirExistsException
    from cookiecutter.main import cookiecutter

    again = f"; to make it again: {rerun}" if rerun else ""
    # cookiecutter logs a traceback when the hook refuses an answer; the hook's own message is enough.
    logging.getLogger("cookiecutter").setLevel(logging.CRITICAL)
    try:
        path: str = cookiecutter(
            template,
            no_input=no_input,
            extra_context=answers,
            output_dir=output_dir,
            overwrite_if_exists=overwrite,
            directory=directory,
        )
    except FailedHookException:
        click.echo(f"error: the answers were refused (see the reasons above); nothing was created{again}", err=True)
        sys.exit(1)
    except OutputDirExistsException as exc:
        reason = str(exc).removeprefix("Error: ")
        if into_it is not None:
            click.echo(f"error: {reason}; to write into it: {into_it}", err=True)
        else:
            click.echo(f"error: {reason}; pass --overwrite to write into it", err=True)
        sys.exit(1)
    except CookiecutterException as exc:
        click.echo(f"error: {exc}{again}", err=True)
        sys.exit(1)
    return path


#: A question with at most this many choices lists them, numbered; one with more (the Hub's
#: license ids) lists them when asked with "?".
LISTED_CHOICES = 12


def _ask(question: Question) -> str:
    """Ask ``question`` on the terminal (stderr: stdout stays the repo's path, for scripts).
    Ctrl-C and the end of input raise KeyboardInterrupt."""
    choices = question.choices
    listed = 0 < len(choices) <= LISTED_CHOICES
    text = f"{question.text} ({question.key})"
    if listed:
        click.echo(f"{text}:", err=True)
        for number, choice in enumerate(choices, 1):
            click.echo(f"  {number} - {choice}", err=True)
        text = f"  choose 1-{len(choices)} or type it"
    elif choices:
        text += f"; ? lists the {len(choices)} choices"
    try:
        while True:
            reply: str = click.prompt(text, default=question.default, show_default=bool(question.default), err=True)
            if choices and not listed and reply.strip() == "?":
                click.echo(click.wrap_text(", ".join(choices), initial_indent="  ", subsequent_indent="  "), err=True)
                continue
            if listed and reply.strip().isdigit() and 1 <= int(reply) <= len(choices):
                return choices[int(reply) - 1]
            return reply
    except click.Abort:  # click's answer to Ctrl-C and to the end of input
        raise KeyboardInterrupt from None


def drop_template_bytecode(path: str) -> None:
    """Remove the loading script's ``.pyc`` that cookiecutter copied along: pip byte-compiles the
    installed template's script, and that cache is not part of the repo (only files named after
    the loader go; anything else in ``__pycache__`` is the user's)."""
    cache = os.path.join(path, "__pycache__")
    if not os.path.isdir(cache):
        return
    for name in os.listdir(cache):
        if name.endswith(".pyc") and name.split(".", 1)[0].endswith("_loader"):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(cache, name))
    with contextlib.suppress(OSError):
        os.rmdir(cache)  # only if empty


@main.command("head")
@click.argument("target")
@click.option("-n", "--rows", "count", type=click.IntRange(min=0), default=5, show_default=True, help="Rows to show.")
@click.option("--split", default=None, help="The split to show [default: train, else the first].")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per row on stdout (JSON Lines), no header.")
@click.option(
    "--save-images",
    "save_to",
    default=None,
    metavar="DIR",
    help="Also write each row's file as DIR/<key><ext> (DIR is created if its parent exists; no file is overwritten).",
)
@click.option("--revision", default=None, help="Branch, tag or commit of a Hub dataset [default: main].")
def head_cmd(
    *, target: str, count: int, split: str | None, as_json: bool, save_to: str | None, revision: str | None
) -> None:
    """Show the first rows of a packed dataset: TARGET is its folder, an http(s) URL of one, or a
    Hub dataset (NAMESPACE/NAME or hf://datasets/NAMESPACE/NAME[@REV]).

    Every column of each row on one line each; an image as its size, mode, format and file size
    (from its header), an audio file as its duration, sample rate and channels. Only the
    manifest and the rows shown are read (from the split's first shards).
    """
    from .head import SavedFiles, header_lines, open_head, row_json, row_lines

    _setup_logging()

    def emit(text: str) -> None:
        try:
            click.echo(text)
        except BrokenPipeError:  # `| head -1`: the reader has what it wanted (the files saved are kept)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            _exit_now(0)

    def show() -> int:
        head = open_head(target, split=split, revision=revision)
        with SavedFiles(save_to) if save_to else contextlib.nullcontext() as saving:
            if not as_json:
                emit("\n".join(header_lines(head, count)))
            for row in head.rows(count):
                if saving is not None:
                    saving.save(row)
                emit(json.dumps(row_json(row)) if as_json else "\n" + "\n".join(row_lines(head, row)))
            return saving.saved if saving is not None else 0

    saved = _run(show, resumes=False)
    if save_to:
        click.echo(f"saved {saved} file{'s' if saved != 1 else ''} in {one_line(os.path.abspath(save_to))}", err=True)


pack_shards = click.command("pack-shards", context_settings={"help_option_names": ["-h", "--help"]})(
    click.version_option(__version__, prog_name="pack-shards")(_with_options(pack_options)(_pack_command))
)


if __name__ == "__main__":  # pragma: no cover
    main()
