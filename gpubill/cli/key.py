"""`gpubill key create | list | revoke | audit`: API keys (tenant_api/keys.py) and the API's
access records (tenant_api/access_log.py).

`create` prints the key once, on stdout (with `--json`, only ``{"id": …, "key": …}``), and
says on stderr that it cannot be shown again: only a hash of its secret is stored. Every
option is checked before the database is opened; every value that came from outside (labels,
paths asked for, client addresses, reasons) is printed through terminal_text.
"""

from __future__ import annotations

import re
import sys
from datetime import UTC, date, datetime

import typer

from gpubill.cli.books import open_books
from gpubill.cli.common import connect, err, out, terminal_text
from gpubill.config import load_settings
from gpubill.errors import GpubillError

app = typer.Typer(help="API keys for the tenant API and web page, and who used them.", no_args_is_help=True)

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


@app.command("create")
def key_create(
    tenant: str = typer.Option("", "--tenant", help="The registered tenant the key reads (not with --role operator)."),
    role: str = typer.Option("tenant", "--role", help="tenant (reads its tenant only) or operator (reads any tenant)."),
    label: str = typer.Option("", "--label", help="What the key is for, in any script (at most 100 characters)."),
    expires: str = typer.Option("", "--expires", help="YYYY-MM-DD: the key works through the end of that day, UTC."),
    as_json: bool = typer.Option(False, "--json", help='Print only {"id": …, "key": …}.'),
) -> None:
    """Create a key and print it once: only a hash of its secret is kept."""
    from tenant_api.keys import OPERATOR, check_request, create_key

    day = _date("--expires", expires) if expires else None
    checked = check_request(tenant=tenant or None, role=role, label=label, expires=day)  # before opening anything
    settings = load_settings()
    with connect(settings) as database, open_books(database, settings):
        key, token = create_key(database, tenant=checked[0] or None, role=checked[1], label=checked[2], expires=day)
    if as_json:
        _print_json({"id": key.id, "key": token})
        return
    sys.stdout.write(token + "\n")
    whose = "operator key (reads every tenant)" if key.role == OPERATOR else f"key for tenant {key.tenant}"
    until = f"until {_iso(key.expires_at)}" if key.expires_at else "without expiry"
    err.print(f"created {whose} {key.id}, {until}" + (f", label {terminal_text(key.label)}" if key.label else ""),
              highlight=False)
    err.print("This is the only time the key is shown: store it now. Only a hash of it is kept; "
              f"a lost key is revoked (`gpubill key revoke {key.id}`) and replaced.", highlight=False)


@app.command("list")
def key_list(
    tenant: str = typer.Option("", "--tenant", help="Only this tenant's keys."),
    as_json: bool = typer.Option(False, "--json", help="JSON instead of a table."),
) -> None:
    """Every key with its tenant, role, label, expiry and state; never a secret."""
    from tenant_api.keys import list_keys
    from billing.tenants import check_tenant_id

    wanted = check_tenant_id(tenant) if tenant else None
    with connect(load_settings()) as database:
        keys = list_keys(database, tenant=wanted)
    now = datetime.now(UTC)
    if as_json:
        _print_json([{"id": k.id, "tenant": k.tenant, "role": k.role, "label": k.label,
                      "created_at": _iso(k.created_at), "expires_at": _iso(k.expires_at) or None,
                      "revoked_at": _iso(k.revoked_at) or None, "state": k.state(now)} for k in keys])
        return
    from rich.table import Table

    table = Table("id", "tenant", "role", "label", "created", "expires", "state")
    for k in keys:
        table.add_row(k.id, terminal_text(k.tenant) or "(any)", k.role, terminal_text(k.label, 60),
                      _iso(k.created_at), _iso(k.expires_at) or "never", k.state(now))
    out.print(table)
    err.print(f"{len(keys)} keys")


@app.command("revoke")
def key_revoke(key_id: str = typer.Argument(..., metavar="ID", help="The key's id (k_…), as `key list` shows.")) -> None:
    """Revoke a key: from now on it is refused. Revoking it again changes nothing."""
    from tenant_api.keys import check_key_id, find_key, revoke_key

    key_id = check_key_id(key_id)
    settings = load_settings()
    with connect(settings) as database, open_books(database, settings):
        before = find_key(database, key_id)
        key = revoke_key(database, key_id)
    whose = "operator key" if not key.tenant else f"key of tenant {key.tenant}"
    if before is not None and before.revoked_at is not None:
        out.print(f"{key.id} ({whose}) was already revoked at {_iso(key.revoked_at)}; nothing changed", highlight=False)
    else:
        out.print(f"revoked {key.id} ({whose}) at {_iso(key.revoked_at)}", highlight=False)


@app.command("audit")
def key_audit(
    tenant: str = typer.Option("", "--tenant", help="Only requests for this tenant's data."),
    key: str = typer.Option("", "--key", help="Only requests made with this key id."),
    since: str = typer.Option("", "--since", help="YYYY-MM-DD: only from the start of that day, UTC."),
    limit: int = typer.Option(100, "--limit", help="At most this many records, newest first (1 to 10000)."),
    as_json: bool = typer.Option(False, "--json", help="JSON instead of a table."),
) -> None:
    """The API's access records, newest first: downloads and refused requests."""
    from tenant_api.access_log import MAX_LIMIT, access_log
    from tenant_api.keys import check_key_id
    from billing.tenants import check_tenant_id

    wanted_tenant = check_tenant_id(tenant) if tenant else None
    wanted_key = check_key_id(key) if key else None
    day = _date("--since", since) if since else None
    if not 1 <= limit <= MAX_LIMIT:
        raise GpubillError(f"--limit: {limit} is not from 1 to {MAX_LIMIT}")
    start = datetime(day.year, day.month, day.day, tzinfo=UTC) if day else None
    with connect(load_settings()) as database:
        records = access_log(database, tenant=wanted_tenant, key_id=wanted_key, since=start, limit=limit)
    if as_json:
        _print_json([{"time": _iso(r.time), "key_id": r.key_id, "tenant": r.tenant, "method": r.method,
                      "what": r.what, "period": r.period, "format": r.fmt, "bytes": r.bytes, "status": r.status,
                      "client": r.client, "reason": r.reason} for r in records])
        return
    from rich.table import Table

    table = Table("time", "key", "tenant", "request", "period", "format", "bytes", "status", "client", "reason")
    for r in records:
        table.add_row(_iso(r.time), terminal_text(r.key_id) or "-", terminal_text(r.tenant) or "-",
                      f"{terminal_text(r.method)} {terminal_text(r.what, 80)}", terminal_text(r.period) or "-",
                      terminal_text(r.fmt) or "-", str(r.bytes), str(r.status), terminal_text(r.client, 60),
                      terminal_text(r.reason, 80))
    out.print(table)
    err.print(f"{len(records)} records, newest first" + (f" (the newest {limit}; --limit shows more)"
                                                          if len(records) == limit else ""))


def _date(option: str, value: str) -> date:
    """`value` as a date, or a one-line error naming `option`."""
    try:
        if _DATE.fullmatch(value):
            return date.fromisoformat(value)
    except ValueError:
        pass
    raise GpubillError(f"{option}: {value[:40]!a} is not a date like 2027-01-31")


def _print_json(value: object) -> None:
    import orjson

    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


def _iso(moment: datetime | None) -> str:
    if moment is None:
        return ""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
