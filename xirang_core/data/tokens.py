"""Batches for the training run: packed token rows of one rank, from one source or a mixture.

Global row ``g`` of a step is what the partition assigns (``(step-1)*accum + micro`` is the
global batch; rank ``r`` reads its slice), so the global batch of a step does not depend on the
number of ranks and a resumed run continues the same trajectory on any world size. With several
sources the mixture's schedule says which source and which of its rows each global row is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from xirang_core.data.document_mask import segments
from xirang_core.data.mixture import Schedule
from xirang_core.data.order import Partition
from xirang_core.specs import Tokenizer

if TYPE_CHECKING:
    from xirang_core.data.shares import Shares


#: a target left out of the loss: ``F.cross_entropy``'s default ``ignore_index`` (transformers')
IGNORE = -100


class TokenSource(Protocol):
    """The packed token rows of one source, by global row number: what a dataset plugin hands
    :class:`TokenBatches` (the snapshot pipeline's is ``xirang_data.stream.TokenSource``).
    Rows are a function of their number alone, so any rank, DataLoader worker or resumed run
    reads the same row for the same number."""

    @property
    def span(self) -> int:
        """Tokens a row holds: ``data.seq_len + 1`` (inputs and the shifted targets)."""
        ...

    @property
    def bytes_per_token(self) -> float:
        """Text bytes per token, for bits per byte (0 when unknown)."""
        ...

    def train_rows(self, rows: np.ndarray, sparse: bool = False) -> np.ndarray:
        """Training rows ``rows`` as a [len(rows), span] int64 array (``sparse``: a first
        batch read from only what its rows need, before the rest is loaded)."""
        ...

    def val_rows(self, rows: np.ndarray) -> np.ndarray:
        """Held-out rows ``rows`` as a [len(rows), span] int64 array."""
        ...

    def train_doc_starts(self, rows: np.ndarray) -> np.ndarray:
        """For :meth:`train_rows`' rows: whether a document starts at each token (bool)."""
        ...

    def val_doc_starts(self, rows: np.ndarray) -> np.ndarray:
        """For :meth:`val_rows`' rows: whether a document starts at each token (bool)."""
        ...

    def settle(self) -> None:
        """Finish reads in flight: DataLoader workers forked next inherit what they loaded."""
        ...

    def close(self) -> None: ...


@dataclass
class NamedSource:
    """A source of the run and the name its tokens are reported under in summary.json."""

    name: str
    source: TokenSource
    weight: float = 1.0


class TokenBatches:
    """Deterministic [rows, seq_len] inputs and targets for (step, micro-batch, rank)."""

    def __init__(
        self,
        sources: list[NamedSource],
        part: Partition,
        accum: int,
        seed: int,
        split: str,
        tokenizer: Tokenizer,
        document_mask: bool = False,
        loss_mask: bool = False,
    ) -> None:
        self.sources, self.part, self.accum, self.split = sources, part, accum, split
        self.tokenizer, self.document_mask = tokenizer, document_mask
        #: targets the sources mark as not trained on are :data:`IGNORE` (supervised
        #: fine-tuning's prompts): each source then also has ``train_loss_mask(rows)`` and
        #: ``val_loss_mask(rows)``, [len(rows), span] bool, True where a token is a target
        self.loss_mask = loss_mask
        #: the rows of one optimizer step over every rank (reshare deals them, never changes them)
        self.rows_per_step = accum * part.global_batch
        self._step_targets: tuple[int, int] | None = None  # (step, its trained targets)
        weights = tuple(s.weight for s in sources)
        self.schedule = Schedule(weights, seed + (split == "val")) if len(sources) > 1 else None
        self.seq_len = sources[0].source.span - 1
        #: unequal micro-batches per rank (``parallel.balance``); None: ``accum`` each
        self.shares: Shares | None = None

    def reshare(self, shares: Shares) -> None:
        """Read this rank's micro-batches of every step as ``shares`` deal them: the step's
        rows stay the same, only which rank reads which changes."""
        self.shares, self.accum = shares, shares.counts[self.part.rank]

    @property
    def bytes_per_token(self) -> float:
        """Text bytes per token of the mixture as trained on (weighted by the sources' shares)."""
        total = sum(s.weight for s in self.sources)
        return sum(s.weight / total * s.source.bytes_per_token for s in self.sources)

    def positions(self, step: int, micro: int) -> np.ndarray:
        """Global rows of this rank for (step, micro); held-out batches count from 0."""
        if self.shares is not None and self.split == "train":
            slot = (step - 1) * self.shares.total + self.shares.slot(self.part.rank, micro)
            return np.arange(slot * self.part.batch_size, (slot + 1) * self.part.batch_size)
        batch = (step - 1) * self.accum + micro if self.split == "train" else step
        return self.part.positions(batch)

    def rows(self, positions: np.ndarray, sparse: bool = False) -> np.ndarray:
        """The [len(positions), seq_len + 1] token rows at global rows ``positions``
        (``sparse``: see :meth:`TokenSource.train_rows`)."""
        return self._gather(positions, lambda s, r: self._read(s, r, sparse), np.int64)

    def doc_starts(self, positions: np.ndarray) -> np.ndarray:
        """Whether a document starts at each position of :meth:`rows`' rows."""
        return self._gather(positions, self._read_starts, np.bool_)

    def trained(self, positions: np.ndarray) -> np.ndarray:
        """With ``loss_mask``: whether each position of :meth:`rows`' rows is trained on."""
        return self._gather(positions, self._read_loss_mask, np.bool_)

    def _gather(self, positions: np.ndarray, read, dtype) -> np.ndarray:
        """``read(source, rows)`` of each global row's source (the mixture's schedule)."""
        if self.schedule is None:
            return read(self.sources[0].source, positions)
        which, within = self.schedule.locate(positions)
        out = np.empty((len(positions), self.seq_len + 1), dtype=dtype)
        for index in np.unique(which):
            mask = which == index
            out[mask] = read(self.sources[int(index)].source, within[mask])
        return out

    def _read(self, source: TokenSource, rows: np.ndarray, sparse: bool = False) -> np.ndarray:
        train = self.split == "train"
        return source.train_rows(rows, sparse) if train else source.val_rows(rows)

    def _read_starts(self, source: TokenSource, rows: np.ndarray) -> np.ndarray:
        train = self.split == "train"
        return source.train_doc_starts(rows) if train else source.val_doc_starts(rows)

    def loss_weight(self, step: int, micro: int) -> float:
        """What the loop multiplies this micro-batch's mean loss by: its trained targets over
        an even share of the step's (every micro-batch of every rank), 1.0 without
        ``loss_mask``. The step's loss and gradient are then the mean over all its trained
        targets, as transformers' ``num_items_in_batch`` makes them, however unevenly the
        replies fall into micro-batches and ranks; each rank counts the step's targets itself."""
        if not self.loss_mask:
            return 1.0
        if self._step_targets is None or self._step_targets[0] != step:
            first = (step - 1) * self.rows_per_step
            rows = np.arange(first, first + self.rows_per_step)
            self._step_targets = (step, int(self.trained(rows)[:, 1:].sum()))
        mine = int(self.trained(self.positions(step, micro))[:, 1:].sum())
        return mine * (self.rows_per_step / self.part.batch_size) / self._step_targets[1]

    def _read_loss_mask(self, source: Any, rows: np.ndarray) -> np.ndarray:
        """A ``loss_mask`` source's flags (methods beyond :class:`TokenSource`'s)."""
        train = self.split == "train"
        return source.train_loss_mask(rows) if train else source.val_loss_mask(rows)

    def get(self, step: int, micro: int = 0) -> tuple[torch.Tensor, ...]:
        """(inputs, targets), and with ``data.document_mask`` each input's document in its
        row (:func:`~xirang_core.data.document_mask.segments`) for the model's ``forward``.
        With ``loss_mask`` the targets not trained on are :data:`IGNORE`, which the models'
        cross-entropy leaves out of the loss and of its mean."""
        positions = self.positions(step, micro)
        tokens = torch.from_numpy(self.rows(positions))
        targets = tokens[:, 1:]
        if self.loss_mask:
            trained = torch.from_numpy(self.trained(positions)[:, 1:])
            targets = torch.where(trained, targets, IGNORE)
        if not self.document_mask:
            return tokens[:, :-1], targets
        documents = segments(self.doc_starts(positions)[:, :-1])
        return tokens[:, :-1], targets, torch.from_numpy(documents).long()

    def tokens_seen(self, steps: int) -> dict[str, int]:
        """Training tokens (inputs) each source gave the whole run in its first ``steps``."""
        rows = steps * self.accum * self.part.global_batch
        if self.shares is not None:
            rows = steps * self.shares.total * self.part.batch_size
        counts = self.schedule.counts(rows) if self.schedule else np.array([rows])
        return {s.name: int(c) * self.seq_len for s, c in zip(self.sources, counts, strict=True)}

    def close(self) -> None:
        for s in self.sources:
            s.source.close()
