"""How the epoch reaches ``shardkit.stream``'s generator: datasets' ``ExamplesIterable`` with one
method of its own. Imported by ``stream`` only (it imports datasets); a module of its own so that
DataLoader workers started by spawn or forkserver unpickle the class by name.

A subclass, not a wrapper: datasets builds the iterables of ``map``, ``filter``, ``shuffle``, the
workers' shares... from this one and asks it for its shards, so the epoch's units must be what it
answers with. (datasets' generator-built datasets have no public hook for this.)
"""

from __future__ import annotations

import copy
from typing import Any

from datasets.iterable_dataset import ExamplesIterable


class EpochUnits(ExamplesIterable):  # type: ignore[misc]
    def shuffle_data_sources(self, generator: Any) -> Any:
        """The epoch's units. datasets calls this with a generator drawn from the epoch (datasets 5:
        ``default_rng(epoch)`` for an epoch other than 0; 3.x/4.0: from the shuffling config
        ``stream`` sets and the epoch) or from a ``shuffle(seed=...)``: the plan is drawn from a
        number that generator gives. Without a shuffle seed, what datasets does: permute the units."""
        plan = self.kwargs["plan"]
        if plan.seed is None:
            return super().shuffle_data_sources(generator)
        epoch_key = int(copy.deepcopy(generator).integers(1, 1 << 62))  # a copy: datasets' stays as it was
        return EpochUnits(self.generate_examples_fn, {**self.kwargs, "units": plan.units(epoch_key)})
