"""Shared fixtures: tiny real image files and metadata written the way users write them."""

from __future__ import annotations

import io
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cookiecutter.main import cookiecutter
from PIL import Image

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_DIR = REPO_ROOT / "example_datasets" / "yfcc-mini"

# A shell without job control starts a background job (`bash .ci/run &`) with SIGINT ignored,
# and every process the tests start inherits that: the Ctrl-C tests then meet a packer that
# Ctrl-C cannot stop, and the in-process one waits forever. Take SIGINT back, as a terminal's
# foreground job has it (a handled signal is reset to the default in a child, not ignored).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def tiny_image(seed: int, fmt: str = "JPEG", size: tuple[int, int] = (24, 16)) -> bytes:
    """A small real image whose bytes differ per seed."""
    rng = random.Random(seed)
    img = Image.new("RGB", size, tuple(rng.randrange(256) for _ in range(3)))
    for _ in range(12):
        img.putpixel((rng.randrange(size[0]), rng.randrange(size[1])), tuple(rng.randrange(256) for _ in range(3)))
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return buf.getvalue()


def write_jsonl(path: Path, rows: Iterable[Any]) -> Path:
    """Write rows (dicts, or raw strings taken as a whole line) as JSON Lines."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write((row if isinstance(row, str) else json.dumps(row, ensure_ascii=False)) + "\n")
    return path


def adding_up(manifest: dict[str, Any]) -> dict[str, Any]:
    """``manifest`` (a parsed shards.json) with its totals and each split's rows, shards and bytes
    those of its shards: a test that changes a shard's record keeps the rest in agreement, as a
    forger would (readers refuse a manifest that does not add up before reading any shard)."""

    def counts(shards: list[dict[str, Any]]) -> dict[str, int]:
        return {"rows": sum(s["rows"] for s in shards), "shards": len(shards), "bytes": sum(s["bytes"] for s in shards)}

    manifest["totals"] = counts(manifest["shards"])
    for name, split in manifest.get("splits", {}).items():
        split.update(counts([s for s in manifest["shards"] if s.get("split", "train") == name]))
    return manifest


class Corpus:
    """An IMAGES_DIR with N small images and a matching metadata file."""

    def __init__(self, root: Path, n: int, *, with_keys: bool = False, fmt: str = "JPEG") -> None:
        self.root = root
        self.images = root / "images"
        self.images.mkdir(parents=True)
        self.rows: list[dict[str, Any]] = []
        ext = {"JPEG": ".jpg", "PNG": ".png"}[fmt]
        for i in range(n):
            rel = f"sub{i % 3}/img_{i:04d}{ext}"
            path = self.images / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(tiny_image(i, fmt))
            row: dict[str, Any] = {
                "file_name": rel,
                "caption": f"picture number {i}",
                "label": i % 5,
                "score": None if i % 4 == 0 else i / 10,
            }
            if with_keys:
                row["key"] = f"{(i * 2654435761) % 16**12:012x}"
            self.rows.append(row)
        self.meta = write_jsonl(root / "meta.jsonl", self.rows)

    def write_meta(self, rows: Iterable[Any], name: str = "meta.jsonl") -> Path:
        return write_jsonl(self.root / name, rows)


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


def shard_files(out_dir: Path) -> list[Path]:
    data = out_dir / "data"
    return sorted(data.glob("*.zip")) if data.is_dir() else []


def tree_bytes(out_dir: Path) -> dict[str, bytes]:
    """Every published file under OUT_DIR (not the .shardkit work dir), by relative path."""
    out: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(out_dir):
        dirnames[:] = [d for d in dirnames if d != ".shardkit"]
        for name in filenames:
            path = Path(dirpath) / name
            out[str(path.relative_to(out_dir))] = path.read_bytes()
    return out


def pack_example(
    out_dir: Path | str, *options: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `pack-shards` on the shipped example dataset into ``out_dir``, as a user would.

    With ``--prefix-length 1`` unless the options choose the layout: the tests that use it were
    written for the example in 16 shards named by key prefix (``data/3.zip``); by default the
    1.6 MB example is one shard (a split smaller than the target), whose layout
    tests/test_default_zip_loads.py, test_plan.py and test_pack.py's by-size tests cover."""
    layout = () if {"--prefix-length", "--target-shard-size"} & set(options) else ("--prefix-length", "1")
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "pack-shards"),
            str(EXAMPLE_DIR / "images"),
            str(EXAMPLE_DIR / "metadata.jsonl"),
            "-o",
            str(out_dir),
            *layout,
            *options,
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=600,
    )


def packed_example_bytes(tmp_path_factory: pytest.TempPathFactory, name: str) -> dict[str, bytes]:
    """The example packed locally into a folder called ``name`` (the card's title), as tree_bytes."""
    out = tmp_path_factory.mktemp("local") / name
    result = pack_example(out, "-q")
    assert result.returncode == 0, result.stderr
    return tree_bytes(out)


@pytest.fixture(scope="session")
def packed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
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


def s3_env(endpoint: str) -> dict[str, str]:
    """This environment with only test credentials and ``endpoint`` for S3 (nothing of the user's)."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FSSPEC_"))},
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "FSSPEC_S3_ENDPOINT_URL": endpoint,
        "NO_PROXY": "127.0.0.1",
    }


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
