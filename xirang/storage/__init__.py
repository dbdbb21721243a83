"""What storage-tier and dataset plugins read shards with: a disk cache shared by processes
(:mod:`~xirang.storage.cache`), retries with backoff and a throttle (:mod:`~xirang.storage.retry`),
the tier for a URL (:mod:`~xirang.storage.locate`) and a local S3 server for tests and
benchmarks (:mod:`~xirang.storage.local_s3`). :mod:`xirang.data` re-exports the stable names.
Importing this package imports nothing else."""
