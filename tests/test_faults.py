"""Servers that stop answering: every network wait is bounded, fails with one line, and a re-run resumes.

A fault-injecting proxy (tests/fault_proxy.py) stands between shardkit and the test servers (the
static file server, the Hub server, moto's S3). ``SHARDKIT_NETWORK_TIMEOUT=2`` keeps the tests
short; the subprocess timeouts are only guards against a hang, never what a test checks.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets
import pytest
import s3fs

import shardkit
from shardkit.errors import ShardkitError
from tests.fault_proxy import Fault, FaultProxy, run_fault_proxy
from tests.http_server import serve_directory
from tests.hub_server import HubServer, run_hub_server
from tests.support.corpus import REPO_ROOT, tree_bytes
from tests.support.packing import pack_example, s3_env
from tests.support.readback import expected_rows
from tests.test_push import hub_env, local_files, remote_files

pytestmark = pytest.mark.slow  # every test here takes over about 3 s, or shares a fixture that does

SCRIPTS = Path(sys.executable).parent
TIMEOUT = "2"  # SHARDKIT_NETWORK_TIMEOUT for the tests, in seconds
GUARD = 60  # seconds a subprocess may take before the test calls it hung
FORMATS = ("zip", "tar", "parquet")

#: Each way a server can fail mid-read, and what the reader must say.
READ_FAULTS = [
    (Fault("stall", path="/data/"), "timed out"),  # accepts, never answers
    (Fault("stall_body", path="/data/", after=1000), "timed out"),  # answers, then stops mid-body
    (Fault("cut_body", path="/data/", after=1000), "the connection failed"),  # closes mid-body
]


@pytest.fixture(autouse=True)
def no_read_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """SHARDKIT_NETWORK_RETRIES=0: these tests check what a read says of a failure at once (each
    fault here breaks every matching request); reads that retry are tests/test_stream_network.py's."""
    monkeypatch.setenv("SHARDKIT_NETWORK_RETRIES", "0")


@pytest.fixture(scope="module")
def packed_example_each_format(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The example dataset packed once in each format."""
    root = tmp_path_factory.mktemp("packed")
    out = {}
    for fmt in FORMATS:
        out[fmt] = root / f"faults-{fmt}"
        result = pack_example(out[fmt], "--format", fmt, "-q")
        assert result.returncode == 0, result.stderr
    return out


def read_all(source: str) -> dict[str, Any]:
    """Every row of ``shardkit.stream(source)`` as tests/support/readback.py digests them, or the error
    that stopped the read and how many rows came before it."""
    rows = []
    try:
        for row in shardkit.stream(source).cast_column("image", datasets.Image(decode=False)):
            data = row.pop("image")["bytes"]
            rows.append([row["key"], hashlib.sha256(data).hexdigest(), json.dumps(row, sort_keys=True)])
    except ShardkitError as exc:
        return {"error": str(exc), "rows_before": len(rows)}
    return {"rows": sorted(rows)}


#: A reader in another process (huggingface_hub reads HF_ENDPOINT once, at import): one read per
#: line on stdin, one JSON line of :func:`read_all` on stdout, so one process serves every fault.
HUB_READER = r"""
import json, sys
from tests.test_faults import read_all
for _ in sys.stdin:
    print(json.dumps(read_all(sys.argv[1])), flush=True)
"""


def check_read_faults(proxy: FaultProxy, read: Any, shard_url: str) -> None:
    """Without faults every row comes back with its bytes; each fault is one line naming a shard
    (``shard_url`` + its name), before any row of it is yielded; then a clean read again."""
    assert read() == {"rows": expected_rows()}
    for fault, said in READ_FAULTS:
        [hit] = proxy.set(fault)
        got = read()
        assert hit.hits >= 1, fault
        assert set(got) == {"error", "rows_before"}, (fault, got)
        assert got["rows_before"] == 0
        assert re.match(f"{said} (opening|reading) {re.escape(shard_url)}", got["error"]), got
        assert "\n" not in got["error"]
        if said == "timed out":
            assert f"nothing from the server for {TIMEOUT} s (SHARDKIT_NETWORK_TIMEOUT={TIMEOUT};" in got["error"]
    proxy.set()
    assert read() == {"rows": expected_rows()}


@pytest.mark.parametrize("fmt", FORMATS)
def test_stream_from_a_url_that_stalls_or_cuts_fails_with_one_line_naming_the_shard(
    fmt: str, packed_example_each_format: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHARDKIT_NETWORK_TIMEOUT", TIMEOUT)
    with serve_directory(packed_example_each_format[fmt]) as (base, _), run_fault_proxy(base) as proxy:
        check_read_faults(proxy, lambda: read_all(proxy.url + "/"), f"{proxy.url}/data/")


@pytest.fixture(scope="module")
def hub_with_every_format(
    packed_example_each_format: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HubServer]:
    """A Hub server holding the packed example in each format, as tester/faults-<format>."""
    root = tmp_path_factory.mktemp("hub")
    with run_hub_server(root / "state") as hub:
        for folder in packed_example_each_format.values():
            copy = root / folder.name
            shutil.copytree(folder, copy)
            result = shardkit_cli("push", str(copy), "--repo", f"tester/{folder.name}", env=hub_env(hub.url, root))
            assert result.returncode == 0, result.stderr[-2000:]
        yield hub


@pytest.mark.parametrize("fmt", FORMATS)
def test_stream_from_a_hub_that_stalls_or_cuts_fails_with_one_line_naming_the_shard(
    fmt: str, hub_with_every_format: HubServer, tmp_path: Path
) -> None:
    repo = f"tester/faults-{fmt}"
    with run_fault_proxy(hub_with_every_format.url) as proxy:
        env = {**hub_env(proxy.url, tmp_path / "home", token=None), "SHARDKIT_NETWORK_TIMEOUT": TIMEOUT}
        reader = subprocess.Popen(
            [sys.executable, "-c", HUB_READER, repo],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO_ROOT,
        )
        assert reader.stdin is not None and reader.stdout is not None

        def read() -> dict[str, Any]:
            assert reader.stdin is not None and reader.stdout is not None
            reader.stdin.write("read\n")
            reader.stdin.flush()
            line = reader.stdout.readline()
            assert line, reader.stderr.read() if reader.stderr else ""
            return json.loads(line)  # type: ignore[no-any-return]

        try:
            check_read_faults(proxy, read, f"{proxy.url}/datasets/{repo}/resolve/main/data/")
        finally:
            reader.stdin.close()
            reader.wait(GUARD)
    assert reader.returncode == 0


# --- push to a Hub that stops answering --------------------------------------------------------------


def shardkit_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPTS / "shardkit"), *args], capture_output=True, text=True, env=env, timeout=GUARD, check=False
    )


@pytest.fixture
def faulty_hub(tmp_path: Path) -> Iterator[tuple[HubServer, FaultProxy, dict[str, str]]]:
    """A fresh Hub server behind a proxy, and the environment that points a push at the proxy."""
    with run_hub_server(tmp_path / "hub") as hub, run_fault_proxy(hub.url) as proxy:
        hub.url = proxy.url  # the links it hands out (LFS uploads, next pages) go through the proxy too
        env = {**hub_env(proxy.url, tmp_path / "home"), "SHARDKIT_NETWORK_TIMEOUT": TIMEOUT}
        yield hub, proxy, env


@pytest.fixture
def repo(packed_example_each_format: dict[str, Path], tmp_path: Path) -> Path:
    dst = tmp_path / "faults-zip"
    shutil.copytree(packed_example_each_format["zip"], dst)
    return dst


REPO = "tester/faults"


def error_line(stderr: str) -> str:
    """The one ``error:`` line of a failed run (there must be exactly one, and no traceback)."""
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr
    return errors[0]


def test_push_to_a_hub_that_stops_answering_mid_upload_fails_with_one_line_and_a_rerun_completes(
    faulty_hub: tuple[HubServer, FaultProxy, dict[str, str]], repo: Path
) -> None:
    hub, proxy, env = faulty_hub
    # The commit carries the small files themselves: the server takes part of it, then reads no more.
    [stall] = proxy.set(Fault("stall_upload", method="POST", path="/commit/", after=100))
    result = shardkit_cli("push", str(repo), "--repo", REPO, env=env)
    assert result.returncode == 1 and stall.hits == 1
    line = error_line(result.stderr)
    assert line.startswith("error: timed out committing 'shardkit: shards data/0.zip .. data/f.zip (commit 1 of 1)'")
    assert f"at the Hub ({proxy.url}): nothing from the server for {TIMEOUT} s" in line
    assert line.endswith("Re-run the same command to resume: files already uploaded are not sent again.")
    assert hub.counters.commits == 0 and hub.counters.lfs_uploads == 16  # the shards went up before the commit

    proxy.set()
    pushed = json.loads(shardkit_cli("push", str(repo), "--repo", REPO, "--json", env=env).stdout)
    assert pushed["uploaded_files"] == len(local_files(repo))
    assert remote_files(hub, repo=REPO) == local_files(repo)
    lfs = {entry["sha256"] for entry in hub.files(REPO).values() if entry["lfs"]}
    assert hub.counters.lfs_uploads == len(lfs)  # the shards were not sent again


def ctrl_c_at_the_stall(
    cmd: list[str], env: dict[str, str], stall: Fault
) -> tuple[subprocess.Popen[bytes], bytes, bytes]:
    """Start ``cmd``, send it SIGINT once it has met ``stall``; the process and its output."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + GUARD
        while stall.hits == 0 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stall.hits >= 1, "the push never reached an upload"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=GUARD)
    finally:
        proc.kill()
    return proc, out, err


def test_ctrl_c_stops_a_push_stalled_mid_upload_at_once_and_a_rerun_completes(
    faulty_hub: tuple[HubServer, FaultProxy, dict[str, str]], repo: Path
) -> None:
    hub, proxy, env = faulty_hub
    env["SHARDKIT_NETWORK_TIMEOUT"] = "3600"  # only Ctrl-C can end this wait
    [stall] = proxy.set(Fault("stall", method="PUT", path="^/lfs-upload/"))
    proc, _, raw_err = ctrl_c_at_the_stall([str(SCRIPTS / "shardkit"), "push", str(repo), "--repo", REPO], env, stall)
    err = raw_err.decode()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "interrupted; re-run the same command to resume"
    assert "Traceback" not in err and hub.counters.commits == 0

    proxy.set()
    env["SHARDKIT_NETWORK_TIMEOUT"] = TIMEOUT
    result = shardkit_cli("push", str(repo), "--repo", REPO, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert remote_files(hub, repo=REPO) == local_files(repo)


#: A library caller that lives on after Ctrl-C (a notebook's kernel does): it catches the
#: KeyboardInterrupt, then waits for the push's thread to end, whatever it does.
PUSH_FROM_PYTHON = """
import sys, threading
from shardkit.push import PushConfig, push
try:
    push(PushConfig(out_dir=sys.argv[1], repo_id=sys.argv[2]))
except KeyboardInterrupt:
    for thread in threading.enumerate():
        if thread.name.startswith("push"):  # the push's own thread (threads.call_interruptibly)
            thread.join()
    print("interrupted")
"""


def test_ctrl_c_stops_a_push_called_from_python_before_its_next_step(
    faulty_hub: tuple[HubServer, FaultProxy, dict[str, str]], repo: Path
) -> None:
    """From Python, KeyboardInterrupt reaches the caller at once; the push's own thread stops at
    its next step instead of going on to upload and commit."""
    hub, proxy, env = faulty_hub
    [stall] = proxy.set(Fault("stall", method="PUT", path="^/lfs-upload/", times=1))  # then the upload is retried
    proc, out, err = ctrl_c_at_the_stall([sys.executable, "-c", PUSH_FROM_PYTHON, str(repo), REPO], env, stall)
    assert proc.returncode == 0 and out == b"interrupted\n", err
    assert hub.counters.commits == 0  # the push's thread stopped before committing anything


def test_a_push_retries_500_503_a_stall_and_a_cut_connection_then_completes(
    faulty_hub: tuple[HubServer, FaultProxy, dict[str, str]], repo: Path
) -> None:
    hub, proxy, env = faulty_hub
    faults = proxy.set(
        Fault("status", method="POST", path="/preupload/", status=500, times=1),
        Fault("status", method="PUT", path="^/lfs-upload/", status=503, times=2),
        Fault("stall", method="PUT", path="^/lfs-upload/", times=1),  # times out, then is sent again
        Fault("cut_body", method="POST", path="/info/lfs/objects/batch", after=10, times=1),
    )
    result = shardkit_cli("push", str(repo), "--repo", REPO, "--json", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [f.hits for f in faults] == [1, 2, 1, 1]
    assert json.loads(result.stdout)["uploaded_files"] == len(local_files(repo))
    assert remote_files(hub, repo=REPO) == local_files(repo)


def test_a_commit_answer_cut_mid_body_is_one_line_and_a_rerun_completes(
    faulty_hub: tuple[HubServer, FaultProxy, dict[str, str]], repo: Path
) -> None:
    hub, proxy, env = faulty_hub
    # huggingface_hub does not send a commit twice: the server committed, the answer never came.
    [cut] = proxy.set(Fault("cut_body", method="POST", path="/commit/", after=10))
    result = shardkit_cli("push", str(repo), "--repo", REPO, env=env)
    assert result.returncode == 1 and cut.hits == 1
    line = error_line(result.stderr)
    assert line.startswith(f"error: cannot reach the Hub at {proxy.url} while committing 'shardkit: shards")
    assert "RemoteProtocolError" in line and line.endswith("files already uploaded are not sent again.")

    proxy.set()
    result = shardkit_cli("push", str(repo), "--repo", REPO, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert remote_files(hub, repo=REPO) == local_files(repo)


# --- verify and pack with an OUT_DIR URL -------------------------------------------------------------


def test_verify_of_a_url_that_stalls_is_one_line_naming_the_shard(packed_example_each_format: dict[str, Path]) -> None:
    with serve_directory(packed_example_each_format["zip"]) as (base, _), run_fault_proxy(base) as proxy:
        env = {**os.environ, "SHARDKIT_NETWORK_TIMEOUT": TIMEOUT}
        ok = shardkit_cli("verify", proxy.url + "/", "-q", env=env)
        assert ok.returncode == 0, ok.stderr
        assert ok.stdout.startswith("verified 16 shards, 300 rows, 1.7 MB in ") and ok.stdout.endswith(": OK\n")

        for fault, said in READ_FAULTS:
            [hit] = proxy.set(Fault(fault.mode, path=r"/data/3\.zip", after=fault.after))
            result = shardkit_cli("verify", proxy.url + "/", "-q", env=env)
            assert result.returncode == 1 and hit.hits >= 1
            line = error_line(result.stderr)
            assert said in line and f"{proxy.url}/data/3.zip" in line, line

        proxy.set()
        wrong = shardkit_cli("verify", proxy.url + "/", env={**env, "SHARDKIT_NETWORK_TIMEOUT": "soon"})
        assert wrong.returncode == 2
        assert error_line(wrong.stderr) == (
            "error: SHARDKIT_NETWORK_TIMEOUT='soon' is not a number of seconds above 0 (e.g. 60)"
        )


def test_pack_to_a_bucket_that_stops_answering_fails_with_one_line_and_a_rerun_resumes(
    s3_endpoint: str, packed_example_each_format: dict[str, Path], tmp_path: Path
) -> None:
    fs = s3fs.S3FileSystem(key="testing", secret="testing", endpoint_url=s3_endpoint, skip_instance_cache=True)
    if not fs.exists("faults"):
        fs.mkdir("faults")
    url = "s3://faults/faults-zip"  # named like the local pack, whose card has the folder's name
    with run_fault_proxy(s3_endpoint) as proxy:
        env = {
            **s3_env(proxy.url),
            "AWS_MAX_ATTEMPTS": "1",  # botocore's own retries, under s3fs's five
            "SHARDKIT_NETWORK_TIMEOUT": TIMEOUT,
        }
        # The server takes shard 8's upload, then never answers (a hung server behind a reverse proxy).
        [stall] = proxy.set(Fault("stall", method="PUT", path=r"/data/8\.zip"))
        options = ("--work-dir", str(tmp_path / "work"), "-j", "1", "--json")
        result = pack_example(url, *options, env=env)
        assert result.returncode == 1 and stall.hits >= 1
        assert error_line(result.stderr) == (
            f"error: timed out uploading to {url}/data/8.zip: nothing from the server for {TIMEOUT} s"
            f" (SHARDKIT_NETWORK_TIMEOUT={TIMEOUT}; raise it for a slow server)."
            " Try again: pack and push resume where they stopped."
        )

        proxy.set()
        again = pack_example(url, *options, env=env)
        assert again.returncode == 0, again.stderr[-2000:]
        summary = json.loads(again.stdout)
        assert summary["resumed_shards"] >= 1 and summary["resumed_shards"] + summary["written_shards"] == 16
    fs.invalidate_cache()
    prefix = url[len("s3://") :]
    assert {p[len(prefix) + 1 :]: fs.cat_file(p) for p in fs.find(prefix)} == tree_bytes(
        packed_example_each_format["zip"]
    )


def test_remux_from_a_url_that_stalls_is_one_line_naming_it(
    packed_example_each_format: dict[str, Path], tmp_path: Path
) -> None:
    """A stalled manifest is a timeout, not "this source has no data files"; a stalled shard too."""
    env = {**os.environ, "SHARDKIT_NETWORK_TIMEOUT": TIMEOUT, "PYTHONPATH": str(REPO_ROOT)}
    with serve_directory(packed_example_each_format["zip"]) as (base, _), run_fault_proxy(base) as proxy:
        for fault, where in [
            (Fault("stall", path=r"/shards\.json"), f"{proxy.url}/shards.json"),
            (Fault("stall", path=r"/data/3\.zip"), f"{proxy.url}/data/3.zip"),
        ]:
            [hit] = proxy.set(fault)
            result = shardkit_cli(
                "remux",
                proxy.url + "/",
                str(tmp_path / "out"),
                "--map",
                "tests.remux_functions:identity",
                "-q",
                "-j",
                "1",
                env=env,
            )
            assert result.returncode == 1 and hit.hits >= 1
            line = error_line(result.stderr)
            assert "timed out" in line and where in line, line
