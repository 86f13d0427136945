"""A card's text: its YAML front matter (read, and set one key at a time) and shardkit's
sections between their marker lines; reading and writing README.md as it was (its UTF-8 mark,
its line ends)."""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import quote, unquote

import yaml

from ..errors import UsageError
from ..location import MAX_SMALL_FILE_BYTES, read_upto
from ..manifest import write_atomic
from .sections import LICENSE_KEYS, license_section

#: The card sections shardkit owns, each between ``<!-- shardkit:NAME -->`` and
#: ``<!-- /shardkit:NAME -->``, in the order a missing one is put in. Every pack rewrites them
#: (push rewrites ``usage`` too); the text around them is the user's and is never touched.
SECTIONS = ("stats", "features", "usage", "layout", "license")
#: A section's opening marker; ``usage`` records there, as ``key=value`` words, what push must
#: know to render it again (``repo``, ``revision``, ``builtin``; each value percent-encoded).
#: A marker is a line of its own: user text in a section (a column or class name, a value) is
#: never a whole line (one-line cells and JSON strings), so it can neither open nor close one.
_BEGIN = re.compile(r"^<!-- shardkit:(?P<name>[a-z]+)(?P<attrs>(?: [a-z]+=[^\s>]+)*) -->[ \t\r]*$", re.MULTILINE)
#: What a marker's word keeps as it is (a repo id, a branch name as usually spelled).
_ATTR_SAFE = "/._-+@"
#: A line of a section's content that would read as a marker: shown as text instead.
_MARKER_LIKE = re.compile(r"^<!--(?= /?shardkit:)", re.MULTILINE)
# A top-level key line: `key:`, `"key":`, `key :` (not a comment, list item or indented line).
_TOP_LEVEL_KEY = re.compile(r"""^(["']?)([^\s#\-"'][^:"']*?)\1\s*:(?:\s|\Z)""")


# --- the YAML front matter --------------------------------------------------------------------------


def front_matter_end(text: str) -> int:
    """Where a card's YAML front matter ends: the index of the newline before its closing
    ``---`` (the YAML is ``text[4:end]``, the body ``text[end + 5:]``); -1 if it has none."""
    if not text.startswith("---\n"):
        return -1
    end = text.find("\n---\n", 3)
    if end == -1 and text.rstrip().endswith("\n---"):
        end = text.rstrip().rfind("\n---")
    return end


def split_front_matter(text: str) -> tuple[dict[str, Any], str]:
    """Split a card into its YAML mapping and the text after it."""
    end = front_matter_end(text)
    if end == -1:
        return {}, text
    data = yaml.safe_load(text[4:end]) or {}
    if not isinstance(data, dict):
        raise ValueError("README.md front matter is not a YAML mapping")
    return data, text[end + 5 :]


def set_front_matter_keys(text: str, values: dict[str, Any]) -> str:
    """Set top-level keys of a card's YAML front matter; every other line stays byte for byte.

    A key's block (its line and the indented or ``- `` lines under it) is replaced by the new
    value's YAML, or appended at the end of the front matter; comments and blank lines that end
    a block stay. A card without front matter gets one in front of its text. Setting
    ``license`` (``license_name``, ``license_link``) rewrites shardkit's license section too,
    which says the same in words.

    Not huggingface_hub's ``DatasetCard``: it writes the whole YAML again from the parsed data
    (the user's comments, quoting, key order and line breaks would be lost); these are the
    user's lines, edited one key at a time.
    """
    end = front_matter_end(text)
    front, body = (text[4 : end + 1], text[end + 5 :]) if end != -1 else ("", text)
    lines = front.splitlines(keepends=True)
    for key, value in values.items():
        dumped = yaml.safe_dump({key: value}, sort_keys=False, allow_unicode=True, width=1000)
        starts = [i for i, line in enumerate(lines) if (m := _TOP_LEVEL_KEY.match(line)) and m.group(2) == key]
        if not starts:
            lines.extend(dumped.splitlines(keepends=True))
            continue
        start = starts[0]
        stop = next((i for i in range(start + 1, len(lines)) if _TOP_LEVEL_KEY.match(lines[i])), len(lines))
        while stop > start + 1 and (not lines[stop - 1].strip() or lines[stop - 1].startswith("#")):
            stop -= 1  # a comment or blank line before the next key is the user's
        lines[start:stop] = dumped.splitlines(keepends=True)
    new_front = "".join(lines)
    data = yaml.safe_load(new_front)
    if not isinstance(data, dict):
        raise ValueError("README.md front matter is not a YAML mapping")
    if LICENSE_KEYS & set(values) and find_section(body, "license") is not None:
        body = set_section(body, "license", license_section(data))  # the license in words stays the key's
    return f"---\n{new_front}---\n{body}"


# --- shardkit's sections ----------------------------------------------------------------------------


def _end_marker(name: str) -> str:
    return f"<!-- /shardkit:{name} -->"


def find_section(body: str, name: str) -> tuple[int, int, dict[str, str]] | None:
    """Where section ``name`` starts and ends in ``body`` (its marker lines included) and the
    words of its opening marker; None if it has no opening marker or no closing one after it."""
    for match in _BEGIN.finditer(body):
        if match.group("name") != name:
            continue
        end = re.compile(rf"^{re.escape(_end_marker(name))}[ \t\r]*$", re.MULTILINE).search(body, match.end())
        if end is None:
            return None
        attrs = {k: unquote(v) for k, v in (word.split("=", 1) for word in match.group("attrs").split())}
        return match.start(), end.end(), attrs
    return None


def _has_marker(body: str, name: str) -> bool:
    return any(m.group("name") == name for m in _BEGIN.finditer(body))


def is_shardkit_card(text: str) -> bool:
    """Whether a card has shardkit's sections (a marker line, not the words in a sentence)."""
    return _has_marker(text, "stats")


def _section(name: str, content: str, attrs: dict[str, str] | None = None) -> str:
    """The one writer of a section: its markers, each a line, around ``content``, in which no
    line can read as a marker (a name the user gave, say, that ends a line and starts another)."""
    words = "".join(f" {k}={quote(v, safe=_ATTR_SAFE)}" for k, v in (attrs or {}).items())
    if content and not content.endswith("\n"):
        content += "\n"
    content = _MARKER_LIKE.sub("&lt;!--", content)
    return f"<!-- shardkit:{name}{words} -->\n{content}{_end_marker(name)}"


def set_section(body: str, name: str, content: str, attrs: dict[str, str] | None = None) -> str:
    """``body`` with section ``name`` holding ``content``: replaced where it is, else put after
    the shardkit section before it in :data:`SECTIONS` (or before the one after it; or at the
    end of the card). Every other character of ``body`` stays as it was. A section whose
    opening marker has no closing one is left alone: where the user's text ends is unknown."""
    text = _section(name, content, attrs)
    found = find_section(body, name)
    if found is not None:
        start, end, _ = found
        return body[:start] + text + body[end:]
    if _has_marker(body, name):
        return body
    order = SECTIONS.index(name)
    for before in reversed(SECTIONS[:order]):
        if (at := find_section(body, before)) is not None:
            return body[: at[1]] + "\n\n" + text + body[at[1] :]
    for after in SECTIONS[order + 1 :]:
        if (at := find_section(body, after)) is not None:
            return body[: at[0]] + text + "\n\n" + body[at[0] :]
    # A card shardkit did not write (--adopt): its text stays; shardkit's sections go after it.
    return body + ("" if body.endswith("\n") or not body else "\n") + "\n" + text + "\n"


def minimal_body(title: str) -> str:
    """A new card's text: its title, then shardkit's sections (empty until they are set)."""
    return f"\n# {title}\n\n" + "\n\n".join(_section(name, "") for name in SECTIONS) + "\n"


# --- README.md as a file ----------------------------------------------------------------------------


def read_card(path: str) -> tuple[str, str, bool]:
    """A card's text with ``\\n`` line ends, its UTF-8 mark (kept, outside the YAML) and whether
    it had ``\\r\\n`` line ends (it is written back with its own)."""
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    text = text[len(bom) :]
    crlf = "\r\n" in text and text.count("\r\n") == text.count("\n")
    return text.replace("\r\n", "\n"), bom, crlf


def write_card_text(path: str, text: str, bom: str, crlf: bool) -> None:
    """Write a card's text (``\\n`` line ends) back with the mark and line ends it was read with."""
    write_atomic(path, (bom + (text.replace("\n", "\r\n") if crlf else text)).encode("utf-8"))


def read_front_matter(out_dir: str) -> dict[str, Any]:
    """OUT_DIR's README.md's YAML front matter ({} if it has none)."""
    text, _, _ = read_card(os.path.join(out_dir, "README.md"))
    return split_front_matter(text)[0]


def set_card_keys(out_dir: str, values: dict[str, Any]) -> str:
    """Set top-level keys of OUT_DIR's README.md's front matter (:func:`set_front_matter_keys`);
    every other byte stays. Returns the card's path."""
    path = os.path.join(out_dir, "README.md")
    text, bom, crlf = read_card(path)
    write_card_text(path, set_front_matter_keys(text, values), bom, crlf)
    return path


def read_utf8(path: str, limit: int = MAX_SMALL_FILE_BYTES) -> str:
    """A text file of OUT_DIR shardkit reads whole (its card, ``.gitignore``), as text; one line
    naming it if it is over ``limit`` bytes or not UTF-8. :class:`FileNotFoundError` if missing.
    (Open it only after :func:`shardkit.outdir.check_own_entries`: a FIFO would block here.)"""
    with open(path, "rb") as f:
        raw = read_upto(f, limit + 1)
    if len(raw) > limit:
        raise UsageError(f"{path}: more than {limit} bytes, far more than a {os.path.basename(path)} holds")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{path} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); save it as UTF-8"
        ) from None
