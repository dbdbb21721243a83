"""What a run asks of its dataset (``data=<name>``): the :class:`Dataset` protocol.

A dataset is a plugin kind like a tokenizer: a plugin's ``xirang_datasets`` hook returns
:class:`~xirang_core.specs.DatasetSpec` records naming a class that follows :class:`Dataset`,
and the ``data`` config group's ``name:`` selects one. The kernel asks four things of it, at two
moments. The launching process, once per launch: :meth:`~Dataset.prepare` pins the data into
the config, :meth:`~Dataset.text_corpus` gives a tokenizer that learns its text, and
:meth:`~Dataset.pin_tokens` records the token form the workers read. Every worker then reads
only its config.yaml and asks :meth:`~Dataset.batches` for its rank's batches. The built-in
snapshot, stream and mixture pipeline is the ``xirang_data`` plugin (``data=stdlib``,
``snapshot``, ``mixture``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the run's types; importing the protocol imports neither torch nor a plugin
    from xirang_core.data.tokens import TokenBatches
    from xirang_core.plugins import Registry
    from xirang_core.specs import TextCorpus, Tokenizer


class Dataset(Protocol):
    """A run's data. The class named by a :class:`~xirang_core.specs.DatasetSpec`'s ``target``
    is built without arguments; each method reads the run's resolved config (its ``data``
    section, and ``storage``, ``seed``, ``tokenizer`` and ``runtime`` where it needs them).

    What :meth:`prepare` and :meth:`pin_tokens` write into ``config`` is all a worker knows of
    the launch: they run once in the launching process, and the workers (other processes,
    other nodes) read the same values from the run's config.yaml. ``data.seq_len`` (tokens per
    row) and ``data.num_workers`` (DataLoader processes, 0 for none) are read by the kernel too.
    """

    def prepare(self, config: dict[str, Any]) -> str:
        """Pin what the run trains on into ``config["data"]`` (``data.snapshot`` names it), so
        every worker reads the same bytes; returns that id. Called once per launch."""
        ...

    def text_corpus(self, config: dict[str, Any]) -> TextCorpus:
        """The prepared data's documents as text, for a tokenizer that learns from it; read
        lazily, only when the tokenizer asks."""
        ...

    def pin_tokens(self, config: dict[str, Any], tokenizer: Tokenizer) -> list[str]:
        """After the tokenizer is prepared: the data in its ids, made if needed and recorded in
        ``config["runtime"]`` for the workers; returns the ids of what was pinned."""
        ...

    def batches(
        self, config: dict[str, Any], rank: int, world: int, micro: int, accum: int
    ) -> tuple[TokenBatches, TokenBatches]:
        """A worker's training and held-out batches as data-parallel rank ``rank`` of
        ``world``: ``micro`` rows a micro-batch, ``accum`` micro-batches a step."""
        ...


def open_dataset(config: dict[str, Any], registry: Registry) -> Dataset:
    """The dataset the run's ``data`` section names (``data.name``), from the registry."""
    return registry.load("dataset", config["data"]["name"])()
