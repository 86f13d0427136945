"""What ``shardkit push`` is told (:class:`PushConfig`) and the defaults its options show.

Apart from :mod:`shardkit.push`, which loads the card and huggingface_hub's helpers: the command
line reads these defaults when it starts, and ``shardkit --help`` loads no stage.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .hubplan import FILES_PER_COMMIT as FILES_PER_COMMIT  # the Hub's limits: hubplan.py

SCRIPT_BRANCH = "script"


@dataclass(frozen=True)
class PushConfig:
    """What :func:`~shardkit.push.push` uploads, and where: ``shardkit push``'s arguments and options, by name."""

    out_dir: str
    repo_id: str
    private: bool = False
    revision: str = "main"
    token: str | None = None
    script_branch: str | None = SCRIPT_BRANCH  # None: do not publish the loading script
    files_per_commit: int = FILES_PER_COMMIT
    verify_threads: int = field(default_factory=lambda: min(4, os.cpu_count() or 1))
    work_dir: str | None = None  # for an OUT_DIR URL, as PackConfig.work_dir
    include: tuple[str, ...] = ()  # other files to publish: repo-relative paths or patterns, as `hf upload --include`
