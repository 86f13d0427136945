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
import pytest
from click.testing import CliRunner

import shardkit
from shardkit.card import split_front_matter
from shardkit.cli import main, pack_shards
from tests.support.corpus import write_jsonl


def tone(seed: int, frames: int = 800) -> bytes:
    """A short mono 16-bit WAV whose samples differ per seed."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(i * (seed + 1) / 40))) for i in range(frames)))
    return buf.getvalue()


@pytest.mark.slow
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
    assert "meta.jsonl:2: " in result.stderr and "bad.wav: does not decode as audio" in result.stderr


def test_float_wav_and_flac_decode_with_a_real_decoder(tmp_path: Path) -> None:
    """IEEE-float WAV (format tag 3) and FLAC are valid audio: --check-images and verify --deep
    decode them with soundfile, as datasets does, instead of refusing what Python's wave cannot parse."""
    import numpy as np
    import soundfile

    clips = tmp_path / "clips"
    clips.mkdir()
    samples = np.linspace(-0.5, 0.5, 400, dtype="float32")
    soundfile.write(clips / "float.wav", samples, 8000, subtype="FLOAT")
    soundfile.write(clips / "clip.flac", samples, 8000, subtype="PCM_16")
    (clips / "int.wav").write_bytes(tone(3))
    assert (clips / "float.wav").read_bytes()[20:22] == b"\x03\x00"  # WAVE_FORMAT_IEEE_FLOAT
    meta = write_jsonl(tmp_path / "meta.jsonl", [{"file_name": n} for n in ("float.wav", "clip.flac", "int.wav")])
    out = tmp_path / "ds"
    packed = CliRunner().invoke(pack_shards, [str(clips), str(meta), "-o", str(out), "--check-images", "-q"])
    assert packed.exit_code == 0, packed.stderr
    checked = CliRunner().invoke(main, ["verify", str(out), "--deep", "--json", "-q"])
    report = json.loads(checked.stdout)
    assert checked.exit_code == 0 and report["decoded"] == 3 and report["not_decoded"] == 0


def test_a_truncated_flac_is_refused_naming_file_and_line(tmp_path: Path) -> None:
    import numpy as np
    import soundfile

    clips = tmp_path / "clips"
    clips.mkdir()
    soundfile.write(clips / "good.flac", np.zeros(4000, dtype="float32") + 0.25, 8000)
    (clips / "bad.flac").write_bytes((clips / "good.flac").read_bytes()[:60])
    meta = write_jsonl(tmp_path / "meta.jsonl", [{"file_name": "good.flac"}, {"file_name": "bad.flac"}])
    result = CliRunner().invoke(pack_shards, [str(clips), str(meta), "-o", str(tmp_path / "ds"), "--check-images"])
    assert result.exit_code == 1
    assert "meta.jsonl:2: " in result.stderr and "bad.flac: " in result.stderr
    assert not (tmp_path / "ds" / "data").exists()
