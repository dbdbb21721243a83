"""Price device time by energy drawn (``cost=energy``)."""

from xirang import conf_folder, hookimpl
from xirang.specs import CostPolicySpec


@hookimpl
def xirang_cost_policies() -> list[CostPolicySpec]:
    return [
        CostPolicySpec(
            name="energy",
            target="xirang_energy_cost.policy:EnergyPrice",
            schema="xirang_energy_cost.policy:EnergyConfig",
            description="watts per device type x hours x price per kWh",
        )
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
