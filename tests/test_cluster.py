"""Pack and remux on a real Dask cluster (a scheduler and two workers on 127.0.0.1).

The output must be byte for byte a local run's, a worker killed in the middle of a shard must
cost nothing but time, and a cluster that cannot do the work must be refused before any task
runs, with the worker and the reason named.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from shardkit.cli import main
from shardkit.pack import PackConfig, pack
from shardkit.remux import RemuxConfig, remux
from tests.support.corpus import EXAMPLE_DIR, tree_bytes
from tests.support.dask_cluster import DaskCluster
from tests.support.packing import pack_example, packed_example_bytes
from tests.test_remux import RESIZE
from tests.test_remux import remux as remux_cli

pytestmark = pytest.mark.slow  # every test here takes over about 3 s


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaskCluster]:
    c = DaskCluster(tmp_path_factory.mktemp("dask"), workers=2)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def local_pack(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    return packed_example_bytes(tmp_path_factory, "out")


def _verify_deep(out: Path) -> dict[str, object]:
    result = CliRunner().invoke(main, ["verify", str(out), "--deep", "--json", "-q"])
    assert result.exit_code == 0, result.output
    report: dict[str, object] = json.loads(result.stdout)
    return report


def test_pack_on_the_cluster_is_byte_identical_to_a_local_run(
    cluster: DaskCluster, local_pack: dict[str, bytes], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = pack_example(out, "--executor", "dask", "--scheduler", cluster.address, "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["rows"] == 300 and summary["shards"] == 16 and summary["written_shards"] == 16
    assert tree_bytes(out) == local_pack
    assert not (out / ".shardkit" / "tmp").exists()
    # Both workers took shards (the preload logs each task on the worker that ran it).
    assert all(any(line.startswith("end data/") for line in cluster.tasks_of(w)) for w in ("w0", "w1"))

    # Resuming through the cluster (its scheduler file, from DASK_SCHEDULER_ADDRESS) keeps every shard.
    env = {**os.environ, "DASK_SCHEDULER_ADDRESS": str(cluster.scheduler_file)}
    again = pack_example(out, "--executor", "dask", "--json", env=env)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["resumed_shards"] == 16
    assert tree_bytes(out) == local_pack


def test_a_worker_killed_in_the_middle_of_a_shard_costs_nothing_but_time(
    local_pack: dict[str, bytes], tmp_path: Path
) -> None:
    # Each shard waits 0.3 s once written, before its rename: the kill lands on a partial file.
    cluster = DaskCluster(tmp_path / "dask", workers=2, env={"SLOW_SHARD_SECONDS": "0.3"})
    try:
        out = tmp_path / "out"
        # Ranges of 4 KB: the rows are checked by tasks on the cluster too.
        config = PackConfig(
            images_dir=str(EXAMPLE_DIR / "images"),
            metadata_path=str(EXAMPLE_DIR / "metadata.jsonl"),
            out_dir=str(out),
            check_range_bytes=4096,
            prefix_length=1,  # as pack_example: the 16 shards local_pack holds
        )
        outcome: dict[str, object] = {}

        def run() -> None:
            try:
                with cluster.client() as client:
                    outcome["summary"] = pack(config, client=client)
            except BaseException as exc:  # re-raised below, in the test's thread
                outcome["error"] = exc

        packer = threading.Thread(target=run)
        packer.start()
        deadline = time.monotonic() + 120
        # Kill w0 while it holds a shard it has started and not finished, after it finished one.
        while time.monotonic() < deadline:
            lines = cluster.tasks_of("w0")
            started = {line[6:] for line in lines if line.startswith("start ")}
            ended = {line[4:] for line in lines if line.startswith("end ")}
            if ended and started - ended:
                break
            time.sleep(0.02)
        partial = list((out / ".shardkit" / "tmp").glob("*.partial"))
        cluster.kill_worker("w0")
        packer.join(timeout=300)
        assert not packer.is_alive()
        if "error" in outcome:
            raise outcome["error"]  # type: ignore[misc]

        checked = [line for w in ("w0", "w1") for line in cluster.tasks_of(w) if line.startswith("check ")]
        assert len(checked) > 5  # the row checks ran as range tasks on the workers
        in_flight = started - ended
        assert in_flight and partial  # the kill did land in the middle of a shard
        assert cluster.worker_names() == ["w1"]
        redone = {line[4:] for line in cluster.tasks_of("w1") if line.startswith("end ")}
        assert in_flight <= redone  # the other worker wrote what w0 was writing
        assert outcome["summary"].written_shards == 16  # type: ignore[attr-defined]
        assert tree_bytes(out) == local_pack  # complete, nothing twice, same bytes
        assert not (out / ".shardkit" / "tmp").exists()  # no partial file left behind
        report = _verify_deep(out)
        assert report["ok"] is True and report["rows"] == 300
    finally:
        cluster.close()


def test_remux_on_the_cluster_matches_a_local_remux(
    cluster: DaskCluster, packed_template: Path, tmp_path: Path
) -> None:
    local = tmp_path / "local" / "out"  # the same folder name: the card names it
    remux_cli(packed_template, local, "--map", RESIZE, "-j", "2")
    out = tmp_path / "out"
    with cluster.client() as client:
        summary = remux(RemuxConfig(source=str(packed_template), out_dir=str(out), fn=RESIZE), client=client)
    assert summary.source_shards == 16 and summary.rows_out == 300
    assert tree_bytes(out) == tree_bytes(local)
    assert not (out / ".shardkit" / "remux").exists()

    by_cli = tmp_path / "cli" / "out"  # the command line's --executor dask takes the same path
    dask = ("--executor", "dask", "--scheduler", cluster.address)
    summary_cli = remux_cli(packed_template, by_cli, "--map", RESIZE, *dask)
    assert summary_cli["rows_out"] == 300
    assert tree_bytes(by_cli) == tree_bytes(local)


def test_a_cluster_that_cannot_do_the_work_is_refused_before_any_task(cluster: DaskCluster, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"}
    no_scheduler = pack_example(tmp_path / "a", "--executor", "dask", env=env)
    assert no_scheduler.returncode == 2 and "--executor dask needs --scheduler" in no_scheduler.stderr
    forgot_executor = pack_example(tmp_path / "a", "--scheduler", cluster.address, env=env)
    assert forgot_executor.returncode == 2 and "--scheduler is for --executor dask" in forgot_executor.stderr
    assert not (tmp_path / "a" / "data").exists()

    unreachable = pack_example(
        tmp_path / "b",
        "--executor",
        "dask",
        "--scheduler",
        "tcp://127.0.0.1:9",  # the discard port: nothing listens
        env={**env, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"},
    )
    assert unreachable.returncode == 2, unreachable.stderr
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in unreachable.stderr
    not_a_scheduler_file = tmp_path / "scheduler.json"
    not_a_scheduler_file.write_text("tcp://127.0.0.1:9")
    bad_file = pack_example(tmp_path / "b", "--executor", "dask", "--scheduler", str(not_a_scheduler_file), env=env)
    assert bad_file.returncode == 2, bad_file.stderr
    assert f"{not_a_scheduler_file} is not a Dask scheduler file" in bad_file.stderr

    # One worker runs another shardkit version: its bytes could differ, so no task is sent.
    def set_version(version: str) -> None:
        import shardkit.tasks

        shardkit.tasks.__version__ = version

    with cluster.client() as client:
        w1 = next(a for a, w in client.scheduler_info(n_workers=-1)["workers"].items() if w["name"] == "w1")
        client.run(set_version, "0.0.1", workers=[w1])
        try:
            wrong = pack_example(tmp_path / "c", "--executor", "dask", "--scheduler", cluster.address)
        finally:
            client.run(set_version, __import__("shardkit").__version__, workers=[w1])
    assert wrong.returncode == 2, wrong.stderr
    assert f"{w1}: runs shardkit 0.0.1, this client" in wrong.stderr
    assert not (tmp_path / "c" / "data").exists()
