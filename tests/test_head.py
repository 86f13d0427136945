"""``shardkit head``: the first rows of a packed dataset, from a folder, a URL and the Hub.

One corpus of images of every common mode (RGB and CMYK JPEG, an EXIF-rotated JPEG, L, RGBA,
palette and 16-bit PNG, each of its own size) with splits, a class label (one null), typed
columns (a 64-bit int, floats, a bool, a list, a struct, a column that is always null, a long
caption with a newline) is packed as zip, tar and parquet, several shards per split; an audio
corpus (mono WAV, stereo FLAC) too. The command's output is held to the input: every column,
each value of its type, each image's size and mode as Pillow reads the input file, each saved
file's bytes.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import signal
import struct
import subprocess
import sys
import time
import wave
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import soundfile
from PIL import Image

from tests.fault_proxy import Fault, run_fault_proxy
from tests.http_server import serve_directory
from tests.hub_server import WRITE_TOKEN, HubServer, run_hub_server
from tests.support.cli import run_cli
from tests.support.corpus import write_jsonl
from tests.support.packing import pack_example_here
from tests.test_splits_labels import hub_env, push_cli

pytestmark = pytest.mark.slow  # every test here takes over about 3 s, or shares a fixture that does

SCRIPTS = Path(sys.executable).parent
FORMATS = ("zip", "tar", "parquet")
MODES = (("RGB", "JPEG"), ("L", "PNG"), ("RGBA", "PNG"), ("P", "PNG"), ("I;16", "PNG"), ("CMYK", "JPEG"))
CLASSES = ("zebra", "cat", "dog")
NAMES = sorted(CLASSES)
N = 30


def split_of(i: int) -> str:
    return "test" if i % 5 == 4 else "train"  # 24 train, 6 test


def image_bytes(i: int) -> bytes:
    """Image ``i``: a mode of MODES, a size of its own; every 7th JPEG carries EXIF orientation 6."""
    mode, fmt = MODES[i % len(MODES)]
    size = (9 + i, 5 + (i * 3) % 11)
    colour: Any = {"RGB": (i * 8, 50, 200), "L": i * 8, "RGBA": (i * 8, 9, 9, 128), "P": i, "CMYK": (i, 2, 3, 4)}
    img = Image.new(mode, size, colour.get(mode, i * 1000))
    buf = io.BytesIO()
    if fmt == "JPEG" and i % 7 == 0:
        exif = Image.Exif()
        exif[0x0112] = 6
        img.save(buf, format=fmt, exif=exif)
    else:
        img.save(buf, format=fmt)
    return buf.getvalue()


def corpus_rows() -> list[dict[str, Any]]:
    rows = []
    for i in range(N):
        ext = ".jpg" if MODES[i % len(MODES)][1] == "JPEG" else ".png"
        rows.append(
            {
                "file_name": f"d{i % 3}/img_{i:02d}{ext}",
                "split": split_of(i),
                "label": None if i == 3 else CLASSES[i % 3],
                "n": i * 3,
                "big": 2**60 + i,  # over 2**53: a float would round it
                "w": i / 4,
                "flag": i % 2 == 0,
                "tags": [f"t{j}" for j in range(i % 9)],  # up to 8 items: shortened in the text
                "info": {"a": i, "b": f"s{i}"},
                "nothing": None,  # a column that is always null
                "caption": f"picture {i}\nsecond line – ünïcode " + "x" * (i * 5),
            }
        )
    return rows


def tone(seed: int, channels: int) -> bytes:
    """A short 16-bit WAV: 800 frames at 8000 Hz."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(
            b"".join(struct.pack("<h", int(8000 * math.sin(i * (seed + 1) / 40))) * channels for i in range(800))
        )
    return buf.getvalue()


@dataclass
class Packed:
    root: Path
    images: Path
    rows: dict[str, dict[str, Any]]  # file_name -> input row
    folders: dict[str, Path] = field(default_factory=dict)
    audio_rows: dict[str, dict[str, Any]] = field(default_factory=dict)

    def input_file(self, source_path: str, *, audio: bool = False) -> Path:
        return (self.root / "clips" if audio else self.images) / source_path


def pack(images: Path, meta: Path, out: Path, *options: str) -> None:
    """`pack-shards`, in this process (tests/support/cli.py): only what it writes is looked at."""
    result = run_cli("pack-shards", images, meta, "-o", out, "-q", *options)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def packed_head_corpus(tmp_path_factory: pytest.TempPathFactory) -> Packed:
    root = tmp_path_factory.mktemp("head")
    images = root / "images"
    rows = corpus_rows()
    for i, row in enumerate(rows):
        path = images / row["file_name"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(image_bytes(i))
    meta = write_jsonl(root / "meta.jsonl", rows)
    sets = Packed(root, images, {r["file_name"]: r for r in rows})
    for fmt in FORMATS:
        out = root / f"photos-{fmt}"
        pack(images, meta, out, "--format", fmt, "--class-label", "label", "--keep-source-path", "--prefix-length", "1")
        sets.folders[fmt] = out

    clips = root / "clips"
    clips.mkdir()
    audio = []
    for i in range(6):
        name = f"clip_{i}.wav" if i % 2 == 0 else f"clip_{i}.flac"
        if name.endswith(".wav"):
            (clips / name).write_bytes(tone(i, 1))
        else:
            data, rate = soundfile.read(io.BytesIO(tone(i, 2)))
            soundfile.write(clips / name, data, rate, format="FLAC")
        audio.append({"file_name": name, "speaker": f"s{i % 3}", "n": i})
    sets.audio_rows = {r["file_name"]: r for r in audio}
    pack(clips, write_jsonl(root / "audio.jsonl", audio), root / "sounds", "--keep-source-path")
    sets.folders["audio"] = root / "sounds"
    return sets


def head(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`shardkit head`: in this process (tests/support/cli.py), the many runs on a folder or a URL;
    in a process of its own with ``env`` (the Hub's: huggingface_hub reads it once, at import)."""
    if env is None:
        return run_cli("shardkit", "head", *args)
    return subprocess.run(
        [str(SCRIPTS / "shardkit"), "head", *args], capture_output=True, text=True, env=env, timeout=300, check=False
    )


def json_rows(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def same_typed(a: Any, b: Any) -> bool:
    """Equal, and of the same JSON type at every depth (1 is not 1.0 nor True)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same_typed(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_typed(a[k], b[k]) for k in a)
    return bool(a == b)


def one_error_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def split_keys(folder: Path, split: str) -> list[tuple[str, str]]:
    """(shard, key) of every row of a split, in the order readers get them (shard by shard)."""
    manifest = json.loads((folder / "shards.json").read_text())
    out = []
    for shard in manifest["shards"]:
        if shard.get("split", "train") == split:
            lines = (folder / shard["metadata"]).read_text().splitlines()
            out += [(shard["file"], json.loads(line)["key"]) for line in lines]
    return out


# --- JSON: every value as the input has it ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_json_rows_are_the_input_rows_with_their_types_and_image_headers(packed_head_corpus: Packed, fmt: str) -> None:
    folder = packed_head_corpus.folders[fmt]
    for split, count in (("train", 7), ("test", 6)):
        got = json_rows(head(str(folder), "--json", "-n", str(count), "--split", split))
        assert [r["key"] for r in got] == [k for _, k in split_keys(folder, split)][:count]
        for row in got:
            given = packed_head_corpus.rows[row["source_path"]]
            assert given["split"] == split
            expected = {k: v for k, v in given.items() if k not in ("file_name", "split")}
            expected["label"] = -1 if given["label"] is None else NAMES.index(given["label"])
            fields = {k: v for k, v in row.items() if k not in ("image", "key", "source_path")}
            assert same_typed(fields, expected), (fields, expected)
            data = packed_head_corpus.input_file(row["source_path"]).read_bytes()
            with Image.open(io.BytesIO(data)) as img:
                want = {"width": img.width, "height": img.height, "mode": img.mode, "format": img.format.lower()}
                orientation = img.getexif().get(0x0112)
            image = row["image"]
            assert {k: image[k] for k in want} == want
            assert image["bytes"] == len(data) and image["sha256"] == hashlib.sha256(data).hexdigest()
            assert image.get("orientation") == orientation
            assert "problem" not in image and set(image) <= {*want, "bytes", "sha256", "path", "orientation"}
    every = json_rows(head(str(folder), "--json", "-n", "100"))
    assert {r["image"]["mode"] for r in every} == {m for m, _ in MODES}  # every mode was shown at least once
    assert [r["source_path"] for r in every if r["image"].get("orientation") == 6] == ["d0/img_00.jpg"]


def test_the_columns_come_in_the_order_of_the_features(packed_head_corpus: Packed) -> None:
    manifest = json.loads((packed_head_corpus.folders["zip"] / "shards.json").read_text())
    [row] = json_rows(head(str(packed_head_corpus.folders["zip"]), "--json", "-n", "1"))
    assert list(row) == [f["name"] for f in manifest["features"]]


# --- text -------------------------------------------------------------------------------------


def blocks(text: str) -> tuple[list[str], list[dict[str, str]]]:
    """The header lines, and each row's block as column -> shown value."""
    parts = text.rstrip("\n").split("\n\n")
    rows = []
    for part in parts[1:]:
        lines = part.splitlines()
        assert lines[0].startswith("row ")
        rows.append({line.split()[0]: line.split(None, 1)[1].strip() for line in lines[1:]})
    return parts[0].splitlines(), rows


@pytest.mark.parametrize("fmt", FORMATS)
def test_text_names_every_column_and_each_image_size_and_mode(packed_head_corpus: Packed, fmt: str) -> None:
    folder = packed_head_corpus.folders[fmt]
    result = head(str(folder), "-n", "6")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    header, rows = blocks(result.stdout)
    assert header[0] == f"{folder}: {fmt} shards, split train: 6 of 24 rows shown (" + header[0].split(" (", 1)[1]
    assert "other splits: test 6" in header[0]
    features = " ".join(line.strip() for line in header[1:])
    assert features == (
        "features: image (image), key (string), label (ClassLabel: cat, dog, zebra), n (int64), big (int64),"
        " w (float64), flag (bool), tags (list of string), info (struct a, b), nothing (string), caption (string),"
        " source_path (string)"
    )
    assert all(len(line) <= 100 for line in header[1:])
    assert len(rows) == 6
    columns = ["image", "key", "label", "n", "big", "w", "flag", "tags", "info", "nothing", "caption", "source_path"]
    for shown in rows:
        assert sorted(shown) == sorted(columns)
        source = json.loads(shown["source_path"])
        given = packed_head_corpus.rows[source]
        with Image.open(packed_head_corpus.input_file(source)) as img:
            assert shown["image"].startswith(f"<image {img.width}x{img.height} {img.mode} {img.format.lower()} ")
        label = given["label"]
        assert shown["label"] == ("-1 (no label)" if label is None else f"{NAMES.index(label)} ({label})")
        assert shown["nothing"] == "null" and shown["big"] == str(given["big"]) and shown["w"] == repr(given["w"])
        assert shown["flag"] == json.dumps(given["flag"])
        caption = shown["caption"]  # one line: the newline escaped, a long caption cut with its length
        assert caption.startswith('"picture ') and "\\n" in caption
        if len(given["caption"]) > 60:
            assert caption.endswith(f'…" ({len(given["caption"])} chars)')
        tags = given["tags"]
        assert (
            shown["tags"]
            == "[" + ", ".join([json.dumps(t) for t in tags[:5]] + [f"… {len(tags)} items"] * (len(tags) > 5)) + "]"
        )


def test_text_of_audio_gives_duration_rate_and_channels(packed_head_corpus: Packed) -> None:
    folder = packed_head_corpus.folders["audio"]
    result = head(str(folder), "-n", "10")
    header, rows = blocks(result.stdout)
    assert result.returncode == 0 and header[0].startswith(f"{folder}: zip shards, split train: 6 of 6 rows shown")
    assert len(rows) == 6
    for shown in rows:
        source = json.loads(shown["source_path"])
        info = soundfile.info(str(packed_head_corpus.input_file(source, audio=True)))
        assert shown["audio"].startswith(
            f"<audio {info.duration:.1f} s {info.samplerate} Hz {info.channels} ch {info.format.lower()} "
        )
        assert set(shown) == {"audio", "key", "speaker", "n", "source_path"}
    got = json_rows(head(str(folder), "--json"))
    assert len(got) == 5
    for row in got:
        data = packed_head_corpus.input_file(row["source_path"], audio=True).read_bytes()
        info = soundfile.info(io.BytesIO(data))
        assert row["audio"]["seconds"] == info.duration and row["audio"]["sample_rate"] == info.samplerate
        assert row["audio"]["channels"] == info.channels and row["audio"]["sha256"] == hashlib.sha256(data).hexdigest()
        assert same_typed(row["n"], packed_head_corpus.audio_rows[row["source_path"]]["n"])
    assert {r["audio"]["channels"] for r in got} == {1, 2}


def test_more_rows_than_the_split_holds_shows_them_all_and_zero_shows_the_header(packed_head_corpus: Packed) -> None:
    folder = packed_head_corpus.folders["tar"]
    result = head(str(folder), "--split", "test", "-n", "1000")
    header, rows = blocks(result.stdout)
    assert header[0].startswith(f"{folder}: tar shards, split test: 6 of 6 rows shown")
    assert "other splits: train 24" in header[0] and len(rows) == 6
    assert len(json_rows(head(str(folder), "--split", "test", "-n", "1000", "--json"))) == 6
    result = head(str(folder), "-n", "0")
    assert result.returncode == 0 and "\n\n" not in result.stdout and "\nrow " not in result.stdout  # the header alone
    assert result.stdout.startswith(f"{folder}: tar shards, split train: 0 of 24 rows shown")


# --- --save-images ------------------------------------------------------------------------------


def test_saved_files_are_the_input_files_and_a_rerun_keeps_them(packed_head_corpus: Packed, tmp_path: Path) -> None:
    for fmt in FORMATS:
        folder = tmp_path / f"saved-{fmt}"
        result = head(str(packed_head_corpus.folders[fmt]), "--json", "-n", "8", "--save-images", str(folder))
        rows = json_rows(result)
        assert result.stderr.strip() == f"saved 8 files in {folder}"
        assert sorted(os.listdir(folder)) == sorted(r["key"] + Path(r["source_path"]).suffix for r in rows)
        for row in rows:
            saved = (folder / (row["key"] + Path(row["source_path"]).suffix)).read_bytes()
            assert saved == packed_head_corpus.input_file(row["source_path"]).read_bytes()
            assert hashlib.sha256(saved).hexdigest() == row["image"]["sha256"]
        again = head(str(packed_head_corpus.folders[fmt]), "-n", "8", "--save-images", str(folder))
        assert again.returncode == 0 and len(os.listdir(folder)) == 8  # the same bytes: left as they are
    audio = tmp_path / "clips"
    rows = json_rows(head(str(packed_head_corpus.folders["audio"]), "--json", "-n", "6", "--save-images", str(audio)))
    for row in rows:
        saved = (audio / (row["key"] + Path(row["source_path"]).suffix)).read_bytes()
        assert saved == packed_head_corpus.input_file(row["source_path"], audio=True).read_bytes()


def test_an_other_file_in_the_way_is_refused_and_the_folder_left_as_it_was(
    packed_head_corpus: Packed, tmp_path: Path
) -> None:
    folder = packed_head_corpus.folders["zip"]
    *_, third = json_rows(head(str(folder), "--json", "-n", "3"))
    out = tmp_path / "out"
    out.mkdir()
    blocked = out / (third["key"] + Path(third["source_path"]).suffix)
    blocked.write_bytes(b"mine")
    (out / "other.txt").write_bytes(b"also mine")
    result = head(str(folder), "-n", "3", "--save-images", str(out))
    shard = dict((k, s) for s, k in split_keys(folder, "train"))[third["key"]]
    assert one_error_line(result, 1) == (
        f"error: {blocked} exists with other bytes than row {third['key']} of {shard}: not overwritten"
        " (save to another folder, or remove it)"
    )
    assert sorted(os.listdir(out)) == sorted([blocked.name, "other.txt"]) and blocked.read_bytes() == b"mine"

    blocked.unlink()
    blocked.symlink_to(tmp_path / "elsewhere")  # a link is never written through
    one_error_line(head(str(folder), "-n", "3", "--save-images", str(out)), 1)
    assert not (tmp_path / "elsewhere").exists() and blocked.is_symlink()


def test_a_save_folder_whose_parent_is_missing_or_that_is_a_file_is_one_line(
    packed_head_corpus: Packed, tmp_path: Path
) -> None:
    folder = str(packed_head_corpus.folders["zip"])
    missing = tmp_path / "no" / "such"
    line = one_error_line(head(folder, "--save-images", str(missing)), 2)
    assert line == (
        f"error: --save-images '{missing}': its folder '{missing.parent}' does not exist; create it first"
        f" (mkdir -p {missing.parent}) or choose another --save-images"
    )
    assert not (tmp_path / "no").exists()
    a_file = tmp_path / "file"
    a_file.write_bytes(b"x")
    line = one_error_line(head(folder, "--save-images", str(a_file)), 2)
    assert line == f"error: --save-images {a_file}: it exists and is not a folder" and a_file.read_bytes() == b"x"


# --- URL and Hub: only what is shown is fetched -------------------------------------------------


def first_shards(folder: Path, split: str, count: int) -> set[str]:
    """The shard files the first ``count`` rows of ``split`` are in."""
    return {shard for shard, _ in split_keys(folder, split)[:count]}


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_url_gives_what_the_folder_gives_reading_only_the_manifest_and_first_shards(
    packed_head_corpus: Packed, fmt: str
) -> None:
    folder = packed_head_corpus.folders[fmt]
    local = head(str(folder), "--json", "-n", "4").stdout
    assert len(first_shards(folder, "train", 4)) < len(first_shards(folder, "train", 24))  # a real test of it
    with serve_directory(folder) as (url, log):
        got = head(url, "--json", "-n", "4")
        text = head(url.rstrip("/"), "-n", "4")
    assert got.returncode == 0 and got.stdout == local, got.stderr
    assert text.returncode == 0 and text.stdout.startswith(f"{url.rstrip('/')}: {fmt} shards, split train: 4 of 24")
    fetched = {path.lstrip("/") for _, path, _ in log.entries}
    assert fetched == {"shards.json"} | first_shards(folder, "train", 4)


@pytest.fixture(scope="module")
def pushed_head_corpus(
    packed_head_corpus: Packed, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[HubServer, dict[str, str]]]:
    root = tmp_path_factory.mktemp("hub")
    with run_hub_server(root / "state") as server:
        push_cli(packed_head_corpus.folders["zip"], "tester/photos", hub_env(server.url, root / "home"))
        push_cli(packed_head_corpus.folders["audio"], "tester/sounds", hub_env(server.url, root / "home"))
        yield server, hub_env(server.url, root / "reader", token=WRITE_TOKEN)


@pytest.mark.slow
def test_a_hub_id_gives_what_the_folder_gives_fetching_only_the_manifest_and_first_shards(
    packed_head_corpus: Packed, pushed_head_corpus: tuple[HubServer, dict[str, str]]
) -> None:
    server, env = pushed_head_corpus
    folder = packed_head_corpus.folders["zip"]
    local = head(str(folder), "--json", "-n", "4", "--split", "test").stdout
    for target in ("tester/photos", "hf://datasets/tester/photos", "hf://datasets/tester/photos@main"):
        server.log.clear()
        got = head(target, "--json", "-n", "4", "--split", "test", env=env)
        assert got.returncode == 0 and got.stdout == local, got.stderr
        fetched = {path.split("/resolve/main/", 1)[1] for _, path, _ in server.log.entries}
        assert fetched == {"shards.json"} | first_shards(folder, "test", 4)
    text = head("tester/sounds", "-n", "2", "--revision", "main", env=env)
    assert text.returncode == 0 and text.stdout.startswith("tester/sounds: zip shards, split train: 2 of 6 rows shown")
    assert text.stdout.count("<audio ") == 2


def test_a_hub_repo_or_revision_that_is_not_there_is_one_line(
    pushed_head_corpus: tuple[HubServer, dict[str, str]],
) -> None:
    _, env = pushed_head_corpus
    line = one_error_line(head("tester/nothing-here", env=env), 2)
    assert line.startswith("error: ") and "tester/nothing-here" in line and "shards.json" in line


# --- bad targets and options ----------------------------------------------------------------------


def test_bad_targets_splits_and_options_are_one_line(packed_head_corpus: Packed, tmp_path: Path) -> None:
    folder = str(packed_head_corpus.folders["zip"])
    line = one_error_line(head(str(tmp_path / "missing")), 2)
    assert str(tmp_path / "missing") in line and "is not a folder" in line
    (tmp_path / "plain").mkdir()
    line = one_error_line(head(str(tmp_path / "plain")), 2)
    assert line == (
        f"error: {tmp_path / 'plain' / 'shards.json'} does not exist: {tmp_path / 'plain'} is not a dataset packed"
        " by shardkit (pack it with `pack-shards IMAGES_DIR META_JSONL -o OUT_DIR`)"
    )
    line = one_error_line(head(folder, "--split", "valid"), 2)
    assert line == "error: the dataset has no split 'valid'; its splits: train, test"
    line = one_error_line(head(folder, "--revision", "v1"), 2)
    assert line == f"error: --revision is for a dataset on the Hub; {folder} is not one"
    assert head(folder, "-n", "-1").returncode == 2


def test_a_damaged_shard_is_one_line_naming_it(packed_head_corpus: Packed, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(packed_head_corpus.folders["tar"], copy)
    shard = sorted((copy / "data" / "train").glob("*.tar"))[0]
    data = bytearray(shard.read_bytes())
    data[600] ^= 0xFF  # inside the first member's bytes
    shard.write_bytes(bytes(data))
    line = one_error_line(head(str(copy), "-n", "1"), 1)
    assert line.startswith("error: ") and str(shard) in line


@pytest.mark.slow
def test_ctrl_c_while_a_shard_is_read_is_one_line_exit_130_and_the_saved_files_removed(
    packed_head_corpus: Packed, tmp_path: Path
) -> None:
    folder = packed_head_corpus.folders["zip"]
    keys = split_keys(folder, "train")
    stalled = next(shard for shard, _ in keys if shard != keys[0][0])  # the second shard
    out = tmp_path / "saved"
    env = {**os.environ, "SHARDKIT_NETWORK_TIMEOUT": "3600"}  # only Ctrl-C ends this wait
    with serve_directory(folder) as (url, _), run_fault_proxy(url) as proxy:
        [stall] = proxy.set(Fault("stall", path=stalled.replace(".", r"\.") + "$"))
        cmd = [str(SCRIPTS / "shardkit"), "head", proxy.url, "-n", "24", "--save-images", str(out)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        try:
            deadline = time.monotonic() + 120
            while stall.hits == 0 and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert stall.hits == 1, "the read never reached the stalled shard"
            proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=120)
        finally:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert stderr.decode().strip().splitlines() == ["interrupted"]
    assert stdout.decode().count("\nrow ") >= 1  # the rows before the stall were shown
    assert not out.exists()  # the folder it made, and the file saved in it, are gone


@pytest.mark.slow
def test_a_file_no_decoder_reads_is_shown_with_why_and_control_characters_are_escaped(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    (images / "a.jpg").write_bytes(b"not an image")
    (images / "b.png").write_bytes(image_bytes(1))
    caption = "esc \x1b[31mred\x1b[0m \u2028 line sep \x85 next line \r\n tab\t nul\x00 end"
    rows = [{"file_name": "a.jpg", "caption": caption}, {"file_name": "b.png", "caption": "ok"}]
    rows = [{**row, "split": "validation"} for row in rows]  # no train split: the first is shown
    out = tmp_path / "out"
    pack(images, write_jsonl(tmp_path / "meta.jsonl", rows), out)

    result = head(str(out))
    assert result.returncode == 0, result.stderr
    assert all(line.isprintable() for line in result.stdout.splitlines())
    assert "\x1b" not in result.stdout and "\x85" not in result.stdout and "\u2028" not in result.stdout
    header, shown = blocks(result.stdout)
    assert header[0] == f"{out}: zip shards, split validation: 2 of 2 rows shown (1 shard, {header[0].split(', ')[-1]}"
    by_caption = {s["caption"]: s for s in shown}
    assert by_caption['"ok"']["image"] == f"<image 10x8 L png {len(image_bytes(1))} B>"
    [bad] = [s for c, s in by_caption.items() if c != '"ok"']
    assert bad["image"] == "<image .jpg 12 B: Pillow cannot read its header: not an image type it knows>"

    got = {r["caption"]: r for r in json_rows(head(str(out), "--json"))}
    assert set(got) == {caption, "ok"}  # exactly as written, escapes and all
    assert got[caption]["image"] == {
        "path": got[caption]["image"]["path"],
        "bytes": 12,
        "sha256": hashlib.sha256(b"not an image").hexdigest(),
        "format": None,
        "width": None,
        "height": None,
        "mode": None,
        "problem": "Pillow cannot read its header: not an image type it knows",
    }


@pytest.mark.slow
def test_a_reader_that_stops_reading_ends_it_quietly(tmp_path: Path) -> None:
    out = tmp_path / "yfcc-mini"
    packed = pack_example_here(out, "-q")
    assert packed.returncode == 0, packed.stderr
    for args in (["--json"], []):  # 300 rows: far more than a pipe holds
        cmd = [str(SCRIPTS / "shardkit"), "head", str(out), "-n", "300", *args]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()  # as `| head -1` does
        stderr = proc.stderr.read()
        assert proc.wait(timeout=120) == 0 and stderr == b""
        assert first.startswith(b'{"image": ' if args else f"{out}: zip shards".encode())


def test_a_saved_file_never_leaves_its_folder(tmp_path: Path) -> None:
    from shardkit.errors import ShardkitError
    from shardkit.head import HeadRow, SavedFiles, describe_file

    image = describe_file("image", "images/x/0123abcd.png", image_bytes(1))
    good = HeadRow(1, "data/0.zip", "0123abcd", {"image": image}, image_bytes(1))
    out = tmp_path / "out"
    bad_names = (("../../0123abcd", "a.png"), ("0123abcd", "x/0123abcd.\\..\\..\\evil"), ("0123ABCD/x", "a.png"))
    for key, path in bad_names:
        bad = HeadRow(1, "data/0.zip", key, {"image": describe_file("image", path, b"x")}, b"x")
        with pytest.raises(ShardkitError, match="not saved"), SavedFiles(str(out)) as saving:
            saving.save(good)
            saving.save(bad)
        assert not out.exists()  # the folder it made, and the good file, removed
    assert list(tmp_path.iterdir()) == []


def test_only_the_header_is_read_so_an_image_cut_short_still_shows_its_size_and_mode() -> None:
    from shardkit.head import describe_file

    for fmt, mode, size in (("PNG", "RGB", (300, 200)), ("JPEG", "L", (120, 90)), ("PNG", "I;16", (64, 48))):
        buf = io.BytesIO()
        Image.effect_noise(size, 64).convert(mode).save(buf, format=fmt)
        cut = buf.getvalue()[: len(buf.getvalue()) // 2]  # the pixels stop half way
        with pytest.raises(OSError), Image.open(io.BytesIO(cut)) as img:
            img.load()  # a decode fails...
        info = describe_file("image", f"images/0123abcd.{fmt.lower()}", cut)
        assert (info.width, info.height, info.mode, info.problem) == (*size, mode, None)  # ...the header does not
        assert info.size == len(cut) and info.sha256 == hashlib.sha256(cut).hexdigest()
