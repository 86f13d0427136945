"""Loaded by the Python processes of a test that puts this folder on PYTHONPATH: stops a command
at one fixed point until a signal ends it, so a Ctrl-C lands there every time.

``SHARDKIT_TEST_BLOCK_AT`` names the point: a module (the process blocks as it starts importing
it) or ``module:function`` (the module imports, then a call of that function blocks).
``SHARDKIT_TEST_BLOCKED`` is a file created once the process is blocked.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import time
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

_AT = os.environ.get("SHARDKIT_TEST_BLOCK_AT", "")
_MARKER = os.environ.get("SHARDKIT_TEST_BLOCKED", "")


def _block(*args: Any, **kwargs: Any) -> None:
    with open(_MARKER, "w"):
        pass
    while True:  # a signal's handler runs here (or its KeyboardInterrupt leaves from here)
        time.sleep(3600)


class _BlockingFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        module, _, function = _AT.partition(":")
        if fullname != module:
            return None
        if not function:
            _block()
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        assert spec is not None and spec.loader is not None
        real_exec = spec.loader.exec_module

        def exec_module(mod: ModuleType) -> None:
            real_exec(mod)
            setattr(mod, function, _block)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if _AT:
    sys.meta_path.insert(0, _BlockingFinder())
