"""Audio end to end: WAV files packed, typed as Audio in the card, verified (--deep parses each),
and streamed back byte for byte with ``shardkit.stream``."""

from __future__ import annotations

import hashlib
import io
import json
import math
import struct
import wave
from pathlib import Path

import datasets
from click.testing import CliRunner

import shardkit
from shardkit.card import split_front_matter
from shardkit.cli import main, pack_shards
from tests.conftest import write_jsonl


def tone(seed: int, frames: int = 800) -> bytes:
    """A short mono 16-bit WAV whose samples differ per seed."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(i * (seed + 1) / 40))) for i in range(frames)))
    return buf.getvalue()


def test_wav_files_pack_verify_and_stream_back(tmp_path: Path) -> None:
    clips = tmp_path / "clips"
    clips.mkdir()
    rows = []
    for i in range(24):
        (clips / f"clip_{i:02d}.wav").write_bytes(tone(i))
        rows.append({"file_name": f"clip_{i:02d}.wav", "speaker": f"s{i % 3}", "seconds": 0.1})
    meta = write_jsonl(tmp_path / "meta.jsonl", rows)
    out = tmp_path / "ds"
    packed = CliRunner().invoke(pack_shards, [str(clips), str(meta), "-o", str(out), "--json", "-j", "1"])
    assert packed.exit_code == 0, packed.stderr
    assert json.loads(packed.stdout)["rows"] == 24

    card, _ = split_front_matter((out / "README.md").read_text())
    assert card["dataset_info"]["features"][0] == {"name": "audio", "dtype": "audio"}
    assert not (out / "preview.jpg").exists()  # a contact sheet is for images

    checked = CliRunner().invoke(main, ["verify", str(out), "--deep", "--json", "-q"])
    report = json.loads(checked.stdout)
    assert checked.exit_code == 0 and report["decoded"] == 24 and report["not_decoded"] == 0

    ds = shardkit.stream(str(out))
    if isinstance(ds.features["audio"], datasets.Audio):  # torchcodec installed: decodable, ask for bytes
        ds = ds.cast_column("audio", datasets.Audio(decode=False))
    else:  # datasets' Audio needs torchcodec even to pass bytes through; without it, bytes and path
        assert ds.features["audio"] == {"bytes": datasets.Value("binary"), "path": datasets.Value("string")}
    got = {row["key"]: hashlib.sha256(row["audio"]["bytes"]).hexdigest() for row in ds}
    expected = {hashlib.sha256(tone(i)).hexdigest()[:32]: hashlib.sha256(tone(i)).hexdigest() for i in range(24)}
    assert got == expected  # content keys: sha256(file)[:32]; bytes unchanged


def test_a_wav_that_does_not_parse_is_found_by_check_images_and_verify_deep(tmp_path: Path) -> None:
    clips = tmp_path / "clips"
    clips.mkdir()
    (clips / "good.wav").write_bytes(tone(1))
    (clips / "bad.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    meta = write_jsonl(tmp_path / "meta.jsonl", [{"file_name": "good.wav"}, {"file_name": "bad.wav"}])
    result = CliRunner().invoke(pack_shards, [str(clips), str(meta), "-o", str(tmp_path / "ds"), "--check-images"])
    assert result.exit_code == 1
    assert "meta.jsonl:2: " in result.stderr and "bad.wav: does not decode as WAV audio" in result.stderr
