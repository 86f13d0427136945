"""Hostile manifests and links out of the dataset (issue 31): refused by every reader in one line.

A ``shards.json`` is checked as a whole before any reader uses it (``shardkit.manifest.parse_manifest``;
the template's loading script has its own copy of the checks): each mutation of the packed
example's manifest below must be refused by ``shardkit verify`` and ``shardkit.stream`` (and, for
a few, by ``remux`` and ``push``), and by the loading script in datasets 3.6, with one line naming
the file. A file of a local dataset that is a link out of its folder (a shard, a metadata file,
the manifest, a file a remux source's row names) is refused the same way, while a Hugging Face
cache snapshot, whose files are links into its repo's ``blobs/``, stays readable.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import datasets
import pytest
from click.testing import CliRunner

import shardkit
from shardkit import manifest as manifest_module
from shardkit.cli import main
from shardkit.errors import ManifestError, ShardkitError
from tests.http_server import serve_directory
from tests.hub_server import run_hub_server
from tests.support.corpus import REPO_ROOT, tiny_image
from tests.test_hostile_shards import script_outcomes
from tests.test_splits_labels import hub_env, push_cli

SCRIPTS = Path(sys.executable).parent
LOADER = "yfcc_mini_loader.py"
Manifest = dict[str, Any]


# --- the mutations: each returns the manifest changed, or the bytes to write instead -------------------


def _shard(m: Manifest, i: int = 3) -> dict[str, Any]:
    return m["shards"][i]  # type: ignore[no-any-return]


def _parent(m: Manifest, path: str) -> tuple[Any, str | int]:
    """The list or object holding the field a dotted ``path`` names (numbers index lists), and its key."""
    *parents, last = path.split(".")
    target: Any = m
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    return target, int(last) if isinstance(target, list) else last


def _set(path: str, value: Any) -> Callable[[Manifest], Manifest]:
    """A mutation setting one field (``shards.3.sha256``)."""

    def mutate(m: Manifest) -> Manifest:
        target, key = _parent(m, path)
        target[key] = value
        return m

    return mutate


def _drop(path: str) -> Callable[[Manifest], Manifest]:
    def mutate(m: Manifest) -> Manifest:
        target, key = _parent(m, path)
        del target[key]
        return m

    return mutate


def _truncated(m: Manifest) -> bytes:
    text = json.dumps(m, indent=1).encode()
    return text[: len(text) // 2]


def _duplicate_field(m: Manifest) -> bytes:
    text = json.dumps(m, indent=1)
    return text.replace('"modality": "image"', '"modality": "image", "modality": "audio"', 1).encode()


def _nan(m: Manifest) -> bytes:
    return json.dumps(m).replace('"max_shard_bytes": 1000000000', '"max_shard_bytes": NaN').encode()


def _not_utf8(m: Manifest) -> bytes:
    return json.dumps(m, ensure_ascii=False).replace('"pageurl"', '"page\xffurl"').encode("latin-1", "replace")


def _utf8_surrogate(m: Manifest) -> bytes:
    """A surrogate written as UTF-8 bytes (ED A0 80): not UTF-8, though json.loads(bytes) takes it."""
    return json.dumps(m, ensure_ascii=False).replace('"pageurl"', '"page\ud800url"').encode("utf-8", "surrogatepass")


def _swapped_keys(m: Manifest) -> Manifest:
    s = _shard(m)
    s["first_key"], s["last_key"] = s["last_key"], s["first_key"]
    return m


def _overlap(m: Manifest) -> Manifest:
    """Two parts of one key prefix (names the planner gives) whose keys overlap."""
    a, b = _shard(m, 3), _shard(m, 4)
    a["file"], a["metadata"] = "data/3-00.zip", "metadata/3-00.jsonl"
    b["file"], b["metadata"] = "data/3-01.zip", "metadata/3-01.jsonl"
    b["first_key"], b["last_key"] = a["first_key"], a["last_key"]
    return m


def _key_outside_range(m: Manifest) -> Manifest:
    _shard(m)["last_key"] = "4" + _shard(m)["last_key"][1:]  # data/3.zip holds the keys that start with 3
    return m


def _feature(name: str, spec: dict[str, Any]) -> Callable[[Manifest], Manifest]:
    def mutate(m: Manifest) -> Manifest:
        m["features"].append({"name": name, **spec})
        return m

    return mutate


def _deep_list(m: Manifest) -> Manifest:
    spec: Any = "string"
    for _ in range(100):
        spec = {"list": spec}
    m["features"].append({"name": "deep", "list": spec})
    return m


def _totals(m: Manifest) -> Manifest:
    m["totals"]["rows"] += 1
    return m


def _totals_bool(m: Manifest) -> Manifest:
    """Totals of one shard of one row, written as ``true`` (JSON's true must not pass for 1)."""
    m["shards"] = m["shards"][:1]
    m["shards"][0]["rows"] = 1
    m["shards"][0]["last_key"] = m["shards"][0]["first_key"]
    m["totals"] = {"rows": True, "shards": True, "bytes": m["shards"][0]["bytes"]}
    return m


def _unknown_split(m: Manifest) -> Manifest:
    m["splits"]["test"] = dict(m["splits"]["train"])
    return m


def _json_nest(m: Manifest) -> bytes:
    return b"[" * 100_000 + b"]" * 100_000


#: case -> (mutation, words shardkit's message holds after "<repo>/shards.json: ")
CASES: dict[str, tuple[Callable[[Manifest], Manifest | bytes], str]] = {
    "truncated": (_truncated, "not a shardkit manifest (not JSON"),
    "a JSON array": (lambda m: [m], "the manifest is a list, not an object"),
    "empty file": (lambda m: b"", "not JSON"),
    "not UTF-8": (_not_utf8, "not a shardkit manifest"),
    "NaN": (_nan, "NaN is not a JSON number"),
    "a field twice": (_duplicate_field, "the name 'modality' appears twice"),
    "nested 100,000 deep": (_json_nest, "not a shardkit manifest"),
    "shards as strings": (_set("shards", ["data/0.zip"]), "shards[0] is a string, not an object"),
    "shards an object": (_set("shards", {"data/0.zip": {}}), "shards is an object, not a list of shards"),
    "no shards": (_set("shards", []), "shards is [], not a list of shards"),
    "no input_fingerprint": (_drop("input_fingerprint"), "has no 'input_fingerprint'"),
    "format unknown": (_set("format", "shardkit.zip/9"), "format is 'shardkit.zip/9', not one shardkit writes"),
    "format a number": (_set("format", 1), "format is 1, not one shardkit writes"),
    "layout unknown": (_set("layout", 99), "layout is 99, not 4, the layout shardkit writes"),
    "layout a string": (_set("layout", "4"), "layout is '4', not 4"),
    "layout older than the data's": (_set("layout", 3), "layout is 3, not 4"),
    "layout a float": (_set("layout", 4.0), "layout is 4.0, not 4"),
    "prefix_length a boolean": (_set("prefix_length", True), "prefix_length is True, not a whole number"),
    "prefix_length negative": (_set("prefix_length", -1), "prefix_length is -1, not a whole number from 0 to 6"),
    "max_shard_bytes a float": (_set("max_shard_bytes", 1e9), "max_shard_bytes is 1000000000.0, not a whole"),
    "max_shard_bytes negative": (_set("max_shard_bytes", -5), "max_shard_bytes is -5, not a whole number"),
    "max_shard_bytes huge": (_set("max_shard_bytes", 2**70), f"max_shard_bytes is {2**70}, not a whole number"),
    "target over the cap": (_set("target_shard_bytes", 2_000_000_000), "target_shard_bytes is 2000000000"),
    "input_fingerprint not hex": (_set("input_fingerprint", "x" * 64), "input_fingerprint is 'xxxx"),
    "modality a path": (_set("modality", "../../etc"), "modality is '../../etc', not one of image, audio"),
    "features a string": (_set("features", "image"), "features is a string, not a list of features"),
    "features not objects": (_set("features", ["image", "key"]), "features must begin with"),
    "file column a string": (_set("features.0.dtype", "string"), "features must begin with"),
    "dtype int65": (_set("features.3.dtype", "int65"), "features 'uid' has dtype 'int65', not one of"),
    "dtype a list": (_set("features.3.dtype", ["string"]), "features 'uid' has dtype ['string']"),
    "a feature with two types": (_set("features.3.list", "string"), "features 'uid' has ['dtype', 'list']"),
    "a feature without a name": (_drop("features.3.name"), "features[3].name is None, not a column name"),
    "a column twice": (_set("features.3.name", "photoid"), "features[3] is a second column named 'photoid'"),
    "a field named as the file column": (_set("features.3.name", "image"), "a second column named 'image'"),
    "nested 100 deep": (_deep_list, "nests deeper than 64 levels"),
    "struct of strings": (_feature("s", {"struct": ["a", "b"]}), "features 's'.struct[0] is a string, not an object"),
    "list of a path": (_feature("l", {"list": "../x"}), "features 'l'.list has dtype '../x'"),
    "class names repeated": (
        _feature("label", {"dtype": {"class_label": {"names": {"0": "cat", "1": "cat"}}}}),
        "has the class name 'cat' twice",
    ),
    "class name a number": (
        _feature("label", {"dtype": {"class_label": {"names": {"0": "cat", "1": 7}}}}),
        "class name 1 is 7, not a class name",
    ),
    "class names numbered from 1": (
        _feature("label", {"dtype": {"class_label": {"names": {"1": "cat"}}}}),
        "class names are not numbered 0 to 0",
    ),
    "class label in a list": (
        _feature("labels", {"list": {"dtype": {"class_label": {"names": {"0": "cat"}}}}}),
        "features 'labels'.list is {'dtype'",
    ),
    "shard file out of data/": (_set("shards.3.file", "../secret.zip"), "shards[3].file is '../secret.zip'"),
    "shard metadata elsewhere": (_set("shards.3.metadata", "/etc/passwd"), "has metadata '/etc/passwd'"),
    "shard with an unknown field": (_set("shards.3.path", "/x"), "shards[3] has a field shardkit does not write"),
    "shard without sha256": (_drop("shards.3.sha256"), "shards[3] has no 'sha256'"),
    "sha256 not 64 hex": (_set("shards.3.sha256", "abc"), "shard 'data/3.zip': sha256 is 'abc', not a sha256"),
    "sha256 in capitals": (_set("shards.3.sha256", "A" * 64), "sha256 is 'AAAA"),
    "sha256 with a newline": (_set("shards.3.sha256", "a" * 64 + "\n"), "sha256 is 'aaaa"),
    "metadata_sha256 a number": (_set("shards.3.metadata_sha256", 5), "metadata_sha256 is 5, not a sha256"),
    "rows zero": (_set("shards.3.rows", 0), "shard 'data/3.zip': rows is 0, not a whole number from 1 to 65534"),
    "rows a million": (_set("shards.3.rows", 10**6), "rows is 1000000, not a whole number from 1 to 65534"),
    "rows a float": (_set("shards.3.rows", 14.0), "rows is 14.0, not a whole number"),
    "rows a boolean": (_set("shards.3.rows", True), "rows is True, not a whole number"),
    "bytes over the cap": (_set("shards.3.bytes", 2 * 10**9), "bytes is 2000000000, not a whole number from 1 to"),
    "first_key not a key": (_set("shards.3.first_key", "../3"), "first_key is '../3', not a key"),
    "first_key with a newline": (
        lambda m: _set("shards.3.first_key", _shard(m)["first_key"] + "\n")(m),
        "first_key is '3",
    ),
    "last_key a number": (_set("shards.3.last_key", 3), "last_key is 3, not a key"),
    "first key after the last": (_swapped_keys, "its keys must ascend"),
    "key outside the shard's name": (_key_outside_range, "not in this shard's prefix '3'"),
    "overlapping shards": (_overlap, "the keys of shards 'data/3-00.zip' and 'data/3-01.zip' overlap"),
    "split not a string": (_set("shards.3.split", 5), "shards[3].split is 5, not a split's name"),
    "totals off": (_totals, "totals is {'rows': 301"),
    "totals as booleans": (_totals_bool, "totals is {'rows': True"),
    "totals a string": (_set("totals", "300"), "totals is a string, not an object"),
    "a split without shards": (_unknown_split, "splits names ['test', 'train'], but the shards are in ['train']"),
    "split prefix_length negative": (_set("splits.train.prefix_length", -1), "prefix_length is -1"),
    "metadata_table a path": (_set("metadata_table", "../secret.parquet"), "metadata_table is '../secret.parquet'"),
    "metadata_table_sha256 not hex": (_set("metadata_table_sha256", "zz"), "metadata_table_sha256 is 'zz'"),
    "metadata_member unknown": (_set("metadata_member", "../x"), "metadata_member is '../x'"),
    "metadata_member of an older layout": (
        _set("metadata_member", "metadata.jsonl"),
        "metadata_member is 'metadata.jsonl', not 'metadata.parquet', what shardkit writes",
    ),
    **{
        f"member_template {template!r}": (_set("member_template", template), f"member_template is {template!r}, not")
        for template in (
            "../{key}{ext}",
            "images/{key.__class__}/{key}{ext}",
            "{key}.json, then {key}{ext.lower()}",  # tar's
            "",
            "images/{key[0:3]}/{key[3:6]}/{key}{ext}\n",
        )
    },
    "member_template a number": (_set("member_template", 5), "member_template is 5, not"),
    "key_scheme another": (_set("key_scheme", "sha1(file bytes)"), "key_scheme is 'sha1(file bytes)', not"),
    "an unknown top-level field": (
        _set("publish", ["../x"]),
        "the manifest has a field shardkit does not write: 'publish'",
    ),
    # A lone surrogate (JSON's "\ud800" escape) in any kind of string: no text holds one.
    "surrogate in a feature name": (
        _set("features.3.name", "\ud800"),
        "features[3].name holds a lone surrogate ('\\ud800')",
    ),
    "surrogate in a struct field's name": (
        _feature("s", {"struct": [{"name": "a\udfff", "dtype": "string"}]}),
        "features[24].struct[0].name holds a lone surrogate ('a\\udfff')",
    ),
    "surrogate in a class name": (
        _feature("label", {"dtype": {"class_label": {"names": {"0": "cat", "1": "d\udc00g"}}}}),
        "features[24].dtype.class_label.names.1 holds a lone surrogate ('d\\udc00g')",
    ),
    "surrogate in key_scheme": (
        lambda m: _set("key_scheme", m["key_scheme"] + "\ud800")(m),
        "key_scheme holds a lone surrogate ('256(file bytes)[:32]\\ud800')",
    ),
    "surrogate in a split's name": (
        lambda m: _set("splits", {"tr\ud800": m["splits"]["train"]})(m),
        "the name of splits.tr\\ud800 holds a lone surrogate ('tr\\ud800')",
    ),
    "surrogate in a shard's sha256": (
        _set("shards.3.sha256", "\udbff"),
        "shards[3].sha256 holds a lone surrogate ('\\udbff')",
    ),
    "surrogate in a field's name": (_set("\ud800", 1), "the manifest has a field shardkit does not write: '\\ud800'"),
    "surrogate as UTF-8 bytes": (_utf8_surrogate, "not a shardkit manifest (not UTF-8)"),
    "a byte order mark": (lambda m: b"\xef\xbb\xbf" + json.dumps(m).encode(), "(it begins with a byte order mark)"),
    "UTF-16": (lambda m: json.dumps(m).encode("utf-16"), "not a shardkit manifest"),
    # Feature names a message could not show on one line, or no loader could take as a column.
    **{
        f"feature name {name[:12]!r}": (_set("features.3.name", name), f"features[3].name {name[:12]!r}")
        for name in ("", "v\nx", "nul\x00", "tab\t", "del\x7f", "c1\x85", "ls\u2028")
    },
    "feature name too long": (_set("features.3.name", "x" * 10_001), "features[3].name is 'xxxx"),
    "struct field name with a newline": (
        _feature("s", {"struct": [{"name": "a\nb", "dtype": "string"}]}),
        "features 's'.struct[0].name 'a\\nb' holds '\\n'",
    ),
}


def hostile_copy(packed: Path, dest: Path, case: str) -> Path:
    """A copy of the packed example whose shards.json is ``case``'s mutation of it."""
    repo = dest / "yfcc-mini"
    shutil.copytree(packed, repo, ignore=shutil.ignore_patterns("lock", ".shardkit"))
    manifest = json.loads((repo / "shards.json").read_text(encoding="utf-8"))
    changed = CASES[case][0](copy.deepcopy(manifest))
    data = changed if isinstance(changed, bytes) else json.dumps(changed, indent=1).encode()
    (repo / "shards.json").write_bytes(data)
    return repo


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
    return lines[0].removeprefix("error: ")


def assert_verify_refuses(repo: Path, says: str, file: str = "shards.json") -> None:
    result = CliRunner().invoke(main, ["verify", str(repo), "-q"], catch_exceptions=False)
    assert result.exit_code == 1, result.output
    line = one_error_line(result.stderr)
    assert line.startswith(f"{repo}/{file}: ") and says in line, line


def assert_stream_refuses(repo: Path, says: str, file: str = "shards.json", error: type = ManifestError) -> None:
    with pytest.raises(error) as caught:
        for _ in shardkit.stream(str(repo)).cast_column("image", datasets.Image(decode=False)):
            pass
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{repo}/{file}: ") and says in message, message


def run_shardkit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPTS / "shardkit"), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        # This checkout's shardkit (src) and its tests package (the --map functions).
        env={**(env or os.environ), "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), str(REPO_ROOT)])},
    )


def assert_remux_refuses(repo: Path, out: Path, says: str, file: str = "shards.json") -> None:
    result = run_shardkit("remux", str(repo), str(out), "--map", "tests.remux_functions:identity", "-q", "-j", "1")
    assert result.returncode == 1, result.stderr[-3000:]
    line = one_error_line(result.stderr)
    assert f"{repo}/{file}: " in line and says in line, line
    assert not (out / "shards.json").exists() and not list(out.glob("data/*"))


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_manifest_is_refused_by_verify_and_stream(packed_template: Path, tmp_path: Path, case: str) -> None:
    repo = hostile_copy(packed_template, tmp_path, case)
    before = (repo / "shards.json").read_bytes()
    says = CASES[case][1]
    assert_verify_refuses(repo, says)
    assert_stream_refuses(repo, says)
    assert (repo / "shards.json").read_bytes() == before


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    [
        "truncated",
        "dtype int65",
        "modality a path",
        "overlapping shards",
        "totals off",
        "surrogate in a feature name",
        "surrogate in a class name",
        "member_template '../{key}{ext}'",
        "an unknown top-level field",
        "feature name 'v\\nx'",
    ],
)
def test_a_hostile_manifest_is_refused_by_remux_and_push(packed_template: Path, tmp_path: Path, case: str) -> None:
    repo = hostile_copy(packed_template, tmp_path / "src", case)
    says = CASES[case][1]
    assert_remux_refuses(repo, tmp_path / "out", says)
    with run_hub_server(tmp_path / "hub") as hub:
        result = run_shardkit("push", str(repo), "--repo", "tester/hostile", env=hub_env(hub.url, tmp_path / "home"))
        assert result.returncode == 1, result.stderr[-3000:]
        line = one_error_line(result.stderr)
        assert line.startswith(f"{repo}/shards.json: ") and says in line, line
        assert hub.state.load("dataset", "tester/hostile") is None  # nothing was published, not even the repo


@pytest.mark.slow
@pytest.mark.parametrize("case", ["truncated", "modality a path", "shard file out of data/"])
def test_a_hostile_manifest_at_a_url_is_refused_by_verify_stream_and_remux(
    packed_template: Path, tmp_path: Path, case: str
) -> None:
    """Read over http(s), the same checks, the message naming the URL; remux does not fall back
    to reading the source some other way."""
    repo = hostile_copy(packed_template, tmp_path / "src", case)
    says = CASES[case][1]
    with serve_directory(repo) as (base, log):
        url = base.rstrip("/")
        result = CliRunner().invoke(main, ["verify", url, "-q"], catch_exceptions=False)
        assert result.exit_code == 1, result.output
        assert one_error_line(result.stderr).startswith(f"{url}/shards.json: "), result.stderr
        with pytest.raises(ManifestError, match=f"^{url}/shards.json: .*{re.escape(says)}"):
            shardkit.stream(url)
        out = tmp_path / "out"
        remuxed = run_shardkit("remux", url, str(out), "--map", "tests.remux_functions:identity", "-q", "-j", "1")
        assert remuxed.returncode == 1, remuxed.stderr[-3000:]
        line = one_error_line(remuxed.stderr)
        assert line.startswith(f"{url}/shards.json: ") and says in line, line
        assert log.count("/data/") == 0, "a shard was read"


def test_a_manifest_over_the_size_bound_is_refused_unread(
    packed_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = hostile_copy(packed_template, tmp_path, "truncated")
    (repo / "shards.json").write_bytes(b" " * 5000 + (packed_template / "shards.json").read_bytes())
    monkeypatch.setattr(manifest_module, "MAX_MANIFEST_BYTES", 4096)
    assert_verify_refuses(repo, "larger than 4096 bytes, more than any shardkit manifest")
    assert_stream_refuses(repo, "larger than 4096 bytes")


def test_the_packed_manifest_is_accepted_as_it_is(packed_template: Path) -> None:
    """The validator takes what pack writes (every field present), and older manifests' absences."""
    data = (packed_template / "shards.json").read_bytes()
    manifest = manifest_module.parse_manifest(data, "shards.json")
    assert json.loads(manifest_module.dump_json(manifest.to_json())) == json.loads(data)
    older = json.loads(data)
    older["metadata_member"] = "metadata.jsonl"  # ZIP shards' first member before layout 4
    for name in ("layout", "splits", "totals", "metadata_table", "metadata_table_sha256", "key_scheme"):
        del older[name]
    for shard in older["shards"]:
        del shard["split"], shard["input_sha256"]
    assert manifest_module.parse_manifest(json.dumps(older).encode(), "shards.json").shards[3].split == "train"


# --- links out of the dataset folder --------------------------------------------------------------------


def linked_out(packed: Path, dest: Path, rel: str) -> tuple[Path, Path]:
    """A copy of the packed example whose ``rel`` is a link to a copy of itself outside the folder
    (the same bytes: only the link rule can refuse it); the outside file."""
    repo = dest / "yfcc-mini"
    shutil.copytree(packed, repo, ignore=shutil.ignore_patterns("lock", ".shardkit"))
    outside = dest / "outside" / rel.replace("/", "_")
    outside.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(repo / rel, outside)
    (repo / rel).symlink_to(outside)
    return repo, outside


LINK_WORDS = "a link to '{outside}', outside the dataset folder '{repo}'"


@pytest.mark.parametrize("rel", ["data/3.zip", "metadata/3.jsonl", "shards.json", "metadata.parquet"])
def test_verify_refuses_a_file_linked_out_of_the_dataset(packed_template: Path, tmp_path: Path, rel: str) -> None:
    repo, outside = linked_out(packed_template, tmp_path, rel)
    assert_verify_refuses(repo, LINK_WORDS.format(outside=outside, repo=repo), rel)


@pytest.mark.slow
@pytest.mark.parametrize("rel", ["data/3.zip", "shards.json"])
def test_stream_and_remux_refuse_a_file_linked_out_of_the_dataset(
    packed_template: Path, tmp_path: Path, rel: str
) -> None:
    repo, outside = linked_out(packed_template, tmp_path, rel)
    words = LINK_WORDS.format(outside=outside, repo=repo)
    assert_stream_refuses(repo, words, rel, ShardkitError)
    assert_remux_refuses(repo, tmp_path / "out", words, rel)


def test_push_refuses_a_file_linked_out_of_the_dataset(packed_template: Path, tmp_path: Path) -> None:
    repo, outside = linked_out(packed_template, tmp_path, "README.md")
    with run_hub_server(tmp_path / "hub") as hub:
        result = run_shardkit("push", str(repo), "--repo", "tester/linked", env=hub_env(hub.url, tmp_path / "home"))
        assert result.returncode == 1, result.stderr[-3000:]
        line = one_error_line(result.stderr)
        assert line.startswith(f"{repo}/README.md: {LINK_WORDS.format(outside=outside, repo=repo)}"), line
        assert hub.state.load("dataset", "tester/linked") is None


@pytest.mark.slow
def test_a_link_inside_the_dataset_is_followed(packed_template: Path, tmp_path: Path) -> None:
    """A link to a file that stays inside the folder reads as the file (only links out are refused)."""
    repo = tmp_path / "yfcc-mini"
    shutil.copytree(packed_template, repo, ignore=shutil.ignore_patterns("lock", ".shardkit"))
    (repo / "kept").mkdir()
    shutil.move(repo / "data" / "3.zip", repo / "kept" / "3.zip")
    (repo / "data" / "3.zip").symlink_to(Path("..") / "kept" / "3.zip")
    result = CliRunner().invoke(main, ["verify", str(repo), "-q"], catch_exceptions=False)
    assert result.exit_code == 0 and result.stdout.rstrip().endswith(": OK"), result.output
    assert sum(1 for _ in shardkit.stream(str(repo))) == 300


@pytest.mark.slow
def test_remux_refuses_a_source_file_linked_out_of_its_folder(tmp_path: Path) -> None:
    """An imagefolder source whose b.jpg is a link to ../secret.jpg: the row is named, nothing is
    published, and the secret's bytes are nowhere in the output."""
    source = tmp_path / "src" / "train"
    source.mkdir(parents=True)
    secret = tmp_path / "secret.jpg"
    secret.write_bytes(tiny_image(99))
    (source / "a.jpg").write_bytes(tiny_image(1))
    (source / "b.jpg").symlink_to(secret)
    (source / "metadata.jsonl").write_text('{"file_name": "a.jpg", "n": 0}\n{"file_name": "b.jpg", "n": 1}\n')
    out = tmp_path / "out"
    result = run_shardkit("remux", str(source.parent), str(out), "--map", "tests.remux_functions:identity", "-q")
    assert result.returncode == 1, result.stderr[-3000:]
    line = one_error_line(result.stderr)
    assert "split 'train', row 1: " in line and f"b.jpg: a link to {str(secret)!r}, outside the dataset" in line
    assert not (out / "shards.json").exists() and not list(out.glob("data/*"))
    assert all(tiny_image(99) not in p.read_bytes() for p in out.rglob("*") if p.is_file())


# --- a Hugging Face cache snapshot: links into its own blobs/ ---------------------------------------------


@pytest.fixture(scope="module")
def snapshot(packed_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packed example pushed to the test Hub server and fetched back with
    ``huggingface_hub.snapshot_download``: a real cache snapshot, its files links into ``blobs/``."""
    root = tmp_path_factory.mktemp("snapshot")
    repo = root / "yfcc-mini"
    shutil.copytree(packed_template, repo, ignore=shutil.ignore_patterns("lock", ".shardkit"))
    with run_hub_server(root / "hub") as hub:
        env = hub_env(hub.url, root / "home")
        push_cli(repo, "tester/yfcc-mini", env)
        fetched = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from huggingface_hub import snapshot_download;"
                " print(snapshot_download('tester/yfcc-mini', repo_type='dataset', cache_dir=sys.argv[1]))",
                str(root / "cache"),
            ],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=300,
        )
    assert fetched.returncode == 0, fetched.stderr[-3000:]
    folder = Path(fetched.stdout.strip().splitlines()[-1])
    assert folder.parent.name == "snapshots" and (folder / "data" / "3.zip").is_symlink()
    assert (folder / "data" / "3.zip").resolve().parent == folder.parent.parent / "blobs"
    return folder


@pytest.mark.slow
def test_a_hub_cache_snapshot_stays_readable(snapshot: Path, packed_template: Path) -> None:
    result = CliRunner().invoke(main, ["verify", str(snapshot), "--deep", "-q"], catch_exceptions=False)
    assert result.exit_code == 0 and result.stdout.rstrip().endswith(": OK"), result.output
    got, expected = file_bytes(snapshot), file_bytes(packed_template)
    assert len(got) == 300 and got == expected


def file_bytes(folder: Path) -> dict[str, bytes]:
    """Each row's file as shardkit.stream reads it from ``folder``, by key."""
    ds = shardkit.stream(str(folder)).cast_column("image", datasets.Image(decode=False))
    return {row["key"]: row["image"]["bytes"] for row in ds}


@pytest.mark.slow
def test_a_snapshot_link_out_of_its_repo_cache_is_refused(snapshot: Path, tmp_path: Path) -> None:
    """A snapshot's file linking to another repo's blob (outside the folder holding snapshots/ and
    blobs/) is a link out like any other."""
    copy_root = tmp_path / "datasets--tester--yfcc-mini"
    shutil.copytree(snapshot.parent.parent, copy_root, symlinks=True)
    folder = copy_root / "snapshots" / snapshot.name
    other = tmp_path / "datasets--someone--else" / "blobs" / "f00"
    other.parent.mkdir(parents=True)
    other.write_bytes((folder / "data" / "3.zip").read_bytes())
    (folder / "data" / "3.zip").unlink()
    (folder / "data" / "3.zip").symlink_to(Path("..", "..", "..", "..", "datasets--someone--else", "blobs", "f00"))
    words = f"a link to {str(other)!r}, outside the dataset folder {str(copy_root)!r}"
    assert_verify_refuses(folder, words, "data/3.zip")


# --- the loading script in datasets 3.6: every case in one process ------------------------------------------

#: Links out, for the script: the file linked, as the script names it in its message.
SCRIPT_LINKS = ("shards.json", "data/3.zip", "metadata/3.jsonl")


@pytest.fixture(scope="module")
def script_results(
    packed_template: Path, snapshot: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[dict[str, Any], Path, str]]:
    """What the template's loading script did with each case, in datasets 3.6: (outcome, the
    dataset folder, the file its message must name)."""
    root = tmp_path_factory.mktemp("script")
    folders: dict[str, tuple[Path, str]] = {}
    for number, case in enumerate(sorted(CASES)):
        folders[case] = (hostile_copy(packed_template, root / f"case{number}", case), "shards.json")
    for number, rel in enumerate(SCRIPT_LINKS):
        folders[f"link {rel}"] = (linked_out(packed_template, root / f"link{number}", rel)[0], rel)
    folders["snapshot"] = (snapshot, "")
    loaders = {case: str(folder / LOADER) for case, (folder, _) in folders.items()}
    outcomes = script_outcomes(loaders, root / "cache")
    return {case: (outcomes[case], *folders[case]) for case in outcomes}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_manifest_is_refused_by_the_loading_script_in_datasets_3_6(
    script_results: dict[str, tuple[dict[str, Any], Path, str]], case: str
) -> None:
    outcome, folder, file = script_results[case]
    error = outcome["error"]
    assert error is not None and outcome["rows"] == [], outcome
    assert error.startswith(f"ValueError: {folder}/{file}: ") and "\n" not in error, error


@pytest.mark.slow
@pytest.mark.parametrize("rel", SCRIPT_LINKS)
def test_the_loading_script_refuses_a_file_linked_out_of_the_dataset(
    script_results: dict[str, tuple[dict[str, Any], Path, str]], rel: str
) -> None:
    outcome, folder, file = script_results[f"link {rel}"]
    error = outcome["error"]
    assert error is not None and error.startswith(f"ValueError: {folder}/{file}: a link to "), error
    assert "outside the dataset folder" in error and "\n" not in error, error
    assert outcome["rows"] == []  # refused before the first shard is read


@pytest.mark.slow
def test_the_loading_script_reads_a_hub_cache_snapshot(
    script_results: dict[str, tuple[dict[str, Any], Path, str]],
) -> None:
    outcome, _, _ = script_results["snapshot"]
    assert outcome["error"] is None and len({key for key, _ in outcome["rows"]}) == 300


def test_the_snapshot_holds_the_packed_bytes(snapshot: Path, packed_template: Path) -> None:
    for rel in ("shards.json", "data/3.zip", "metadata/3.jsonl"):
        digest = hashlib.sha256((snapshot / rel).read_bytes()).hexdigest()
        assert digest == hashlib.sha256((packed_template / rel).read_bytes()).hexdigest(), rel
