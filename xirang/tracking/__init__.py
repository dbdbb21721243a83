"""What an experiment-tracker plugin uses: ``run_event_hooks`` (the run-event hooks that call a
tracker on the main worker only) and ``flatten`` (a nested config as dotted keys).

The names in ``__all__`` are the stable surface for tracker plugins. Importing this module does
not import torch.
"""

from xirang.tracking.events import flatten, run_event_hooks

__all__ = ["flatten", "run_event_hooks"]
