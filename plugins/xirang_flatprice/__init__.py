"""A flat price per device-hour by device type (``cost=flat``)."""

from xirang import conf_folder, hookimpl
from xirang.specs import CostPolicySpec


@hookimpl
def xirang_cost_policies() -> list[CostPolicySpec]:
    return [
        CostPolicySpec(
            name="flat",
            target="xirang_flatprice.policy:FlatPrice",
            schema="xirang_flatprice.policy:FlatPriceConfig",
            description="one price per device-hour for each device type",
        )
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
