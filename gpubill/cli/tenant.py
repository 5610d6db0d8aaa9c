"""`gpubill tenant add | update | list | suspend | resume | unknown`: the tenant registry (billing/tenants.py).

Only a registered, active tenant receives the trial credit; readings of any well-formed id
are rated and invoiced either way. `unknown` lists the ids with usage that are not
registered, so the operator can register them before the month's invoice run. The registry
also names the buyer on a tenant's invoices (legal name, tax id, address, e-mail): given
with `add`, changed with `update`.
"""

from __future__ import annotations

import sys
from datetime import UTC
from fractions import Fraction

import typer

from gpubill.cli.books import open_books
from gpubill.cli.common import check_format, check_period, connect, err, out, read_rules, terminal_text
from gpubill.config import load_settings
from gpubill.errors import GpubillError

app = typer.Typer(help="The tenant registry: who receives the trial credit.", no_args_is_help=True)


_LEGAL_NAME_HELP = "The buyer's legal name on invoices, in any script (at most 200 characters)."
_TAX_ID_HELP = ("The buyer's tax id: A-Z, 0-9 and '-', 4-40 characters, upper case; "
                "a 统一社会信用代码 must pass its check character.")
_ADDRESS_HELP = "The buyer's address on invoices, one line, in any script (at most 300 characters)."
_EMAIL_HELP = "The buyer's e-mail for invoices: one address, local@domain.tld."


@app.command("add")
def tenant_add(
    tenant: str = typer.Argument(..., metavar="ID", help="Tenant id as readings carry it (letters, digits, . _ -)."),
    name: str = typer.Option(..., "--name", help="Display name, in any script (at most 100 characters)."),
    note: str = typer.Option("", "--note", help="Why: who asked, a ticket (at most 200 characters)."),
    legal_name: str = typer.Option("", "--legal-name", help=_LEGAL_NAME_HELP),
    tax_id: str = typer.Option("", "--tax-id", help=_TAX_ID_HELP),
    address: str = typer.Option("", "--address", help=_ADDRESS_HELP),
    email: str = typer.Option("", "--email", help=_EMAIL_HELP),
) -> None:
    """Register a tenant as active. Re-adding it as it is changes nothing; under another name, or with another
    legal name, tax id, address or e-mail, is an error (`tenant update` changes a tenant)."""
    from billing.tenants import add_tenant, check_buyer, check_display_name, check_note, check_tenant_id

    # Every value checked before opening anything.
    checked = check_tenant_id(tenant), check_display_name(name), check_note(note)
    buyer = check_buyer(legal_name=legal_name, tax_id=tax_id, address=address, email=email)
    settings = load_settings()
    with connect(settings) as database, open_books(database, settings):
        registered, added = add_tenant(database, *checked[:2], note=checked[2], **buyer)
    if added:
        out.print(f"registered {registered.tenant} ({terminal_text(registered.display_name)}): active", highlight=False)
    else:
        out.print(f"{registered.tenant} is already registered as {terminal_text(registered.display_name)} "
                  f"({registered.status}); nothing changed", highlight=False)


@app.command("update")
def tenant_update(
    tenant: str = typer.Argument(..., metavar="ID"),
    name: str | None = typer.Option(None, "--name", help="A new display name (at most 100 characters)."),
    legal_name: str | None = typer.Option(None, "--legal-name", help=_LEGAL_NAME_HELP + " '' clears it."),
    tax_id: str | None = typer.Option(None, "--tax-id", help=_TAX_ID_HELP + " '' clears it."),
    address: str | None = typer.Option(None, "--address", help=_ADDRESS_HELP + " '' clears it."),
    email: str | None = typer.Option(None, "--email", help=_EMAIL_HELP + " '' clears it."),
    note: str = typer.Option("", "--note", help="Why (replaces the last note)."),
) -> None:
    """Change a registered tenant's display name or buyer fields; what is not given stays. Nothing is deleted:
    the registry keeps every earlier row."""
    from billing.tenants import (
        changed_fields, check_buyer, check_display_name, check_note, check_tenant_id, find_tenant, update_tenant)

    if all(value is None for value in (name, legal_name, tax_id, address, email)):
        raise GpubillError("nothing to update: give --name, --legal-name, --tax-id, --address or --email")
    # Every value checked before opening anything.
    tenant, note = check_tenant_id(tenant), check_note(note)
    buyer = check_buyer(legal_name=legal_name, tax_id=tax_id, address=address, email=email)
    display_name = None if name is None else check_display_name(name)
    settings = load_settings()
    with connect(settings) as database, open_books(database, settings):
        before = find_tenant(database, tenant)
        # NotFound when `before` is None: update_tenant says so.
        after, changed = update_tenant(database, tenant, display_name=display_name, note=note, **buyer)
    if changed:
        out.print(f"updated {after.tenant} ({terminal_text(after.display_name)}): "
                  f"{', '.join(changed_fields(before, after))}", highlight=False)
    else:
        out.print(f"{after.tenant} is already so; nothing changed", highlight=False)


@app.command("list")
def tenant_list(
    fmt: str = typer.Option("table", "--format", help="table or json."),
    status: str = typer.Option("", "--status", help="Only active or suspended tenants."),
) -> None:
    """Every registered tenant, by id."""
    from billing.tenants import STATUSES, list_tenants

    check_format(fmt, "table", "json")
    if status and status not in STATUSES:
        raise GpubillError(f"--status: {status[:40]!a} is not one of {', '.join(STATUSES)}")
    with connect(load_settings()) as database:
        tenants = list_tenants(database, status=status or None)
    if fmt == "json":
        _print_json([{"tenant": t.tenant, "display_name": t.display_name, "status": t.status,
                      "created_at": _iso(t.created_at), "updated_at": _iso(t.updated_at), "note": t.note,
                      "legal_name": t.legal_name, "tax_id": t.tax_id, "address": t.address, "email": t.email}
                     for t in tenants])
        return
    from rich.table import Table

    table = Table("tenant", "display name", "legal name", "tax id", "status", "registered", "changed", "note")
    for t in tenants:
        table.add_row(t.tenant, terminal_text(t.display_name), terminal_text(t.legal_name, 40),
                      terminal_text(t.tax_id), t.status, _iso(t.created_at), _iso(t.updated_at),
                      terminal_text(t.note, 60))
    out.print(table)
    err.print(f"{len(tenants)} tenants")


def _change_status(tenant: str, status: str, note: str) -> None:
    from billing.tenants import check_note, check_tenant_id, set_status

    checked = check_tenant_id(tenant), check_note(note)
    settings = load_settings()
    with connect(settings) as database, open_books(database, settings):
        changed, did = set_status(database, checked[0], status, note=checked[1])
    out.print(f"{changed.tenant} is {changed.status}" + ("" if did else " already; nothing changed"))


@app.command("suspend")
def tenant_suspend(
    tenant: str = typer.Argument(..., metavar="ID"),
    note: str = typer.Option("", "--note", help="Why (replaces the last note)."),
) -> None:
    """Suspend a tenant: still rated and invoiced in full, without the trial credit while suspended."""
    from billing.tenants import SUSPENDED

    _change_status(tenant, SUSPENDED, note)


@app.command("resume")
def tenant_resume(
    tenant: str = typer.Argument(..., metavar="ID"),
    note: str = typer.Option("", "--note", help="Why (replaces the last note)."),
) -> None:
    """Make a suspended tenant active again (what it had left of the trial credit is usable again)."""
    from billing.tenants import ACTIVE

    _change_status(tenant, ACTIVE, note)


@app.command("unknown")
def tenant_unknown(
    period: str = typer.Option(..., help="Billing period YYYY-MM."),
    fmt: str = typer.Option("table", "--format", help="table or json."),
) -> None:
    """Tenant ids with rated usage in the period that are not registered (no trial credit), most charges first."""
    from billing_rules import MJ_PER_KWH, format_quantity, gpu_hours
    from billing.tenants import unregistered_usage

    check_format(fmt, "table", "json")
    check_period(period)
    settings = load_settings()
    rules = read_rules(settings)
    with connect(settings) as database:
        found = unregistered_usage(database, rules, period)
    listed = [u for u in found if u.well_formed]
    malformed = len(found) - len(listed)
    if fmt == "json":
        _print_json([{"tenant": u.tenant, "rented_gpu_seconds": u.rented_seconds, "energy_mj": u.energy_mj,
                      "charges_cny": str(u.charges)} for u in listed])
    else:
        from rich.table import Table

        table = Table("tenant", "GPU-seconds", "GPU-hours", "energy kWh", "charges CNY (before credit, VAT)")
        for u in listed:
            table.add_row(u.tenant, str(u.rented_seconds), format_quantity(gpu_hours(u.rented_seconds)),
                          format_quantity(Fraction(u.energy_mj, MJ_PER_KWH)), str(u.charges))
        out.print(table)
        err.print(f"{len(listed)} unregistered tenants with usage in {period}; register with "
                  "`gpubill tenant add ID --name NAME` before the invoice run")
    if malformed:
        err.print(f"{malformed} more ids with usage are outside the id syntax and cannot be registered "
                  "(rated before ids were checked)")


def _print_json(rows: list[dict]) -> None:
    import orjson

    sys.stdout.write(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode() + "\n")


def _iso(moment) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
