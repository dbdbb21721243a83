"""What a comm-backend plugin uses: backend availability, collective counting and the wire
ledger, hierarchical groups, the overlap meter, the serial lane for asynchronous work and the
sync window of periodic averaging.

The names in ``__all__`` are the stable surface for comm plugins. Importing this module imports
torch.
"""

from xirang_core.comm.backends import check_available, collective_backend
from xirang_core.comm.counting import Collectives, CountedGroup, WireLedger
from xirang_core.comm.groups import Hierarchy, build_hierarchy, link_key
from xirang_core.comm.overlap import OverlapMeter
from xirang_core.comm.serial import SerialLane
from xirang_core.comm.sync_window import SyncWindow

__all__ = [
    "Collectives",
    "CountedGroup",
    "Hierarchy",
    "OverlapMeter",
    "SerialLane",
    "SyncWindow",
    "WireLedger",
    "build_hierarchy",
    "check_available",
    "collective_backend",
    "link_key",
]
