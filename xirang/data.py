"""What a storage-tier or dataset plugin uses: the fsspec-backed tier base class and
``publishing``, which fills a cache entry so readers see all of it or none; the
:class:`Dataset` protocol a ``data=<name>`` plugin follows and the token batches it hands the
run (:class:`TokenBatches` over :class:`TokenSource` rows, dealt to ranks by
:class:`Partition`, mixed by weight with :func:`largest_remainder`'s shares); and the tier,
cache, retry, tokenizer and command-line helpers the built-in snapshot pipeline
(``xirang_data``) reads its shards and serves ``xirang data`` with.

The names in ``__all__`` are the stable surface for data and storage plugins. Importing this
module does not import torch: :class:`TokenBatches`, :class:`NamedSource` and
:class:`TokenSource` (which do) load when first asked for, as does :func:`compose` (the config
module, which a storage tier never needs).
"""

from typing import TYPE_CHECKING

from xirang.storage.cache import DiskCache, NextUse, check_separate, furthest_first
from xirang.storage.locate import origin_errors, tier_for
from xirang.storage.retry import RetryPolicy, Throttle
from xirang_core.data.interface import Dataset
from xirang_core.data.mixture import largest_remainder
from xirang_core.data.order import EpochOrder, Partition
from xirang_core.data.tokenizer import open_tokenizer, prepare_tokenizer, tokenizer_runtime
from xirang_core.lazy import lazy_names
from xirang_core.overrides import did_you_mean
from xirang_core.paths import publishing
from xirang_core.storage.tier import FsspecTier
from xirang_core.terminal import help_text

if TYPE_CHECKING:  # at run time through __getattr__ below, so that they load only then
    from xirang_core.config import compose
    from xirang_core.data.tokens import NamedSource, TokenBatches, TokenSource

__all__ = [
    "Dataset",
    "DiskCache",
    "EpochOrder",
    "FsspecTier",
    "NamedSource",
    "NextUse",
    "Partition",
    "RetryPolicy",
    "Throttle",
    "TokenBatches",
    "TokenSource",
    "check_separate",
    "compose",
    "did_you_mean",
    "furthest_first",
    "help_text",
    "largest_remainder",
    "open_tokenizer",
    "origin_errors",
    "prepare_tokenizer",
    "publishing",
    "tier_for",
    "tokenizer_runtime",
]

#: the names that import torch, loaded on first use
_TORCH_NAMES = ("NamedSource", "TokenBatches", "TokenSource")

# TokenBatches and its parts (with torch) and compose (with the config module) load only when
# asked for: the storage tiers import this module in processes that never read a batch
__getattr__ = lazy_names(
    __name__,
    {n: "xirang_core.data.tokens" for n in _TORCH_NAMES} | {"compose": "xirang_core.config"},
)
