"""Whether a file decodes as its extension says, by the decoders datasets' features use."""

from __future__ import annotations

import threading
import warnings
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from PIL import Image

AUDIO_EXTENSIONS = frozenset({".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".aac", ".aiff", ".aif", ".wma"})
#: Audio extensions -> the libsndfile format that decodes them (soundfile; datasets 3.x decodes
#: audio with it too). Other audio (m4a, aac, wma) needs FFmpeg and is not decoded by the checks.
_SOUNDFILE_FORMATS = {".wav": "WAV", ".flac": "FLAC", ".ogg": "OGG", ".opus": "OGG", ".mp3": "MP3", ".aiff": "AIFF"}
_SOUNDFILE_FORMATS[".aif"] = "AIFF"


def can_decode(ext: str) -> bool:
    """Whether :func:`decode_problem` can decode this type: images (Pillow), audio that libsndfile reads."""
    ext = ext.lower()
    if ext not in AUDIO_EXTENSIONS:
        return True
    import soundfile

    return _SOUNDFILE_FORMATS.get(ext) in soundfile.available_formats()


def decode_problem(source: str | BinaryIO, ext: str) -> str | None:
    """Why a file (a path or an open binary file) does not decode as its extension says; None if it does.

    Real decoders decide, not a parser of our own: Pillow for images, soundfile (libsndfile)
    for audio, which read what datasets' Image and Audio features read.
    """
    if ext.lower() in AUDIO_EXTENSIONS:
        return _audio_problem(source)
    from PIL import Image, UnidentifiedImageError

    try:
        with open_image(source) as image:
            image.load()
    except UnidentifiedImageError:
        return "is not an image Pillow can read (wrong extension, or not an image at all)"
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        return f"is refused as a decompression bomb: {exc}"
    except (OSError, SyntaxError, ValueError) as exc:
        if isinstance(exc, OSError) and exc.errno is not None:
            raise  # a read error, not a decode error
        return f"does not decode as an image: {exc}"
    return None


#: Held while Pillow reads an image's header: :func:`warnings.catch_warnings` changes the
#: process's warning filters, and two threads doing so at once could leave its filter behind.
_WARNINGS_LOCK = threading.Lock()


def open_image(source: str | BinaryIO) -> Image.Image:
    """``Image.open(source)``, its :class:`~PIL.Image.DecompressionBombWarning` raised as an error.

    Pillow refuses an image of more than twice ``Image.MAX_IMAGE_PIXELS`` pixels with an error,
    but only warns above the limit itself, and decodes it: a few KB of PNG declaring 100 million
    pixels would take gigabytes, and the warning would be printed in the middle of the run.
    Both are a bad file here. Only the header is read under the lock; the decode is not.
    """
    from PIL import Image

    with _WARNINGS_LOCK, warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        return Image.open(source)


def _audio_problem(source: str | BinaryIO) -> str | None:
    import soundfile

    try:
        with soundfile.SoundFile(source) as sound:
            frames = sum(len(block) for block in sound.blocks(blocksize=1 << 16))
    except (RuntimeError, TypeError, ValueError) as exc:  # soundfile.LibsndfileError is a RuntimeError
        return f"does not decode as audio: {exc}"
    return None if frames else "audio file has no samples"
