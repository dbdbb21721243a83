"""A third-party dataset plugin, as a package outside xirang would write it against the SDK:
``data=counting`` trains on documents that count ("7 8 9 ..."), made in memory and tokenised
with the run's tokenizer. Its rows follow the :class:`xirang.data.TokenSource` protocol and
reach the run through :class:`xirang.data.TokenBatches`, so the kernel's step loader, balance
and resume apply to it as to the built-in pipeline."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from xirang import conf_folder, hookimpl, xirang_home
from xirang.data import NamedSource, Partition, TokenBatches, open_tokenizer
from xirang.specs import DataPins, DatasetSpec, TextCorpus, Tokenizer

#: every ``prepare`` in this process, by the data id it pinned (the launch prepares once)
PREPARED: list[str] = []


@hookimpl
def xirang_datasets() -> list[DatasetSpec]:
    return [DatasetSpec(name="counting", target=f"{__name__}:CountingDataset")]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)


def documents(data: dict[str, Any]) -> list[str]:
    """Document ``i`` counts ``length`` numbers up from ``3 * i``."""
    return [
        " ".join(str(n) for n in range(3 * i, 3 * i + data["length"]))
        for i in range(data["documents"])
    ]


class CountingDataset:
    """The :class:`xirang.data.Dataset` of ``data=counting``."""

    def prepare(self, config: Mapping[str, Any]) -> DataPins:
        data = config["data"]
        snapshot = f"counting-{data['documents']}x{data['length']}"
        PREPARED.append(snapshot)
        return DataPins({**data, "snapshot": snapshot}, ids=(snapshot,))

    def text_corpus(self, config: Mapping[str, Any]) -> TextCorpus:
        texts = documents(config["data"])

        def batches() -> Iterator[list[str]]:
            yield texts

        return TextCorpus(config["data"]["snapshot"], len(texts), batches, xirang_home())

    def pin_tokens(self, config: Mapping[str, Any], tokenizer: Tokenizer) -> DataPins:
        ids = tokenizer.encode_batch(documents(config["data"]))
        tokens = sum(len(d) for d in ids)
        return DataPins(runtime={"counting_tokens": tokens}, ids=(config["data"]["snapshot"],))

    def batches(
        self, config: Mapping[str, Any], rank: int, world: int, micro: int, accum: int
    ) -> tuple[TokenBatches, TokenBatches]:
        data, tokenizer, seed = config["data"], open_tokenizer(config), config["seed"]
        texts = documents(data)
        ids = tokenizer.encode_batch(texts)
        cut = max(1, len(ids) // 8)  # the first documents are held out
        span, part = data["seq_len"] + 1, Partition(micro, world, rank)
        train = [NamedSource("counting", PackedRows(ids[cut:], texts[cut:], span))]
        val = [NamedSource("counting", PackedRows(ids[:cut], texts[:cut], span))]
        return (
            TokenBatches(train, part, accum, seed, "train", tokenizer),
            TokenBatches(val, part, 1, seed, "val", tokenizer),
        )


class PackedRows:
    """Documents packed end to end and cut into rows of ``span`` tokens; row ``r`` is row
    ``r`` modulo the rows there are, so every row number has its tokens."""

    def __init__(self, docs: list[np.ndarray], texts: list[str], span: int) -> None:
        self.span = span
        self.tokens = np.concatenate(docs).astype(np.int64)
        self.starts = np.zeros(len(self.tokens), dtype=bool)
        self.starts[np.cumsum([0, *[len(d) for d in docs[:-1]]])] = True
        self.rows = len(self.tokens) // span
        self.bytes_per_token = sum(len(t.encode()) for t in texts) / len(self.tokens)

    def _take(self, values: np.ndarray, rows: np.ndarray) -> np.ndarray:
        starts = (np.asarray(rows, dtype=np.int64) % self.rows) * self.span
        return values[starts[:, None] + np.arange(self.span)]

    def train_rows(self, rows: np.ndarray, sparse: bool = False) -> np.ndarray:
        return self._take(self.tokens, rows)

    def val_rows(self, rows: np.ndarray) -> np.ndarray:
        return self._take(self.tokens, rows)

    def train_doc_starts(self, rows: np.ndarray) -> np.ndarray:
        return self._take(self.starts, rows)

    def val_doc_starts(self, rows: np.ndarray) -> np.ndarray:
        return self._take(self.starts, rows)

    def settle(self) -> None:
        """Nothing in flight: every token is in memory."""

    def close(self) -> None:
        """Nothing to release."""
