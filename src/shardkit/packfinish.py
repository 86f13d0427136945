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

import logging
import os
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .card import card_facts, write_card_files
from .manifest import MANIFEST_NAME, Manifest, ManifestShard, write_manifest
from .outdir import push_small_files
from .packrun import PackRun
from .plan import ShardPlan
from .preview import write_preview
from .staging import iter_published_lines
from .table import TABLE_NAME, write_metadata_table

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
    manifest_path = location.where(MANIFEST_NAME)
    shutil.rmtree(run.staging_dir, ignore_errors=True)
    shutil.rmtree(run.tmp_dir, ignore_errors=True)  # partial files of tasks whose worker died
    return manifest_path
