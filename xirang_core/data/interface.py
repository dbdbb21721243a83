"""What a run asks of its dataset (``data=<name>``): the :class:`Dataset` protocol.

A dataset is a plugin kind like a tokenizer: a plugin's ``xirang_datasets`` hook returns
:class:`~xirang_core.specs.DatasetSpec` records naming a class that follows :class:`Dataset`,
and the ``data`` config group's ``name:`` selects one. The kernel asks four things of it, at two
moments. The launching process, once per launch: :meth:`~Dataset.prepare` pins the data (a
:class:`~xirang_core.specs.DataPins` the launch derives the workers' config from),
:meth:`~Dataset.text_corpus` gives a tokenizer that learns its text, and
:meth:`~Dataset.pin_tokens` pins the token form the workers read. Every worker then reads
only its config.yaml and asks :meth:`~Dataset.batches` for its rank's batches. The built-in
snapshot, stream and mixture pipeline is the ``xirang_data`` plugin (``data=stdlib``,
``snapshot``, ``mixture``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from xirang_core.contract import RunConfig
from xirang_core.specs import DataPins

if TYPE_CHECKING:  # the run's types; importing the protocol imports neither torch nor a plugin
    from xirang_core.data.tokens import TokenBatches
    from xirang_core.plugins import Registry
    from xirang_core.specs import TextCorpus, Tokenizer


class Dataset(Protocol):
    """A run's data. The class named by a :class:`~xirang_core.specs.DatasetSpec`'s ``target``
    is built without arguments; each method reads the run's resolved config (its ``data``
    section, and ``storage``, ``seed``, ``tokenizer`` and ``runtime`` where it needs them).

    What :meth:`prepare` and :meth:`pin_tokens` pin (their :class:`DataPins`; the config they
    are given is read-only) is all a worker knows of the launch: they run once in the launching
    process, the launch derives the run's config from their pins, and the workers (other
    processes, other nodes) read the same values from the run's config.yaml. ``data.seq_len``
    (tokens per row) and ``data.num_workers`` (DataLoader processes, 0 for none) are read by
    the kernel too.
    """

    def prepare(self, config: Mapping[str, Any]) -> DataPins:
        """Pin what the run trains on: the ``data`` section naming it (``data.snapshot``), so
        every worker reads the same bytes, and that id. Called once per launch."""
        ...

    def text_corpus(self, config: Mapping[str, Any]) -> TextCorpus:
        """The prepared data's documents as text, for a tokenizer that learns from it; read
        lazily, only when the tokenizer asks."""
        ...

    def pin_tokens(self, config: Mapping[str, Any], tokenizer: Tokenizer) -> DataPins:
        """After the tokenizer is prepared (``config`` has ``data`` pinned and
        ``runtime.tokenizer``): the data in its ids, made if needed; the pins name them for
        the workers' ``runtime`` section."""
        ...

    def batches(
        self, config: Mapping[str, Any], rank: int, world: int, micro: int, accum: int
    ) -> tuple[TokenBatches, TokenBatches]:
        """A worker's training and held-out batches as data-parallel rank ``rank`` of
        ``world``: ``micro`` rows a micro-batch, ``accum`` micro-batches a step."""
        ...


def open_dataset(config: Mapping[str, Any], registry: Registry) -> Dataset:
    """The dataset the run's ``data`` section names (``data.name``), from the registry."""
    return registry.load("dataset", config["data"]["name"])()


def with_runtime(config: Mapping[str, Any], **entries: Any) -> RunConfig:
    """``config`` with ``entries`` added to its ``runtime`` section (created if absent)."""
    return RunConfig(config).replace(runtime={**(config.get("runtime") or {}), **entries})


def apply_pins(config: Mapping[str, Any], pins: DataPins) -> RunConfig:
    """The config the workers read: ``config`` with what the dataset pinned."""
    derived = RunConfig(config)
    if pins.data is not None:
        derived = derived.replace(data=pins.data)
    return with_runtime(derived, **pins.runtime) if pins.runtime else derived
