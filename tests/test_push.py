"""``shardkit push`` / ``pack-shards --push`` against a Hub-API server on 127.0.0.1.

The real huggingface_hub client does the talking (``HF_ENDPOINT`` points it at the test server,
``HF_HUB_DISABLE_XET=1`` makes it use classic LFS), and real ``datasets`` 5.x and 3.6 read the
result back from the same server. Pushes run as subprocesses: huggingface_hub reads its
environment once, at import.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub.utils.sha import git_hash

from shardkit.errors import UsageError
from shardkit.manifest import read_manifest
from shardkit.outdir import unnamed_files
from shardkit.push import LocalFile, RemoteFile, collect_files, ignore_rules, is_ignored, plan_commits
from tests.hub_server import READ_TOKEN, WRITE_TOKEN, HubServer, run_hub_server
from tests.support.corpus import Corpus
from tests.support.packing import pack_example_here
from tests.support.readback import DS36_PYTHON, expected_rows, read_with

SCRIPTS = Path(sys.executable).parent
REPO = "tester/yfcc-mini"


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[HubServer]:
    with run_hub_server(tmp_path / "hub-state") as server:
        yield server


def hub_env(endpoint: str, home: Path, *, token: str | None = WRITE_TOKEN, xet: bool = False) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1", NO_PROXY="127.0.0.1")
    if not xet:
        env["HF_HUB_DISABLE_XET"] = "1"
    if token:
        env["HF_TOKEN"] = token
    return env


def shardkit(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPTS / "shardkit"), *args], capture_output=True, text=True, env=env, timeout=300, check=False
    )


def push(out_dir: Path, env: dict[str, str], *args: str, repo: str = REPO) -> dict[str, Any]:
    result = shardkit("push", str(out_dir), "--repo", repo, "--json", *args, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)  # type: ignore[no-any-return]


@contextlib.contextmanager
def pushed_copy(folder: Path, tmp_path: Path) -> Iterator[tuple[HubServer, dict[str, Any]]]:
    """A copy of a packed ``folder`` (at ``tmp_path/<its name>``) pushed as REPO to a fresh Hub
    server; yields the server, its log cleared, and the push summary."""
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("lock"))
    with run_hub_server(tmp_path / "hub") as hub:
        summary = push(copy, hub_env(hub.url, tmp_path / "home"))
        hub.log.clear()
        yield hub, summary


def local_files(out_dir: Path) -> dict[str, bytes]:
    """What a push should publish: the repo folder minus shardkit's work dir and .gitignore'd files."""
    out = {}
    for path in sorted(out_dir.rglob("*")):
        rel = path.relative_to(out_dir).as_posix()
        if path.is_file() and not rel.startswith(".shardkit/") and "__pycache__" not in rel:
            out[rel] = path.read_bytes()
    return out


def remote_files(hub: HubServer, revision: str = "main", repo: str = REPO) -> dict[str, bytes]:
    return {p: hub.read_file(repo, p, revision) for p in hub.files(repo, revision)}


def main_history(hub: HubServer, repo: str = REPO) -> list[dict[str, Any]]:
    """main's commits, oldest first."""
    state = hub.state.load("dataset", repo)
    assert state is not None
    commits, sha = [], state["refs"]["main"]
    while sha:
        commits.append(state["commits"][sha])
        sha = state["commits"][sha]["parent"]
    return commits[::-1]


def lfs_objects(hub: HubServer, repo: str = REPO) -> int:
    """Distinct LFS objects main holds: what a push must upload once (shards, and more as .gitattributes says)."""
    return len({entry["sha256"] for entry in hub.files(repo).values() if entry["lfs"]})


# --- the whole path: pack, push, stream back with both datasets versions ---------------------------


@pytest.mark.slow
def test_push_then_datasets_5_and_3_6_stream_every_row_back(hub: HubServer, repo_dir: Path, tmp_path: Path) -> None:
    env = hub_env(hub.url, tmp_path / "home")
    summary = push(repo_dir, env, "--files-per-commit", "10")

    published = local_files(repo_dir)
    assert summary["created_repo"] is True
    assert summary["uploaded_files"] == len(published) and summary["skipped_files"] == 0
    assert summary["uploaded_bytes"] == sum(len(b) for b in published.values())
    # 16 shards + 16 metadata files, 10 files (5 pairs) a commit -> 4 commits, then the card commit.
    assert summary["commits"] == 5
    assert summary["url"] == f"{hub.url}/datasets/{REPO}"
    assert summary["commit"] == hub.refs(REPO)["main"]
    assert remote_files(hub) == published

    # Nothing ever names a shard the repo does not hold: the manifest and card come in the last commit.
    history = main_history(hub)
    assert [("shards.json" in c["files"], "README.md" in c["files"]) for c in history[1:]] == [(False, False)] * 4 + [
        (True, True)
    ]
    for commit in history:
        zips = {p for p in commit["files"] if p.endswith(".zip")}
        metas = {p for p in commit["files"] if p.endswith(".jsonl")}
        assert {p.replace("data/", "metadata/").replace(".zip", ".jsonl") for p in zips} == metas

    # The script branch: main's files plus the loading script under the name datasets 3.6 looks for.
    loader = (repo_dir / "yfcc_mini_loader.py").read_bytes()
    assert remote_files(hub, "script") == {**published, "yfcc-mini.py": loader}
    assert summary["script_branch"] == "script" and summary["script_commit"] == hub.refs(REPO)["script"]

    reader_env = hub_env(hub.url, tmp_path / "reader-home", token=None)
    # datasets 5 decodes hf:// media in threads unless told not to; the test wants the raw bytes.
    got = read_with(sys.executable, REPO, True, tmp_path / "cache5", env=reader_env, decode_num_threads=0)
    assert got["version"].startswith("5.") and got["rows"] == expected_rows()

    assert Path(DS36_PYTHON).exists(), f"{DS36_PYTHON} missing: scripts/test.sh builds it"
    got = read_with(
        DS36_PYTHON, REPO, True, tmp_path / "cache36", env=reader_env, revision="script", trust_remote_code=True
    )
    assert got["version"] == "3.6.0" and got["rows"] == expected_rows()
    assert got["n_shards"] == 16  # the script path: one unit of work per ZIP
    assert hub.unknown == []  # every request the clients made has a route


@pytest.mark.slow
def test_a_second_push_sends_nothing_and_makes_no_commit(hub: HubServer, repo_dir: Path, tmp_path: Path) -> None:
    env = hub_env(hub.url, tmp_path / "home")
    first = push(repo_dir, env)
    uploads, commits = hub.counters.lfs_uploads, hub.counters.commits
    again = push(repo_dir, env)
    assert again["uploaded_files"] == 0 and again["commits"] == 0 and again["commit_url"] is None
    assert again["skipped_files"] == first["uploaded_files"]
    assert again["commit"] == first["commit"] and again["script_commit"] == first["script_commit"]
    assert (hub.counters.lfs_uploads, hub.counters.commits) == (uploads, commits)


# --- interruptions -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_upload_failing_part_way_resumes_and_sends_only_what_was_missing(
    hub: HubServer, repo_dir: Path, tmp_path: Path
) -> None:
    env = hub_env(hub.url, tmp_path / "home")
    hub.faults.lfs_uploads_before_failure = 6
    failed = shardkit("push", str(repo_dir), "--repo", REPO, "--files-per-commit", "10", env=env)
    assert failed.returncode == 1, failed.stderr
    assert "failed while uploading" in failed.stderr and "507" in failed.stderr
    assert "Re-run the same command to resume" in failed.stderr
    assert "Traceback" not in failed.stderr
    assert hub.counters.lfs_uploads == 6
    # The first commit (.gitattributes + 4 shards with their metadata) made it; nothing names a missing shard.
    committed = set(hub.files(REPO))
    assert len(committed) == 9 and "shards.json" not in committed and "README.md" not in committed

    hub.faults.lfs_uploads_before_failure = None
    summary = push(repo_dir, env, "--files-per-commit", "10")
    assert remote_files(hub) == local_files(repo_dir)
    assert summary["skipped_files"] == len(committed)
    assert summary["uploaded_files"] == len(local_files(repo_dir)) - len(committed)
    # Every LFS object went up exactly once over the two runs: the 6 stored before the failure
    # were not sent again (the LFS batch endpoint said the server had them).
    assert hub.counters.lfs_uploads == lfs_objects(hub)


@pytest.mark.slow
def test_commit_failing_part_way_resumes_from_the_committed_batches(
    hub: HubServer, repo_dir: Path, tmp_path: Path
) -> None:
    env = hub_env(hub.url, tmp_path / "home")
    hub.faults.commits_before_failure = 2
    failed = shardkit("push", str(repo_dir), "--repo", REPO, "--files-per-commit", "10", env=env)
    assert failed.returncode == 1 and "Re-run the same command to resume" in failed.stderr
    committed = set(hub.files(REPO))
    assert len(committed) == 9 + 10  # .gitattributes + 4 shard pairs, then 5 pairs
    uploads_before = hub.counters.lfs_uploads

    hub.faults.commits_before_failure = None
    summary = push(repo_dir, env, "--files-per-commit", "10")
    assert summary["skipped_files"] == len(committed)
    assert summary["uploaded_files"] == len(local_files(repo_dir)) - len(committed)
    assert remote_files(hub) == local_files(repo_dir)
    # The third batch's shards reached storage before its commit failed: they are not sent again.
    assert hub.counters.lfs_uploads == lfs_objects(hub)
    assert uploads_before > 10


@pytest.mark.slow
def test_pushing_a_repacked_dataset_replaces_the_old_shards_in_the_final_commit(
    hub: HubServer, repo_dir: Path, tmp_path: Path
) -> None:
    env = hub_env(hub.url, tmp_path / "home")
    push(repo_dir, env)
    old = {p for p in hub.files(REPO) if p.endswith((".zip", ".jsonl"))}
    # Smaller shards: each prefix group is split into parts (data/0-00.zip ...), new names.
    repack = pack_example_here(
        repo_dir, "--max-shard-size", "60KB", "--target-shard-size", "30KB", "--prefix-length", "1", "--force", "-q"
    )
    assert repack.returncode == 0, repack.stderr
    summary = push(repo_dir, env)
    assert summary["deleted_files"] == len(old) == 32
    assert remote_files(hub) == local_files(repo_dir)
    assert not old & set(hub.files(REPO))
    reader_env = hub_env(hub.url, tmp_path / "reader-home", token=None)
    got = read_with(sys.executable, REPO, True, tmp_path / "cache", env=reader_env, decode_num_threads=0)
    assert got["rows"] == expected_rows()  # no row twice, none missing


# --- pack-shards --push, options -----------------------------------------------------------------------


@pytest.mark.slow
def test_pack_shards_push_packs_and_pushes_in_one_command(hub: HubServer, make_corpus: Any, tmp_path: Path) -> None:
    corpus: Corpus = make_corpus(30)
    out = tmp_path / "out"
    env = hub_env(hub.url, tmp_path / "home")
    result = subprocess.run(
        [
            str(SCRIPTS / "pack-shards"),
            str(corpus.images),
            str(corpus.meta),
            "-o",
            str(out),
            "--push",
            "tester/small",
            "--private",
            "--revision",
            "v1",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["rows"] == 30 and summary["push"]["repo_id"] == "tester/small"
    assert summary["push"]["revision"] == "v1" and summary["push"]["script_branch"] is None
    assert "no 'script' branch" in result.stderr  # packed without the template: no loading script
    state = hub.state.load("dataset", "tester/small")
    assert state is not None and state["private"] is True
    assert hub.files("tester/small", "main") == {}  # pushed to v1 only
    assert remote_files(hub, "v1", "tester/small") == local_files(out)


# --- errors: a message that says what to do, exit 1 or 2, the token never shown ------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "code", "says"),
    [
        ("no token", 1, ["no Hugging Face token", "hf auth login", "HF_TOKEN"]),
        ("invalid token", 1, ["refused the token", "401", "hf auth login"]),
        ("read-only token", 1, ["token is read-only", "write access"]),
        ("other namespace", 1, ["may not write to 'someone-else'", "403"]),
        ("repo is a model", 1, ["tester/yfcc-mini exists on the Hub as a model, not a dataset", "--repo"]),
        ("hub down", 1, ["cannot reach the Hub at http://127.0.0.1:", "HF_ENDPOINT", "resume"]),
        ("changed shard", 1, ["differ from shards.json; nothing was uploaded", "data/3.zip", "pack"]),
        ("stray shard", 2, ["shards.json does not name (data/zz.zip)"]),
        ("bad repo id", 2, ["'a/b/c' is not a Hub repo id"]),
        ("not packed", 2, ["has no shards.json: pack it first"]),
        ("locked", 2, ["another shardkit run is working on", "wait for it to finish"]),
    ],
)
def test_push_errors_say_what_to_do(
    case: str, code: int, says: list[str], hub: HubServer, repo_dir: Path, tmp_path: Path
) -> None:
    token, endpoint, repo, out = WRITE_TOKEN, hub.url, REPO, repo_dir
    if case == "no token":
        token = ""
    elif case == "invalid token":
        token = "hf_not_a_real_token_555"
    elif case == "read-only token":
        token = READ_TOKEN
    elif case == "other namespace":
        repo = "someone-else/yfcc-mini"
    elif case == "repo is a model":
        hub.state.create_repo("model", REPO, private=False)
    elif case == "hub down":
        endpoint = f"http://127.0.0.1:{_free_port()}"
    elif case == "changed shard":
        shard = repo_dir / "data" / "3.zip"
        data = bytearray(shard.read_bytes())
        data[100] ^= 0xFF
        shard.write_bytes(bytes(data))
    elif case == "stray shard":
        (repo_dir / "data" / "zz.zip").write_bytes(b"PK")
    elif case == "bad repo id":
        repo = "a/b/c"
    elif case == "not packed":
        out = tmp_path / "empty"
        out.mkdir()
    env = hub_env(endpoint, tmp_path / "home", token=token or None)
    with open(repo_dir / ".shardkit" / "lock", "w") as lock:
        if case == "locked":  # as a pack or push running on the same OUT_DIR holds it
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = shardkit("push", str(out), "--repo", repo, env=env)
    assert result.returncode == code, (result.stdout, result.stderr)
    for text in says:
        assert text in result.stderr
    assert "Traceback" not in result.stderr
    assert token not in result.stdout + result.stderr if token else True
    assert hub.counters.commits == 0 and hub.counters.lfs_uploads == 0


@pytest.mark.slow
def test_ctrl_c_during_upload_stops_the_push_and_a_rerun_finishes(
    hub: HubServer, repo_dir: Path, tmp_path: Path
) -> None:
    env = hub_env(hub.url, tmp_path / "home")
    hub.faults.lfs_upload_delay = 0.5
    proc = subprocess.Popen(
        [str(SCRIPTS / "shardkit"), "push", str(repo_dir), "--repo", REPO],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while hub.counters.lfs_uploads < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert hub.counters.lfs_uploads >= 2, "the push never started uploading"
        # From here every upload waits for ever: a push that exits at all was stopped by the
        # Ctrl-C, whatever the machine's load (no time is measured).
        hub.faults.lfs_upload_gate = threading.Event()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        if hub.faults.lfs_upload_gate is not None:
            hub.faults.lfs_upload_gate.set()  # the server's waiting uploads end now, not later in another test
        hub.faults.lfs_upload_gate = None
    assert proc.returncode == 130, err
    assert "interrupted; re-run the same command to resume" in err and "Traceback" not in err
    assert "shards.json" not in hub.files(REPO)
    hub.faults.lfs_upload_delay = 0
    push(repo_dir, env)
    assert remote_files(hub) == local_files(repo_dir)


@pytest.mark.slow
@pytest.mark.parametrize("source", ["--token", "hf auth login"])
def test_token_from_the_option_or_the_stored_login_is_used_and_never_shown(
    source: str, hub: HubServer, repo_dir: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    env = hub_env(hub.url, home, token=None)  # no HF_TOKEN
    args = ["push", str(repo_dir), "--repo", REPO]
    if source == "--token":
        args += ["--token", WRITE_TOKEN]
    else:  # where `hf auth login` stores it: $HF_HOME/token
        home.mkdir()
        (home / "token").write_text(WRITE_TOKEN)
    result = shardkit(*args, env=env)
    assert result.returncode == 0, result.stderr
    assert WRITE_TOKEN not in result.stdout + result.stderr
    assert f'load_dataset("{REPO}", streaming=True)' in result.stdout
    assert remote_files(hub) == local_files(repo_dir)


@pytest.mark.slow
def test_without_disable_xet_the_client_asks_for_xet_and_fails_clearly(
    hub: HubServer, repo_dir: Path, tmp_path: Path
) -> None:
    """Documents huggingface_hub 2.4: with hf_xet installed, uploads go through Xet unless
    HF_HUB_DISABLE_XET=1 is set before import. The real Hub speaks Xet, so shardkit leaves it on;
    this test server speaks classic LFS only. If a future huggingface_hub falls back to LFS by
    itself, or stops asking for a Xet token, this test fails: then revisit hub-facts.md."""
    env = hub_env(hub.url, tmp_path / "home", xet=True)
    result = shardkit("push", str(repo_dir), "--repo", REPO, env=env)
    assert result.returncode == 1
    assert "the Xet upload failed" in result.stderr and "HF_HUB_DISABLE_XET=1" in result.stderr
    assert "Traceback" not in result.stderr
    assert any("/xet-write-token/" in request for request in hub.unknown), hub.unknown
    assert hub.counters.lfs_uploads == 0 and "shards.json" not in hub.files(REPO)


# --- the planner, without a server ---------------------------------------------------------------------


def _f(path: str, size: int = 10, sha: str | None = "a" * 64) -> LocalFile:
    return LocalFile(path, "/nonexistent/" + path, size, sha)


def test_plan_keeps_pairs_together_and_gitattributes_first() -> None:
    shards = [_f(f"{d}/{i:x}.{e}") for i in range(5) for d, e in (("data", "zip"), ("metadata", "jsonl"))]
    other = [_f(".gitattributes", sha=None), _f("README.md", sha=None), _f("shards.json", sha=None)]
    plan = plan_commits(shards, other, {}, files_per_commit=4, unchanged=lambda f, r: False)
    assert [[f.path for f in b] for b in plan.batches] == [
        [".gitattributes", "data/0.zip", "metadata/0.jsonl"],
        ["data/1.zip", "metadata/1.jsonl", "data/2.zip", "metadata/2.jsonl"],
        ["data/3.zip", "metadata/3.jsonl", "data/4.zip", "metadata/4.jsonl"],
    ]
    assert [f.path for f in plan.final] == ["README.md", "shards.json"]


def test_plan_skips_what_the_repo_has_and_deletes_only_stale_shards() -> None:
    shards = [_f("data/0.zip"), _f("metadata/0.jsonl")]
    remote = {
        "data/0.zip": RemoteFile(10, "a" * 64, "x"),
        "data/old.zip": RemoteFile(1, "b" * 64, "y"),
        "metadata/old.jsonl": RemoteFile(1, None, "z"),
        "LICENSE": RemoteFile(1, None, "w"),  # not shardkit's: left alone
    }
    plan = plan_commits(shards, [_f("README.md")], remote, files_per_commit=100, unchanged=lambda f, r: r is not None)
    assert [f.path for f in plan.skipped] == ["data/0.zip"]
    assert [[f.path for f in b] for b in plan.batches] == [["metadata/0.jsonl"]]
    assert plan.deletions == ["data/old.zip", "metadata/old.jsonl"]


def test_stale_files_past_the_final_commits_room_are_deleted_in_batches_before_it() -> None:
    """No commit changes more than files_per_commit files: the final commit (manifest, card)
    deletes what it has room for, and the rest goes first, a batch at a time, while the repo's
    manifest still names them (a stopped push deletes them again when re-run)."""
    remote = {f"data/{i:03x}.zip": RemoteFile(1, "b" * 64, "y") for i in range(250)}
    other = [_f("README.md", sha=None), _f("shards.json", sha=None)]
    plan = plan_commits([], other, remote, files_per_commit=100, unchanged=lambda f, r: False)
    assert len(plan.deletions) == 250
    assert [len(b) for b in plan.deletion_batches] == [100, 52] and len(plan.final_deletions) == 98
    assert sorted(p for b in plan.deletion_batches for p in b) + plan.final_deletions == sorted(remote)
    small = plan_commits([], other, dict(list(remote.items())[:98]), files_per_commit=100, unchanged=lambda f, r: False)
    assert small.deletion_batches == [] and len(small.final_deletions) == 98  # all in the final commit


@pytest.mark.slow
def test_a_repack_into_fewer_shards_is_pushed_in_commits_of_at_most_files_per_commit(
    hub: HubServer, repo_dir: Path, tmp_path: Path
) -> None:
    """16 shards pushed, then packed again into one (data/0.zip): the other 15 shards' 30 files
    are deleted in commits of at most --files-per-commit files (the Hub-API server refuses more
    than 100 in any commit), and the repo ends as the folder."""
    env = hub_env(hub.url, tmp_path / "home")
    push(repo_dir, env, "--files-per-commit", "10")
    repacked = pack_example_here(repo_dir, "--force", "--target-shard-size", "1GB", "-q")
    assert repacked.returncode == 0, repacked.stderr
    before = len(main_history(hub))
    summary = push(repo_dir, env, "--files-per-commit", "10")
    assert summary["deleted_files"] == 30
    history = main_history(hub)[before - 1 :]
    changed = [len(_changed_paths(old["files"], new["files"])) for old, new in itertools.pairwise(history)]
    assert summary["commits"] == len(changed) >= 4 and max(changed) <= 10, changed
    assert remote_files(hub) == local_files(repo_dir)


def _changed_paths(old: dict[str, Any], new: dict[str, Any]) -> set[str]:
    return {p for p in old.keys() | new.keys() if old.get(p) != new.get(p)}


@pytest.mark.slow
def test_a_push_waits_out_the_hubs_rate_limit_on_commits(hub: HubServer, repo_dir: Path, tmp_path: Path) -> None:
    """The Hub answers every third commit request 429 (Retry-After: 1), as it answers a client
    that commits too often: push waits as asked, says so, commits again, and publishes the folder."""
    hub.faults.commits_between_rate_limits = 3
    env = hub_env(hub.url, tmp_path / "home")
    result = shardkit("push", str(repo_dir), "--repo", REPO, "--json", "--files-per-commit", "10", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert hub.counters.rate_limited >= 2 and summary["commits"] >= 5
    waits = [line for line in result.stderr.splitlines() if "429" in line]
    assert len(waits) == hub.counters.rate_limited, result.stderr
    assert all(
        line.endswith("the Hub limits commits (429 Too Many Requests): committing again in 1 s") for line in waits
    )
    assert remote_files(hub) == local_files(repo_dir)


def test_stale_files_go_first_when_old_and_new_together_would_overfill_a_folder() -> None:
    """A split grown from 9,990 flat shards to nested folders: data/train/ would hold the old
    shards and the new folders at once, 10,000 entries or more, which the Hub refuses. The stale
    files are deleted first, all of them; a small change keeps its deletions in the final commit."""
    remote = {f"data/train/{i:04x}.zip": RemoteFile(1, "b" * 64, "y") for i in range(9_990)}
    remote["shards.json"] = RemoteFile(1, None, "m")
    nested = [_f(f"data/train/{i % 256:02x}/{i:05x}.zip") for i in range(10_010)]
    other = [_f("README.md", sha=None), _f("shards.json", sha=None)]
    plan = plan_commits(nested, other, remote, files_per_commit=100, unchanged=lambda f, r: False)
    assert plan.deletions_first and sum(map(len, plan.deletion_batches)) == 9_990 and plan.final_deletions == []
    assert max(len(b) for b in plan.deletion_batches) <= 100
    few = plan_commits(nested[:5], other, dict(list(remote.items())[:5]), files_per_commit=100)
    assert not few.deletions_first and len(few.final_deletions) == 5


def test_regular_files_compare_by_git_blob_id(tmp_path: Path) -> None:
    from shardkit.push import is_unchanged

    path = tmp_path / "README.md"
    path.write_bytes(b"hello\n")
    local = LocalFile("README.md", str(path), 6)
    assert git_hash(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"  # `git hash-object`
    assert is_unchanged(local, RemoteFile(6, None, "ce013625030ba8dba906f756967f9e9ca394464a"))
    assert not is_unchanged(local, RemoteFile(6, None, "0" * 40))


GITIGNORE = """# a comment
build/
docs/draft.md
*.log
!keep.log
scratch/
!scratch/wanted.txt
!.shardkit/
"""


@pytest.mark.parametrize(
    ("path", "is_dir", "ignored"),
    [
        (".shardkit", True, True),
        (".shardkit/lock", False, True),  # "!.shardkit/" cannot publish the working folder
        ("notes/.ipynb_checkpoints", True, True),
        ("x/y.pyc", False, True),
        ("build", True, True),
        ("build", False, False),  # "build/" matches folders only
        ("docs/draft.md", False, True),
        ("draft.md", False, False),  # "docs/draft.md" is anchored
        ("README.md", False, False),
        ("run.log", False, True),
        ("keep.log", False, False),  # "!keep.log" takes it back
        ("logs/keep.log", False, False),
        ("scratch/wanted.txt", False, True),  # as in git: a file in an ignored folder stays out
    ],
)
def test_gitignore_rules(path: str, is_dir: bool, ignored: bool, tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text(GITIGNORE)
    assert is_ignored(path, is_dir, ignore_rules(str(tmp_path))) is ignored


def test_a_gitignore_line_that_is_not_a_pattern_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("*.log\nbad\\\n")
    with pytest.raises(UsageError, match=r"\.gitignore:2: 'bad\\\\' is not a \.gitignore pattern; fix or remove"):
        ignore_rules(str(tmp_path))


def test_push_with_a_bad_gitignore_line_exits_2_with_one_line_and_changes_nothing(
    repo_dir: Path, tmp_path: Path
) -> None:
    (repo_dir / ".gitignore").write_text(".shardkit/\n!\n")
    before = local_files(repo_dir)
    result = shardkit("push", str(repo_dir), "--repo", REPO, env=hub_env(f"http://127.0.0.1:{_free_port()}", tmp_path))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{repo_dir / '.gitignore'}:2: '!' is not a .gitignore pattern" in result.stderr.splitlines()[-1]
    assert local_files(repo_dir) == before


def test_push_leaves_out_what_gitignore_ignores_and_takes_back_what_a_bang_rule_names(repo_dir: Path) -> None:
    (repo_dir / ".gitignore").write_text("*.txt\n!keep.txt\n.shardkit/\n")
    (repo_dir / "notes.txt").write_text("ignored")
    (repo_dir / "keep.txt").write_text("published")
    manifest = read_manifest(str(repo_dir))
    assert manifest is not None
    left_out: list[str] = []
    _, other = collect_files(str(repo_dir), manifest, include=("*.txt",), left_out=left_out)
    published = {f.path for f in other}
    assert "keep.txt" in published and "notes.txt" not in published and "notes.txt" not in left_out
    assert {".gitignore", "README.md", "shards.json", "data/.gitkeep"} <= published


NEVER_OUT_RULES = [
    "!.shardkit/**",
    "!.shardkit/\n!.shardkit/**\n!.shardkit/*",
    "!**/.shardkit/**\n!.git/**\n!**",
    "*\n!*\n!**/*",
]


@pytest.mark.parametrize("rules", NEVER_OUT_RULES)
def test_no_gitignore_rule_nor_include_publishes_the_working_folder_or_git(repo_dir: Path, rules: str) -> None:
    (repo_dir / ".gitignore").write_text(rules + "\n")
    (repo_dir / ".shardkit" / "state.json").write_text("{}")
    (repo_dir / ".git").mkdir()
    (repo_dir / ".git" / "config").write_text("[core]\n")
    nested = repo_dir / "extras" / ".shardkit"  # another dataset's working folder, in a folder included
    nested.mkdir(parents=True)
    (nested / "rejects.jsonl").write_text("{}\n")
    (repo_dir / "extras" / "notes.md").write_text("mine")
    manifest = read_manifest(str(repo_dir))
    assert manifest is not None
    left_out: list[str] = []
    include = (".shardkit/**", ".shardkit/", ".git/**", "extras/**", "**", "*")
    _, other = collect_files(str(repo_dir), manifest, include=include, left_out=left_out)
    published = {f.path for f in other}
    assert "extras/notes.md" in published and "README.md" in published
    assert not [p for p in published | set(left_out) if ".shardkit" in p.split("/") or ".git" in p.split("/")]


@pytest.mark.slow
def test_push_with_include_and_a_bang_rule_for_the_working_folder_publishes_none_of_it(
    hub: HubServer, repo_dir: Path, tmp_path: Path
) -> None:
    (repo_dir / ".gitignore").write_text("!.shardkit/**\n")
    (repo_dir / ".shardkit" / "rejects.jsonl").write_text('{"line":1,"reason":"x","row":"private"}\n')
    push(repo_dir, hub_env(hub.url, tmp_path / "home"), "--include", ".shardkit/**")
    published = remote_files(hub)
    assert "README.md" in published and not [p for p in published if p.startswith(".shardkit")]


def test_push_refuses_any_file_in_data_or_metadata_the_manifest_does_not_name(repo_dir: Path) -> None:
    (repo_dir / "data" / "my_results.csv").write_text("a,b\n")
    manifest = read_manifest(str(repo_dir))
    assert manifest is not None
    with pytest.raises(UsageError, match=r"shards\.json does not name \(data/my_results\.csv\)"):
        collect_files(str(repo_dir), manifest, include=("data/",))


def test_unnamed_files_are_those_of_data_and_metadata_no_manifest_names() -> None:
    paths = ["README.md", "data/0.zip", "data/.gitkeep", "data/x.csv", "metadata/0.jsonl", "metadata/1.jsonl", "docs/a"]
    assert unnamed_files(paths, {"data/0.zip", "metadata/0.jsonl"}) == ["data/x.csv", "metadata/1.jsonl"]


def test_include_patterns_match_as_hf_upload_does() -> None:
    from shardkit.push import is_published

    assert is_published("docs/a/b.md", ("docs/",))  # a folder: everything under it
    assert is_published("docs/a.md", ("/docs/*.md",))
    assert not is_published("notes.txt", ("docs/",))
    assert is_published("README.md") and is_published("data/.gitkeep") and not is_published("metadata/.gitkeep")


def test_layouts_over_the_hubs_advice_are_refused_before_uploading() -> None:
    from shardkit.errors import UsageError
    from shardkit.push import check_hub_limits

    check_hub_limits([_f(f"data/{i:05x}.zip") for i in range(9_999)])  # under the limit: fine
    with pytest.raises(UsageError, match=r"data/ would hold 10000 entries; the Hub allows under 10000 per folder"):
        check_hub_limits([_f(f"data/{i:05x}.zip") for i in range(10_000)])
    # A folder's subfolders are entries too: data/train/ holds 10,000 folders.
    with pytest.raises(UsageError, match=r"data/train/ would hold 10000 entries"):
        check_hub_limits([_f(f"data/train/{i:05x}/{i:05x}.zip") for i in range(10_000)])
    check_hub_limits([_f(f"data/train/{i % 256:02x}/{i:05x}.zip") for i in range(20_000)])  # nested: fine
    many = [_f(f"{d}/{i:05x}.zip") for d in "abcdefghijk" for i in range(9_500)]
    with pytest.raises(UsageError, match=r"the repo would hold 104500 files; the Hub allows under 100000"):
        check_hub_limits(many)


@pytest.mark.slow
def test_verify_reads_a_pushed_dataset_at_its_hf_url(packed_template: Path, tmp_path: Path) -> None:
    """`shardkit verify hf://datasets/NS/NAME` checks the pushed shards against their manifest, as
    for a folder (pack refuses an hf:// OUT_DIR; verify only reads)."""
    with pushed_copy(packed_template, tmp_path) as (hub, _):
        env = hub_env(hub.url, tmp_path / "home")
        ok = shardkit("verify", f"hf://datasets/{REPO}", "--json", env=env)
        assert ok.returncode == 0, ok.stderr[-2000:]
        report = json.loads(ok.stdout)
        assert report["ok"] is True and report["shards"] == 16 and report["rows"] == 300
        # pack's refusal of an hf:// OUT_DIR is not verify's
        assert "OUT_DIR is where shards are packed" not in ok.stderr
