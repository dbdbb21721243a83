"""What a comm-backend plugin uses: backend availability, collective counting and the wire
ledger, hierarchical groups, the overlap meter, the serial lane for asynchronous work and the
sync window of periodic averaging; and for the comm benchmark, the collectives' cost model
(ring time, bus bandwidth, a link fitted to timings) and ``run_group``, which runs a function on
N local workers in one process group.

The names in ``__all__`` are the stable surface for comm plugins. Importing this module imports
torch.
"""

from xirang_core.comm.backends import check_available, collective_backend
from xirang_core.comm.cost_model import OPS, ClusterDescription, Link, bus_bandwidth, fit_link
from xirang_core.comm.counting import Collectives, CountedGroup, WireLedger
from xirang_core.comm.groups import Hierarchy, build_hierarchy, link_key
from xirang_core.comm.launch import run_group
from xirang_core.comm.overlap import OverlapMeter
from xirang_core.comm.serial import SerialLane
from xirang_core.comm.sync_window import SyncWindow

__all__ = [
    "OPS",
    "ClusterDescription",
    "Collectives",
    "CountedGroup",
    "Hierarchy",
    "Link",
    "OverlapMeter",
    "SerialLane",
    "SyncWindow",
    "WireLedger",
    "build_hierarchy",
    "bus_bandwidth",
    "check_available",
    "collective_backend",
    "fit_link",
    "link_key",
    "run_group",
]
