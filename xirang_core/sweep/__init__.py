"""Sweeps: the number a Hydra sweep optimises, the table that ends one, pruning of trials.

``objective`` names and checks the summary figure each run returns to Hydra's sweeper
(``sweep.objective``); ``prune`` lets a sweeper plugin end a trial at an evaluation step;
``table`` prints and writes ``sweep_results.csv`` when a ``-m`` sweep ends. Optuna itself lives
in the ``xirang_optuna`` plugin: nothing here imports it.
"""
