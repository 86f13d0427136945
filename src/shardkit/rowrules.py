"""What every published row obeys, whatever its shard format: the shapes of keys and file
extensions, the longest metadata line, the column ``--keep-source-path`` adds.

A module of its own so that the formats (:mod:`.formats`), which check these in the shards they
read, need not import the stages that first enforce them (:mod:`.metadata`, :mod:`.check`).
"""

from __future__ import annotations

import re

#: A key and a file extension, each matched whole: use them with ``.fullmatch`` (``$`` would let
#: a value ending in a newline through, and a newline in a key or extension would break every
#: line that holds it). ASCII classes, not ``\d`` or ``\w``, which take other scripts' digits too.
KEY_RE = re.compile(r"[0-9a-f]{8,128}")
EXT_RE = re.compile(r"\.[A-Za-z0-9]{1,16}")
#: A longer metadata line is refused without being held in memory (it would be published in
#: the shard's metadata.jsonl and the metadata table, and read whole by every reader of them).
MAX_LINE_BYTES = 16 << 20
#: The column ``--keep-source-path`` adds: the row's file_name as given (files are published
#: under their key, so without it an input file cannot be found again from a published row).
SOURCE_PATH_COLUMN = "source_path"
#: What no name a message shows whole may hold: control characters (C0, DEL and C1: NUL, tab,
#: newline, U+0085...) and Unicode's line and paragraph separators.
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
#: The longest column (or struct field) name: the manifest's features hold every one.
MAX_COLUMN_NAME_CHARS = 10_000


def column_name_problem(name: str) -> str | None:
    """What is wrong with a column's (or a struct field's) name, or None: the packer refuses such
    a column and every reader of a manifest such a feature. A name is shown in messages, one line
    each, and becomes a column of every loader's table."""
    if not name:
        return "is empty"
    if len(name) > MAX_COLUMN_NAME_CHARS:
        return f"is longer than {MAX_COLUMN_NAME_CHARS} characters"
    if not name.isprintable() and (control := CONTROL_RE.search(name)):
        return f"holds {control.group()!r}: a column name holds no control character or line break"
    return None
