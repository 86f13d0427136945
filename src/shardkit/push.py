"""``push``: upload a packed OUT_DIR to a dataset repo on the Hub, resumably, with huggingface_hub.

The order keeps the repo readable at every step (a reader never sees a manifest or card that
names a shard not yet uploaded):

1. every shard and metadata file is checked against ``shards.json`` (size, then sha256);
2. the token is checked (``whoami``) and the repo created if needed;
3. the repo's files at the revision are listed; files already there with the same content are
   skipped, which is what makes a re-run after an interruption resume;
4. shards go up with their metadata files, at most ``files_per_commit`` files per commit (the
   Hub advises under 100), ``.gitattributes`` first so its LFS rules precede the LFS files;
5. the last commit holds ``shards.json``, the card, the preview, the metadata table, the loader
   and the files ``include`` names (no other file of the folder is published), and deletes
   ``data/`` and ``metadata/`` files that the repo's own previous ``shards.json`` named and the
   new one does not (left by an earlier push of other shards), so the switch to the new dataset
   is one commit; files another tool put there are never deleted;
6. the ``script`` branch is (re)made from that commit plus the loading script as ``<name>.py``,
   for ``load_dataset(repo, revision="script", trust_remote_code=True)`` in datasets 3.6.

The planning (:func:`collect_files`, :func:`plan_commits`) is pure; :func:`push` does the I/O.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from .card import LOADER_SUFFIX, card_problem, name_repo, read_utf8
from .errors import ManifestError, ShardkitError, UsageError, listed, server_text
from .formats import format_named
from .hashing import sha256_stream
from .hubplan import HUB_MAX_FOLDER_ENTRIES, HUB_MAX_REPO_FILES, folder_entries
from .location import (
    Location,
    bounded_hub_requests,
    is_network_error,
    is_timeout,
    is_url,
    network_timeout,
    read_url,
    timeout_error,
)
from .manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES, Manifest, ManifestShard, parse_manifest, read_manifest
from .outdir import (
    PLACEHOLDERS,
    WORK_DIR,
    HashCache,
    check_own_entries,
    check_published_files,
    is_small_file,
    locked,
    never_published,
    pull_small_files,
    shard_problem,
    unnamed_files,
    url_shard_problem,
)
from .progress import NullProgress, Progress
from .pushconfig import PushConfig as PushConfig  # push's public config, as `from shardkit.push import PushConfig`
from .table import TABLE_NAME
from .threads import call_interruptibly, interruptible_pool

if TYPE_CHECKING:
    import pathspec
    from huggingface_hub import HfApi

log = logging.getLogger(__name__)

UPLOAD_GROUP = 8  # files uploaded between two progress updates
ALWAYS_IGNORED = (f"{WORK_DIR}/", ".git/", "__pycache__/", ".ipynb_checkpoints/", ".DS_Store", "*.pyc")
REGULAR_FILE_LIMIT = 10_000_000  # bigger files are always LFS on the Hub
#: Waits for the Hub's rate limit on commits (429) without a time from the Hub: 5 s, doubling to 5 min;
#: a push gives up after an hour of them (a re-run resumes).
FIRST_COMMIT_WAIT, MAX_COMMIT_WAIT, COMMIT_WAIT_LIMIT = 5.0, 300.0, 3600.0
MAX_GITIGNORE_BYTES = 1 << 20  # far more than any .gitignore holds; each line is matched against every path


@dataclass(frozen=True)
class LocalFile:
    path: str  # path in the repo, with "/"
    local: str  # absolute path on disk, or the URL of a shard at an OUT_DIR URL
    size: int
    sha256: str | None = None  # known for shards, metadata files and the table (the manifest records it)


@dataclass(frozen=True)
class RemoteFile:
    size: int
    sha256: str | None  # LFS files only
    git_oid: str


@dataclass(frozen=True)
class CommitPlan:
    """What a push will do: ``batches`` of shard files, then ``deletion_batches`` (the stale files
    the final commit has no room for), then one ``final`` commit of the other files and the rest
    of ``deletions``."""

    batches: list[list[LocalFile]]
    final: list[LocalFile]
    deletions: list[str]  # every file the push deletes
    skipped: list[LocalFile]
    kept_remote: list[str] = field(default_factory=list)  # shard-like files on the Hub not shardkit's to delete
    deletion_batches: list[list[str]] = field(default_factory=list)
    #: The deletion batches go before the uploads: the old and the new files together would
    #: overfill a folder (a split that crosses 10,000 shards moves into nested folders).
    deletions_first: bool = False

    @property
    def final_deletions(self) -> list[str]:
        early = {p for batch in self.deletion_batches for p in batch}
        return [p for p in self.deletions if p not in early]

    @property
    def uploads(self) -> list[LocalFile]:
        return [f for batch in self.batches for f in batch] + self.final


@dataclass(frozen=True)
class PushSummary:
    repo_id: str
    url: str
    revision: str
    commit: str
    commit_url: str | None  # None when nothing had to change
    script_branch: str | None
    script_commit: str | None
    uploaded_files: int
    uploaded_bytes: int
    skipped_files: int
    deleted_files: int
    commits: int
    created_repo: bool
    seconds: float
    not_published: list[str] = field(default_factory=list)  # the folder's other files, left out
    splits: list[str] = field(default_factory=list)  # the dataset's splits, as the manifest orders them

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["seconds"] = round(self.seconds, 3)
        return data


# -- planning (pure) -------------------------------------------------------------------------------
#
# huggingface_hub does the uploads, the commits and the blob ids. What is kept here is what it
# lacks: ``upload_folder`` commits in batches of its own size and order through Xet (so the
# manifest could go up before shards it names), and in one commit without Xet; nothing in it
# checks files against a manifest, or skips a file by a sha256 known without reading it.


def ignore_rules(out_dir: str) -> pathspec.GitIgnoreSpec:
    """OUT_DIR's ``.gitignore`` with git's rules (``!`` included), then :data:`ALWAYS_IGNORED`.
    (Last, yet a ``!`` rule that names a file in one of those folders takes it back, as
    pathspec reads git's rules: :func:`is_ignored` keeps the working folder and ``.git`` out.)

    huggingface_hub applies ``.gitignore`` on the server only, after a file is uploaded;
    ``pathspec`` is the library git-style tools use to match it here. A line pathspec cannot read
    is refused, naming it: silently publishing what the user meant to keep out is worse.
    """
    import pathspec

    path = os.path.join(out_dir, ".gitignore")
    try:
        # UTF-8, as the Hub reads it when it is published (a file whose name is not is never published).
        lines = read_utf8(path, MAX_GITIGNORE_BYTES).splitlines()
    except FileNotFoundError:
        lines = []
    for number, line in enumerate(lines, 1):
        try:
            pathspec.GitIgnoreSpec.from_lines([line])
        except ValueError:
            raise UsageError(
                f"{path}:{number}: {line!r} is not a .gitignore pattern; fix or remove that line, then push again"
            ) from None
    return pathspec.GitIgnoreSpec.from_lines([*lines, *ALWAYS_IGNORED])


def is_ignored(path: str, is_dir: bool, rules: pathspec.GitIgnoreSpec) -> bool:
    """Whether git would leave ``path`` out: it or a folder on the way to it is ignored (as in
    git, a file in an ignored folder stays out, whatever ``!`` rule names it). A path in the
    working folder or ``.git`` always is (:func:`~shardkit.outdir.never_published`)."""
    if never_published(path):
        return True
    parts = path.split("/")
    folders = ["/".join(parts[:i]) + "/" for i in range(1, len(parts))]
    return any(rules.match_file(folder) for folder in folders) or rules.match_file(path + "/" if is_dir else path)


def is_published(rel: str, include: tuple[str, ...] = ()) -> bool:
    """Whether a repo file other than a shard goes up: shardkit's own (a root file it writes, a
    template's placeholder in data/), or one ``include`` names. Patterns match the repo-relative
    path as ``hf upload --include`` matches them (``docs/*.md``; ``docs/`` is the folder)."""
    from huggingface_hub.utils import filter_repo_objects  # type: ignore[attr-defined]

    folder, _, name = rel.rpartition("/")
    if (not folder and is_small_file(name)) or (folder == "data" and name in PLACEHOLDERS):
        return True
    return bool(include) and any(filter_repo_objects([rel], allow_patterns=[p.lstrip("/") for p in include]))


#: A file a run was writing when it stopped (an older shardkit wrote them beside the card):
#: never published, whatever --include says.
_PARTIAL = ".partial"


def _check_name(rel: str, where: str) -> None:
    """A file to publish must have a UTF-8 name: the Hub's paths are UTF-8 text."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        shown = rel.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise UsageError(
            f"{where}: the name {shown!r} is not UTF-8, which a Hub file name must be; rename the file,"
            " or leave it out of --include"
        ) from None


def collect_files(
    out_dir: str,
    manifest: Manifest,
    location: Location | None = None,
    listing: dict[str, int] | None = None,
    include: tuple[str, ...] = (),
    left_out: list[str] | None = None,
) -> tuple[list[LocalFile], list[LocalFile]]:
    """The shard files (manifest order, each ZIP before its metadata file) and the other repo files:
    shardkit's own (card, ``.gitattributes``, ``.gitignore``, manifest, preview, metadata table,
    loading script) and those ``include`` names. The folder's other files are listed in
    ``left_out`` and not published: shardkit publishes nothing it did not write without being told.

    A file in ``data/`` or ``metadata/`` that the manifest does not name (:func:`unnamed_files`)
    is an error: the card's ``data/*`` pattern would publish it as part of the dataset (or it is
    left from a pack in another format). For an OUT_DIR URL (``location``), the shard files are
    those at the URL (``listing``: its files and their sizes, from :meth:`Location.find`) and
    ``out_dir`` is the local copy of the small files.
    """
    listing = listing or {}
    # At a URL, the shards are listed there; a local OUT_DIR is walked below (its .gitignore prunes it).
    remote = location if location is not None and not location.is_local else None
    shard_files: list[LocalFile] = []
    for shard in manifest.shards:
        # A nested folder's metadata file holds several shards' rows: listed once, its sha256 not
        # in the manifest (read when it is compared with the Hub's).
        part = shard.metadata_range
        shared = part is not None
        if part is not None and part[0] != 0:
            shard_files.append(LocalFile(shard.file, _where(out_dir, remote, shard.file), shard.bytes, shard.sha256))
            continue
        meta = _where(out_dir, remote, shard.metadata)
        if remote is not None:
            size = listing.get(shard.metadata, 0)
        else:
            size = os.path.getsize(meta) if os.path.exists(meta) else 0
        shard_files.append(LocalFile(shard.file, _where(out_dir, remote, shard.file), shard.bytes, shard.sha256))
        shard_files.append(LocalFile(shard.metadata, meta, size, None if shared else shard.metadata_sha256))
    named = {f.path for f in shard_files}
    rules = ignore_rules(out_dir)
    found: dict[str, tuple[str, int | None]] = {}  # repo path -> (where it is, its size if known)
    for folder, dirs, files in os.walk(out_dir):
        rel_folder = os.path.relpath(folder, out_dir).replace(os.sep, "/")
        prefix = "" if rel_folder == "." else rel_folder + "/"
        dirs[:] = sorted(d for d in dirs if not is_ignored(prefix + d, True, rules))
        found.update((prefix + name, (os.path.join(folder, name), None)) for name in sorted(files))
    if remote is not None:  # the files below the top level are at the URL only
        for rel, size in sorted(listing.items()):
            if "/" in rel or rel == TABLE_NAME:  # the one root file not copied to the work folder
                found[rel] = (remote.where(rel), size)
    candidates = [rel for rel in found if rel not in named and not is_ignored(rel, False, rules)]
    unnamed = unnamed_files(candidates, named)
    if unnamed:
        raise UsageError(
            f"{out_dir} holds files in data/ or metadata/ that {MANIFEST_NAME} does not name ({listed(unnamed, 5)});"
            " the dataset would read them too. Move them out of those folders, or, if a pack stopped"
            " part-way, run the same pack command again to finish it."
        )
    # The table's sha256 too: an unchanged table (GBs, maybe at a URL) is not read to compare.
    known = {TABLE_NAME: manifest.metadata_table_sha256} if manifest.metadata_table_sha256 else {}
    other: list[LocalFile] = []
    for rel in candidates:
        where, known_size = found[rel]
        if not is_published(rel, include) or rel.endswith(_PARTIAL):
            if left_out is not None:
                left_out.append(rel)
            continue
        _check_name(rel, where)
        size_of = os.path.getsize(where) if known_size is None else known_size
        other.append(LocalFile(rel, where, size_of, known.get(rel)))
    return shard_files, other


def _where(out_dir: str, remote: Location | None, rel: str) -> str:
    """Where a repo file to upload is: in the local OUT_DIR, or at the OUT_DIR URL."""
    return remote.where(rel) if remote is not None else os.path.join(out_dir, rel)


def check_hub_limits(files: list[LocalFile]) -> None:
    """Refuse a layout over the Hub's limits on entries per folder and files per repo, before
    uploading anything. (These are the files push would really publish, ``--include``d ones too;
    pack refused a plan over a limit already, with the option that fixes it.)"""
    per_folder = folder_entries(f.path for f in files)
    folder, count = per_folder.most_common(1)[0] if per_folder else ("", 0)
    fix = "Pack again with a larger --target-shard-size (up to --max-shard-size, at most 4GiB) for fewer shards."
    if count >= HUB_MAX_FOLDER_ENTRIES:
        raise UsageError(
            f"{folder or 'the repo root'} would hold {count} entries; the Hub allows under {HUB_MAX_FOLDER_ENTRIES}"
            f" per folder (https://huggingface.co/docs/hub/repositories-recommendations). {fix}"
        )
    if len(files) >= HUB_MAX_REPO_FILES:
        raise UsageError(f"the repo would hold {len(files)} files; the Hub allows under {HUB_MAX_REPO_FILES}. {fix}")


def is_unchanged(local: LocalFile, remote: RemoteFile | None, location: Location | None = None) -> bool:
    """Whether the repo already holds this file's content at this path (reads small files only,
    and files whose sha256 is not known; a file whose ``local`` is a URL is read through ``location``).

    Decided here, from one listing of the repo, rather than left to ``create_commit`` (which also
    drops unchanged files): a shard's sha256 is the manifest's, so an unchanged shard is neither
    read nor sent to preupload, and the summary can count what was skipped."""
    from huggingface_hub.utils.sha import git_hash

    if remote is None or remote.size != local.size:
        return False
    if remote.sha256 is not None and local.sha256 is not None:
        return local.sha256 == remote.sha256  # a shard or metadata file: the manifest has it
    if remote.sha256 is None and local.size > REGULAR_FILE_LIMIT:
        return False
    with location.open(local.path) if location is not None and is_url(local.local) else open(local.local, "rb") as f:
        if remote.sha256 is not None:
            return sha256_stream(f) == remote.sha256
        return git_hash(f.read()) == remote.git_oid


def plan_commits(
    shard_files: list[LocalFile],
    other_files: list[LocalFile],
    remote: dict[str, RemoteFile],
    files_per_commit: int,
    unchanged: Callable[[LocalFile, RemoteFile | None], bool] = is_unchanged,
    deletable: set[str] | None = None,
) -> CommitPlan:
    """Split the files that differ from the repo into commits; see the module docstring for the order.

    Own code (see above): huggingface_hub has no planner that keeps shards before the manifest,
    a shard with its metadata file, and a commit under ``files_per_commit`` files.
    """
    if files_per_commit < 2:
        raise UsageError("files per commit must be at least 2 (a shard and its metadata file go together)")
    skipped = [f for f in shard_files + other_files if unchanged(f, remote.get(f.path))]
    skip = {f.path for f in skipped}
    shard_todo = [f for f in shard_files if f.path not in skip]
    other_todo = [f for f in other_files if f.path not in skip]
    first = [f for f in other_todo if f.path == ".gitattributes"] if shard_todo else []
    final = [f for f in other_todo if f not in first]
    batches: list[list[LocalFile]] = []
    batch: list[LocalFile] = list(first)
    pairs: dict[str, list[LocalFile]] = {}
    for f in shard_todo:  # a ZIP and its metadata file stay in one commit
        stem = f.path.split("/", 1)[1].rsplit(".", 1)[0]
        pairs.setdefault(stem, []).append(f)
    for pair in pairs.values():
        if batch and len(batch) + len(pair) > files_per_commit:
            batches.append(batch)
            batch = []
        batch.extend(pair)
    if batch and shard_todo:
        batches.append(batch)
    local_paths = {f.path for f in shard_files}
    gone = sorted(unnamed_files(remote, local_paths))
    deletions = [p for p in gone if deletable is None or p in deletable]
    kept = [p for p in gone if p not in deletions]
    # The final commit deletes what it has room for, so that a small update stays one commit.
    # More (an update that takes a split into nested folders removes every flat shard) are
    # deleted first, while the repo's manifest still names them: a push stopped there deletes
    # them again when re-run.
    early = deletions[: max(0, len(deletions) - (files_per_commit - len(final)))]
    peak = folder_entries(set(remote) | {f.path for f in shard_files + other_files})
    deletions_first = bool(deletions) and max(peak.values(), default=0) >= HUB_MAX_FOLDER_ENTRIES
    if deletions_first:  # every stale file goes first: then no state between two commits holds more than the last
        early = deletions
    deletion_batches = [early[i : i + files_per_commit] for i in range(0, len(early), files_per_commit)]
    return CommitPlan(batches, final, deletions, skipped, kept, deletion_batches, deletions_first)


def _published_by_shardkit(api: Any, repo_id: str, revision: str, remote: dict[str, RemoteFile]) -> set[str]:
    """The data/ and metadata/ files the repo's own shards.json names: the only ones a push may
    delete (files another tool or person put there are left alone)."""
    if MANIFEST_NAME not in remote or remote[MANIFEST_NAME].size > MAX_MANIFEST_BYTES:
        return set()  # none, or not one shardkit wrote: delete nothing
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

    url = hf_hub_url(repo_id, MANIFEST_NAME, repo_type="dataset", revision=revision, endpoint=api.endpoint)
    with hub_errors(f"reading {MANIFEST_NAME} of {repo_id}", repo_id):  # read whole, never more than a manifest
        data = read_url(url, dict(build_hf_headers(token=api.token)), MAX_MANIFEST_BYTES)
    try:
        published = parse_manifest(data or b"", url)
    except ManifestError:
        return set()  # not a manifest shardkit can read: delete nothing
    return {rel for shard in published.shards for rel in (shard.file, shard.metadata)}


def find_loader(out_dir: str) -> str | None:
    """The loading script at OUT_DIR's root (``<name>_loader.py``, from the template), if there is one."""
    loaders = sorted(n for n in os.listdir(out_dir) if n.endswith(LOADER_SUFFIX))
    if len(loaders) > 1:
        raise UsageError(f"{out_dir} holds several loading scripts ({', '.join(loaders)}); keep one")
    return os.path.join(out_dir, loaders[0]) if loaders else None


# -- the Hub ---------------------------------------------------------------------------------------


def _root_cause(exc: BaseException) -> BaseException:
    """The HTTP or network error behind ``exc`` (huggingface_hub wraps upload errors in RuntimeError)."""
    from huggingface_hub.errors import HfHubHTTPError

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (HfHubHTTPError, ShardkitError, json.JSONDecodeError)) or is_network_error(seen):
            return seen
        if type(seen).__name__ == "TooManyRedirects":
            return seen
        seen = seen.__cause__ or seen.__context__
    return exc


@contextmanager
def hub_errors(action: str, repo_id: str) -> Iterator[None]:
    """Turn huggingface_hub and network errors into one message that says what to do."""
    import httpx2
    from huggingface_hub import constants
    from huggingface_hub.errors import HfHubHTTPError

    resume = "Re-run the same command to resume: files already uploaded are not sent again."
    try:
        yield
    except ShardkitError:  # already one line (reading an OUT_DIR URL, say)
        raise
    except Exception as raised:
        exc = _root_cause(raised)
        if isinstance(exc, ShardkitError):  # one line already (a bound of bounded_hub_requests), in a thread's error
            raise exc from None
        named = re.search(r"Error while uploading '([^']+)'", str(raised))
        if named:  # huggingface_hub names the file that failed
            action = f"uploading {named.group(1)}"
        if is_timeout(exc):
            raise timeout_error(f"{action} at the Hub ({constants.ENDPOINT})", network_timeout(), resume) from None
        if is_network_error(exc) and "xet" in str(exc).lower():
            raise ShardkitError(
                f"the Xet upload failed while {action} ({exc}). huggingface_hub uploads through Xet storage"
                " unless HF_HUB_DISABLE_XET=1 is set; set it for a Hub server without Xet (classic LFS)."
                f" {resume}"
            ) from None
        if is_network_error(exc):
            raise ShardkitError(
                f"cannot reach the Hub at {constants.ENDPOINT} while {action} ({type(exc).__name__}: {exc})."
                f" Check the network (and HF_ENDPOINT, if set). {resume}"
            ) from None
        if type(exc).__name__ == "TooManyRedirects":
            where = exc.request.url if isinstance(exc, httpx2.RequestError) else constants.ENDPOINT
            raise ShardkitError(
                f"{where}: the server redirected too many times (a redirect loop?) while {action}"
            ) from None
        if isinstance(exc, json.JSONDecodeError):
            raise ShardkitError(
                f"the Hub at {constants.ENDPOINT} answered with something that is not JSON while {action}"
                f" ({exc}); check HF_ENDPOINT (and the proxy, if any)"
            ) from None
        if not isinstance(exc, HfHubHTTPError):
            raise
        status = exc.response.status_code if exc.response is not None else None
        server = (exc.server_message or "").strip().splitlines()[0:1]
        said = f": {server_text(server[0])}" if server else ""
        if status == 401:
            raise ShardkitError(
                f"the Hub at {constants.ENDPOINT} refused the token while {action} (401 Unauthorized{said})."
                " It is invalid or expired:"
                " log in again with `hf auth login`, or pass a valid one with --token or HF_TOKEN."
            ) from None
        if status == 403:
            namespace = repo_id.split("/")[0]
            raise ShardkitError(
                f"the token may not write to {namespace!r} at {constants.ENDPOINT} ({action}: 403 Forbidden{said})."
                f" Create a token with write access to {namespace} at https://huggingface.co/settings/tokens,"
                " then `hf auth login`."
            ) from None
        if status == 412:
            raise ShardkitError(
                f"{repo_id} changed at {constants.ENDPOINT} while this push was running (someone else pushed?)."
                f" {resume}"
            ) from None
        raise ShardkitError(
            f"the Hub at {constants.ENDPOINT} failed while {action} ({status}{said}). {resume}"
        ) from None


def resolve_token(explicit: str | None) -> str:
    """``--token``, else ``HF_TOKEN``, else the stored login. Never logged or printed."""
    from huggingface_hub import get_token

    token = explicit or get_token()
    if not token:
        raise ShardkitError(
            "no Hugging Face token: log in with `hf auth login`, or set HF_TOKEN, or pass --token"
            " (a token with write access, from https://huggingface.co/settings/tokens)"
        )
    return token


def list_remote(api: HfApi, repo_id: str, revision: str) -> dict[str, RemoteFile]:
    from huggingface_hub import RepoFile

    remote: dict[str, RemoteFile] = {}
    for entry in api.list_repo_tree(repo_id, repo_type="dataset", revision=revision, recursive=True):
        if isinstance(entry, RepoFile):
            remote[entry.path] = RemoteFile(entry.size, entry.lfs.sha256 if entry.lfs else None, entry.blob_id)
    return remote


def _create_repo(api: HfApi, repo_id: str, private: bool) -> bool:
    """Create the dataset repo; False if it exists. Refuse a name taken by a model or Space."""
    from huggingface_hub.errors import HfHubHTTPError

    try:
        api.create_repo(repo_id, repo_type="dataset", private=private)
        return True
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status not in (409, 401, 402, 403):
            raise
        if api.repo_exists(repo_id, repo_type="dataset"):
            return False  # a 401/403 here only meant "may not create"; writing may still be allowed
        if status != 409:
            raise
    others = [t for t in ("model", "space") if api.repo_exists(repo_id, repo_type=t)]
    kind = others[0] if others else "repo of another type"
    raise ShardkitError(
        f"{repo_id} exists on the Hub as a {kind}, not a dataset: push to another name, e.g."
        f" --repo {repo_id}-dataset (or delete the {kind} with `hf repos delete {repo_id} --repo-type {kind}`)"
    )


def _card_naming(
    out_dir: str,
    repo_id: str,
    revision: str,
    manifest: Manifest,
    files: list[LocalFile],
    location: Location,
) -> list[LocalFile]:
    """Name ``repo_id`` in the card's load examples before it is published; ``files`` with the
    card's new size. OUT_DIR's card (at its URL too) gets the same: that section is shardkit's,
    and the next pack keeps the name."""
    card = name_repo(out_dir, repo_id, revision, manifest)
    if card is None:
        return files
    location.upload(card, "README.md")  # for a local OUT_DIR, the card is already there
    return [
        LocalFile(f.path, f.local, os.path.getsize(f.local), f.sha256) if f.path == "README.md" else f for f in files
    ]


def _check_shards(
    config: PushConfig,
    out_dir: str,
    manifest: Manifest,
    progress: Progress,
    listing: dict[str, int] | None,
    location: Location,
) -> None:
    progress.start("checking shards", total=sum(s.bytes for s in manifest.shards), unit="B")
    problems = []
    hashes = HashCache(out_dir)  # files unchanged since pack (or the last push) hashed them are not read again

    def problem_of(shard: ManifestShard) -> str | None:
        # At a URL, sizes only: objects are uploaded whole, and the Hub checks each upload's sha256.
        if listing is not None:
            return url_shard_problem(listing, shard, location, published=True)
        return shard_problem(out_dir, shard, hashes, published=True)

    with interruptible_pool(config.verify_threads, "verify") as pool:
        for shard, problem in zip(manifest.shards, pool.map(problem_of, manifest.shards), strict=True):
            progress.advance(shard.bytes)
            if problem:
                problems.append(problem)
    hashes.save()
    progress.finish()
    problems += _folder_file_problems(out_dir, manifest, listing)
    if problems:
        raise ShardkitError(
            [
                f"{len(problems)} shard(s) in {out_dir} differ from {MANIFEST_NAME}; nothing was uploaded:",
                *(f"  {p}" for p in problems[:10]),
                *(["  ..."] if len(problems) > 10 else []),
                "Run the same pack command again to rewrite them.",
            ]
        )


def _commit(
    api: HfApi,
    config: PushConfig,
    repo_id: str,
    files: list[LocalFile],
    deletions: list[str],
    message: str,
    parent: str,
    progress: Progress,
    location: Location | None = None,
    stop: threading.Event | None = None,
) -> str:
    """Upload ``files`` a group at a time, then commit them; ``stop`` (Ctrl-C in the caller's
    thread) ends it before the next group or the commit."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    adds = []
    with hub_errors(f"uploading the files of {message!r}", repo_id), tempfile.TemporaryDirectory() as tmp:
        for start in range(0, len(files), UPLOAD_GROUP):
            if stop is not None and stop.is_set():
                raise KeyboardInterrupt
            group = []
            fetched = []
            for f in files[start : start + UPLOAD_GROUP]:
                source: str | bytes = f.local
                if location is not None and is_url(f.local):
                    # From the URL through this machine, a group at a time: huggingface_hub
                    # uploads paths and bytes (Xet takes nothing else). Small files as bytes,
                    # since a commit reads non-LFS files again; big ones are always LFS.
                    if f.size <= REGULAR_FILE_LIMIT:
                        source = location.read_bytes(f.path) or b""
                    else:
                        source = os.path.join(tmp, f.path.replace("/", "__"))
                        location.get(f.path, source)
                        fetched.append(source)
                op = CommitOperationAdd(path_in_repo=f.path, path_or_fileobj=source)
                if f.sha256 is not None:  # checked against the manifest just before: no second read to hash
                    op.upload_info.sha256 = bytes.fromhex(f.sha256)
                group.append(op)
            api.preupload_lfs_files(repo_id, additions=group, repo_type="dataset", revision=config.revision)
            for path in fetched:  # uploaded: the commit needs only their sha256 and size now
                os.unlink(path)
            adds.extend(group)
            progress.advance(sum(f.size for f in files[start : start + UPLOAD_GROUP]))
    operations: list[Any] = [*adds, *(CommitOperationDelete(path_in_repo=p) for p in deletions)]
    if stop is not None and stop.is_set():
        raise KeyboardInterrupt
    with hub_errors(f"committing {message!r}", repo_id):
        info = _paced(
            lambda: api.create_commit(
                repo_id,
                operations=operations,
                commit_message=message,
                repo_type="dataset",
                revision=config.revision,
                parent_commit=parent,
            ),
            stop,
        )
    return str(info.oid)


def _paced(commit: Callable[[], Any], stop: threading.Event | None) -> Any:
    """``commit()``, again after the wait the Hub asks for while it answers 429 (its rate limit on
    commits: a push of 1,000 commits meets it), up to :data:`COMMIT_WAIT_LIMIT` seconds in all.

    Own code: huggingface_hub retries uploads on 429, not a commit (a commit whose answer was lost
    would be made twice); a 429 is a commit refused, and ``parent_commit`` makes any commit made
    twice fail. The wait ends at once on Ctrl-C (``stop``, or the signal in this thread)."""
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.utils import parse_ratelimit_headers  # type: ignore[attr-defined]

    waited, delay = 0.0, FIRST_COMMIT_WAIT
    while True:
        try:
            return commit()
        except HfHubHTTPError as exc:
            if exc.response is None or exc.response.status_code != 429:
                raise
            limit = parse_ratelimit_headers(exc.response.headers)
            retry_after = exc.response.headers.get("Retry-After", "")
            wait = float(limit.reset_in_seconds) if limit is not None and limit.remaining == 0 else delay
            wait = float(retry_after) if retry_after.isdigit() else wait
            if waited + wait > COMMIT_WAIT_LIMIT:
                raise ShardkitError(
                    f"the Hub has refused commits for {waited:.0f} s (429 Too Many Requests: its rate limit);"
                    " run the same command later to resume: files already uploaded are not sent again"
                ) from None
            log.warning("the Hub limits commits (429 Too Many Requests): committing again in %.0f s", wait)
            if stop is not None and stop.wait(wait):
                raise KeyboardInterrupt from None
            if stop is None:
                time.sleep(wait)
            waited, delay = waited + wait, min(delay * 2, MAX_COMMIT_WAIT)


def _publish_script_branch(
    api: HfApi, config: PushConfig, repo_id: str, main_commit: str, loader: str, branch: str
) -> str:
    """Make ``branch`` = the pushed commit + the loading script as ``<name>.py``; return its commit."""
    from huggingface_hub import CommitOperationAdd
    from huggingface_hub.utils.sha import git_hash

    script_name = repo_id.split("/")[1] + ".py"
    with hub_errors(f"publishing the {branch!r} branch", repo_id):
        refs = {b.name: b.target_commit for b in api.list_repo_refs(repo_id, repo_type="dataset").branches}
        if branch in refs:
            wanted = dict(list_remote(api, repo_id, main_commit))
            with open(loader, "rb") as f:
                script = f.read()
            wanted[script_name] = RemoteFile(len(script), None, git_hash(script))
            if list_remote(api, repo_id, refs[branch]) == wanted:
                return refs[branch]  # already the pushed data plus this script
            api.delete_branch(repo_id, branch=branch, repo_type="dataset")
        api.create_branch(repo_id, branch=branch, revision=main_commit, repo_type="dataset")
        info = _paced(
            lambda: api.create_commit(
                repo_id,
                operations=[CommitOperationAdd(path_in_repo=script_name, path_or_fileobj=loader)],
                commit_message=f"shardkit: loading script {script_name} for datasets 3.x",
                repo_type="dataset",
                revision=branch,
                parent_commit=main_commit,
            ),
            None,
        )
    return str(info.oid)


def push(config: PushConfig, *, progress: Progress | None = None) -> PushSummary:
    """Upload ``config.out_dir`` (packed by :func:`shardkit.pack.pack`) to ``config.repo_id``;
    ``progress`` as for :func:`shardkit.pack.pack`.

    Every request waits at most :func:`shardkit.location.network_timeout` seconds for a byte; a
    re-run after a timeout (or Ctrl-C, which stops the push at once) resumes.
    """
    bar = progress or NullProgress()
    try:
        return call_interruptibly(lambda stop: _push(config, bar, stop), "push")
    except BaseException:  # an error, or Ctrl-C: its message on a line of its own, not at the end of the bar's
        bar.finish()
        raise


def _push(config: PushConfig, progress: Progress, stop: threading.Event | None = None) -> PushSummary:
    started = time.perf_counter()
    check_repo_id(config.repo_id)
    location = Location.out_dir(config.out_dir)
    out_dir = location.local_dir(config.work_dir)  # OUT_DIR, or for a URL its local work folder
    if location.is_local and not os.path.isdir(out_dir):
        raise UsageError(f"OUT_DIR {config.out_dir!r} is not a folder")
    check_own_entries(out_dir)  # before the lock (in .shardkit/) and before any file is read
    os.makedirs(out_dir, exist_ok=True)
    with locked(out_dir):
        pull_small_files(location, out_dir)  # for a URL: the card, manifest and script, to the work folder
        manifest = read_manifest(out_dir)
        if manifest is None:
            raise UsageError(
                f"{config.out_dir} has no {MANIFEST_NAME}: pack it first (pack-shards IMAGES_DIR META_JSONL -o OUT_DIR)"
            )
        with bounded_hub_requests(network_timeout()):
            return _push_locked(config, out_dir, manifest, progress, started, location, stop)


def _push_locked(
    config: PushConfig,
    out_dir: str,
    manifest: Manifest,
    progress: Progress,
    started: float,
    location: Location,
    stop: threading.Event | None = None,
) -> PushSummary:
    from huggingface_hub import HfApi
    from huggingface_hub.utils import disable_progress_bars  # type: ignore[attr-defined]

    # At a URL, one listing serves both steps; a local OUT_DIR's shards are hashed (below).
    listing = None if location.is_local else location.find()
    left_out: list[str] = []
    shard_files, other_files = _files_to_publish(config, out_dir, manifest, location, listing, left_out)
    # The loading script reads ZIP shards; datasets 3.x reads tar and Parquet with its own builders.
    scripted = format_named(manifest.options.format).loading_script
    loader = find_loader(out_dir) if config.script_branch and scripted else None
    token = resolve_token(config.token)
    _check_shards(config, out_dir, manifest, progress, listing, location)

    disable_progress_bars()  # one bar of our own instead of one per file
    api = HfApi(token=token)
    repo_id, created, head, remote = _open_repo(api, config)
    other_files = _card_naming(out_dir, repo_id, config.revision, manifest, other_files, location)
    unchanged = functools.partial(is_unchanged, location=location)
    deletable = _published_by_shardkit(api, repo_id, head, remote)
    plan = plan_commits(shard_files, other_files, remote, config.files_per_commit, unchanged, deletable)
    if plan.kept_remote:
        shown = listed(plan.kept_remote, 10)
        log.warning("left on the Hub: %s (no shardkit manifest there names them, so they are not removed)", shown)
    head, commits = _upload(api, config, repo_id, plan, manifest, head, progress, location, stop)

    script_commit = None
    branch = config.script_branch if loader else None
    if branch and loader:
        script_commit = _publish_script_branch(api, config, repo_id, head, loader, branch)
    elif config.script_branch and scripted:
        log.warning(
            "%s has no *%s (scaffold with `shardkit new`): no %r branch for datasets 3.x",
            out_dir,
            LOADER_SUFFIX,
            config.script_branch,
        )
    return PushSummary(
        repo_id=repo_id,
        url=f"{api.endpoint}/datasets/{repo_id}",
        revision=config.revision,
        commit=head,
        commit_url=f"{api.endpoint}/datasets/{repo_id}/commit/{head}" if commits else None,
        script_branch=branch,
        script_commit=script_commit,
        uploaded_files=len(plan.uploads),
        uploaded_bytes=sum(f.size for f in plan.uploads),
        skipped_files=len(plan.skipped),
        deleted_files=len(plan.deletions),
        commits=commits,
        created_repo=created,
        seconds=time.perf_counter() - started,
        not_published=left_out,
        splits=[split.name for split in manifest.splits()],
    )


def _files_to_publish(
    config: PushConfig,
    out_dir: str,
    manifest: Manifest,
    location: Location,
    listing: dict[str, int] | None,
    left_out: list[str],
) -> tuple[list[LocalFile], list[LocalFile]]:
    """The shard files and the other files to publish (:func:`collect_files`; the rest of the
    folder in ``left_out``, with a warning), once each is a file the Hub will take: OUT_DIR's
    own regular file, a card the Hub accepts, no more files than it advises."""
    shard_files, other_files = collect_files(out_dir, manifest, location, listing, config.include, left_out)
    # huggingface_hub opens them by path: each a regular file of OUT_DIR's own, not a link out or into .git
    check_published_files(out_dir, [f.local for f in (*shard_files, *other_files) if not is_url(f.local)])
    if problem := card_problem(out_dir):  # the Hub would refuse it at the last commit, after the uploads
        raise UsageError(problem)
    if left_out:
        shown = listed(left_out, 10)
        log.warning(
            "not published: %s (files shardkit did not write; name them with --include PATTERN to publish them)",
            shown,
        )
    check_hub_limits(shard_files + other_files)
    return shard_files, other_files


def _open_repo(api: HfApi, config: PushConfig) -> tuple[str, bool, str, dict[str, RemoteFile]]:
    """The repo to push to, made ready: its full id (a bare name is the token owner's), whether it
    was created now, the revision's head commit (made from main if missing) and its files.
    A read-only token is refused here, before anything is written."""
    with hub_errors("checking the token", config.repo_id):
        who = api.whoami()
    role = who.get("auth", {}).get("accessToken", {}).get("role")
    if role == "read":
        raise ShardkitError(
            "the token is read-only: create one with write access at https://huggingface.co/settings/tokens,"
            " then `hf auth login` (or pass it with --token)"
        )
    repo_id = config.repo_id if "/" in config.repo_id else f"{who['name']}/{config.repo_id}"
    with hub_errors(f"creating {repo_id}", repo_id):
        created = _create_repo(api, repo_id, config.private)
        if config.revision != "main":
            api.create_branch(repo_id, branch=config.revision, repo_type="dataset", exist_ok=True)
        head = api.repo_info(repo_id, repo_type="dataset", revision=config.revision).sha
        remote = list_remote(api, repo_id, config.revision)
    assert head is not None
    return repo_id, created, head, remote


def _upload(
    api: HfApi,
    config: PushConfig,
    repo_id: str,
    plan: CommitPlan,
    manifest: Manifest,
    head: str,
    progress: Progress,
    location: Location,
    stop: threading.Event | None,
) -> tuple[str, int]:
    """Make ``plan``'s commits on top of ``head``, in order (the shards' batches, then the final
    commit); the new head and the number of commits made."""
    uploads = plan.uploads
    if uploads:
        progress.start(f"uploading to {repo_id}", total=sum(f.size for f in uploads), unit="B")
    commits = 0

    def delete() -> None:
        nonlocal head, commits
        for number, paths in enumerate(plan.deletion_batches, 1):
            message = f"shardkit: remove {paths[0]} .. {paths[-1]} (commit {number} of {len(plan.deletion_batches)})"
            head = _commit(api, config, repo_id, [], paths, message, head, progress, location, stop)
            commits += 1

    if plan.deletions_first:
        delete()
    for number, batch in enumerate(plan.batches, 1):
        shards = [f.path for f in batch if f.path.startswith("data/")] or [batch[0].path]
        message = f"shardkit: shards {shards[0]} .. {shards[-1]} (commit {number} of {len(plan.batches)})"
        head = _commit(api, config, repo_id, batch, [], message, head, progress, location, stop)
        commits += 1
    if not plan.deletions_first:
        delete()
    if plan.final or plan.final_deletions:
        totals = manifest.to_json()["totals"]
        message = f"shardkit: manifest and card, {totals['rows']} rows in {totals['shards']} shards"
        head = _commit(api, config, repo_id, plan.final, plan.final_deletions, message, head, progress, location, stop)
        commits += 1
    progress.finish()
    return head, commits


def _folder_file_problems(out_dir: str, manifest: Manifest, listing: dict[str, int] | None) -> list[str]:
    """A nested folder's metadata file holding bytes after its last shard's part: rows of no
    shard, which builtin readers of the JSON Lines would take (verify reports it too)."""
    ends: dict[str, int] = {}
    for shard in manifest.shards:
        if shard.metadata_range is not None:
            ends[shard.metadata] = max(ends.get(shard.metadata, 0), shard.metadata_range[1])
    problems = []
    for rel, end in ends.items():
        path = os.path.join(out_dir, rel)
        size = listing.get(rel, 0) if listing is not None else os.path.getsize(path) if os.path.exists(path) else 0
        if size > end:
            problems.append(f"{rel} has {size - end} bytes after the last shard's rows")
    return problems


def check_repo_id(repo_id: str) -> None:
    """Refuse a malformed ``NAMESPACE/NAME`` (or bare ``NAME``) before any work is done."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id  # type: ignore[attr-defined]

    try:
        if repo_id.count("/") > 1:
            raise HFValidationError("more than one '/'")
        validate_repo_id(repo_id if "/" in repo_id else f"user/{repo_id}")
    except HFValidationError as exc:
        raise UsageError(f"{repo_id!r} is not a Hub repo id (NAMESPACE/NAME): {exc}") from None
