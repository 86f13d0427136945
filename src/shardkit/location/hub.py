"""A Hub dataset (``ns/name`` or ``hf://datasets/ns/name[@revision]``), read.

Its files are read at their ``resolve`` URLs on ``HF_ENDPOINT`` (as an http(s) URL's: one GET
each), with the token huggingface_hub finds (``HF_TOKEN`` or the login), so private repos work.
As an OUT_DIR ``hf://`` is refused: publishing is ``shardkit push``'s (fsspec would make a commit
per file); ``verify`` reads ``hf://`` through fsspec, as any URL.
"""

from __future__ import annotations

import os
import re

from ..errors import UsageError
from .base import Location, not_a_place, register
from .fsspec_url import FsspecUrl
from .httpurl import HttpUrl

#: A Hub repo id (``ns/name``: ASCII letters, digits, "_", "." and "-"; ``\w`` would take other
#: scripts' letters too) and an ``@revision`` after it (no "/", no space, no line break). The
#: patterns here are matched whole (``.fullmatch``): ``$`` would let a trailing newline through.
HUB_REPO_ID = r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+"
HUB_REVISION = r"@([^/\s]+)"
_REPO_ID = re.compile(HUB_REPO_ID)
_HF_URL = re.compile(rf"hf://datasets/({HUB_REPO_ID})(?:{HUB_REVISION})?/?")


def bare_hub_id(text: str) -> str | None:
    """``text`` when it is a Hub dataset id (``ns/name``) and no file or folder of that name, nor a
    folder named as its namespace, is here (a local folder wins: ``hf://datasets/ns/name`` is
    always the Hub); else None. The one rule by which every reader
    (``shardkit.stream``, ``remux``, ``verify``) tells a Hub id from a relative path."""
    if not _REPO_ID.fullmatch(text) or os.path.lexists(text):
        return None
    if os.path.isdir(text.partition("/")[0]):  # out/typo beside a folder out/: a mistyped path
        return None
    # The Hub's own rules (no "..", "--", leading or trailing "." or "-"): a mistyped relative
    # path such as ``../data`` stays a missing folder, not a request to the Hub.
    from huggingface_hub.errors import HFValidationError

    # public as huggingface_hub.utils.validate_repo_id, which mypy does not see re-exported
    from huggingface_hub.utils._validators import validate_repo_id

    try:
        validate_repo_id(text)
    except HFValidationError:
        return None
    return text


class HubDataset(HttpUrl):
    """A Hub dataset at a revision; its ``url`` is the ``resolve`` URL of its files."""

    kind = "hub"
    has_revisions = True

    @classmethod
    def reading(cls, text: str, *, revision: str | None = None) -> Location:
        match = _HF_URL.fullmatch(text)
        if match is None:
            raise not_a_place(text)
        revision = revision or match.group(2) or "main"
        from urllib.parse import quote

        from huggingface_hub import constants

        return cls(f"{constants.ENDPOINT}/datasets/{match.group(1)}/resolve/{quote(revision, safe='')}")

    @classmethod
    def as_out_dir(cls, text: str, *, writing: bool) -> Location:
        if writing:  # fsspec would make a commit per file
            raise UsageError(
                f"{text}: OUT_DIR is where shards are packed (a folder or a bucket); to publish on the Hub,"
                " pack there and run `shardkit push OUT_DIR --repo NAMESPACE/NAME` (or add --push)"
            )
        return FsspecUrl(text)  # verify reads it through huggingface_hub's fsspec filesystem

    @classmethod
    def url_of_name(cls, text: str) -> str | None:
        repo_id = bare_hub_id(text)
        return f"hf://datasets/{repo_id}" if repo_id else None

    def headers(self) -> dict[str, str]:
        """The Hub's headers: its token, user agent."""
        from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

        return dict(build_hf_headers())

    def refuse_writing(self) -> UsageError:
        return UsageError(f"{self.url}: a Hub dataset is published with `shardkit push`, not written to")

    # Read-only: the refusals of every place, not the writes of the http(s) filesystem.
    put = Location.put
    upload = Location.upload
    write_bytes = Location.write_bytes
    remove = Location.remove


register(HubDataset, "hf")
