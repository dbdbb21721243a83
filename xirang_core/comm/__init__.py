"""Device-independent communication pieces: counted collectives, the ring cost model, process
groups for a topology, overlap measurement and sync windows.

Comm plugins (``plugins/xirang_comm``, which also holds ``xirang bench``) build gradient hooks
from these; nothing here imports a vendor library, so every piece runs and is tested with gloo
on CPU.
"""
