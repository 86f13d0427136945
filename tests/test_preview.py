"""The card's contact sheet (preview.jpg), checked by its pixels: every image mode and orientation
Pillow opens shown upright, in 8 bits, over the cell's background; captions in any script drawn
with real glyphs (not a font's box for a missing one), wrapped to two lines inside their cell."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageStat

from shardkit import captionfont
from shardkit.formats import ZIP
from shardkit.location import Location
from shardkit.pack import PackConfig, pack
from shardkit.preview import (
    BACKGROUND,
    CAPTION_LINES,
    CELL,
    LINE_PITCH,
    MARGIN,
    TEXT_HEIGHT,
    cell_image,
    preview_samples,
)
from tests.support.corpus import write_jsonl

RED, GREEN, BLUE, YELLOW = (220, 30, 30), (30, 180, 30), (30, 30, 220), (230, 210, 20)
SIZE = (96, 64)  # 3:2, fitted into a 160 x 160 cell as 160 x 107 from row 26
#: Boxes inside each quarter of such an image, in its tile: top left, top right, bottom left, bottom right.
QUARTERS = ((15, 36, 65, 66), (95, 36, 145, 66), (15, 94, 65, 124), (95, 94, 145, 124))
ABOVE, BELOW = (0, 0, CELL, 20), (0, 140, CELL, CELL)  # the cell's background around a landscape image
Colour = tuple[int, ...]


def quarters(tl: Colour, tr: Colour, bl: Colour, br: Colour, mode: str = "RGB") -> Image.Image:
    """An image whose four quarters have these colours: any turn or mirror moves one."""
    img = Image.new(mode, SIZE)
    w, h = SIZE[0] // 2, SIZE[1] // 2
    for colour, (x, y) in zip((tl, tr, bl, br), ((0, 0), (w, 0), (0, h), (w, h)), strict=True):
        img.paste(colour if len(colour) > 1 else colour[0], (x, y, x + w, y + h))
    return img


def encoded(img: Image.Image, fmt: str, **options: Any) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **options)
    return buf.getvalue()


def mean(img: Image.Image, box: tuple[int, int, int, int]) -> tuple[float, ...]:
    return tuple(ImageStat.Stat(img.crop(box).convert("RGB")).mean)


def near(got: tuple[float, ...], want: Colour, within: float = 24) -> bool:
    return max(abs(g - w) for g, w in zip(got, want, strict=True)) <= within


def assert_quarters(tile: Image.Image, want: tuple[Colour, Colour, Colour, Colour], within: float = 24) -> None:
    got = [mean(tile, box) for box in QUARTERS]
    assert all(near(g, w, within) for g, w in zip(got, want, strict=True)), (got, want)
    assert near(mean(tile, ABOVE), BACKGROUND, 2) and near(mean(tile, BELOW), BACKGROUND, 2)  # landscape, upright


UPRIGHT = quarters(RED, GREEN, BLUE, YELLOW)
FOUR = (RED, GREEN, BLUE, YELLOW)
#: How a camera stores an upright picture under each EXIF orientation (a viewer undoes it).
STORED_AS = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90,  # the viewer turns it 90 degrees clockwise
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_270,
}


def exif(orientation: int) -> Image.Exif:
    tags = Image.Exif()
    tags[0x0112] = orientation
    return tags


@pytest.mark.parametrize("orientation", sorted(STORED_AS))
@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
def test_an_image_is_shown_upright_by_its_exif_orientation(orientation: int, fmt: str) -> None:
    stored = UPRIGHT.transpose(STORED_AS[orientation])
    options = {"quality": 95} if fmt == "JPEG" else {"lossless": True} if fmt == "WEBP" else {}
    assert_quarters(cell_image(encoded(stored, fmt, exif=exif(orientation), **options)), FOUR)


@pytest.mark.parametrize(
    "block",
    [
        b"Exif\x00\x00garbage",
        b"Exif\x00\x00II*\x00\xff\xff\xff\x7f",
        b"Exif\x00\x00MM\x00*\x00\x00\x00\x08\x00\x01\x01\x12",
    ],
    ids=["not TIFF", "offset past the end", "cut in its first entry"],
)
def test_an_image_with_a_damaged_exif_block_is_shown_as_stored_without_a_word(
    block: bytes, recwarn: pytest.WarningsRecorder
) -> None:
    data = encoded(UPRIGHT, "JPEG", exif=block, quality=95)
    recwarn.clear()
    assert_quarters(cell_image(data), FOUR)
    assert [str(w.message) for w in recwarn.list] == []


def test_a_tiff_is_shown_upright_by_its_orientation_tag() -> None:
    stored = UPRIGHT.transpose(STORED_AS[6])
    assert_quarters(cell_image(encoded(stored, "TIFF", tiffinfo={274: 6})), FOUR)


def gradient(low: float, high: float, dtype: Any) -> np.ndarray:
    """Dark to light from left to right, the same in every row."""
    return np.tile(np.linspace(low, high, SIZE[0]), (SIZE[1], 1)).astype(dtype)


def assert_gradient(tile: Image.Image) -> None:
    """Black at the left to white at the right, evenly: not a blank tile, not clipped."""
    got = [mean(tile, (x - 2, 36, x + 2, 124))[0] for x in (4, 40, 80, 120, 156)]
    want = [255 * x / CELL for x in (4, 40, 80, 120, 156)]
    assert all(abs(g - w) <= 12 for g, w in zip(got, want, strict=True)), (got, want)
    assert near(mean(tile, ABOVE), BACKGROUND, 2)


HIGH_BIT_DEPTH: dict[str, Callable[[], bytes]] = {
    "16-bit PNG": lambda: encoded(Image.fromarray(gradient(0, 65535, np.uint16)), "PNG"),
    "16-bit PNG of 12-bit values": lambda: encoded(Image.fromarray(gradient(0, 4095, np.uint16)), "PNG"),
    "16-bit PNG, values off zero": lambda: encoded(Image.fromarray(gradient(30000, 34000, np.uint16)), "PNG"),
    "16-bit TIFF": lambda: encoded(Image.fromarray(gradient(0, 65535, np.uint16)), "TIFF"),
    "16-bit big-endian TIFF": lambda: encoded(
        Image.frombytes("I;16B", SIZE, gradient(0, 65535, ">u2").tobytes()), "TIFF"
    ),
    "16-bit TIFF, deflate": lambda: encoded(
        Image.fromarray(gradient(0, 65535, np.uint16)), "TIFF", compression="tiff_adobe_deflate"
    ),
    "32-bit integer TIFF": lambda: encoded(Image.fromarray(gradient(-(10**6), 10**6, np.int32)), "TIFF"),
    "float TIFF": lambda: encoded(Image.fromarray(gradient(0.0, 1.0, np.float32)), "TIFF"),
}


@pytest.mark.parametrize("make", HIGH_BIT_DEPTH.values(), ids=HIGH_BIT_DEPTH.keys())
def test_a_high_bit_depth_image_is_scaled_to_8_bits_by_its_range(make: Callable[[], bytes]) -> None:
    data = make()
    with Image.open(io.BytesIO(data)) as img:
        assert img.mode in ("I;16", "I;16B", "I", "F")  # what a new author's files open as
    assert_gradient(cell_image(data))


def test_a_float_image_with_not_a_number_pixels_is_scaled_by_its_finite_values() -> None:
    values = gradient(-2.0, 2.0, np.float32)
    values[:3, :3] = np.nan
    values[-3:, -3:] = np.inf
    assert_gradient(cell_image(encoded(Image.fromarray(values), "TIFF")))


def test_a_flat_high_bit_depth_image_is_grey() -> None:
    tile = cell_image(encoded(Image.fromarray(np.full(SIZE[::-1], 40000, np.uint16)), "PNG"))
    assert near(mean(tile, (0, 36, CELL, 124)), (128, 128, 128), 1)


def palette_with_a_transparent_quarter() -> bytes:
    img = quarters((0,), (1,), (2,), (3,), mode="P")
    img.putpalette([*RED, *GREEN, *BLUE, *YELLOW])
    return encoded(img, "PNG", transparency=3)


def rgba_with_clear_and_half_clear_quarters() -> bytes:
    return encoded(quarters((*RED, 255), (*GREEN, 128), (*BLUE, 255), (*YELLOW, 0), mode="RGBA"), "PNG")


def half_clear(colour: Colour) -> Colour:
    return tuple((c * 128 + b * 127) // 255 for c, b in zip(colour, BACKGROUND, strict=True))


def animated_gif() -> bytes:
    frames = [UPRIGHT, Image.new("RGB", SIZE, GREEN)]
    return encoded(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)


def gif_with_a_transparent_quarter() -> bytes:
    img = quarters((0,), (1,), (2,), (3,), mode="P")
    img.putpalette([*RED, *GREEN, *BLUE, *YELLOW])
    return encoded(img, "GIF", transparency=3)


GREYS = ((40,), (100,), (160,), (220,))
MODES: dict[str, tuple[Callable[[], bytes], str, tuple[Colour, Colour, Colour, Colour]]] = {
    "RGB JPEG": (lambda: encoded(UPRIGHT, "JPEG", quality=95), "RGB", FOUR),
    "CMYK JPEG": (lambda: encoded(UPRIGHT.convert("CMYK"), "JPEG", quality=95), "CMYK", FOUR),
    "CMYK TIFF": (lambda: encoded(UPRIGHT.convert("CMYK"), "TIFF"), "CMYK", FOUR),
    "YCbCr TIFF": (lambda: encoded(UPRIGHT.convert("YCbCr"), "TIFF"), "YCbCr", FOUR),
    "LAB TIFF": (lambda: encoded(UPRIGHT.convert("LAB"), "TIFF"), "LAB", FOUR),
    "L PNG": (lambda: encoded(quarters(*GREYS, mode="L"), "PNG"), "L", tuple(g * 3 for g in GREYS)),  # type: ignore[dict-item]
    "1 PNG": (
        lambda: encoded(quarters((0,), (1,), (1,), (0,), mode="1"), "PNG"),
        "1",
        ((0, 0, 0), (255, 255, 255), (255, 255, 255), (0, 0, 0)),
    ),
    "LA PNG": (
        lambda: encoded(quarters((40, 255), (100, 128), (160, 255), (220, 0), mode="LA"), "PNG"),
        "LA",
        ((40,) * 3, half_clear((100,) * 3), (160,) * 3, BACKGROUND),
    ),
    "P PNG with a transparent index": (palette_with_a_transparent_quarter, "P", (RED, GREEN, BLUE, BACKGROUND)),
    "RGBA PNG": (rgba_with_clear_and_half_clear_quarters, "RGBA", (RED, half_clear(GREEN), BLUE, BACKGROUND)),
    "RGBA WebP": (
        lambda: encoded(
            quarters((*RED, 255), (*GREEN, 255), (*BLUE, 255), (*YELLOW, 0), mode="RGBA"), "WEBP", lossless=True
        ),
        "RGBA",
        (RED, GREEN, BLUE, BACKGROUND),
    ),
    "animated GIF: its first frame": (animated_gif, "P", FOUR),
    "GIF with a transparent index": (gif_with_a_transparent_quarter, "P", (RED, GREEN, BLUE, BACKGROUND)),
    "animated PNG: its first frame": (
        lambda: encoded(UPRIGHT, "PNG", save_all=True, append_images=[Image.new("RGB", SIZE, GREEN)]),
        "RGB",
        FOUR,
    ),
    "multi-page TIFF: its first page": (
        lambda: encoded(UPRIGHT, "TIFF", save_all=True, append_images=[Image.new("RGB", SIZE, GREEN)]),
        "RGB",
        FOUR,
    ),
}


@pytest.mark.parametrize(("make", "mode", "want"), MODES.values(), ids=MODES.keys())
def test_every_mode_is_shown_in_its_colours_over_the_cell_background(
    make: Callable[[], bytes], mode: str, want: tuple[Colour, Colour, Colour, Colour]
) -> None:
    data = make()
    with Image.open(io.BytesIO(data)) as img:
        assert img.mode == mode
    assert_quarters(cell_image(data), want)


# --- captions ----------------------------------------------------------------------------------------

SIZE_PX = 12
ROOM = CELL - 2 * MARGIN


def ink_of(text: str, file: captionfont.FontFile) -> bytes:
    """``text`` drawn alone in ``file`` (what its font shows for it)."""
    layer = Image.new("L", (80, 40), 0)
    ImageDraw.Draw(layer).text((8, 28), text, font=captionfont.font(file, SIZE_PX), fill=255, anchor="ls")
    return layer.tobytes()


def drawn(
    laid: list[list[captionfont.Run]], canvas: tuple[int, int] = (80, 40), at: tuple[int, int] = (8, 8)
) -> Image.Image:
    """``laid`` drawn as the sheet draws a caption, on a layer of ``canvas`` pixels from ``at``."""
    layer = Image.new("L", canvas, 0)
    captionfont.draw_lines(ImageDraw.Draw(layer), at, laid, size=SIZE_PX, pitch=LINE_PITCH, fill=255)
    return layer


NOT_A_CHARACTER = "\u0378"  # unassigned: every font draws its .notdef glyph (the box) for it
SCRIPTS = [
    "café é",
    "Ελληνικά",
    "日本語のテキスト",
    "中文标题",
    "한국어",
    "a — b – c",
    "😀👍🏽👨‍👩‍👧🇯🇵",
    "Привет",
    "مرحبا بالعالم",
    "עברית",
    "नमस्ते",
    "বাংলা",
    "தமிழ்",
    "ภาษาไทย",
    "ქართული",
    "Հայերեն",
    "አማርኛ",
    "Tiếng Việt",
    "→ ✓ ★ ♫ € ₹",
]


@pytest.mark.parametrize("caption", SCRIPTS)
def test_each_character_is_drawn_with_its_glyph_not_a_box(caption: str) -> None:
    first = captionfont.fallback(caption)[0]  # Noto Sans: what one font alone would draw
    units = [u for u in captionfont.clusters(caption) if u.text != " "]
    assert "".join(u.text for u in units) == caption.replace(" ", "")  # nothing replaced or left out
    for unit in units:
        ink = drawn([[unit]]).tobytes()
        assert any(ink), unit
        assert ink != ink_of(NOT_A_CHARACTER, unit.file), f"{unit.text!r} is drawn as {unit.file[1]}'s box"
        if unit.file != first:
            assert ink_of(unit.text[0], first) == ink_of(NOT_A_CHARACTER, first)  # Noto Sans alone shows a box
            assert ink != ink_of(NOT_A_CHARACTER, first)


def test_a_character_no_font_holds_is_a_replacement_sign_not_a_box() -> None:
    units = captionfont.clusters("ཀ x \ue000")  # Tibetan, and a private-use character
    assert [u.text for u in units] == ["\ufffd", " ", "x", " ", "\ufffd"]
    sign = drawn([units[:1]]).tobytes()
    assert any(sign) and sign != ink_of(NOT_A_CHARACTER, units[0].file)


def test_line_ends_tabs_and_control_characters_are_spaces_and_invisible_ones_draw_nothing() -> None:
    units = captionfont.clusters("line one\nline two\r\n\tthree\x00four\x1b[0m\u2028five\x7f\x85six  ")
    assert "".join(u.text for u in units) == "line one line two three four [0m five six"
    invisible = "five\u200b\ufeff six\ufe0f\U000e0001\u180e"  # zero-width, a stray selector, a tag...
    assert drawn([captionfont.clusters(invisible)]).tobytes() == drawn([captionfont.clusters("five six")]).tobytes()


def text_of(laid: list[list[captionfont.Run]]) -> list[str]:
    return ["".join(u.text for u in line) for line in laid]


def test_a_short_caption_is_one_line() -> None:
    laid = captionfont.wrap("A tram on the bridge", size=SIZE_PX, room=ROOM, lines=CAPTION_LINES)
    assert text_of(laid) == ["A tram on the bridge"]


def test_a_caption_with_a_line_end_is_laid_out_as_one_text() -> None:
    laid = captionfont.wrap("first line\nsecond line", size=SIZE_PX, room=ROOM, lines=CAPTION_LINES)
    assert text_of(laid) == ["first line second line"]


@pytest.mark.parametrize(
    "caption",
    [
        " ".join(f"word{i}" for i in range(40)),  # 200-odd characters of words
        "x" * 200,  # one word longer than a line
        "日本語のテキスト、" * 20,  # no spaces to break at
        "مرحبا بالعالم " * 15,
        "😀" * 60,
    ],
    ids=["words", "one long word", "Japanese", "Arabic", "emoji"],
)
def test_a_long_caption_fills_two_lines_cut_with_an_ellipsis(caption: str) -> None:
    laid = captionfont.wrap(caption, size=SIZE_PX, room=ROOM, lines=CAPTION_LINES)
    lines = text_of(laid)
    assert len(lines) == 2 and lines[1].endswith("…") and not lines[0].endswith("…")
    for line in laid:
        width = captionfont.width(line, SIZE_PX)
        assert ROOM * 0.8 < width <= ROOM, (line, width)  # full lines, each inside the cell
    shown = "".join(lines)[:-1].replace(" ", "")
    assert caption.replace(" ", "").startswith(shown) and len(shown) > 10
    if caption.startswith("word"):  # broken at a space
        last = lines[0].split()[-1]
        assert last.startswith("word") and lines[1].startswith(f"word{int(last[4:]) + 1} ")


HOSTILE = [
    *SCRIPTS,
    " ".join(f"word{i}" for i in range(40)),
    "W" * 200,
    "ဘာသာစကား မြန်မာ " * 10,  # Myanmar: tall stacks above and below
    "ཀ྄ུཀྵ" * 20,
    "﷽" * 10,  # the widest glyph there is
    "\u202eright-to-left override",
]
#: Marks stacked without end: drawn past any line, cut at the cell's edge.
STACKED = [
    "e" + "\u0301" * 50,  # a letter with fifty accents
    "ǅ̴̵̶̷̸̡̢̧̨̛̖̗̘̙̜̝̞̟̠̣̤̥̦̩̪̫̬̭̮̯̰̱̲̳̹̺̻̼͇͈͉͍͎̀́̂̃̄̅̆̇̈̉̊̋̌̍̎̏̐̑̒̓̔̽̾̿̀́͂̓̈́͆͊͋͌̕̚ͅ͏͓͔͕͖͙͚͐͑͒͗͛ͣͤͥͦͧͨͩͪͫͬͭͮͯ͘͜͟͢͝͞͠͡" * 3,
]


@pytest.mark.parametrize("caption", HOSTILE, ids=range(len(HOSTILE)))
def test_no_ink_of_a_caption_falls_outside_its_cell(caption: str) -> None:
    laid = captionfont.wrap(caption, size=SIZE_PX, room=ROOM, lines=CAPTION_LINES)
    assert 1 <= len(laid) <= CAPTION_LINES
    at = (200, 200)  # on a large canvas: ink past the cell would show
    layer = drawn(laid, canvas=(600, 500), at=(at[0] + MARGIN, at[1] + MARGIN))
    box = layer.getbbox()
    assert box is not None
    assert at[0] <= box[0] and box[2] <= at[0] + CELL and at[1] <= box[1] and box[3] <= at[1] + TEXT_HEIGHT, box


# --- the sheet a pack writes ------------------------------------------------------------------------

CORPUS: dict[str, tuple[bytes, str]] = {
    "rotated.jpg": (encoded(UPRIGHT.transpose(STORED_AS[6]), "JPEG", exif=exif(6), quality=95), "Ελληνικά — rotated"),
    "deep.png": (encoded(Image.fromarray(gradient(0, 65535, np.uint16)), "PNG"), "16-bit gradient é"),
    "deep.tif": (encoded(Image.fromarray(gradient(0, 4095, np.uint16)), "TIFF"), "日本語のテキスト"),
    "clear.png": (palette_with_a_transparent_quarter(), "한국어 😀"),
    "moving.gif": (animated_gif(), "line one\nline two"),
    "print.jpg": (encoded(UPRIGHT.convert("CMYK"), "JPEG", quality=95), "x" * 200),
    "alpha.png": (rgba_with_clear_and_half_clear_quarters(), "half clear"),
}
EXPECTED: dict[str, Callable[[Image.Image], None]] = {
    "rotated.jpg": lambda tile: assert_quarters(tile, FOUR),
    "deep.png": assert_gradient,
    "deep.tif": assert_gradient,
    "clear.png": lambda tile: assert_quarters(tile, (RED, GREEN, BLUE, BACKGROUND)),
    "moving.gif": lambda tile: assert_quarters(tile, FOUR),
    "print.jpg": lambda tile: assert_quarters(tile, FOUR),
    "alpha.png": lambda tile: assert_quarters(tile, (RED, half_clear(GREEN), BLUE, BACKGROUND)),
}


def packed_sheet(tmp_path: Path, files: dict[str, tuple[bytes, str]]) -> tuple[Path, list[str]]:
    """Pack ``files`` (name: bytes, caption) with the packer; return OUT_DIR and the captions in
    the sheet's order."""
    images = tmp_path / "images"
    images.mkdir()
    for name, (data, _) in files.items():
        (images / name).write_bytes(data)
    meta = write_jsonl(tmp_path / "meta.jsonl", [{"file_name": n, "caption": c} for n, (_, c) in files.items()])
    out = tmp_path / "out"
    pack(PackConfig(images_dir=str(images), metadata_path=str(meta), out_dir=str(out), jobs=1))
    manifest = json.loads((out / "shards.json").read_text(encoding="utf-8"))
    shards = [s["file"] for s in manifest["shards"]]
    return out, [caption for _, caption, _ in preview_samples(Location(str(out), "folder"), shards, 12, ZIP, {})]


def test_the_packed_sheet_shows_each_image_right_with_its_caption_inside_its_cell(tmp_path: Path) -> None:
    out, order = packed_sheet(tmp_path, CORPUS)
    by_caption = {caption: name for name, (_, caption) in CORPUS.items()}
    with Image.open(out / "preview.jpg") as sheet:
        sheet.load()
    assert sheet.size == (4 * CELL, 2 * (CELL + TEXT_HEIGHT)) and len(order) == len(CORPUS)
    for i, caption in enumerate(order):
        x, y = (i % 4) * CELL, (i // 4) * (CELL + TEXT_HEIGHT)
        EXPECTED[by_caption[caption]](sheet.crop((x, y, x + CELL, y + CELL)))
        text = np.asarray(sheet.crop((x, y + CELL, x + CELL, y + CELL + TEXT_HEIGHT)).convert("L"))
        assert (text < 128).sum() > 20  # the caption is drawn
    # The cells of the missing last tile are white: no caption ran into them.
    assert near(mean(sheet, (3 * CELL, CELL + TEXT_HEIGHT, 4 * CELL, sheet.height)), (255, 255, 255), 0.5)


def test_caption_ink_stays_off_the_images(tmp_path: Path) -> None:
    """Square green images fill their cells: a caption reaching above its cell, or past a line
    end into the next row, would mark one."""
    files = {
        f"{i}.png": (encoded(Image.new("RGB", (50 + i, 50 + i), GREEN), "PNG"), caption)
        for i, caption in enumerate([*HOSTILE[-6:], *STACKED, "line one\nline two\nline three\nline four"])
    }
    out, order = packed_sheet(tmp_path, files)
    with Image.open(out / "preview.jpg") as sheet:
        sheet.load()
    for i in range(len(order)):
        x, y = (i % 4) * CELL, (i // 4) * (CELL + TEXT_HEIGHT)
        tile = np.asarray(sheet.crop((x, y, x + CELL, y + CELL)))
        assert tile[..., 1].min() > 120, i  # green, with JPEG's error: no dark ink


def test_the_sheet_is_the_same_bytes_each_time(tmp_path: Path) -> None:
    from shardkit.preview import write_preview

    out, _ = packed_sheet(tmp_path, CORPUS)
    first = (out / "preview.jpg").read_bytes()
    manifest = json.loads((out / "shards.json").read_text(encoding="utf-8"))
    assert write_preview(str(out), [s["file"] for s in manifest["shards"]]) == "preview.jpg"
    assert (out / "preview.jpg").read_bytes() == first


def test_a_font_file_a_font_package_no_longer_has_is_left_out_not_a_crash(caplog: pytest.LogCaptureFixture) -> None:
    from shardkit import captionfont

    gone = ("manimgx_fonts", "NoSuchFont[wght].ttf", 0)
    with caplog.at_level("WARNING", logger="shardkit.captionfont"):
        assert captionfont.code_points(gone) == frozenset()
    assert "NoSuchFont[wght].ttf cannot be read" in caplog.text
    assert captionfont.font(gone, 14).getlength("abc") > 0  # Pillow's own font draws instead
