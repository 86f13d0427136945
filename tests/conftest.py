"""Shared fixtures (helpers that are not fixtures live in tests/support/: see its __init__)."""

from __future__ import annotations

import logging
import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cookiecutter.main import cookiecutter

from tests.support.corpus import EXAMPLE_DIR, REPO_ROOT, Corpus
from tests.support.packing import pack_example
from tests.support.readback import missing_old_datasets

# A shell without job control starts a background job (`bash .ci/run &`) with SIGINT ignored,
# and every process the tests start inherits that: the Ctrl-C tests then meet a packer that
# Ctrl-C cannot stop, and the in-process one waits forever. Take SIGINT back, as a terminal's
# foreground job has it (a handled signal is reset to the default in a child, not ignored).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


#: The test files that take longest, longest first (wall time summed over a file's tests, measured
#: 2026-11-28 after the in-process commands of tests/support/cli.py). scripts/test.sh hands each
#: file whole to one of its processes (`--dist loadfile`: a file's module fixtures, often a pack
#: and a push, are then made once, not once in each process) in this order
#: (`--no-loadscope-reorder`), so the long files start first and the short ones fill in at the
#: end, where one long file would leave the other processes idle.
LONGEST_FIRST = (
    "test_faults.py",
    "test_training_stream.py",
    "test_remux.py",
    "test_hostile_shards.py",
    "test_default_zip_loads.py",
    "test_url_output.py",
    "test_stream_network.py",
    "test_hostile_servers.py",
    "test_push.py",
    "test_stream_exit.py",
    "test_nested_layout.py",
    "test_hostile_manifest.py",
    "test_remux_splits.py",
    "test_hostile_messages.py",
    "test_formats.py",
    "test_cluster.py",
    "test_paths.py",
    "test_hub_limits.py",
    "test_update.py",
    "test_card.py",
    "test_compat.py",
    "test_demo.py",
    "test_template.py",
    "test_hostile_state.py",
    "test_splits_labels.py",
)


def _file_rank(item: pytest.Item) -> int:
    name = item.nodeid.split("::")[0].rsplit("/", 1)[-1]
    return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_file_rank)  # (a stable sort: the rest keep their order)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say, under the results, when the older datasets' venvs are missing: the tests that read
    with them fail (a plain `python -m pytest` in a fresh clone); scripts/test.sh makes them."""
    for python in missing_old_datasets():
        terminalreporter.write_line(
            f"{python} missing: the tests reading with that datasets fail; `bash scripts/test.sh` makes it"
            " (or set SHARDKIT_DS36_PYTHON / SHARDKIT_DS40_PYTHON)"
        )


@pytest.fixture
def corpus(tmp_path: Path) -> Corpus:
    return Corpus(tmp_path / "in", 40)


@pytest.fixture
def make_corpus(tmp_path: Path) -> Callable[..., Corpus]:
    counter = iter(range(1000))

    def make(n: int, **kw: Any) -> Corpus:
        return Corpus(tmp_path / f"in{next(counter)}", n, **kw)

    return make


@pytest.fixture(scope="session")
def example_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the shipped example dataset."""
    dst = tmp_path_factory.mktemp("example") / "yfcc-mini"
    shutil.copytree(EXAMPLE_DIR, dst)
    return dst


@pytest.fixture(scope="session")
def packed_example_tar_parquet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The example packed as tar and as Parquet (16 shards each). Copy a folder to change it."""
    out = {}
    for fmt in ("tar", "parquet"):
        folder = tmp_path_factory.mktemp(fmt) / "yfcc-mini"
        result = pack_example(folder, "--format", fmt, "-q")
        assert result.returncode == 0, result.stderr
        out[fmt] = folder
    return out


@pytest.fixture(scope="session")
def packed_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example dataset scaffolded with the template and packed into it: 16 shards. Copy it to change it."""
    root = tmp_path_factory.mktemp("tpl")
    repo = Path(
        cookiecutter(
            str(REPO_ROOT / "templates" / "hub-dataset"),
            no_input=True,
            extra_context={"dataset_name": "yfcc-mini"},
            output_dir=str(root),
            default_config=True,
        )
    )
    result = pack_example(repo, "-q")
    assert result.returncode == 0, result.stderr
    return repo


@pytest.fixture
def repo_dir(packed_template: Path, tmp_path: Path) -> Path:
    """A private copy of the scaffolded and packed example dataset (16 shards), as yfcc-mini/."""
    dst = tmp_path / "yfcc-mini"
    shutil.copytree(packed_template, dst, ignore=shutil.ignore_patterns("lock"))
    return dst


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server on 127.0.0.1 (the tests of OUT_DIR URLs and of dead servers)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
