"""Device-independent communication pieces: counted collectives, the ring cost model, process
groups for a topology, overlap measurement, sync windows and the scaling benchmark.

Comm plugins (``plugins/xirang_comm``) build gradient hooks from these; nothing here imports a
vendor library, so every piece runs and is tested with gloo on CPU.
"""
