"""`gpubill balance topup | show` and `gpubill budget set`: prepaid balances (billing/balances.py).

balance = top-ups − issued invoices' totals + their credit notes − estimates of the periods not yet invoiced
(docs/balances.md). Top-ups are idempotent by `--ref`: re-running the same command changes
nothing; the same ref with another tenant or amount is an error.
"""

from __future__ import annotations

import sys
from datetime import UTC
from typing import Optional

import typer

from gpubill.cli.books import open_books
from gpubill.cli.common import check_period, connect, err, out, read_rules, terminal_text
from gpubill.config import load_settings
from gpubill.errors import GpubillError

app = typer.Typer(help="Prepaid balances: top-ups, and what is left after invoices and estimates.",
                  no_args_is_help=True)
budget_app = typer.Typer(help="Monthly budgets per tenant, compared with the month-to-date estimate.",
                         no_args_is_help=True)


@app.command("topup")
def balance_topup(
    tenant: str = typer.Option(..., "--tenant", help="A registered tenant id."),
    amount: str = typer.Option(..., "--amount", help="CNY, above zero, at most two decimals (e.g. 500 or 99.50)."),
    ref: str = typer.Option(..., "--ref", help="The payment's reference (letters, digits, . _ -): recorded once."),
    note: str = typer.Option("", "--note", help="Why: a payment id, a ticket (at most 200 characters)."),
) -> None:
    """Add a top-up to a tenant's balance. The same --ref again changes nothing; with another tenant or amount, an error."""
    from billing.balances import check_ref, parse_amount, top_up
    from billing.tenants import check_note, check_tenant_id

    checked = check_tenant_id(tenant), parse_amount(amount), check_ref(ref), check_note(note)  # before opening anything
    settings = load_settings()
    rules = read_rules(settings)
    # a top-up is a payment (issue 38): allocated under the invoicing lease, by the numbered writer
    with connect(settings) as database, open_books(database, settings, numbered=True, rules=rules):
        entry, added = top_up(database, checked[0], checked[1], checked[2], note=checked[3], rules=rules)
    if added:
        out.print(f"recorded {terminal_text(entry.ref)}: +{entry.amount} CNY for {terminal_text(entry.tenant)}",
                  highlight=False)
    else:
        out.print(f"{terminal_text(entry.ref)} is already recorded (+{entry.amount} CNY for "
                  f"{terminal_text(entry.tenant)}); nothing changed", highlight=False)


@app.command("show")
def balance_show(
    tenant: str = typer.Option("", "--tenant", help="One registered tenant; every registered tenant when omitted."),
    as_json: bool = typer.Option(False, "--json", help="One JSON array of balances."),
) -> None:
    """Top-ups, invoiced, estimated, the balance, the budget's used share and the runway at the last hour's burn."""
    from billing.balances import balance, balance_of_all
    from billing.tenants import check_tenant_id

    one = check_tenant_id(tenant) if tenant else None
    settings = load_settings()
    rules = read_rules(settings)
    with connect(settings) as database:
        found = [balance(database, rules, one)] if one else balance_of_all(database, rules)
    if as_json:
        import orjson

        sys.stdout.write(orjson.dumps([_json(b) for b in found], option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    from rich.table import Table

    table = Table("tenant", "top-ups", "invoiced", "estimated", "balance", "month to date", "budget", "used",
                  "burn/h", "runway h")
    for b in found:
        table.add_row(terminal_text(b.tenant), str(b.top_ups), str(b.invoiced), _estimated(b), str(b.balance),
                      str(b.month_to_date), _or_dash(b.budget), _percent(b.budget_used), str(b.burn_per_hour),
                      _or_dash(b.runway_hours))
    out.print(table)
    err.print(f"{len(found)} tenants; CNY with VAT; estimates are the invoices the run would build now")


@budget_app.command("set")
def budget_set(
    tenant: str = typer.Option(..., "--tenant", help="A registered tenant id."),
    amount: Optional[str] = typer.Option(None, "--amount", help="CNY per billing period, with VAT."),
    none: bool = typer.Option(False, "--none", help="Remove the tenant's budget."),
    note: str = typer.Option("", "--note", help="Why (at most 200 characters)."),
) -> None:
    """Set a tenant's monthly budget (--amount A) or remove it (--none); the latest setting wins."""
    from billing.balances import parse_amount, set_budget
    from billing.tenants import check_note, check_tenant_id

    if none == (amount is not None):
        raise GpubillError("give exactly one of --amount A and --none")
    checked = check_tenant_id(tenant), None if none else parse_amount(amount, "budget"), check_note(note)
    settings = load_settings()
    with connect(settings) as database, open_books(database, settings):
        budget = set_budget(database, checked[0], checked[1], note=checked[2])
    shown = "no budget" if budget.amount is None else f"a budget of {budget.amount} CNY per period"
    out.print(f"{terminal_text(budget.tenant)} has {shown}", highlight=False)


def _json(b) -> dict:
    money = lambda value: None if value is None else str(value)  # noqa: E731 — text: exact, never a float
    return {
        "tenant": b.tenant, "at": b.at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "period": b.period, "top_ups": money(b.top_ups), "invoiced": money(b.invoiced), "invoices": b.invoices,
        "estimates": [{"period": e.period, "total": money(e.total), "closed": e.closed} for e in b.estimates],
        "estimated": money(b.estimated), "balance": money(b.balance), "month_to_date": money(b.month_to_date),
        "budget": money(b.budget), "budget_used": money(b.budget_used), "burn_per_hour": money(b.burn_per_hour),
        "runway_hours": money(b.runway_hours), "currency": "CNY",
    }


def _estimated(b) -> str:
    closed = [e.period for e in b.estimates if e.closed]
    return str(b.estimated) + (f" (incl. closed {', '.join(closed)})" if closed else "")


def _runway_words(hours) -> str:
    """"runway 12.50 h", or why there is none ("no runway: nothing is being used" when nothing burns)."""
    return "no runway figure: nothing was used in the last hour" if hours is None else f"runway {hours} h"


def _or_dash(value) -> str:
    return "—" if value is None else str(value)


def _or_none(value) -> str | None:
    return None if value is None else str(value)


def _stream_spend(settings, tenant: str, period: str | None, as_json: bool) -> None:
    """`spend --stream`: the spend table's quantities for `tenant`, priced as invoice lines before credits."""
    import asyncio

    from billing_rules.spend import spend_invoice
    from schemas.topics import spend_changelog_topic, spend_topic
    from streams.kafka.logs import latest_values
    from streams.kafka.settings import client_options
    from streams.spend.tracker import table_totals

    rules = read_rules(settings)
    values = asyncio.run(latest_values(settings.kafka, spend_changelog_topic(settings.group), client_options(settings, client="aiokafka"),
                                       settings.partitions))
    periods = table_totals(values).get(tenant, {})
    shown = {}
    for one, quantities in sorted(periods.items()):
        if period is None or one == period:
            draft = spend_invoice(tenant, one, quantities, vat_rate=rules.vat_rate(one))
            shown[one] = {"lines": [{"kind": line.kind, "description": line.description, "quantity": str(line.quantity),
                                     "unit": line.unit, "unit_price": str(line.unit_price), "amount": str(line.amount)}
                                    for line in draft.lines],
                          "before_credits": str(draft.net), "subtotal": str(draft.subtotal),
                          "rented_seconds": sum(quantities.rent_s.values()),
                          "energy_mj": sum(quantities.energy_mj.values())}
    if as_json:
        import orjson

        sys.stdout.write(orjson.dumps({"tenant": tenant, "source": spend_topic(settings.group), "periods": shown},
                                      option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    if not shown:
        out.print(f"the stream holds no spend of {terminal_text(tenant)}{' in ' + period if period else ''}")
    for one, figures in shown.items():
        out.print(f"{terminal_text(tenant)} {one}, from the stream (before credits and VAT): {figures['before_credits']} CNY",
                  highlight=False)
        for line in figures["lines"]:
            out.print(f"  {line['kind']:<12} {line['quantity']:>16} {line['unit']:<9} × {line['unit_price']:>12} = "
                      f"{line['amount']:>12}  {terminal_text(line['description'])}", highlight=False)


def _percent(share) -> str:
    return "—" if share is None else f"{share * 100:.2f} %"


def spend(
    tenant: str = typer.Option(..., "--tenant", help="A registered tenant id."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object."),
    stream: bool = typer.Option(False, "--stream", help="What the stream's spend table holds for the tenant, per "
                                "period: the invoice lines of its exact quantities, before credits (read from Kafka)."),
    period: Optional[str] = typer.Option(None, "--period", help="With --stream: only this period (YYYY-MM)."),
) -> None:
    """A tenant's month to date: usage, charges, the estimated total with VAT, the balance and its runway."""
    from billing.balances import balance
    from billing.current_usage import current_usage
    from billing.live_spend import live_position
    from billing.tenants import check_tenant_id

    one = check_tenant_id(tenant)
    settings = load_settings()
    if stream:
        return _stream_spend(settings, one, check_period(period) if period else None, as_json)
    rules = read_rules(settings)
    with connect(settings) as database:
        figures = balance(database, rules, one)
        month = current_usage(database, rules, one, now=figures.at)
        live = live_position(database, one, now=figures.at)
    live_json = None if live is None else {
        "month_to_date": str(live.month_to_date), "balance": _or_none(live.balance),
        "runway_hours": _or_none(live.runway_hours), "as_of": live.as_of.isoformat(timespec="milliseconds")}
    if as_json:
        import orjson

        sys.stdout.write(orjson.dumps({**_json(figures), "gpu_hours": str(month.gpu_hours), "kwh": str(month.kwh),
                                       "rent": str(month.rent), "electricity": str(month.electricity),
                                       "credits": str(month.credits), "vat": str(month.vat),
                                       "month_invoiced": month.invoiced, "stream": live_json},
                                      option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    newest = (f"data up to {month.newest_data_at.isoformat(timespec='seconds')}" if month.newest_data_at
              else "no usage yet this period")
    state = f"invoiced ({terminal_text(month.invoice_number or '')})" if month.invoiced else "an estimate"
    out.print(f"{terminal_text(one)}, {month.period} to date ({state}; {newest}):", highlight=False)
    out.print(f"  {month.gpu_hours} GPU-hours, {month.kwh} kWh; rent {month.rent}, electricity {month.electricity}, "
              f"credits −{month.credits}, VAT {month.vat} → {month.estimated_total} CNY", highlight=False)
    budget = "no budget" if figures.budget is None else f"budget {figures.budget} CNY, {_percent(figures.budget_used)} used"
    out.print(f"  balance {figures.balance} CNY ({budget}); burn {figures.burn_per_hour} CNY/h over the last hour, "
              f"{_runway_words(figures.runway_hours)}", highlight=False)
    if live is not None:
        out.print(f"  the stream: {live.month_to_date} CNY to date, balance {_or_dash(live.balance)} CNY, "
                  f"{_runway_words(live.runway_hours)}, as of {live.as_of.isoformat(timespec='seconds')}", highlight=False)
    else:
        out.print("  the stream: no live figure in the last minute (is a worker running with GPUBILL_SPEND?)",
                  highlight=False)
