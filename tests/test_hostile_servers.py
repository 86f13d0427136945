"""Servers that answer what they should not: every case is one line naming the URL, exit code 1,
no secret printed, and no wait longer than SHARDKIT_NETWORK_TIMEOUT.

The fault-injecting proxy (tests/fault_proxy.py) stands in front of the Hub server and the static
file server and answers in their place: 429/503 asking to wait an hour, a 307 of an upload, a
redirect loop, an endless body, a 200 that is not JSON, an error body echoing the request's
headers. The client carries a Hub token shaped like a real one and, for plain URLs, a password
in the URL; neither may appear in anything it prints. No test measures time: each counts the
requests the proxy saw (a retry after a wait would be a second one) and the bytes it sent.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import shutil
import string
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import shardkit
from shardkit.errors import ShardkitError, redact, redact_log_records, server_text
from shardkit.location import MAX_API_BODY_BYTES
from shardkit.manifest import MAX_MANIFEST_BYTES
from tests.fault_proxy import ECHO, Fault, FaultProxy, run_fault_proxy
from tests.http_server import serve_directory
from tests.hub_server import TOKENS, HubServer, run_hub_server
from tests.support.corpus import REPO_ROOT
from tests.support.packing import pack_example
from tests.test_push import hub_env

TOKEN = "hf_" + string.ascii_letters[:34]  # shaped as the Hub's tokens are
PASSWORD = "s3cr3t-pw"
TIMEOUT = "2"  # SHARDKIT_NETWORK_TIMEOUT: far below the hour the servers ask for
GUARD = 120  # seconds a run may take before the test calls it hung (a guard, never what is checked)
ENDLESS = 300 << 20  # bytes of an endless body: far more than any bound
ENDLESS_MANIFEST = 4 * MAX_MANIFEST_BYTES  # an endless shards.json: far more than its bound
REPO = "tester/hostile"

#: Runs the CLI and reports the process's peak memory on its last stderr line.
MEASURED = """
import resource, sys
from shardkit.cli import main
try:
    main(sys.argv[1:], prog_name="shardkit")
finally:
    print(f"peak-rss-kb {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}", file=sys.stderr)
"""


@pytest.fixture(autouse=True)
def no_read_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """SHARDKIT_NETWORK_RETRIES=0: these tests check what a read says of a failure at once (each
    fault here breaks every matching request); reads that retry are tests/test_stream_network.py's."""
    monkeypatch.setenv("SHARDKIT_NETWORK_RETRIES", "0")


class Run:
    """A finished CLI run: exit code, stdout, stderr (without the memory line) and peak memory."""

    def __init__(self, result: subprocess.CompletedProcess[str]) -> None:
        lines = result.stderr.splitlines()
        peak = [line for line in lines if line.startswith("peak-rss-kb ")]
        self.returncode = result.returncode
        self.stdout = result.stdout
        self.stderr = "\n".join(line for line in lines if not line.startswith("peak-rss-kb "))
        self.peak_mb = int(peak[-1].split()[1]) / 1024 if peak else 0.0

    def error_line(self) -> str:
        """The run's one ``error:`` line; no traceback, no secret anywhere in its output."""
        assert "Traceback" not in self.stderr, self.stderr
        errors = [line for line in self.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, self.stderr
        for secret in (TOKEN, PASSWORD, TOKEN[3:]):
            assert secret not in self.stdout + self.stderr, self.stdout + self.stderr
        return errors[0]


def run(*args: str, env: dict[str, str]) -> Run:
    return Run(
        subprocess.run(
            [sys.executable, "-c", MEASURED, *args],
            capture_output=True,
            text=True,
            env={**env, "SHARDKIT_NETWORK_TIMEOUT": TIMEOUT},
            timeout=GUARD,
            check=False,
            cwd=REPO_ROOT,
        )
    )


def with_password(url: str) -> str:
    return url.replace("http://", f"http://user:{PASSWORD}@", 1)


def shown(url: str) -> str:
    """A URL as messages show it: its userinfo redacted."""
    return re.sub(r"//[^/@]+@", "//***@", url)


# --- what is shown: redact() and server_text() -----------------------------------------------------

SECRETS = [
    ("http://user:pass-word@host:8080/ds/shards.json", "pass-word", "http://***@host:8080/ds/shards.json"),
    (f"authorization: Bearer {TOKEN}", TOKEN[3:], "authorization: Bearer ***"),
    (f"Authorization: {TOKEN}", TOKEN[3:], "Authorization: ***"),
    ('{"headers": {"authorization": "Basic dXNlcjpwYXNz"}}', "dXNlcjpwYXNz", '"Basic ***"'),
    (f"the token {TOKEN} is invalid", TOKEN[3:], "the token hf_*** is invalid"),
    (
        "https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F&X-Amz-Signature=abc123",
        "abc123",
        "?X-Amz-Credential=***&X-Amz-Signature=***",
    ),
    ("https://cdn/x?sig=deadbeef&se=2030", "deadbeef", "?sig=***&se=2030"),
    ("https://h/x?token=t0k3n", "t0k3n", "?token=***"),
    ("key AKIAIOSFODNN7EXAMPLE in the log", "IOSFODNN7EXAMPLE", "key AKIA*** in the log"),
    ("aws_secret_access_key=wJalrXUtnFEMI/K7MDENG", "wJalrXUtnFEMI", "aws_secret_access_key=***"),
    ("Cookie: session=abcdef", "abcdef", "Cookie: ***"),
    # A password holding '@': clients take the userinfo up to the last '@' before the host.
    ("http://bob:p@SECRETss@127.0.0.1:9/ds", "SECRETss", "http://***@127.0.0.1:9/ds"),
    ("https://u:a@b@c@host/x?q=1", "a@b@c", "https://***@host/x?q=1"),
    ("s3://key:se@cret@bucket/ds", "cret", "s3://***@bucket/ds"),
    # A token holding a line break or a control character, as given and as repr shows it.
    ("Illegal header value b'Bearer hf_X\\nSECRET'", "SECRET", "b'Bearer ***'"),
    ("Bearer hf_X\nSECRET rest", "SECRET", "Bearer *** rest"),
    ("Bearer hf_X\x1bSECRET\u2028more", "SECRET", "Bearer ***"),
    ("authorization: tok\rSECRET", "SECRET", "authorization: ***"),
    ("Basic dXNl\\x00SECRET, next", "SECRET", "Basic ***, next"),
]


@pytest.mark.parametrize(("text", "secret", "expected"), SECRETS)
def test_redact_removes_every_secret_shape_and_keeps_the_rest(text: str, secret: str, expected: str) -> None:
    redacted = redact(text)
    assert secret not in redacted and expected in redacted


def test_redact_leaves_text_without_secrets_as_it_is() -> None:
    for text in [
        "hf://datasets/ns/name@v1.0/data/3.zip",
        "hf_hub_download failed",
        "the token is read-only",
        "s3://bucket/ds",
        "write to me@example.org",
        "http://host/a@b/c",
        "hf://datasets/ns/name@v1.0/data/3.zip and user@example.org",
    ]:
        assert redact(text) == text


def test_a_servers_text_is_cut_escaped_and_redacted() -> None:
    text = server_text(f"bad\nerror: forged line\x1b[2J authorization: Bearer {TOKEN} " + "x" * 10_000)
    assert "\n" not in text and "\x1b" not in text and "\\nerror: forged line\\x1b[2J" in text
    assert TOKEN not in text and len(text) < 400 and text.endswith("...")


def test_a_shardkit_error_is_redacted_as_it_is_made() -> None:
    assert str(ShardkitError(f"cannot read http://u:{PASSWORD}@h/x ({TOKEN})")) == "cannot read http://***@h/x (hf_***)"


def test_a_log_record_is_redacted_and_one_line_as_it_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """Warnings name paths (a line break in one must not forge a line) and libraries log URLs."""
    records: list[logging.LogRecord] = []
    monkeypatch.setattr(logging, "_logRecordFactory", logging.getLogRecordFactory())  # restored after
    redact_log_records()
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    log = logging.getLogger("shardkit.test_redact")
    log.addHandler(handler)
    try:
        log.warning("%s: left out\nWARNING: forged (%s)", "/tmp/a\nb", f"http://u:p@ss@h/x {TOKEN}")
    finally:
        log.removeHandler(handler)
    assert [r.getMessage() for r in records] == ["/tmp/a\\nb: left out\\nWARNING: forged (http://***@h/x hf_***)"]


def test_a_shardkit_error_is_redacted_and_one_line_as_it_is_made_a_list_one_line_each() -> None:
    """A path may hold a line break, an escape or a lone surrogate: the message stays one line
    that prints; a message of several lines is given as their list."""
    one = ShardkitError("/tmp/a\nerror: forged\x1b[2J\ud800/x.jsonl:3: bad row (Bearer hf_X\nSECRET)")
    assert str(one) == "/tmp/a\\nerror: forged\\x1b[2J\\ud800/x.jsonl:3: bad row (Bearer ***)"
    lines = ShardkitError(["2 problems:", "  a\nb:1: x", f"  http://u:p@ss@h/\u2028: {TOKEN}"])
    assert str(lines).split("\n") == ["2 problems:", "  a\\nb:1: x", "  http://***@h/\\u2028: hf_***"]


# --- push to a Hub that answers what it should not ---------------------------------------------------


@pytest.fixture(scope="module")
def packed_example_zip_parquet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hostile")
    out = {}
    for fmt in ("zip", "parquet"):
        out[fmt] = root / f"hostile-{fmt}"
        result = pack_example(out[fmt], "--format", fmt, "-q")
        assert result.returncode == 0, result.stderr
    return out


@pytest.fixture(autouse=True, scope="module")
def real_looking_token() -> Iterator[None]:
    TOKENS[TOKEN] = "write"  # the Hub server takes it as a write token
    yield
    del TOKENS[TOKEN]


@pytest.fixture
def proxied_hub(tmp_path: Path) -> Iterator[tuple[HubServer, FaultProxy, dict[str, str]]]:
    """A fresh Hub server behind the proxy, and the environment of a push to it with TOKEN."""
    with run_hub_server(tmp_path / "hub") as server, run_fault_proxy(server.url) as proxy:
        server.url = proxy.url  # the links it hands out (LFS uploads) go through the proxy too
        yield server, proxy, hub_env(proxy.url, tmp_path / "home", token=TOKEN)


@pytest.fixture
def repo(packed_example_zip_parquet: dict[str, Path], tmp_path: Path) -> Path:
    return Path(shutil.copytree(packed_example_zip_parquet["zip"], tmp_path / "hostile-zip"))


WAIT_AN_HOUR = {"Retry-After": "3600"}
TREE = f"/api/datasets/{REPO}/tree/"

#: A fault a push meets, and what its one line must say.
PUSH_FAULTS = {
    "429 asking to wait an hour": (
        Fault("status", method="POST", path="/preupload/", status=429, headers=WAIT_AN_HOUR),
        "429 Too Many Requests and asked to wait 3600 s before trying again, longer than SHARDKIT_NETWORK_TIMEOUT=2",
    ),
    "503 asking to wait an hour": (
        Fault("status", method="GET", path="/api/whoami", status=503, headers=WAIT_AN_HOUR),
        "503 Service Unavailable and asked to wait 3600 s",
    ),
    "429 whose rate limit resets in an hour": (
        Fault(
            "status",
            method="GET",
            path=TREE,
            status=429,
            headers={"RateLimit": '"api";r=0;t=3600', "RateLimit-Policy": '"fixed window";"api";q=500;w=300'},
        ),
        "429 Too Many Requests and asked to wait 3600 s",
    ),
    "307 of an upload to itself": (
        Fault("redirect", method="PUT", path="^/lfs-upload/", status=307),
        "307 Temporary Redirect (to /lfs-upload/",
    ),
    "307 of an upload elsewhere": (
        Fault("redirect", method="PUT", path="^/lfs-upload/", status=307, to="/elsewhere/upload"),
        "307 Temporary Redirect (to /elsewhere/upload) for an upload",
    ),
    "a redirect loop": (
        Fault("redirect", method="GET", path=TREE, status=302),
        "the server redirected too many times (a redirect loop?)",
    ),
    "an endless tree listing": (
        Fault("endless", method="GET", path=TREE, status=200, size=ENDLESS),
        f"the server's answer is over {MAX_API_BODY_BYTES} bytes",
    ),
    "a compressed answer (a bomb: its bound counts bytes sent)": (
        Fault(
            "status",
            method="GET",
            path="/api/whoami",
            status=200,
            headers={"Content-Encoding": "gzip"},
            body=gzip.compress(b"[" * (1 << 20)),
        ),
        "the server answered 200 OK, compressed (gzip) though asked not to be",
    ),
    "a 200 that is not JSON": (
        Fault("status", method="GET", path="/api/whoami", status=200, body=b"<html>a captive portal</html>"),
        "answered with something that is not JSON while checking the token",
    ),
    "an error echoing the request's headers": (
        Fault("status", method="GET", path="/api/whoami", status=403, body=ECHO),
        "403 Forbidden: GET /api/whoami-v2 HTTP/1.1",
    ),
    "an error quoting the token first": (
        Fault("status", method="POST", path="/preupload/", status=400, body=f"Authorization: Bearer {TOKEN}".encode()),
        "(400: Authorization: Bearer ***)",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(PUSH_FAULTS))
def test_a_push_to_a_hostile_hub_ends_in_one_line_naming_the_url_without_waiting(
    case: str, proxied_hub: tuple[HubServer, FaultProxy, dict[str, str]], repo: Path
) -> None:
    server, proxy, env = proxied_hub
    fault, said = PUSH_FAULTS[case]
    proxy.set(fault)
    result = run("push", str(repo), "--repo", REPO, "--json", env=env)
    assert result.returncode == 1 and fault.hits >= 1
    line = result.error_line()
    assert said in line and proxy.url in line, line
    faulted = [(method, path) for method, path, mode in proxy.log.entries if mode is not None]
    if fault.mode == "redirect" and not fault.to:
        assert len(faulted) > 1  # a loop: the client followed some hops, then stopped
    else:  # never asked again: neither after the hour it was asked to wait, nor after a redirect
        assert len(set(faulted)) == len(faulted), faulted
    if fault.mode == "endless":
        assert fault.sent < 4 * MAX_API_BODY_BYTES < ENDLESS
    assert server.counters.commits == 0


@pytest.mark.slow
def test_a_push_waits_out_a_short_retry_after_and_completes(
    proxied_hub: tuple[HubServer, FaultProxy, dict[str, str]], repo: Path
) -> None:
    """A wait the timeout allows is honoured (huggingface_hub retries after it)."""
    server, proxy, env = proxied_hub
    [fault] = proxy.set(
        Fault("status", method="POST", path="/preupload/", status=503, headers={"Retry-After": "1"}, times=2)
    )
    result = run("push", str(repo), "--repo", REPO, "--json", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert fault.hits == 2 and server.counters.commits >= 1
    assert TOKEN not in result.stdout + result.stderr


@pytest.mark.slow
def test_a_hub_endpoint_with_a_password_is_never_printed(tmp_path: Path, repo: Path) -> None:
    with run_hub_server(tmp_path / "hub") as server:
        env = hub_env(with_password(server.url), tmp_path / "home", token=TOKEN)
        result = run("push", str(repo), "--repo", REPO, "--json", env=env)
    assert result.returncode == 1
    assert shown(with_password(server.url)) in result.error_line()


# --- verify hf://: the same client, bounded the same way ------------------------------------------------


@pytest.fixture(scope="module")
def hub_with_parquet(
    packed_example_zip_parquet: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HubServer]:
    root = tmp_path_factory.mktemp("hub")
    with run_hub_server(root / "state") as server:
        copy = Path(shutil.copytree(packed_example_zip_parquet["parquet"], root / "hostile-parquet"))
        pushed = run("push", str(copy), "--repo", REPO, "-q", env=hub_env(server.url, root / "home", token=TOKEN))
        assert pushed.returncode == 0, pushed.stderr[-2000:]
        yield server


VERIFY_HUB_FAULTS = {
    "429 on a shard asking to wait an hour": (
        Fault("status", path=r"/resolve/main/data/3\.parquet", status=429, headers=WAIT_AN_HOUR),
        "/resolve/main/data/3.parquet: the server answered 429 Too Many Requests and asked to wait 3600 s",
    ),
    "an endless tree listing": (
        Fault("endless", path="/tree/", status=200, size=ENDLESS),
        f"the server's answer is over {MAX_API_BODY_BYTES} bytes",
    ),
    "an endless shards.json": (
        Fault("endless", path=r"/resolve/main/shards\.json", status=200, size=ENDLESS),
        "/resolve/main/shards.json: the server's answer is over",
    ),
    "a redirect loop on shards.json": (
        Fault("redirect", path=r"/resolve/main/shards\.json", status=302),
        "the server redirected too many times",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(VERIFY_HUB_FAULTS))
def test_verify_of_a_hostile_hub_ends_in_one_line_naming_the_url(
    case: str, hub_with_parquet: HubServer, tmp_path: Path
) -> None:
    fault, said = VERIFY_HUB_FAULTS[case]
    with run_fault_proxy(hub_with_parquet.url) as proxy:
        env = hub_env(proxy.url, tmp_path / "home", token=TOKEN)
        ok = run("verify", f"hf://datasets/{REPO}", "-q", env=env)
        assert ok.returncode == 0 and ok.stdout.endswith(": OK\n"), ok.stderr
        proxy.set(fault)
        result = run("verify", f"hf://datasets/{REPO}", "-q", "--json", env=env)
    assert result.returncode == 1 and fault.hits >= 1
    line = result.error_line()
    assert said in line and (proxy.url in line or f"hf://datasets/{REPO}/" in line), line
    if fault.mode == "status":
        assert fault.hits == 1  # not asked again after the hour
    if fault.mode == "endless":
        assert fault.sent < 4 * MAX_API_BODY_BYTES < ENDLESS


# --- an http(s) URL with a password in it -----------------------------------------------------------------


@pytest.fixture
def url_server(packed_example_zip_parquet: dict[str, Path]) -> Iterator[tuple[FaultProxy, str]]:
    """The Parquet pack served over HTTP behind the proxy; its URL with a password in it."""
    with serve_directory(packed_example_zip_parquet["parquet"]) as (base, _), run_fault_proxy(base) as proxy:
        yield proxy, with_password(proxy.url) + "/"


@pytest.mark.slow
def test_a_429_on_a_parquet_shard_is_not_a_missing_shard(url_server: tuple[FaultProxy, str]) -> None:
    proxy, url = url_server
    for headers in ({}, WAIT_AN_HOUR):
        [fault] = proxy.set(Fault("status", path=r"/data/3\.parquet", status=429, headers=headers))
        result = run("verify", url, "-q", env=dict(os.environ))
        assert result.returncode == 1 and fault.hits >= 1
        line = result.error_line()
        assert f"{shown(url)}data/3.parquet: the server answered 429 Too Many Requests" in line, line
        assert "missing" not in result.stdout + line

    [fault] = proxy.set(Fault("status", path=r"/data/3\.parquet", status=404))  # only a 404 is missing
    result = run("verify", url, "-q", "--json", env=dict(os.environ))
    assert result.returncode == 1 and fault.hits >= 1
    report = json.loads(result.stdout)
    assert [p["text"] for p in report["problems"]] == ["data/3.parquet: missing"]
    assert report["out_dir"] == shown(url).rstrip("/")
    assert PASSWORD not in result.stdout + result.stderr


@pytest.mark.slow
def test_a_stream_of_a_parquet_shard_answering_429_is_one_line_naming_it(
    url_server: tuple[FaultProxy, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy, url = url_server
    monkeypatch.setenv("SHARDKIT_NETWORK_TIMEOUT", TIMEOUT)
    [fault] = proxy.set(Fault("status", path=r"/data/", status=429, headers=WAIT_AN_HOUR))
    with pytest.raises(ShardkitError) as raised:
        next(iter(shardkit.stream(url)))
    assert fault.hits >= 1
    message = str(raised.value)
    assert "\n" not in message and "the server answered 429 Too Many Requests" in message
    assert shown(url) in message and PASSWORD not in message


URL_FAULTS = {
    "an endless shards.json": (
        Fault("endless", path=r"/shards\.json", status=200, size=ENDLESS_MANIFEST),
        f"shards.json: larger than {MAX_MANIFEST_BYTES} bytes",
        1,
    ),
    "a shards.json that is not JSON": (
        Fault("status", path=r"/shards\.json", status=200, body=b"<html>a captive portal</html>"),
        "shards.json: not a shardkit manifest (not JSON: Expecting value",
        1,
    ),
    "a redirect loop": (
        Fault("redirect", path=r"/shards\.json", status=302),
        "shards.json: the server redirected too many times (a redirect loop?)",
        1,
    ),
    "an error echoing the request's headers": (
        Fault(
            "status", path=r"/shards\.json", status=500, body=f"authorization: Bearer {TOKEN}\r\nerror: forged".encode()
        ),
        "shards.json: the server answered 500 Internal Server Error",
        1,
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(URL_FAULTS))
def test_verify_of_a_hostile_url_ends_in_one_line_naming_it(case: str, url_server: tuple[FaultProxy, str]) -> None:
    proxy, url = url_server
    fault, said, code = URL_FAULTS[case]
    baseline = run("verify", url, "-q", env=dict(os.environ))  # the same run, for its memory
    assert baseline.returncode == 0, baseline.stderr
    proxy.set(fault)
    result = run("verify", url, "-q", "--json", env=dict(os.environ))
    assert result.returncode == code and fault.hits >= 1
    line = result.error_line()
    assert shown(url) in line and said in line, line
    if fault.mode == "endless":
        assert fault.sent < 2 * MAX_MANIFEST_BYTES + (32 << 20) < ENDLESS_MANIFEST
        # Held at most twice (the bytes, joined); all of it would be four times the bound, and more.
        assert result.peak_mb - baseline.peak_mb < 3 * MAX_MANIFEST_BYTES / 2**20, (result.peak_mb, baseline.peak_mb)


@pytest.mark.slow
def test_a_push_reads_the_published_manifest_only_up_to_its_bound(
    proxied_hub: tuple[HubServer, FaultProxy, dict[str, str]], repo: Path
) -> None:
    """The repo's own shards.json (what a push may delete) is read whole, never more than a
    manifest; one that is not JSON deletes nothing."""
    server, proxy, env = proxied_hub
    first = run("push", str(repo), "--repo", REPO, "-q", env=env)
    assert first.returncode == 0, first.stderr[-2000:]
    published = server.files(REPO)

    [fault] = proxy.set(
        Fault("endless", method="GET", path=r"/resolve/[0-9a-f]+/shards\.json", status=200, size=ENDLESS_MANIFEST)
    )
    result = run("push", str(repo), "--repo", REPO, "--json", env=env)
    assert result.returncode == 1 and fault.hits == 1
    line = result.error_line()
    assert (
        f"{proxy.url}/datasets/{REPO}/resolve/" in line and f"shards.json: more than {MAX_MANIFEST_BYTES} bytes" in line
    )
    assert fault.sent < 2 * MAX_MANIFEST_BYTES + (32 << 20) < ENDLESS_MANIFEST

    [fault] = proxy.set(
        Fault("status", method="GET", path=r"/resolve/[0-9a-f]+/shards\.json", status=200, body=b"<html>")
    )
    again = run("push", str(repo), "--repo", REPO, "--json", env=env)
    assert again.returncode == 0 and fault.hits == 1, again.stderr[-2000:]
    assert json.loads(again.stdout)["deleted_files"] == 0 and server.files(REPO) == published


def test_an_endless_metadata_file_is_read_only_up_to_its_bound(
    url_server: tuple[FaultProxy, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify reads each metadata/<stem>.jsonl whole; the bound (2 GiB, too much to send in a
    test) is lowered to 1 MiB here, the server sends 300 MB."""
    from shardkit import manifest, verify

    proxy, url = url_server
    monkeypatch.setattr(manifest, "MAX_METADATA_FILE_BYTES", 1 << 20)  # (read_published_rows reads the rows)
    [fault] = proxy.set(Fault("endless", path=r"/metadata/3\.jsonl", status=200, size=ENDLESS))
    with pytest.raises(ShardkitError) as raised:
        verify.verify(url, threads=1)
    message = str(raised.value)
    assert message.startswith(f"{shown(url)}metadata/3.jsonl: more than {1 << 20} bytes") and "\n" not in message
    assert fault.sent < (64 << 20) and PASSWORD not in message


STREAM_FAULTS = {
    "an endless shards.json": (
        Fault("endless", path=r"/shards\.json", status=200, size=ENDLESS_MANIFEST),
        f"shards.json: larger than {MAX_MANIFEST_BYTES} bytes",
    ),
    "a redirect loop on a shard": (
        Fault("redirect", path=r"/data/", status=302),
        "the server redirected too many times (a redirect loop?)",
    ),
    "a 503 on a shard asking to wait an hour": (
        Fault("status", path=r"/data/", status=503, headers=WAIT_AN_HOUR, body=f"Bearer {TOKEN}\nforged".encode()),
        "the server answered 503 Service Unavailable",
    ),
}


@pytest.mark.parametrize("case", list(STREAM_FAULTS))
def test_a_stream_from_a_hostile_url_is_one_line_naming_it(
    case: str, packed_example_zip_parquet: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """shardkit.stream reads a ZIP pack with one GET per file (huggingface_hub's client, not fsspec's)."""
    fault, said = STREAM_FAULTS[case]
    monkeypatch.setenv("SHARDKIT_NETWORK_TIMEOUT", TIMEOUT)
    with serve_directory(packed_example_zip_parquet["zip"]) as (base, _), run_fault_proxy(base) as proxy:
        url = with_password(proxy.url) + "/"
        proxy.set(fault)
        with pytest.raises(ShardkitError) as raised:
            next(iter(shardkit.stream(url)))
    message = str(raised.value)
    assert fault.hits >= 1 and said in message and shown(url) in message, message
    assert "\n" not in message and PASSWORD not in message and TOKEN not in message
    if fault.mode == "endless":
        assert fault.sent < 2 * MAX_MANIFEST_BYTES + (32 << 20) < ENDLESS_MANIFEST
