"""Device-independent communication pieces the kernel itself runs: the launcher of local process
groups and the sync window of periodic averaging.

The pieces only plugins use (counted collectives, the ring cost model, process groups for a
topology, the overlap meter, the serial lane, backend checks) are the SDK's :mod:`xirang.comm`.
"""
