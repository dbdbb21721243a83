"""``data.document_mask=true``: attention stays within a document in packed rows.

Rows pack documents one after another, so without a mask a token attends to the end of the
document before it. With the mask each batch carries the document index of every input
position (:func:`segments`, from the document starts the token stream records), and a model
family that supports it (its model class says ``document_mask = True``) attends causally within
a document only and restarts its positions at each document (:func:`attention_mask`), so a
packed row gives the logits each of its documents would give alone.

Checked when the config is composed (:func:`check`): a family without support, or a strategy
whose batches do not reach the model's ``forward`` as given (tensor, sequence or pipeline
parallel), is one :class:`ConfigError` naming the key, before any worker starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xirang_core.errors import ConfigError

if TYPE_CHECKING:  # config.py imports this module: numpy and torch load only when used
    import numpy as np

#: strategies whose workers call ``model(inputs, targets, documents)`` unchanged
STRATEGIES = ("auto", "single", "ddp", "fsdp")


def check(config: dict[str, Any], registry: Any) -> None:
    """Refuse ``data.document_mask=true`` for a model family or strategy that cannot keep it."""
    if not (config.get("data") or {}).get("document_mask"):
        return
    family = config["model"]["family"]
    able = [n for n in registry.names("model") if _supports(registry, n)]
    if not _supports(registry, family):
        raise ConfigError(
            f"data.document_mask=true: model family {family} cannot keep attention within "
            f"documents; families that can: {', '.join(able) or 'none installed'} (e.g. "
            f"model=llama_tiny), or set data.document_mask=false"
        )
    strategy = config["parallel"]["name"]
    if strategy not in STRATEGIES:
        raise ConfigError(
            f"data.document_mask=true: parallel={strategy} does not hand the document indices "
            f"to the model; use one of parallel={', '.join(STRATEGIES)}, or "
            f"data.document_mask=false"
        )


def _supports(registry: Any, family: str) -> bool:
    spec = registry.spec("model", family)
    return not spec.missing() and registry.load("model", family).document_mask


def segments(starts: np.ndarray) -> np.ndarray:
    """Document index of each position of ``[rows, span]`` rows from their document-start
    flags (a row's first position counts from 0 whether or not a document starts there)."""
    import numpy as np

    return np.cumsum(starts, axis=1, dtype=np.int32) - starts[:, :1]


def attention_mask(documents: Any) -> tuple[Any, Any]:
    """(positions ``[batch, seq]``, mask ``[batch, 1, seq, seq]``) for document indices
    ``[batch, seq]``: a query sees keys of its own document at or before it, and positions
    count from 0 at each document's first token."""
    import torch

    seq = documents.shape[1]
    index = torch.arange(seq, device=documents.device)
    same = documents[:, :, None] == documents[:, None, :]
    mask = same & (index[None, :, None] >= index[None, None, :])
    first = torch.ones_like(documents, dtype=torch.bool)
    first[:, 1:] = documents[:, 1:] != documents[:, :-1]
    starts = torch.where(first, index, torch.zeros_like(index)).cummax(dim=1).values
    return index - starts, mask[:, None]
