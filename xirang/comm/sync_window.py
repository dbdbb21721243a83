"""Sync windows: several large jobs on one pool take turns at their full gradient exchange.

A window divides wall-clock time into periods of ``slots`` equal slots; a job given slot ``slot``
starts its exchange only inside that slot, so jobs sharing links do not all-reduce at the same
moment. Whoever places jobs (a pool scheduler) assigns the slots through the
``xirang_comm_sync_window`` hook; a run's comm config can also set one. The record is the
kernel's (:class:`xirang_core.specs.records.SyncWindow`, the hook's answer).
"""

from xirang_core.specs.records import SyncWindow

__all__ = ["SyncWindow"]
