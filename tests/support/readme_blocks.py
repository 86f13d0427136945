"""The fenced code blocks of README.md and docs/*.md, and how a block of printed output is
compared with what a command really printed.

An output block (a fence without a language) shows what the command before it prints, with two
liberties a reader expects: a line ``...`` (indented or not) stands for any number of lines, and
what changes from run to run or machine to machine is masked on both sides (:data:`MASKS`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tests.support.corpus import REPO_ROOT

FENCE = re.compile(r"^```(\S*)\s*$")


@dataclass(frozen=True)
class Block:
    doc: str  # path relative to the repository root
    line: int  # the opening fence's line number
    heading: str  # the nearest heading above it
    lang: str  # "bash", "python", "" for output and pictures of files
    text: str

    @property
    def first_line(self) -> str:
        return self.text.split("\n", 1)[0]

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def fenced_blocks(doc: str) -> list[Block]:
    """Every fenced block of ``doc`` in order."""
    blocks: list[Block] = []
    heading = ""
    lang: str | None = None
    body: list[str] = []
    start = 0
    for number, line in enumerate((REPO_ROOT / doc).read_text(encoding="utf-8").splitlines(), 1):
        fence = FENCE.match(line)
        if lang is None and fence:
            lang, body, start = fence.group(1), [], number
        elif lang is not None and line.rstrip() == "```":
            blocks.append(Block(doc, start, heading, lang, "\n".join(body)))
            lang = None
        elif lang is not None:
            body.append(line)
        elif line.startswith("#"):
            heading = line.lstrip("#").strip()
    assert lang is None, f"{doc}:{start}: a fence is not closed"
    return blocks


def output_of(blocks: list[Block], block: Block) -> Block | None:
    """The output block that shows what ``block`` prints: the next block, if it has no language."""
    after = blocks[blocks.index(block) + 1 :]
    return after[0] if after and after[0].lang == "" and after[0].heading == block.heading else None


#: What changes between runs and machines, masked in both the README's lines and the real ones.
MASKS = [
    (re.compile(r"https?://[^/\s\"']+"), "<host>"),  # the test's server and port, or huggingface.co
    (re.compile(r"\b[0-9a-f]{7,}\b"), "<hex>"),  # commits, keys
    (re.compile(r"\d[\d,.]*\d|\d"), "<n>"),  # times, rates
    (re.compile(r"\(\w+ <n> s(, \w+ <n> s)*\)"), "(<phases>)"),  # pack lists only the phases that took time
    (re.compile(r"title=.*$"), "title=<row>"),  # datasets' imagefolder yields ZIPs' rows in no fixed order
]


def shape(line: str) -> str:
    line = line.rstrip()
    for pattern, mask in MASKS:
        line = pattern.sub(mask, line)
    return line


def output_problem(shown: str, printed: str) -> str | None:
    """Why ``printed`` (a command's real output) does not have the lines ``shown`` (an output
    block, with ``...`` lines), or None if it does."""
    want = [shape(line) for line in shown.splitlines()]
    got = [shape(line) for line in printed.splitlines()]
    at = 0
    skipping = False
    for line in want:
        if line.strip() == "...":
            skipping = True
            continue
        if skipping:
            found = [i for i in range(at, len(got)) if got[i] == line]
            if not found:
                return f"no line like {line!r} after line {at} of:\n{printed}"
            at = found[0]
        elif at >= len(got) or got[at] != line:
            return f"line {at + 1} is {got[at] if at < len(got) else None!r}, expected {line!r}, in:\n{printed}"
        at += 1
        skipping = False
    if not skipping and at != len(got):
        return f"{len(got) - at} lines more than shown, from {got[at]!r}, in:\n{printed}"
    return None
