"""Checkpoints: nothing lost, resume anywhere.

Model and optimizer state go through torch.distributed.checkpoint (sharded as the strategy holds
them, reshardable to another world size); RNG states, data position, step and learning-rate
schedule ride along. Saves are content-addressed chunks in a storage tier, committed by a
manifest written last; they run in the background and skip chunks that did not change.

Modules: ``config`` (settings), ``manager`` (restore/save/finish in a worker), ``snapshot`` (one
save in flight), ``store`` (a run's checkpoints: list, verify, commit, retain), ``chunks``,
``manifest``, ``state`` (RNG, state dicts), ``interval`` (Young/Daly). The tools over a run's
checkpoints (``xirang ckpt``, ``xirang drill``) are the plugin ``xirang_ckpt``.
This package imports nothing heavy itself, so the config schema loads without torch.
"""
