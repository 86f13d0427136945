"""OUT_DIR as an fsspec URL: pack, resume, verify, stream and push with an S3 bucket.

The bucket lives in moto's S3 server on 127.0.0.1 (a real HTTP server speaking the S3 API);
shardkit reaches it through fsspec and s3fs, configured only by the environment a user would
set (AWS_* credentials and FSSPEC_S3_ENDPOINT_URL), so the CLI runs as subprocesses.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import s3fs
from cookiecutter.main import cookiecutter

from tests.hub_server import run_hub_server
from tests.support.corpus import REPO_ROOT, tree_bytes
from tests.support.dask_cluster import DaskCluster
from tests.support.packing import pack_example, packed_example_bytes, s3_env
from tests.support.readback import expected_rows, read_with
from tests.test_push import REPO, hub_env, remote_files
from tests.test_remux import RESIZE
from tests.test_remux import remux as remux_cli

SCRIPTS = Path(sys.executable).parent


@pytest.fixture
def s3(s3_endpoint: str, tmp_path: Path) -> Iterator[tuple[s3fs.S3FileSystem, dict[str, str]]]:
    """A fresh bucket ``bkt``, a client on it, and the environment that points shardkit at it."""
    env = s3_env(s3_endpoint)
    fs = s3fs.S3FileSystem(key="testing", secret="testing", endpoint_url=s3_endpoint, skip_instance_cache=True)
    if fs.exists("bkt"):
        fs.rm("bkt", recursive=True)
    fs.mkdir("bkt")
    yield fs, env


def objects(fs: s3fs.S3FileSystem, prefix: str) -> dict[str, bytes]:
    fs.invalidate_cache()
    return {path[len(prefix) + 1 :]: fs.cat_file(path) for path in fs.find(prefix)}


def cli(name: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPTS / name), *args], capture_output=True, text=True, env=env, timeout=600, check=False
    )


@pytest.fixture(scope="module")
def local_yfcc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The example packed into a local folder named like the URL's last part (the card's title)."""
    return packed_example_bytes(tmp_path_factory, "yfcc-mini")


@pytest.mark.slow
def test_pack_to_s3_is_a_local_pack_byte_for_byte_resumes_verifies_and_streams(
    s3: tuple[s3fs.S3FileSystem, dict[str, str]], local_yfcc: dict[str, bytes], tmp_path: Path
) -> None:
    fs, env = s3
    url = "s3://bkt/yfcc-mini"
    work = tmp_path / "work"
    result = pack_example(url, "--work-dir", str(work), "--json", env=env)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["out_dir"] == url and summary["manifest"] == f"{url}/shards.json"
    assert summary["written_shards"] == 16
    assert objects(fs, "bkt/yfcc-mini") == local_yfcc  # no probe, token or working file left behind
    assert not (work / "data").exists() and not (work / "metadata").exists()  # shards went straight up

    again = pack_example(url, "--work-dir", str(work), "--json", env=env)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["resumed_shards"] == 16

    # A shard gone and one replaced by other bytes are written again; the rest are kept.
    fs.rm_file("bkt/yfcc-mini/data/3.zip")
    fs.pipe_file("bkt/yfcc-mini/data/5.zip", b"not a shard")
    third = pack_example(url, "--work-dir", str(work), "--json", env=env)
    assert third.returncode == 0, third.stderr
    assert json.loads(third.stdout)["written_shards"] == 2
    assert "data/5.zip: recorded as written but missing or changed" in third.stderr
    assert objects(fs, "bkt/yfcc-mini") == local_yfcc

    verified = cli("shardkit", "verify", url, "--deep", "--json", "-q", env=env)
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["rows"] == 300

    # Damage that keeps the size: verify reads everything and names the file.
    blob = bytearray(local_yfcc["metadata/7.jsonl"])
    blob[10] ^= 1
    fs.pipe_file("bkt/yfcc-mini/metadata/7.jsonl", bytes(blob))
    damaged = cli("shardkit", "verify", url, "--json", "-q", env=env)
    assert damaged.returncode == 1
    assert any(p["file"] == "metadata/7.jsonl" for p in json.loads(damaged.stdout)["problems"])
    fs.pipe_file("bkt/yfcc-mini/metadata/7.jsonl", local_yfcc["metadata/7.jsonl"])

    # shardkit.stream reads the URL as it reads a folder: one shard per file.
    code = (
        "import sys, shardkit; ds = shardkit.stream(sys.argv[1]); rows = list(ds);"
        " print(ds.n_shards, len(rows), min(r['key'] for r in rows))"
    )
    streamed = subprocess.run(
        [sys.executable, "-c", code, url], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert streamed.returncode == 0, streamed.stderr
    first_key = min(json.loads(line)["key"] for line in local_yfcc["metadata/0.jsonl"].decode().splitlines())
    assert streamed.stdout.split() == ["16", "300", first_key]

    # The URL is the truth: its manifest gone, the work folder's copy does not stand in for it.
    fs.rm_file("bkt/yfcc-mini/shards.json")
    pushed = cli("shardkit", "push", url, "--repo", "tester/x", "--work-dir", str(work), env=env)
    assert pushed.returncode == 2 and f"{url} has no shards.json" in pushed.stderr
    assert not (work / "shards.json").exists()


@pytest.mark.slow
def test_a_template_repo_in_a_bucket_is_packed_in_place_then_pushed_from_there(
    s3: tuple[s3fs.S3FileSystem, dict[str, str]], tmp_path: Path
) -> None:
    fs, s3_env = s3
    repo = Path(
        cookiecutter(
            str(REPO_ROOT / "templates" / "hub-dataset"),
            no_input=True,
            extra_context={"dataset_name": "yfcc-mini"},
            output_dir=str(tmp_path / "scaffold"),
            default_config=True,
        )
    )
    scaffold = {p.relative_to(repo).as_posix(): p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    for rel, data in scaffold.items():
        fs.pipe_file(f"bkt/tpl/{rel}", data)
    url = "s3://bkt/tpl"
    result = pack_example(url, "--work-dir", str(tmp_path / "work"), "-q", env=s3_env)
    assert result.returncode == 0, result.stderr

    # The same pack into a local copy of the scaffold gives the same files.
    local = tmp_path / "local" / "tpl"
    shutil.copytree(repo, local)
    assert pack_example(local, "-q").returncode == 0
    in_bucket = objects(fs, "bkt/tpl")
    assert in_bucket == tree_bytes(local)
    assert in_bucket["yfcc_mini_loader.py"] != scaffold["yfcc_mini_loader.py"]  # its features were filled in
    assert b"dataset_info:" in in_bucket["README.md"] and b"preview.jpg" in in_bucket["README.md"]

    with run_hub_server(tmp_path / "hub") as hub:
        # From another machine: a fresh work folder, the bucket the only source.
        env = {
            **hub_env(hub.url, tmp_path / "home"),
            **{k: v for k, v in s3_env.items() if k.startswith(("AWS_", "FSSPEC_"))},
        }
        pushed = cli("shardkit", "push", url, "--repo", REPO, "--json", "--work-dir", str(tmp_path / "w2"), env=env)
        assert pushed.returncode == 0, pushed.stderr[-3000:]
        summary = json.loads(pushed.stdout)
        assert summary["uploaded_files"] == len(in_bucket)
        # The push writes the repo's name into the card's load examples, at the URL too.
        named = objects(fs, "bkt/tpl")
        assert f'shardkit.stream("{REPO}"'.encode() in named["README.md"]
        assert remote_files(hub) == named == {**in_bucket, "README.md": named["README.md"]}
        assert remote_files(hub, "script")["yfcc-mini.py"] == in_bucket["yfcc_mini_loader.py"]

        reader_env = hub_env(hub.url, tmp_path / "reader-home", token=None)
        got = read_with(sys.executable, REPO, True, tmp_path / "cache5", env=reader_env, decode_num_threads=0)
        assert got["rows"] == expected_rows()

        again = cli("shardkit", "push", url, "--repo", REPO, "--json", "--work-dir", str(tmp_path / "w2"), env=env)
        assert again.returncode == 0, again.stderr[-3000:]
        assert json.loads(again.stdout)["uploaded_files"] == 0 and json.loads(again.stdout)["commits"] == 0


@pytest.mark.slow
def test_pack_to_s3_on_a_dask_cluster(
    s3: tuple[s3fs.S3FileSystem, dict[str, str]], local_yfcc: dict[str, bytes], tmp_path: Path
) -> None:
    fs, env = s3
    # The workers get the bucket's credentials and endpoint from their environment, like the client.
    cluster = DaskCluster(
        tmp_path / "dask", workers=2, env={k: v for k, v in env.items() if k.startswith(("AWS_", "FSSPEC_"))}
    )
    try:
        url = "s3://bkt/yfcc-mini"
        args = ("--executor", "dask", "--scheduler", cluster.address, "--work-dir", str(tmp_path / "work"), "--json")
        result = pack_example(url, *args, env=env)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["written_shards"] == 16
        assert objects(fs, "bkt/yfcc-mini") == local_yfcc
        assert all(any(line.startswith("end data/") for line in cluster.tasks_of(w)) for w in ("w0", "w1"))
    finally:
        cluster.close()

    # A cluster whose workers cannot reach the bucket is refused before any task, naming the URL.
    blind = DaskCluster(
        tmp_path / "dask2", workers=1, env={"AWS_ACCESS_KEY_ID": "", "FSSPEC_S3_ENDPOINT_URL": "http://127.0.0.1:9"}
    )
    try:
        refused = pack_example(
            "s3://bkt/other",
            "--executor",
            "dask",
            "--scheduler",
            blind.address,
            "--work-dir",
            str(tmp_path / "w3"),
            env=env,
        )
        assert refused.returncode == 2, refused.stderr
        assert "s3://bkt/other/.shardkit/cluster-token" in refused.stderr
        fs.invalidate_cache()
        assert not fs.exists("bkt/other/data")
    finally:
        blind.close()


@pytest.mark.parametrize(
    ("out", "extra", "message"),
    [
        ("nosuchproto://x/y", (), "nosuchproto://x/y"),
        ("s3://no-such-bucket/x", (), "cannot write to s3://no-such-bucket/x"),
        # A password holding '@', redacted whole; the place, then what failed there.
        (
            "http://bob:p@SECRET@127.0.0.1:9/ds",
            (),
            "error: cannot write to http://***@127.0.0.1:9/ds: the connection failed writing http://***@127.0.0.1:9/ds/",
        ),
        ("LOCAL", ("--work-dir", "WORK"), "--work-dir is for an OUT_DIR URL"),
        ("s3://bkt/x", ("--push", "tester/x"), "--push needs a local OUT_DIR"),
        ("hf://datasets/tester/x", (), "run `shardkit push OUT_DIR"),
    ],
)
def test_url_mistakes_are_refused_before_any_work(
    s3: tuple[s3fs.S3FileSystem, dict[str, str]], tmp_path: Path, out: str, extra: tuple[str, ...], message: str
) -> None:
    fs, env = s3
    out = str(tmp_path / "local") if out == "LOCAL" else out
    extra = tuple(str(tmp_path / "work") if a == "WORK" else a for a in extra)
    result = pack_example(out, *extra, env=env)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr and "SECRET" not in result.stderr
    fs.invalidate_cache()
    assert fs.find("bkt") == []


@pytest.mark.slow
def test_remux_into_a_bucket_gives_the_bytes_of_a_local_remux(
    s3: tuple[s3fs.S3FileSystem, dict[str, str]], packed_template: Path, tmp_path: Path
) -> None:
    fs, env = s3
    local = tmp_path / "small"
    remux_cli(packed_template, local, "--map", RESIZE)
    summary = remux_cli(packed_template, "s3://bkt/small", "--map", RESIZE, "--work-dir", str(tmp_path / "w"), env=env)
    assert summary["pack"]["out_dir"] == "s3://bkt/small" and summary["rows_out"] == 300
    assert objects(fs, "bkt/small") == tree_bytes(local)
    assert not (tmp_path / "w" / ".shardkit" / "remux").exists()  # the staged files are gone once packed


@pytest.mark.slow
def test_a_filesystem_with_folders_gets_each_file_by_upload_then_move(
    local_yfcc: dict[str, bytes], tmp_path: Path
) -> None:
    # fsspec's local:// stands for filesystems whose uploads are not atomic (SFTP, WebDAV...):
    # each file goes up under a temporary name and is moved into place.
    target = tmp_path / "remote" / "yfcc-mini"
    result = pack_example(f"local://{target}", "--work-dir", str(tmp_path / "work"), "-q")
    assert result.returncode == 0, result.stderr
    assert tree_bytes(target) == local_yfcc
    assert sorted(p.name for p in target.iterdir()) == [
        ".gitattributes",
        "README.md",
        "data",
        "metadata",
        "metadata.parquet",
        "preview.jpg",
        "shards.json",
    ]


@pytest.mark.slow
def test_a_bucket_without_credentials_is_one_line_naming_the_url(
    s3: tuple[s3fs.S3FileSystem, dict[str, str]], tmp_path: Path
) -> None:
    _, env = s3
    blind = {k: v for k, v in env.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    blind["AWS_EC2_METADATA_DISABLED"] = "true"  # no instance-metadata lookup on a test machine
    for command in (
        ("verify", "s3://bkt/x"),
        ("push", "s3://bkt/x", "--repo", "tester/x", "--work-dir", str(tmp_path)),
    ):
        result = cli("shardkit", *command, env=blind)
        assert result.returncode == 1, result.stderr
        assert result.stderr.strip().splitlines()[-1] == (
            "error: s3://bkt/x: NoCredentialsError: Unable to locate credentials"
        )
        assert "Traceback" not in result.stderr
