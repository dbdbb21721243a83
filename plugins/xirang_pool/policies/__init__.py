"""Built-in pool policies: FIFO, priority with quotas (default), heterogeneity-aware."""
