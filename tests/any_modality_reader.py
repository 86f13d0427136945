"""tests/splits_reader.py for audio datasets too: run as a script, same cells, same output.

splits_reader.py reads every file column as an image (``_undecoded(ds, "image")``); this casts
an Audio column to ``Audio(decode=False)`` instead (tests/compat_reader.py's ``_undecoded`` with
the modality the dataset's features name), then runs splits_reader's ``main`` unchanged.
Used by tests/test_default_zip_loads.py.
"""

from __future__ import annotations

import gc
from typing import Any

import splits_reader
from compat_reader import _undecoded


def _undecoded_as_declared(ds: Any, _modality: str) -> Any:
    kinds = {type(feature).__name__ for feature in (ds.features or {}).values()}
    return _undecoded(ds, "audio" if "Audio" in kinds else "image")


if __name__ == "__main__":
    splits_reader._undecoded = _undecoded_as_declared
    splits_reader.main()
    gc.freeze()  # the exit's last collection of every object datasets made is left out: the output is written
