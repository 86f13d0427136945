"""shardkit: author large image and audio datasets for the Hugging Face Hub, streamable by anyone.

Library entry points: ``shardkit.stream(source)`` (read a packed dataset), and one module per
stage, ``shardkit.pack.pack``, ``shardkit.push.push``, ``shardkit.verify.verify``,
``shardkit.remux.remux``. The command
line (``shardkit``, ``pack-shards``) is a thin layer over them.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = [
    "PackConfig",
    "PackSummary",
    "PushConfig",
    "PushSummary",
    "RemuxConfig",
    "RemuxSummary",
    "ShardkitError",
    "UsageError",
    "__version__",
    "stream",
]

# Names loaded on first use, so `import shardkit` stays light. (No function here shares its
# name with a module: once `shardkit.pack` is imported, that attribute is the module.)
_LAZY = {
    "PackConfig": "pack",
    "PackSummary": "pack",
    "PushConfig": "pushconfig",
    "PushSummary": "push",
    "RemuxConfig": "remux",
    "RemuxSummary": "remux",
    "ShardkitError": "errors",
    "UsageError": "errors",
    "stream": "streaming",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(name)
    from importlib import import_module

    return getattr(import_module(f".{module}", __name__), name)
