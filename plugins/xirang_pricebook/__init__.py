"""Price-book cost policies (``cost=pricebook|offpeak|energy_aware``), the ``xirang cost``
command and the observer that meters every training run into the cost store."""

from xirang import conf_folder, hookimpl
from xirang.specs import CommandSpec, CostPolicySpec, JsonValue, WorkerContext

_SCHEMA = "xirang_pricebook.policy:PriceBookConfig"


@hookimpl
def xirang_cost_policies() -> list[CostPolicySpec]:
    return [
        CostPolicySpec(
            name="pricebook",
            target="xirang_pricebook.policy:PriceBookPolicy",
            schema=_SCHEMA,
            description="price per device-hour by type, time window and capacity class",
        ),
        CostPolicySpec(
            name="offpeak",
            target="xirang_pricebook.policy:OffPeakPolicy",
            schema=_SCHEMA,
            description="price book on spot capacity; interruptible jobs wait for cheap windows",
        ),
        CostPolicySpec(
            name="energy_aware",
            target="xirang_pricebook.policy:EnergyAwarePolicy",
            schema=_SCHEMA,
            description="price book plus energy (watts x kWh price); prefers efficient types",
        ),
    ]


@hookimpl
def xirang_commands() -> list[CommandSpec]:
    return [
        CommandSpec(
            name="cost",
            target="xirang_service.cost.cli:main",
            description="cost reports by team/project/device, findings and budgets",
        )
    ]


@hookimpl
def xirang_on_run_end(ctx: WorkerContext, summary: dict[str, JsonValue]) -> None:
    """Meter the finished run into the cost store (imported only when a run ends)."""
    from xirang_pricebook.observer import record_run

    record_run(ctx, summary)


@hookimpl
def xirang_on_step_end(ctx: WorkerContext, step: int, metrics: dict[str, float]) -> None:
    """Sample the run's device power where its plugin reads it (energy metering)."""
    from xirang_pricebook.observer import sample_power

    sample_power(ctx)


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
