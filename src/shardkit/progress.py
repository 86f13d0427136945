"""Progress reporting: the library calls a :class:`Progress`; the CLI passes a tqdm one (stderr)."""

from __future__ import annotations

import sys
import time
import weakref
from typing import Any


class Progress:
    """Interface the stages report to. The default does nothing."""

    def start(self, phase: str, *, total: int | None, unit: str) -> None:
        """A new phase begins; ``total`` is in ``unit`` (None if unknown)."""

    def advance(self, amount: int, **info: Any) -> None:
        """``amount`` more units are done; ``info`` carries counters worth showing (rows, shards)."""

    def finish(self) -> None:
        """The current phase is over."""


class NullProgress(Progress):
    pass


def end_bars() -> None:
    """Close every bar still shown (its last state stays, and the line ends), so that what is
    printed next, an error that stopped a phase before its end, starts on a line of its own."""
    for progress in list(_shown):
        progress.finish()


class TqdmProgress(Progress):
    """One tqdm bar per phase on stderr, with rows/s and shards in the postfix."""

    def __init__(self, *, disable: bool = False) -> None:
        self.disable = disable
        self._bar: Any = None
        self._rows = 0
        self._started = 0.0

    def start(self, phase: str, *, total: int | None, unit: str) -> None:
        if self.disable:  # (no tqdm import when nothing is shown: it is slow to import)
            return
        from tqdm.auto import tqdm

        tqdm.monitor_interval = 0  # no monitor thread: one thread fewer to catch a Ctrl-C
        self.finish()
        scale = unit == "B"
        self._rows = 0
        self._started = time.perf_counter()
        self._bar = tqdm(
            total=total,
            desc=phase,
            unit=unit,
            unit_scale=scale,
            unit_divisor=1000,
            file=sys.stderr,
            disable=self.disable,
            dynamic_ncols=True,
        )
        _shown.add(self)

    def advance(self, amount: int, **info: Any) -> None:
        if self._bar is None:
            return
        self._rows += int(info.get("rows", 0))
        postfix = {}
        if "shards" in info:
            postfix["shards"] = info["shards"]
        if self._rows:
            elapsed = max(time.perf_counter() - self._started, 1e-9)
            postfix["rows/s"] = f"{self._rows / elapsed:,.0f}"
        if postfix:
            self._bar.set_postfix(postfix, refresh=False)
        self._bar.update(amount)

    def finish(self) -> None:
        _shown.discard(self)
        if self._bar is not None:
            self._bar.close()
            self._bar = None


#: The TqdmProgress objects with a bar on the terminal now.
_shown: weakref.WeakSet[TqdmProgress] = weakref.WeakSet()
