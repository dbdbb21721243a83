"""Storage tiers: named places (memory, local disk, shared filesystem, object store) behind one
fsspec-backed interface, so data and checkpoints move between them without special cases.
The helpers only tier and dataset plugins use (the disk cache, retries, finding a tier for a
URL, a local S3 server) are the SDK's :mod:`xirang.storage`."""
