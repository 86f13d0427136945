"""``shardkit.stream`` on datasets' side: how the epoch reaches its generator, and the guard that
refuses a saved state of another stream. Imported by ``stream`` only (it imports datasets); a
module of its own so that DataLoader workers started by spawn or forkserver unpickle its classes
by name.

* :class:`EpochUnits`: datasets' ``ExamplesIterable`` with its own ``shuffle_data_sources`` (the
  epoch's units) and a state that records what the order depends on (:data:`STATE_KEY`). A
  subclass, not a wrapper: datasets builds the iterables of ``map``, ``filter``, ``shuffle``, the
  workers' shares... from this one, so it sits at the bottom of every chain, and what it records
  is in every state of every derived dataset, in DataLoader workers too.
* :class:`StreamDataset`: the ``IterableDataset`` ``stream`` returns, kept through datasets'
  derivations (``map``, ``decode``, ``with_format``...). When it is iterated after
  ``load_state_dict`` it checks the state first: datasets applies a state only when its epoch is
  the dataset's, and otherwise starts the epoch over without a word. An iteration of a stream that
  decodes on threads is handed to :func:`.decoding.settled`, which ends its decode tasks with it.
"""

from __future__ import annotations

import copy
import functools
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from datasets import IterableDataset
from datasets.iterable_dataset import ExamplesIterable

from .decoding import decodes_here, settled
from .errors import UsageError

log = logging.getLogger(__name__)

#: The key of what the order depends on (``Plan.identity`` in :mod:`.streaming`) in
#: :class:`EpochUnits`' state: split, shards, shuffle_seed, rank, world_size, shuffle_shards,
#: shuffle_window.
STATE_KEY = "shardkit"


class EpochUnits(ExamplesIterable):  # type: ignore[misc]
    def shuffle_data_sources(self, generator: Any) -> Any:
        """The epoch's units. datasets calls this with a generator drawn from the epoch (datasets 5:
        ``default_rng(epoch)`` for an epoch other than 0; 3.x/4.0: from the shuffling config
        ``stream`` sets and the epoch) or from a ``shuffle(seed=...)``: the plan is drawn from a
        number that generator gives. Without a shuffle seed, what datasets does: permute the units."""
        plan = self.kwargs["plan"]
        if plan.seed is None:
            return _kept(super().shuffle_data_sources(generator))
        epoch_key = int(copy.deepcopy(generator).integers(1, 1 << 62))  # a copy: datasets' stays as it was
        return EpochUnits(self.generate_examples_fn, {**self.kwargs, "units": plan.units(epoch_key)})

    def shard_data_sources(self, *args: Any, **kwargs: Any) -> Any:
        """A DataLoader worker's share of the units (datasets' own), still recording the stream."""
        return _kept(super().shard_data_sources(*args, **kwargs))

    def reshard_data_sources(self) -> Any:  # datasets 5.x only
        return _kept(super().reshard_data_sources())

    def _init_state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = super()._init_state_dict()
        units = self.kwargs["units"]
        # Besides the identity, what tells a state at the end of its epoch (all units read): a
        # checkpoint taken then resumes the next epoch from its start.
        last = sum(piece.stop - piece.start for piece in units[-1].pieces) if units else 0
        state[STATE_KEY] = {**self.kwargs["plan"].identity, "units": len(units), "last_unit_rows": last}
        return state

    def __iter__(self) -> Iterator[Any]:
        # A state datasets applied holds the saved identity here (its load merges the saved state
        # into this one). StreamDataset checks before this, with the epoch; this check also holds
        # where a dataset derived from the stream is not a StreamDataset (interleave_datasets...).
        if self._state_dict is not None:
            _refuse(refusal(self._state_dict.get(STATE_KEY), self.kwargs["plan"].identity))
        return super().__iter__()  # type: ignore[no-any-return]


def _kept(iterable: Any) -> Any:
    """datasets' ``ExamplesIterable`` made from an :class:`EpochUnits` (a worker's share, the
    units permuted) as an EpochUnits again: the same generator and arguments, the same state."""
    if type(iterable) is ExamplesIterable:
        iterable.__class__ = EpochUnits
    return iterable


def _shown(name: str, value: object) -> str:
    if name == "shards" and isinstance(value, str):
        return f"shards {value[:12]}"  # a sha256 of the split's shards: its head tells two apart
    return f"{name}={value!r}"


def _differs(name: str, saved: object, now: object) -> bool:
    if name == "decode_threads":  # on threads or not changes the state's shape; how many threads does not
        return (saved is None) != (now is None)
    return saved != now


def _fields_that_differ(saved: Mapping[str, Any], identity: Mapping[str, Any]) -> list[str]:
    """The identity's fields whose saved value differs; a field the saved state does not record is
    not compared. The shuffle's options say nothing where one of the two has no seed."""
    differ = [n for n in identity if n in saved and _differs(n, saved[n], identity[n])]
    if "shuffle_seed" in differ and None in (saved["shuffle_seed"], identity["shuffle_seed"]):
        differ = [n for n in differ if n not in ("shuffle_shards", "shuffle_window")]
    return differ


def refusal(
    saved: Mapping[str, Any] | None,
    identity: Mapping[str, Any],
    saved_epoch: int | None = None,
    epoch: int = 0,
    *,
    epoch_done: bool = False,
) -> str | None:
    """Why a state saved by a stream of identity ``saved`` at ``saved_epoch`` cannot resume one of
    ``identity`` at ``epoch``, in one line naming each field that differs and both values; None if
    it can (``epoch_done``: the state is at the end of its epoch, which the next epoch follows from
    its start). A field the saved state does not record is not compared (None: it records none)."""
    saved = saved or {}
    differ = _fields_that_differ(saved, identity)
    next_epoch = epoch_done and saved_epoch is not None and epoch == saved_epoch + 1
    other_epoch = saved_epoch is not None and saved_epoch != epoch and not next_epoch
    if differ:
        if other_epoch:
            differ.append("epoch")
        saved = {**saved, "epoch": saved_epoch}
        identity = {**identity, "epoch": epoch}
        other_data = "shards" in differ and "split" not in differ  # another split has other shards, of course
        shards = " (other shards: another dataset, or this one packed again since)" if other_data else ""
        return (
            f"this state was saved by a stream with {', '.join(_shown(n, saved[n]) for n in differ)};"
            f" this one has {', '.join(_shown(n, identity[n]) for n in differ)}{shards}"
            " (resume with the stream the state was saved from)"
        )
    if other_epoch and saved_epoch is not None:
        resume_at = saved_epoch + 1 if epoch_done else saved_epoch
        done = f" (at its end: its next epoch is {resume_at})" if epoch_done else ""
        return (
            f"this state was saved at epoch {saved_epoch}{done}; this stream is at epoch {epoch}:"
            f" call set_epoch({resume_at}) first"
        )
    return None


def _refuse(problem: str | None) -> None:
    if problem is not None:
        raise UsageError(problem)


def _unit_states_in(state: Any) -> Iterator[Mapping[str, Any]]:
    """The states of :class:`EpochUnits` in a saved state (those with :data:`STATE_KEY`),
    wherever datasets nested them."""
    if isinstance(state, Mapping):
        if isinstance(state.get(STATE_KEY), Mapping):
            yield state
        for value in state.values():
            yield from _unit_states_in(value)
    elif isinstance(state, list):
        for value in state:
            yield from _unit_states_in(value)


def _at_epoch_end(unit_state: Mapping[str, Any]) -> bool:
    """Whether an :class:`EpochUnits` state has read all its units (a checkpoint after the last row)."""
    recorded = unit_state[STATE_KEY]
    units, last = recorded.get("units"), recorded.get("last_unit_rows")
    if not isinstance(units, int) or not isinstance(last, int):
        return False  # saved before these were recorded: not known
    shard, row = unit_state.get("shard_idx", 0), unit_state.get("shard_example_idx", 0)
    return bool(shard >= units or (shard == units - 1 and row >= last))


def _chain(iterable: Any) -> Iterator[Any]:
    """A chain of datasets' examples iterables, from the top (each holds the one it is made from
    as ``ex_iterable``, or several as ``ex_iterables``: datasets' own convention)."""
    yield iterable
    for inner in [getattr(iterable, "ex_iterable", None), *getattr(iterable, "ex_iterables", [])]:
        if inner is not None:
            yield from _chain(inner)


class StreamDataset(IterableDataset):  # type: ignore[misc]
    """What ``shardkit.stream`` returns: datasets' ``IterableDataset``, whose first iteration after
    ``load_state_dict`` refuses a state saved by another stream (other options, other shards) or
    at another epoch, in one line (:func:`refusal`). A state saved before shardkit recorded the
    stream (it has no :data:`STATE_KEY`) is accepted with a warning. Later iterations (the next
    epochs of a resumed run) start their epochs as datasets does."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._shardkit_state_unchecked = True

    def _check_loaded_state(self) -> None:
        saved = self._starting_state_dict
        if not saved or not self.__dict__.get("_shardkit_state_unchecked"):
            return
        unit_states = list(_unit_states_in(saved.get("examples_iterable")))
        saved_identity = unit_states[0][STATE_KEY] if unit_states else None
        if saved_identity is None:
            log.warning(
                "this state records no stream options (saved by an earlier shardkit): resuming it"
                " as a state of this stream; its options and shards are not checked"
            )
        units = next((it for it in _chain(self._ex_iterable) if isinstance(it, EpochUnits)), None)
        identity = units.kwargs["plan"].identity if units is not None else {}
        done = bool(unit_states) and all(_at_epoch_end(state) for state in unit_states)
        _refuse(refusal(saved_identity, identity, saved.get("epoch"), self.epoch, epoch_done=done))
        self._shardkit_state_unchecked = False

    def _settled(self, rows: Iterator[Any]) -> Iterator[Any]:
        """``rows``, whose decode tasks end with it if the stream decodes on threads (:mod:`.decoding`)."""
        if any(decodes_here(iterable) for iterable in _chain(self._ex_iterable)):
            return settled(rows)
        return rows

    def __iter__(self) -> Iterator[Any]:
        self._check_loaded_state()
        return self._settled(super().__iter__())

    def iter(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        self._check_loaded_state()
        return self._settled(super().iter(*args, **kwargs))


def _keeps_class(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def derive(self: StreamDataset, *args: Any, **kwargs: Any) -> Any:
        if self.__dict__.get("_shardkit_state_unchecked") and not method.__name__.startswith("_"):
            # datasets does not carry a loaded state to the new dataset (its inner helpers aside)
            log.warning(
                "a state loaded into a stream is not carried to the dataset %s() makes: it starts from its"
                " first row; call load_state_dict on the dataset you iterate",
                method.__name__,
            )
        derived = method(self, *args, **kwargs)
        if type(derived) is IterableDataset:
            derived.__class__ = type(self)  # it adds no fields: the same object, checked on resume
        return derived

    return derive


#: datasets' methods that make a new dataset over this one (those of the installed datasets):
#: their results are StreamDatasets too, so the check follows the dataset a training loop iterates.
DERIVATIONS = (
    "map", "filter", "batch", "decode", "with_format", "select_columns", "remove_columns", "rename_column",
    "rename_columns", "cast", "cast_column", "add_column", "shuffle", "take", "skip", "shard", "repeat",
    "reshard", "_resolve_features", "_step",
)  # fmt: skip
for _name in DERIVATIONS:
    if hasattr(IterableDataset, _name):
        setattr(StreamDataset, _name, _keeps_class(getattr(IterableDataset, _name)))
