"""Reads over http(s) and the Hub survive transient failures (issue 34): a cut body, a 503, a 429.

A fault-injecting proxy (tests/fault_proxy.py) stands in front of the static file server and the
Hub server and breaks responses by count: every few responses cut in the middle of the body at a
point drawn from a seeded RNG, some answered 503, one 429 with ``Retry-After: 1``. Every row
``shardkit.stream`` gives through it (bytes, values and types: tests/stream_resume.py's
``row_digest``) must equal an uninterrupted read of the same folder, for ZIP, tar and Parquet, in
a plain read and in a shuffled read of rank 1 of 3 (its cut shards are ranged reads). The proxy's
counts show the faults happened and that cut reads were resumed with ``Range``. After the retry
budget, one line names the URL (``SHARDKIT_NETWORK_RETRIES``); ``SHARDKIT_RETRY_WAIT`` shortens
the waits so that nothing here depends on timing.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import shardkit
from tests.fault_proxy import RANDOM, Fault, FaultProxy, run_fault_proxy
from tests.http_server import serve_directory, serve_handler
from tests.hub_server import run_hub_server
from tests.stream_resume import row_digest
from tests.support.corpus import REPO_ROOT
from tests.test_faults import error_line, shardkit_cli
from tests.test_push import hub_env, push

FORMATS = ("zip", "tar", "parquet")
SHARD_OR_MANIFEST = r"(/data/.*|shards\.json)$"
#: The reads of each soak: a plain one, and a shuffled one of rank 1 of 3 (of 2, each rank's share
#: is 8 whole shards of the 16; of 3, it cuts two: ranged reads of ZIP and Parquet).
READS: list[dict[str, Any]] = [{}, {"shuffle_seed": 7, "rank": 1, "world_size": 3}]
FAST = {"SHARDKIT_RETRY_WAIT": "0.01"}  # the first wait before a retry: the tests do not wait
GUARD = 120  # seconds a subprocess may take before the test calls it hung


@pytest.fixture(scope="module")
def folders(packed_template: Path, packed_example_tar_parquet: dict[str, Path]) -> dict[str, Path]:
    """The example packed in each format (16 shards each)."""
    return {"zip": packed_template, **packed_example_tar_parquet}


@pytest.fixture(scope="module")
def clean(folders: dict[str, Path]) -> dict[str, list[list[list[Any]]]]:
    """Each format's rows, for each of READS, read from the folder itself."""
    return {fmt: [read(str(folder), **options) for options in READS] for fmt, folder in folders.items()}


def read(source: str, **options: Any) -> list[list[Any]]:
    """Every row of a stream, in its order, as digests."""
    return [row_digest(row) for row in shardkit.stream(source, **options).decode(False)]


def soak_faults() -> list[Fault]:
    """Every 4th response to a shard or manifest cut mid-body (at a seeded random point), every
    7th answered 503, one 429 asking to wait a second."""
    return [
        Fault("status", path=SHARD_OR_MANIFEST, status=429, headers={"Retry-After": "1"}, every=9, times=1),
        Fault("cut_body", path=SHARD_OR_MANIFEST, after=RANDOM, every=4, seed=34),
        Fault("status", path=SHARD_OR_MANIFEST, status=503, every=7),
    ]


def assert_faults_met(faults: list[Fault], proxy: FaultProxy, fmt: str) -> None:
    """Each fault happened; a cut whole-file read was resumed with an open-ended Range."""
    assert all(f.hits >= 1 for f in faults), [(f.mode, f.status, f.hits) for f in faults]
    ranges = [r for _, r in proxy.log.ranges if r]
    if fmt != "parquet":  # a plain read of ZIP and tar is one GET per shard, without Range but to resume
        assert any(re.fullmatch(r"bytes=[1-9]\d*-", r) for r in ranges), ranges
    assert any(re.fullmatch(r"bytes=\d+-\d+", r) for r in ranges), ranges  # the cut pieces' ranged reads


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_stream_over_http_through_faults_gives_the_rows_of_a_clean_read(
    fmt: str, folders: dict[str, Path], clean: dict[str, list[list[list[Any]]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in FAST.items():
        monkeypatch.setenv(name, value)
    with serve_directory(folders[fmt]) as (base, _), run_fault_proxy(base) as proxy:
        faults = proxy.set(*soak_faults())
        got = [read(proxy.url + "/", **options) for options in READS]
        assert got == clean[fmt]
        assert_faults_met(faults, proxy, fmt)


#: A reader in another process (huggingface_hub reads HF_ENDPOINT once, at import): the digests
#: of each of READS (argv[2], JSON) of the Hub dataset argv[1], as one JSON line.
HUB_READER = r"""
import json, sys
from tests.test_stream_network import read
print(json.dumps([read(sys.argv[1], **options) for options in json.loads(sys.argv[2])]))
"""


@pytest.fixture(scope="module")
def hub_url(folders: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Hub server holding the example in each format, as tester/net-<format>."""
    root = tmp_path_factory.mktemp("hub")
    with run_hub_server(root / "state") as hub:
        for fmt, folder in folders.items():
            push(folder, hub_env(hub.url, root / "home"), repo=f"tester/net-{fmt}")
        yield hub.url


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_stream_from_the_hub_through_faults_gives_the_rows_of_a_clean_read(
    fmt: str, hub_url: str, clean: dict[str, list[list[list[Any]]]], tmp_path: Path
) -> None:
    with run_fault_proxy(hub_url) as proxy:
        faults = proxy.set(*soak_faults())
        env = {**hub_env(proxy.url, tmp_path / "home", token=None), **FAST, "PYTHONPATH": os.pathsep.join(sys.path)}
        result = subprocess.run(
            [sys.executable, "-c", HUB_READER, f"tester/net-{fmt}", json.dumps(READS)],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO_ROOT,
            timeout=GUARD,
            check=False,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        got = json.loads(result.stdout)
        assert got == json.loads(json.dumps(clean[fmt]))  # as JSON: the types are in each digest
        assert_faults_met(faults, proxy, fmt)
        assert "Traceback" not in result.stderr
        assert re.search(r"failed at byte \d+ \(.*\); asking again from there in", result.stderr)  # logged


# --- after the budget: one line ---------------------------------------------------------------------


BUDGET = {**FAST, "SHARDKIT_NETWORK_RETRIES": "2"}


@pytest.mark.parametrize(
    ("faults", "said"),
    [
        ([Fault("status", path=r"/data/", status=503)], r": the server answered 503 Service Unavailable\. "),
        (  # the first answer cut after 1000 bytes, every later one at once: no progress from byte 1000
            [Fault("cut_body", path=r"/data/", after=1000, times=1), Fault("cut_body", path=r"/data/", after=0)],
            r" \(RemoteProtocolError: .*\)\. ",
        ),
    ],
    ids=["always-503", "always-cut"],
)
def test_after_the_retry_budget_a_read_is_one_line_naming_the_url(
    faults: list[Fault], said: str, folders: dict[str, Path]
) -> None:
    with serve_directory(folders["tar"]) as (base, _), run_fault_proxy(base) as proxy:
        proxy.set(*faults)
        result = shardkit_cli("head", proxy.url + "/", "-n", "1", env={**os.environ, **BUDGET})
    assert result.returncode == 1 and "rows shown" in result.stdout  # the header, from the manifest
    line = error_line(result.stderr)
    at = " at byte 1000" if faults[0].mode == "cut_body" else ""
    assert re.fullmatch(
        rf"error: (the connection failed )?reading {re.escape(proxy.url)}/data/0\.tar{at} after 3 attempts{said}"
        r"Try again later, or raise SHARDKIT_NETWORK_RETRIES \(now 2\)\.",
        line,
    ), line
    assert sum(f.hits for f in faults) == 3
    assert result.stderr.count("asking again from there") == 2  # each retry logged, on stderr


def test_no_retry_when_the_budget_is_0_and_a_404_is_not_retried(folders: dict[str, Path]) -> None:
    with serve_directory(folders["parquet"]) as (base, _), run_fault_proxy(base) as proxy:
        [busy] = proxy.set(Fault("status", path=r"/data/", status=503))
        result = shardkit_cli("head", proxy.url + "/", env={**os.environ, **FAST, "SHARDKIT_NETWORK_RETRIES": "0"})
        assert result.returncode == 1 and busy.hits == 1
        assert error_line(result.stderr) == (
            f"error: reading {proxy.url}/data/0.parquet: the server answered 503 Service Unavailable. Try again."
        )
        [missing] = proxy.set(Fault("status", path=r"/data/3\.parquet", status=404))
        result = shardkit_cli("verify", proxy.url + "/", "-q", "--json", env={**os.environ, **FAST})
        gets = [e for e in proxy.log.entries if e[:2] == ("GET", "/data/3.parquet")]
    assert result.returncode == 1 and missing.hits >= 1 and len(gets) == 1  # missing: not asked again
    assert [p["text"] for p in json.loads(result.stdout)["problems"]] == ["data/3.parquet: missing"]


def test_ctrl_c_during_a_retry_wait_stops_at_once(folders: dict[str, Path]) -> None:
    env = {**os.environ, "SHARDKIT_RETRY_WAIT": "30", "SHARDKIT_NETWORK_RETRIES": "8"}
    with serve_directory(folders["zip"]) as (base, _), run_fault_proxy(base) as proxy:
        [fault] = proxy.set(Fault("status", path=r"/data/", status=503))
        shardkit_script = Path(sys.executable).parent / "shardkit"
        proc = subprocess.Popen(
            [str(shardkit_script), "head", proxy.url + "/", "-n", "1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stderr is not None
        logged = proc.stderr.readline()  # the retry's line: the reader now waits 15 to 30 s
        assert "asking again from there in" in logged, logged
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=GUARD)
    # Stopped in the wait: no second request was made (a wait that ran out would have asked again).
    assert proc.returncode == 130 and fault.hits == 1, (proc.returncode, fault.hits, err)
    assert "Traceback" not in err


def test_a_retry_setting_that_is_not_a_number_is_a_usage_error(folders: dict[str, Path]) -> None:
    with serve_directory(folders["zip"]) as (base, _):
        for name, value, rule in [
            ("SHARDKIT_NETWORK_RETRIES", "many", "is not a whole number of retries, 0 or more (e.g. 8)"),
            ("SHARDKIT_RETRY_WAIT", "-1", "is not a number of seconds 0 or more (e.g. 0.5)"),
        ]:
            result = shardkit_cli("head", base + "/", env={**os.environ, name: value})
            assert result.returncode == 2
            assert error_line(result.stderr) == f"error: {name}={value!r} {rule}"


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        ({"ETag": '"another"', "Content-Range": "bytes 1000-1000/100000"}, r"the file changed while it was read"),
        ({"Content-Range": "bytes 0-0/100000"}, r"asked for the bytes from 1000, the server sent them from 0"),
    ],
    ids=["another-etag", "another-start"],
)
def test_a_resumed_read_that_is_not_the_continuation_is_one_line(
    answer: dict[str, str], said: str, hub_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Hub server's files have an ETag: read here as an http(s) URL of the repo's resolve folder."""
    for name, value in FAST.items():
        monkeypatch.setenv(name, value)
    with run_fault_proxy(hub_url) as proxy:
        shard = r"/data/0\.zip$"
        faults = proxy.set(
            Fault("cut_body", path=shard, after=1000, times=1),
            Fault("status", path=shard, status=206, headers=answer, body=b"x", times=1),
        )
        url = f"{proxy.url}/datasets/tester/net-zip/resolve/main/"
        with pytest.raises(shardkit.ShardkitError) as raised:
            read(url)
    message = str(raised.value)
    assert [f.hits for f in faults] == [1, 1]
    assert re.fullmatch(rf"reading {re.escape(url)}data/0\.zip(: | at byte 1000: ){said}.*", message), message
    assert "\n" not in message


# --- servers that answer otherwise -------------------------------------------------------------------


@contextmanager
def serve_short_ranges(root: Path, most: int) -> Iterator[tuple[str, list[str]]]:
    """A file server on 127.0.0.1 that answers a ranged request with at most ``most`` bytes (a 206
    whose Content-Range says so, as HTTP allows), and gzips a whole file for a client that accepts
    it; yields its URL and the Accept-Encoding of every request."""
    import gzip
    from http.server import BaseHTTPRequestHandler

    encodings: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            encodings.append(self.headers.get("Accept-Encoding", ""))
            path = root / self.path.lstrip("/")
            if not path.is_file():
                self.send_error(404)
                return
            data = path.read_bytes()
            match = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
            if match:
                start = int(match.group(1))
                end = min(int(match.group(2)) + 1 if match.group(2) else len(data), start + most, len(data))
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
                body = data[start:end]
            else:
                self.send_response(200)
                body = data
                if "gzip" in self.headers.get("Accept-Encoding", ""):
                    body = gzip.compress(data)
                    self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    with serve_handler(Handler) as url:
        yield url, encodings


@pytest.mark.parametrize("fmt", FORMATS)
def test_short_ranged_answers_are_continued_and_bodies_are_asked_uncompressed(
    fmt: str, folders: dict[str, Path], clean: dict[str, list[list[list[Any]]]], caplog: pytest.LogCaptureFixture
) -> None:
    with serve_short_ranges(folders[fmt], most=5000) as (url, encodings):
        got = [read(url, **options) for options in READS]
    assert got == clean[fmt]
    assert encodings and set(encodings) == {"identity"}  # byte positions are the file's
    assert "asking again" not in caplog.text  # a short 206 is not a failure: no wait, no retry


def test_parquet_from_a_server_without_range_is_one_line(folders: dict[str, Path]) -> None:
    with (
        serve_directory(folders["parquet"], honour_range=False) as (url, _),
        pytest.raises(shardkit.ShardkitError) as raised,
    ):
        read(url)
    assert str(raised.value) == (
        f"cannot read {url}data/0.parquet out of order: the server does not answer ranged requests (Range),"
        " which reading part of a file needs"
    )


def test_a_server_that_sends_a_byte_and_cuts_each_time_ends_the_read(folders: dict[str, Path]) -> None:
    """Progress of a byte does not start a new count: a read must take a MiB between failures."""
    with serve_directory(folders["tar"]) as (base, _), run_fault_proxy(base) as proxy:
        [trickle] = proxy.set(Fault("cut_body", path=r"/data/0\.tar", after=1))
        result = shardkit_cli("head", proxy.url + "/", "-n", "1", env={**os.environ, **BUDGET})
    assert result.returncode == 1 and trickle.hits == 3
    assert error_line(result.stderr).startswith(
        f"error: the connection failed reading {proxy.url}/data/0.tar at byte 3 after 3 attempts ("
    )


def test_a_wait_the_server_asks_for_is_capped() -> None:
    from shardkit.location.network import MAX_ASKED_WAIT, retry_wait

    assert retry_wait(1, 3600, 0.5) == MAX_ASKED_WAIT == 60  # honoured, but no longer than a minute
    assert retry_wait(1, 5, 0.5) == 5
    assert 0.25 <= retry_wait(1, None, 0.5) <= 0.5


def test_answers_of_no_byte_end_the_read_after_the_budget(folders: dict[str, Path]) -> None:
    """A server that cuts a shard at byte 1000, then answers every resume with a 206 of no byte:
    each such answer is a failure of the budget (not a short part to continue at once, for ever)."""
    from http.server import BaseHTTPRequestHandler

    root = folders["tar"]
    cut: set[str] = set()  # the shards already cut once

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = (root / self.path.lstrip("/")).read_bytes()
            match = re.fullmatch(r"bytes=(\d+)-\d*", self.headers.get("Range", ""))
            start = int(match.group(1)) if match else 0
            if self.path.endswith("shards.json") or self.path not in cut:
                cut.add(self.path)
                self.send_response(200)  # the whole file, or from the start asked for, cut at byte 1000
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data if self.path.endswith("shards.json") else data[:1000])
            else:
                self.send_response(206)  # then a part of no byte, however often asked
                self.send_header("Content-Range", f"bytes {start}-{start - 1}/{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
            self.close_connection = True

        def log_message(self, *args: Any) -> None:
            pass

    with serve_handler(Handler) as url:
        result = shardkit_cli("head", url, "-n", "1", env={**os.environ, **BUDGET})
    assert result.returncode == 1, result.stderr[-2000:]
    line = error_line(result.stderr)
    said = f"error: the connection failed reading {url}data/0.tar at byte 1000 after 3 attempts ("
    assert line.startswith(said), line
