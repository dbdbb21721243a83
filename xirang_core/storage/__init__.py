"""Storage tiers: named places (memory, local disk, shared filesystem, object store) behind one
fsspec-backed interface, so data and checkpoints move between them without special cases."""
