"""What a sweeper plugin uses: ``intermediate``, the objective a trial reports while it runs.

The names in ``__all__`` are the stable surface for sweeper plugins. Importing this module does
not import torch.
"""

from xirang_core.sweep.objective import intermediate

__all__ = ["intermediate"]
