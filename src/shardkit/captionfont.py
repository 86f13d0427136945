"""Captions in any script for the preview: each character drawn in the first font of an ordered
list whose character map holds it, the caption wrapped to its cell by measuring what is drawn.

Pillow draws a string in one font, with a box for every character that font lacks, and no single
font covers Latin, CJK, the Indic scripts and emoji. The fonts are Noto's, from two wheels
(``manimgx-fonts``, ``manimgx-fonts-cjk``); the characters each holds are read from its ``cmap``
with fontTools, and only when every earlier font lacks a character (most captions need Noto Sans
alone, and the 33 MB CJK collection is opened only for a caption that needs it).
"""

from __future__ import annotations

import functools
import importlib.resources
import logging
import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from PIL import ImageDraw, ImageFont

_log = logging.getLogger(__name__)

#: (package, file, face in a collection). The order decides a character several fonts hold: Noto
#: Sans's Latin, Greek and Cyrillic before the CJK font's, each script's own font before the symbols.
FontFile = tuple[str, str, int]
_NOTO = "manimgx_fonts"
_SCRIPTS = (
    "Arabic Hebrew Armenian Georgian Ethiopic Devanagari Bengali Gurmukhi Gujarati Oriya Tamil Telugu"
    " Kannada Malayalam Sinhala Thai Lao Khmer Myanmar"
)
#: The CJK collection's faces: Han characters drawn as Japanese writes them in a caption holding
#: kana, else as Simplified Chinese does (Hangul, kana and punctuation are alike in both).
_CJK, _CJK_JAPANESE, _CJK_CHINESE = ("manimgx_fonts_cjk", "NotoSansCJK-VF.otf.ttc"), 0, 2
_SANS: FontFile = (_NOTO, "NotoSans[wght].ttf", 0)  # Latin (with Vietnamese and IPA), Greek, Cyrillic, punctuation
_EMOJI: FontFile = (_NOTO, "NotoEmoji[wght].ttf", 0)  # every emoji, in one colour: PyPI has no colour emoji font
_ELLIPSIS = "…"
_MISSING = "\ufffd"  # a character no font holds: drawn as a plain sign, not as a box like a glyph
_LONGEST = 1000  # characters of a caption laid out: far more than two lines of a cell hold


def fallback(text: str) -> list[FontFile]:
    """The fonts, in order, that draw ``text``."""
    kana = any("\u3040" <= c <= "\u30ff" or "\u31f0" <= c <= "\u31ff" for c in text)
    return [
        _SANS,
        *((_NOTO, f"NotoSans{script}[wght].ttf", 0) for script in _SCRIPTS.split()),
        (*_CJK, _CJK_JAPANESE if kana else _CJK_CHINESE),
        (_NOTO, "NotoSansSymbols[wght].ttf", 0),
        _EMOJI,
    ]


@functools.cache
def code_points(file: FontFile) -> frozenset[int]:
    """The characters ``file`` holds a glyph for."""
    from fontTools.ttLib import TTFont

    package, name, face = file
    try:
        with importlib.resources.as_file(importlib.resources.files(package) / name) as path:
            font = TTFont(str(path), fontNumber=face, lazy=True)
            try:
                return frozenset(font.getBestCmap() or ())
            finally:
                font.close()
    except (ImportError, OSError) as exc:  # a font package's release that moved its files
        _log.warning("preview captions: font %s/%s cannot be read (%s); drawn without it", package, name, exc)
        return frozenset()


@functools.cache
def font(file: FontFile, size: int) -> ImageFont.FreeTypeFont:
    """``file`` at ``size`` pixels, Regular."""
    from PIL import ImageFont

    package, name, face = file
    try:
        with importlib.resources.as_file(importlib.resources.files(package) / name) as path:
            loaded = ImageFont.truetype(str(path), size, index=face)
    except (ImportError, OSError):  # said once by code_points; the sheet is still made
        return cast("ImageFont.FreeTypeFont", ImageFont.load_default(size))
    if (
        b"Regular" in loaded.get_variation_names()
    ):  # a variable font's default is not always it (Noto Sans CJK's is Thin)
        loaded.set_variation_by_name("Regular")
    return loaded


@dataclass(frozen=True)
class Run:
    """Characters drawn in one font."""

    file: FontFile
    text: str


def _clean(text: str) -> str:
    """Line ends, tabs and other control characters as spaces, one space between words."""
    return " ".join("".join(" " if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in text).split())


def _attaches(c: str, previous: str) -> bool:
    """Whether ``c`` belongs to the character before it (a mark, joiner, variation selector or
    skin tone, or what a zero-width joiner joins): drawn in its font, never wrapped apart from it."""
    return _invisible(c) or "\U0001f3fb" <= c <= "\U0001f3ff" or previous == "\u200d"


def _flag_half(text: str) -> bool:
    """A regional indicator letter: two make a flag."""
    return len(text) == 1 and "\U0001f1e6" <= text <= "\U0001f1ff"


def _invisible(c: str) -> bool:
    """A mark or format character: nothing to show on its own."""
    return unicodedata.category(c) in ("Mn", "Mc", "Me", "Cf") or "\ufe00" <= c <= "\ufe0f" or c >= "\U000e0000"


def clusters(text: str) -> list[Run]:
    """``text`` as the units a line may break between, each with the font that draws it: the first
    font holding its first character (a space, digit or punctuation mark stays in the font of
    the text before it, so a right-to-left phrase is one run). A character no font holds is
    drawn as U+FFFD, or left out where it is invisible (a mark or format character)."""
    text = _clean(text[: 4 * _LONGEST])[:_LONGEST]
    fonts = fallback(text)
    units: list[Run] = []
    previous = ""
    for c in text:
        before = units[-1].file if units else None
        attaches = before is not None and (_attaches(c, previous) or (_flag_half(c) and _flag_half(units[-1].text)))
        here: FontFile | None
        if before is not None and attaches and ord(c) in code_points(before):
            units[-1] = Run(before, units[-1].text + c)
            previous = c
            continue
        if attaches and _invisible(c):
            continue
        if before not in (None, _EMOJI) and unicodedata.category(c)[0] in "ZNP" and ord(c) in code_points(before):
            here = before
        else:
            here = next((f for f in fonts if ord(c) in code_points(f)), None)
        if here is None:
            if _invisible(c):
                continue
            here, c = fonts[0], _MISSING
        units.append(Run(here, c))
        previous = c
    return units


def runs(units: list[Run]) -> list[Run]:
    """Neighbouring units of one font joined: what is measured and drawn as one string (so its
    font shapes and kerns it)."""
    joined: list[Run] = []
    for unit in units:
        if joined and joined[-1].file == unit.file:
            joined[-1] = Run(unit.file, joined[-1].text + unit.text)
        else:
            joined.append(unit)
    return joined


def width(units: list[Run], size: int) -> float:
    """How wide ``units`` are drawn, in pixels."""
    return sum(font(run.file, size).getlength(run.text) for run in runs(units))


def _fitting(units: list[Run], size: int, room: float, after: list[Run]) -> int:
    """How many of ``units`` (at least one) fit in ``room`` pixels followed by ``after``."""
    low, high = 1, len(units)  # width grows with the units taken
    while low < high:
        middle = (low + high + 1) // 2
        if width(units[:middle] + after, size) <= room:
            low = middle
        else:
            high = middle - 1
    return low


def wrap(text: str, *, size: int, room: float, lines: int) -> list[list[Run]]:
    """``text`` in at most ``lines`` lines of ``room`` pixels, broken after a space where a line
    has one, else between characters; the last line cut with an ellipsis if the rest does not fit."""
    rest = clusters(text)
    laid: list[list[Run]] = []
    while rest and len(laid) < lines:
        if width(rest, size) <= room:
            laid.append(rest)
            break
        if len(laid) == lines - 1:
            taken = rest[: _fitting(rest, size, room, [Run(_SANS, _ELLIPSIS)])]
            while len(taken) > 1 and taken[-1].text == " ":
                taken.pop()
            laid.append([*taken, Run(_SANS, _ELLIPSIS)])
            break
        fits = _fitting(rest, size, room, [])
        spaces = [i for i, unit in enumerate(rest[: fits + 1]) if unit.text == " " and i > 0]
        end = spaces[-1] if spaces else fits
        laid.append(rest[:end])
        rest = rest[end:]
        while rest and rest[0].text == " ":
            rest = rest[1:]
    return laid


def draw_lines(
    draw: ImageDraw.ImageDraw, xy: tuple[float, float], laid: list[list[Run]], *, size: int, pitch: int, fill: int
) -> None:
    """Draw ``laid`` lines from ``xy`` (the first line's top left), ``pitch`` pixels apart, every
    run on the line's baseline."""
    ascent = font(_SANS, size).getmetrics()[0]
    for number, line in enumerate(laid):
        x, baseline = xy[0], xy[1] + ascent + number * pitch
        for run in runs(line):
            face = font(run.file, size)
            draw.text((x, baseline), run.text, font=face, fill=fill, anchor="ls")
            x += face.getlength(run.text)
