"""Data: corpora packed into shards, and the batches a worker trains on."""
