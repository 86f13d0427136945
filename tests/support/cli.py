"""A command run in the test's own process, for the tests that run one many times over.

Each `pack-shards` in a process of its own costs a Python start, pyarrow's and the CLI's imports
and a forkserver: most of the time of a pack of the example, and the largest share of the suite's.
:func:`run_cli` runs the same click command through click's CliRunner instead, with the same
arguments, and answers as :func:`subprocess.run` would (exit code, stdout, stderr apart). A test
that needs a process of its own keeps one: signals, Ctrl-C, a kill, an environment of its own
(huggingface_hub and fsspec read theirs once, at import), a read that could hang (a FIFO: only a
process's timeout ends it), what another program writes to the real stderr (cookiecutter's
hooks), the exit itself. Left in the test's process: a forkserver started with its environment
(packs with more than one job), cookiecutter's logger at CRITICAL.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any, Literal

from click.testing import CliRunner

from shardkit.cli import main, pack_shards

#: The warning filters of a Python started without -W (``python -c "import warnings; print(warnings.filters)"``).
PYTHON_DEFAULT_WARNINGS: list[tuple[Literal["default", "ignore"], type[Warning], str]] = [
    ("default", DeprecationWarning, "__main__"),
    ("ignore", DeprecationWarning, ""),
    ("ignore", PendingDeprecationWarning, ""),
    ("ignore", ImportWarning, ""),
    ("ignore", ResourceWarning, ""),
]


def _show_on_stderr(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None
) -> None:
    """A warning printed as Python prints it, on this moment's stderr (the command's, captured)."""
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def run_cli(program: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """``program`` (``pack-shards``, or ``shardkit`` with its command first) with ``args``, here.

    The CLI sets its warnings up on stderr with :func:`logging.basicConfig`, which does nothing
    where the root logger has a handler already (pytest's, or the last run's): the root logger is
    bare while the command runs, so its warnings reach its stderr as they would in a process.
    Python's warnings too: pytest would record them, where a process prints them on stderr."""
    command = {"pack-shards": pack_shards, "shardkit": main}[program]
    argv = [str(a) for a in args]
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers.clear()
    try:
        with warnings.catch_warnings():  # Python's warnings as a process shows them, on its stderr
            warnings.resetwarnings()
            for action, category, module in PYTHON_DEFAULT_WARNINGS:
                warnings.filterwarnings(action, category=category, module=module, append=True)
            warnings.showwarning = _show_on_stderr
            result = CliRunner().invoke(command, argv, catch_exceptions=False, prog_name=program)  # usage names it
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers[:] = handlers
        root.setLevel(level)
    return subprocess.CompletedProcess([program, *argv], result.exit_code, result.stdout, result.stderr)
