"""What a cost-policy or cost-observer plugin uses: the price book, money in micro-units,
placement by price, metering, the cost store, and a run's usage and charge
summary.

The names in ``__all__`` are the stable surface for cost plugins. Importing this module does not
import torch.
"""

from xirang_service.cost.meter import run_charge
from xirang_service.cost.money import from_micro
from xirang_service.cost.placement import cheap_start, rank_device_types
from xirang_service.cost.pricebook import DEFAULT_CLASSES, PriceBook
from xirang_service.cost.run_cost import charge_summary
from xirang_service.cost.store import CostStore
from xirang_service.cost.usage import run_usage

__all__ = [
    "DEFAULT_CLASSES",
    "CostStore",
    "PriceBook",
    "charge_summary",
    "cheap_start",
    "from_micro",
    "rank_device_types",
    "run_charge",
    "run_usage",
]
