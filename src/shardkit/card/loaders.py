"""The files beside the card that pack keeps true to what was packed: the template's loading
script (its features, and its reader code brought up to date) and ``.gitattributes``."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..formats import SHARD_SUFFIXES
from ..manifest import write_atomic
from .facts import LOADER_SUFFIX

GITATTRIBUTES_LINES = [
    *(f"*{suffix} filter=lfs diff=lfs merge=lfs -text" for suffix in SHARD_SUFFIXES),
    "*.jsonl filter=lfs diff=lfs merge=lfs -text",
    "*.jsonl.gz filter=lfs diff=lfs merge=lfs -text",
    "*.jpg filter=lfs diff=lfs merge=lfs -text",
    "*.jpeg filter=lfs diff=lfs merge=lfs -text",
    "*.png filter=lfs diff=lfs merge=lfs -text",
    "*.webp filter=lfs diff=lfs merge=lfs -text",
    "*.flac filter=lfs diff=lfs merge=lfs -text",
    "*.wav filter=lfs diff=lfs merge=lfs -text",
    "*.mp3 filter=lfs diff=lfs merge=lfs -text",
]


FEATURES_BEGIN = "# shardkit:features-begin\n"
FEATURES_END = "# shardkit:features-end\n"

#: The template's loading script, whose reader code (everything after :data:`FEATURES_END`) a
#: pack puts in place of an earlier template's.
TEMPLATE_LOADER = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "templates",
    "hub-dataset",
    "{{cookiecutter.dataset_name}}",
    "{{cookiecutter.__loader_module}}.py",
)
#: The sha256 of the reader code of every earlier template (the commit that last changed it),
#: as :func:`normalised_reader` gives it: the code as that template rendered it, with the one
#: line it put the dataset's pretty name in given back as the template wrote it. The code of the
#: template before this one must join this list whenever the template's reader code changes
#: (tests/test_loading_script.py checks this against the git history).
EARLIER_READERS = {
    "66e42d77f9e414f2efd480ae814e4353b02dc10544e9bf861606518e27b589cc": "8d384d8",
    "d3f60e1bbd59098a4943206105b61efe32526da1af55ac165a2f4543923131b5": "f27a2ff",
    "74d9c7680a342671b9f4fd9cc691783df272f525eecb138ee74f4a3e86ef69c3": "dca55b6",
    "73e0b1a754f3b274f74bf0c6f5b01ba060c27d60e609c693cf8c70d52439b00c": "2d45ce5",
    "fa1e0f9eeaace58f10cfea50c10b6dbba34f1efaebefb32aa58fbc9b2c534494": "f31e959",
    "f2ac91e8733954ff211125bbae4d52635d4e3955e12d076827867f3247b9c598": "eec3e39",
    "639ee6803661b5ba2b7605a96e3c68118e9c5694357c17fe8086d5fb1323a9d7": "2fc619f",
    "f54d3fdd289d201f8ab83c21cccee32c2a5219b92e3ff4d334c94ca3a292c42e": "25c66ef",
    "7e6204afec5b45ab211d002b39ac4e3374820f33f1d273d16703a9e1f1932417": "1403417",
    "b8e0d3bf8231732b6cd38da44659289caa2be27d983067a5e40ab82a356cbd82": "b5b75c3",
    "9631f1141235e995d554f82bf15ce383a04a122fa48d227d599400f2deda4a2d": "c9013c6",
    "8663f501f0370ffb1a7ecad1e6a5d0557630ad1b9f307785058644d13ade39f7": "08de0b4",
    "c63ace27c5da799b4ca2ba6f5ffda87ccb1f52003956dcc73683f98ca70ffa8e": "5b06ef5",
    "8264ccaa194ace0eaab2d74fd8e7403ed5800dd35bead9ff9fa55b60175788ee": "c1537fd",
    "877114cde6ebda1593f478045244678c364a9356afa537e2ad6dfc511606e191": "6a7ec62",
}
#: The line of the earlier templates' reader code that held the pretty name (the class docstring),
#: as rendered (a name on one line, without a triple quote) and as the template wrote it.
_PRETTY_NAME_LINE = re.compile(r'^    """(?:(?!""")[^\n])*: ZIP shards packed by shardkit\."""\n', re.MULTILINE)
_PRETTY_NAME_TEMPLATE = '    """{{ cookiecutter.pretty_name }}: ZIP shards packed by shardkit."""\n'
#: The template's reader code begins with this marker and its version (from 7; the earlier ones had none).
_READER_MARKER = re.compile(r"^# shardkit:reader ([0-9]+)\b", re.MULTILINE)


def normalised_reader(code: str) -> str:
    """Reader code as the template that rendered it wrote it (see :data:`EARLIER_READERS`)."""
    return _PRETTY_NAME_LINE.sub(lambda _: _PRETTY_NAME_TEMPLATE, code, count=1)


def reader_code(text: str) -> str | None:
    """A loading script's reader code: everything after its :data:`FEATURES_END` line; None
    without the features markers."""
    start, end = text.find(FEATURES_BEGIN), text.find(FEATURES_END)
    if start == -1 or end < start:
        return None
    return text[end + len(FEATURES_END) :]


def template_reader() -> str:
    """The reader code of shardkit's template (it holds no template variable: it is copied as it is)."""
    with open(TEMPLATE_LOADER, encoding="utf-8") as f:
        code = reader_code(f.read())
    if code is None or "{{" in code or "{%" in code or "{#" in code:
        raise RuntimeError(f"{TEMPLATE_LOADER}: no reader code after {FEATURES_END.strip()!r}, or a template tag in it")
    return code


def _reader_version(code: str) -> int:
    """The version its marker gives reader code; 0 without one (an earlier template's, or edited)."""
    found = _READER_MARKER.search(code)
    return int(found.group(1)) if found else 0


@dataclass
class LoaderUpdate:
    """What :func:`update_loaders` did to the loading scripts at OUT_DIR's root."""

    #: Every loading script whose features were written (it has the markers and is not outdated).
    written: list[str] = field(default_factory=list)
    #: Those whose reader code was an earlier template's, now the template's.
    upgraded: list[str] = field(default_factory=list)
    #: The scripts whose reader code was edited and is older than the template's: left as they are.
    outdated: list[str] = field(default_factory=list)

    def warnings(self, where: Callable[[str], str] = str) -> list[str]:
        """One line for each outdated script; ``where(path)`` names it (for an OUT_DIR URL: its URL)."""
        return [
            f"{where(path)}: its reader code (after {FEATURES_END.strip()!r}) was edited, so it was left as it is"
            " and datasets 3.6 may not read these shards with it; replace it with the template's (the same part"
            f" of {TEMPLATE_LOADER}), or take the script of a new `shardkit new` scaffold"
            for path in self.outdated
        ]


def update_loaders(out_dir: str, features: list[dict[str, Any]]) -> LoaderUpdate:
    """Write the features into every ``*_loader.py`` at OUT_DIR's root that has the markers, and
    bring its reader code up to date.

    The template's loading script declares its features between two marker comments; datasets
    3.6 then types every column as the card does. Everything after the end marker is shardkit's
    reader code: when it is byte for byte what an earlier template wrote (:data:`EARLIER_READERS`),
    it is replaced with the template's, which reads the shards this shardkit writes. Code edited
    by hand is kept: a script whose code is marked as the template's version or a later one
    (edited after it was brought up to date) gets its features; any other is left as it is, and
    the result names it (:attr:`LoaderUpdate.outdated`, :meth:`LoaderUpdate.warnings`).
    """
    result = LoaderUpdate()
    current: str | None = None
    for name in sorted(os.listdir(out_dir)):
        if not name.endswith(LOADER_SUFFIX):
            continue
        path = os.path.join(out_dir, name)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        code = reader_code(text)
        if code is None:
            continue
        current = template_reader() if current is None else current
        if code != current and hashlib.sha256(normalised_reader(code).encode("utf-8")).hexdigest() in EARLIER_READERS:
            code = current
            result.upgraded.append(path)
        elif code != current and _reader_version(code) < _reader_version(current):
            result.outdated.append(path)  # edited: left as it is
            continue
        start = text.find(FEATURES_BEGIN)
        block = f'_FEATURES_JSON = r"""\n{json.dumps(features, ensure_ascii=False, indent=1)}\n"""\n'
        new = text[: start + len(FEATURES_BEGIN)] + block + FEATURES_END + code
        if new != text:
            write_atomic(path, new.encode("utf-8"))
        result.written.append(path)
    return result


def ensure_gitattributes(out_dir: str) -> str:
    """Append the LFS rules shardkit's files need to .gitattributes; what is there stays byte for
    byte (its line endings too)."""
    path = os.path.join(out_dir, ".gitattributes")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raw = b""
    existing = raw.decode("utf-8", errors="surrogateescape").splitlines()
    missing = [line for line in GITATTRIBUTES_LINES if line not in existing]
    if missing:
        newline = b"\r\n" if b"\r\n" in raw else b"\n"
        joined = newline.join(line.encode("utf-8") for line in missing) + newline
        write_atomic(path, raw + (newline if raw and not raw.endswith(b"\n") else b"") + joined)
    return path
