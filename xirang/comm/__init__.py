"""What a comm-backend plugin uses: backend availability, collective counting and the wire
ledger, hierarchical groups, the overlap meter, the serial lane for asynchronous work and the
sync window of periodic averaging; and for the comm benchmark, the collectives' cost model
(ring time, bus bandwidth, a link fitted to timings) and ``run_group``, which runs a function on
N local workers in one process group.

The names in ``__all__`` are the stable surface for comm plugins. Importing this package does not
import torch: the names that need it load when first asked for, so the planner reads the cost
model in a process that never trains.
"""

from typing import TYPE_CHECKING

from xirang.comm.backends import check_available, collective_backend
from xirang.comm.cost_model import OPS, ClusterDescription, Link, bus_bandwidth, fit_link
from xirang_core.lazy import lazy_names

if TYPE_CHECKING:  # at run time through __getattr__ below, so that torch loads only then
    from xirang.comm.counting import Collectives, CountedGroup, WireLedger
    from xirang.comm.groups import Hierarchy, build_hierarchy, link_key
    from xirang.comm.launch import run_group
    from xirang.comm.overlap import OverlapMeter
    from xirang.comm.serial import SerialLane
    from xirang.comm.sync_window import SyncWindow

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

#: the names that import torch -> the module that holds each
_LAZY = {
    "Collectives": "xirang.comm.counting",
    "CountedGroup": "xirang.comm.counting",
    "WireLedger": "xirang.comm.counting",
    "Hierarchy": "xirang.comm.groups",
    "build_hierarchy": "xirang.comm.groups",
    "link_key": "xirang.comm.groups",
    "OverlapMeter": "xirang.comm.overlap",
    "SerialLane": "xirang.comm.serial",
    "run_group": "xirang.comm.launch",
    "SyncWindow": "xirang.comm.sync_window",
}


__getattr__ = lazy_names(__name__, _LAZY)
