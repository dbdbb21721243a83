"""Built-in pool policies: FIFO, FIFO with EASY backfill, priority with quotas (default),
heterogeneity-aware."""
