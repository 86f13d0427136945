"""The last stage of a pack: the repo's metadata table, preview, card and manifest.

:func:`write_table` encodes ``metadata.parquet`` into the work folder before any shard is
written (a row it cannot hold stops the run then, not after hours of writing); :func:`finish`,
the stage's entry once the shards are written, puts it in place, writes the preview, the card
(:mod:`.card`), ``.gitattributes``, the loading script, and the manifest last: it says the
dataset is complete.

Test seams: ``write_metadata_table`` and ``write_manifest`` are looked up in this module when
they are called (a test fills the disk at each of these steps).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .card import card_facts, write_card_files
from .errors import ShardkitError, naming_errors
from .location import Location
from .manifest import (
    LINES_DIR,
    MANIFEST_NAME,
    Manifest,
    ManifestShard,
    lines_file_of,
    own_metadata_file,
    read_published_rows,
    write_manifest,
)
from .outdir import push_small_files
from .packrun import PackRun
from .plan import ShardPlan
from .preview import write_preview
from .staging import iter_published_lines
from .table import TABLE_NAME, write_metadata_table
from .writer import fsync_close

#: A bound on a shard's rows as JSON Lines read back from the work folder: no shard's come near
#: it; it stops an endless body from a server, at a URL.
MAX_SHARD_ROWS_BYTES = 1 << 40

if TYPE_CHECKING:
    from .packplan import Planned
    from .packstage import Staged

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableFile:
    """The repo's ``metadata.parquet``, encoded in the staging folder."""

    path: str
    sha256: str


def write_table(run: PackRun, staged: Staged, plan: list[ShardPlan]) -> TableFile:
    """Encode the metadata table now, in the work folder: a row it cannot hold stops the run
    before any shard is written, not after hours of writing."""
    path = os.path.join(run.staging_dir, TABLE_NAME)
    sha256 = write_metadata_table(
        path,
        ((p.name, b"".join(iter_published_lines(staged.path, p.offset, p.rows))) for p in plan),
        staged.features,
    )
    return TableFile(path, sha256)


def finish(
    run: PackRun,
    staged: Staged,
    planned: Planned,
    shards: list[ManifestShard],
    table: TableFile,
) -> str:
    """Put the metadata table in place; write the preview, card, ``.gitattributes``, loading
    script and, last, the manifest (``shards``: every planned shard's record, in plan order);
    remove the working files. Return where the manifest is."""
    config, fmt, location, local_dir = run.config, run.fmt, run.location, run.local_dir
    location.forget_listings()  # workers wrote what this process listed before (the preview reads it)
    shards = write_folder_metadata(run, shards)
    location.put(table.path, TABLE_NAME, fsync=config.fsync)
    manifest = Manifest(
        options=planned.options,
        input_fingerprint=staged.fingerprint,
        modality=staged.modality,
        features=staged.features,
        shards=shards,
        metadata_table_sha256=table.sha256,
        prefix_lengths=planned.prefix_lengths if staged.split_folders else {},
        layout=fmt.layout_version,
    )
    preview = None
    if staged.modality == "image":
        preview = write_preview(
            local_dir, [s.file for s in shards], fmt=fmt, shards_at=location, labels=staged.labels, manifest=manifest
        )
    facts = card_facts(
        manifest,
        local_dir,
        title=location.name,
        extensions=staged.extensions,
        preview=preview,
        builtin_warnings=planned.warnings,
    )
    loaders = write_card_files(local_dir, facts)
    for path in loaders.upgraded:
        log.info("%s: its reader code was an earlier template's; now the template's", path)
    for warning in loaders.warnings(lambda path: location.where(os.path.basename(path))):
        log.warning("%s", warning)
    # The manifest last, here as at a URL: it says the dataset is complete, so a run stopped
    # before it (Ctrl-C while the card is written) leaves no folder that verify passes and push
    # publishes with the template's card, which no reader can load.
    write_manifest(local_dir, manifest)
    push_small_files(location, local_dir)
    # The nested shards' rows are in their folders' files, which the manifest now names.
    if location.is_local:
        shutil.rmtree(os.path.join(local_dir, LINES_DIR), ignore_errors=True)
    else:
        for shard in shards:
            if shard.metadata != own_metadata_file(shard.file):
                location.remove(lines_file_of(shard.file))
    manifest_path = location.where(MANIFEST_NAME)
    shutil.rmtree(run.staging_dir, ignore_errors=True)
    shutil.rmtree(run.tmp_dir, ignore_errors=True)  # partial files of tasks whose worker died
    return manifest_path


def write_folder_metadata(run: PackRun, shards: list[ManifestShard]) -> list[ManifestShard]:
    """Write the metadata file of each nested folder whose shards changed: its shards' rows one
    shard after another, in their order; return ``shards``, each nested one with its part of
    its folder's file (``metadata_range``). A shard written by this run has its rows in the work
    folder's lines file; one kept from the run before, in its part of the folder's file as it
    was (each part is checked against the shard's metadata_sha256 before it is used)."""
    folders: dict[str, list[int]] = {}
    for index, shard in enumerate(shards):
        if shard.metadata != own_metadata_file(shard.file):
            folders.setdefault(shard.metadata, []).append(index)
    placed = list(shards)
    for folder_file, indexes in folders.items():
        members = [shards[i] for i in indexes]
        if _placed_as_before(run.location, folder_file, members):
            continue
        path = os.path.join(run.tmp_dir, folder_file.replace("/", "__"))
        os.makedirs(run.tmp_dir, exist_ok=True)
        offset = 0
        with naming_errors(path), open(path, "wb") as out:
            for index, shard in zip(indexes, members, strict=True):
                rows, from_lines_file = _rows_of(run.location, shard)
                if not from_lines_file:  # kept, from the file replaced below: a run killed after reads it here
                    run.location.write_bytes(lines_file_of(shard.file), rows)
                out.write(rows)
                placed[index] = replace(shard, metadata_range=(offset, offset + len(rows)))
                offset += len(rows)
            fsync_close(out, run.config.fsync)
        run.location.put(path, folder_file, fsync=run.config.fsync)
    return placed


def _placed_as_before(location: Location, folder_file: str, members: list[ManifestShard]) -> bool:
    """Whether the folder's file holds these shards' parts already: each was kept from the run
    before with its part (checked when it was kept), the parts fill the file in this order."""
    end = 0
    for shard in members:
        if shard.metadata_range is None or shard.metadata_range[0] != end:
            return False
        end = shard.metadata_range[1]
    return location.size(folder_file) == end


def _rows_of(location: Location, shard: ManifestShard) -> tuple[bytes, bool]:
    """A nested shard's rows as JSON Lines, checked against its metadata_sha256, and whether
    they come from the work folder's lines file (written by this run, or kept there by one
    killed while it wrote its folder's file), else from its part of its folder's file."""
    rows = location.read_bytes(lines_file_of(shard.file), MAX_SHARD_ROWS_BYTES)
    if rows is not None and shard.has_rows(rows):
        return rows, True
    if shard.metadata_range:
        with contextlib.suppress(FileNotFoundError):
            rows = read_published_rows(location, shard)
            if shard.has_rows(rows):
                return rows, False
    raise ShardkitError(
        f"{shard.file}: its rows are neither in {lines_file_of(shard.file)} nor in {shard.metadata} as"
        " recorded; run the same command with --force to write the dataset again"
    )
