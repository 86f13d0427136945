"""Where a dataset repo is: a local folder, an fsspec URL, an http(s) URL or a Hub dataset.

One protocol, :class:`Location`, for every place shardkit reads a repo from or writes one to; the
stages ask it to open, list, size, put and remove files by their repo-relative paths, and keep
no branch of their own on what kind of place it is. Each kind is one class and one
:func:`register` line, in its own module, with its reasons:

- :mod:`.folder`: a local folder (``/data/out``, ``file:///data/out``): renames and fsyncs, its
  files read only inside it;
- :mod:`.fsspec_url`: an fsspec URL (``s3://bucket/repo``, ``gs://``, ``memory://``...): where
  ``pack -o URL`` writes the same files a local OUT_DIR gets; also the fsspec filesystem the
  other kinds list through;
- :mod:`.httpurl`: an ``http(s)://`` URL of a packed folder, read-only: each shard read with one GET;
- :mod:`.hub`: a Hub dataset (``ns/name`` or ``hf://datasets/ns/name[@revision]``), read-only.

A new kind subclasses :class:`Location` (:mod:`.base` says what it must define) and registers
its URL schemes; ``shardkit.stream``, ``verify``, ``head`` and ``remux`` then read from it. Inside
shardkit that is a module of this package and its import line below (the import runs the
``register`` line, so the command line knows the kind too); from a user's own code, a class and a
``register`` call before it calls shardkit's Python API (tests/test_location_kinds.py does that).
The command line knows only the kinds imported here: it loads no plug-ins.
Around them: :mod:`.network` (the one timeout, one-line network failures), :mod:`.reading`
(bounded reads, http(s) reading with one GET), :mod:`.hubclient` (huggingface_hub's client held
to the same bounds: :func:`bounded_hub_requests`).
"""

from __future__ import annotations

from .base import ANY_URL, LOCAL, Location, default_work_dir, is_url, local_path, register, url_scheme
from .folder import Folder, OutsideDataset, check_in_dataset, open_in_dataset, readable_root
from .fsspec_url import ATOMIC_UPLOAD_PROTOCOLS, FsspecPlace, FsspecUrl, filesystem_for, http_filesystem
from .httpurl import HttpUrl
from .hub import HUB_REPO_ID, HUB_REVISION, HubDataset, bare_hub_id
from .hubclient import bounded_hub_requests
from .network import (
    DEFAULT_NETWORK_TIMEOUT,
    RESUME,
    TIMEOUT_VARIABLE,
    answered,
    is_network_error,
    is_timeout,
    network_failure,
    network_timeout,
    timeout_error,
)
from .reading import (
    MAX_API_BODY_BYTES,
    MAX_ERROR_BODY_BYTES,
    MAX_METADATA_FILE_BYTES,
    MAX_SMALL_FILE_BYTES,
    read_bounded,
    read_upto,
    read_url,
)

__all__ = [
    "ANY_URL",
    "ATOMIC_UPLOAD_PROTOCOLS",
    "DEFAULT_NETWORK_TIMEOUT",
    "HUB_REPO_ID",
    "HUB_REVISION",
    "LOCAL",
    "MAX_API_BODY_BYTES",
    "MAX_ERROR_BODY_BYTES",
    "MAX_METADATA_FILE_BYTES",
    "MAX_SMALL_FILE_BYTES",
    "RESUME",
    "TIMEOUT_VARIABLE",
    "Folder",
    "FsspecPlace",
    "FsspecUrl",
    "HttpUrl",
    "HubDataset",
    "Location",
    "OutsideDataset",
    "answered",
    "bare_hub_id",
    "bounded_hub_requests",
    "check_in_dataset",
    "default_work_dir",
    "filesystem_for",
    "http_filesystem",
    "is_network_error",
    "is_timeout",
    "is_url",
    "local_path",
    "network_failure",
    "network_timeout",
    "open_in_dataset",
    "read_bounded",
    "read_upto",
    "read_url",
    "readable_root",
    "register",
    "timeout_error",
    "url_scheme",
]
