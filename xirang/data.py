"""What a storage-tier or data plugin uses: the fsspec-backed tier base class,
``publishing``, which fills a cache entry so readers see all of it or none, and
``open_tokenizer``, the run's tokenizer from its config.

The names in ``__all__`` are the stable surface for data and storage plugins. Importing this
module does not import torch.
"""

from xirang_core.data.tokenizer import open_tokenizer
from xirang_core.paths import publishing
from xirang_core.storage.tier import FsspecTier

__all__ = ["FsspecTier", "open_tokenizer", "publishing"]
