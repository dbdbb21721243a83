"""``xirang cost``: reports, findings and budgets from the cost store.

xirang cost report --by team|project|device [--since 7d] [--csv FILE] [--project P]
xirang cost budget set project|job NAME AMOUNT [--warn 0.8] [--action stop_submissions]
xirang cost budget list
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from xirang_core.terminal import help_text
from xirang_service.cost import findings as findings_mod
from xirang_service.cost import report as report_mod
from xirang_service.cost.budgets import ACTIONS, SCOPES, Budget
from xirang_service.cost.errors import CostError
from xirang_service.cost.governor import Governor
from xirang_service.cost.money import format_money, to_micro
from xirang_service.cost.store import CostStore


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    store = CostStore(args.db)
    try:
        return int(args.run(args, store, Console(highlight=False)))
    finally:
        store.close()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xirang cost", description=help_text(__doc__.split("\n\n")[0])
    )
    parser.add_argument("--db", help="cost database (default XIRANG_HOME/cost/cost.db)")
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("report", help="costs grouped by team, project or device type")
    rep.add_argument("--by", default="team", choices=sorted(report_mod.GROUPINGS))
    rep.add_argument("--since", help="7d, 24h, 30m, 2w or an ISO date (default: everything)")
    rep.add_argument("--project", help="only this project's charges")
    rep.add_argument("--csv", help="also write the report as this CSV file")
    rep.add_argument("--low-util", type=float, default=0.3, help="low-utilisation threshold")
    rep.set_defaults(run=_report)
    budget = sub.add_parser("budget", help="set or list budgets")
    bsub = budget.add_subparsers(dest="budget_command", required=True)
    bset = bsub.add_parser("set", help="set a budget for a project or a job")
    bset.add_argument("scope", choices=SCOPES)
    bset.add_argument("name")
    bset.add_argument("amount", help="limit in currency units, e.g. 1500.00")
    bset.add_argument("--warn", type=float, default=0.8, help="warn at this fraction")
    bset.add_argument("--action", default="stop_submissions", choices=ACTIONS)
    bset.set_defaults(run=_budget_set)
    bsub.add_parser("list", help="budgets and spending").set_defaults(run=_budget_list)
    return parser


def _report(args: argparse.Namespace, store: CostStore, out: Console) -> int:
    charges = store.charges(since=report_mod.parse_since(args.since), project=args.project)
    report = report_mod.group(charges, args.by)
    out.print(_report_table(report))
    found = findings_mod.find(charges, threshold=args.low_util)
    if found:
        out.print(_findings_table(found, report.currency))
    if args.csv:  # only when asked: a report is for reading, not a file in the folder
        out.print(f"wrote {report_mod.write_csv(report, args.csv)}")
    return 0


def _report_table(report: report_mod.Report) -> Table:
    table = Table(title=f"cost by {report.by} ({report.currency})")
    for column in (report.by, "amount", "idle", "device-h", "energy kWh", "tokens/cost"):
        table.add_column(column, justify="left" if column == report.by else "right")
    for row in [*report.rows, report.total]:
        tpc = row.tokens_per_cost
        table.add_row(
            row.key,
            format_money(row.amount_micro),
            format_money(row.idle_micro),
            f"{row.device_s / 3600:,.2f}",
            f"{row.energy_wh / 1000:,.2f}",
            f"{tpc:,.0f}" if tpc else "-",
            end_section=row is report.rows[-1] if report.rows else False,
        )
    return table


def _findings_table(found: list[findings_mod.Finding], currency: str) -> Table:
    table = Table(title="findings")
    for column in ("kind", "job/run", "project", "team", "device", "cost", "detail"):
        table.add_column(column)
    for f in found:
        cost = f"{format_money(f.cost_micro)} {currency}"
        table.add_row(f.kind, f.ref, f.project, f.team, f.device_type, cost, f.detail)
    return table


def _budget_set(args: argparse.Namespace, store: CostStore, out: Console) -> int:
    try:
        limit = to_micro(args.amount)
    except (ValueError, ArithmeticError):
        raise CostError(f"budget amount {args.amount!r}: give a number like 1500.00") from None
    store.set_budget(Budget(args.scope, args.name, limit, args.warn, args.action))
    out.print(f"budget for {args.scope} '{args.name}': {format_money(limit)} ({args.action})")
    return 0


def _budget_list(args: argparse.Namespace, store: CostStore, out: Console) -> int:
    table = Table(title="budgets")
    for column in ("scope", "name", "limit", "spent", "used", "state", "action at limit"):
        table.add_column(column)
    for status in Governor(store).statuses():
        b = status.budget
        table.add_row(
            b.scope,
            b.name,
            format_money(b.limit_micro),
            format_money(status.spent_micro),
            f"{status.fraction:.0%}",
            status.state,
            b.action,
        )
    out.print(table)
    return 0
