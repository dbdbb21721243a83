"""What a storage-tier or data plugin uses: the fsspec-backed tier base class and
``publishing``, which fills a cache entry so readers see all of it or none.

The names in ``__all__`` are the stable surface for data and storage plugins. Importing this
module does not import torch.
"""

from xirang_core.paths import publishing
from xirang_core.storage.tier import FsspecTier

__all__ = ["FsspecTier", "publishing"]
