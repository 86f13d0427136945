"""shardkit: author large image and audio datasets for the Hugging Face Hub, streamable by anyone."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["PackConfig", "PackSummary", "__version__", "pack"]


def __getattr__(name: str) -> object:
    # Keep `import shardkit` light: the packer and its dependencies load on first use.
    if name in ("pack", "PackConfig", "PackSummary"):
        from . import pack as _pack_module

        return getattr(_pack_module, name)
    raise AttributeError(name)
