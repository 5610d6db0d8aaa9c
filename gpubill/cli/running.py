"""What runs: `gpubill status`, and the parts of `gpubill up` that say so — its one-instance
check and its start banner.

The facts come from where they live: the broker answers a probe or not
(gpubill/devenv/kafka_probe.py); who holds the embedded database and whether it serves it is
the record beside the database (warehouse/served.py, written by `up` and `clickhouse serve`);
the worker's lag is its consumer group's committed offsets against the readings topics' ends;
the last invoice run and the drafts waiting are in the database, read through the server that
holds it (or opened directly when nothing holds it).

The finance user's URL carries its password: `status` shows it masked, and prints it whole
only when asked (`--finance-url`). Only the owner can: it is read from the record, which is
mode 0600 (the same secret as the gateway's credentials file).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import typer

from gpubill.cli.common import count, out, terminal_text
from gpubill.config import Settings, load_settings
from gpubill.errors import GpubillError
from schemas.topics import TOPIC_BOOKS


def database_path(settings: Settings) -> Path | None:
    """The embedded database's directory, or None for a server DSN."""
    from warehouse.connection import normalize_dsn

    dsn = normalize_dsn(settings.clickhouse)
    return Path(dsn[len("chdb://"):]) if dsn.startswith("chdb:") else None


def refuse_second_up(settings: Settings) -> None:
    """A one-line refusal when a `gpubill up` already holds this database (before any port is bound)."""
    from warehouse import served

    path = database_path(settings)
    if path is None:
        return
    _held, record, _ignored = served.current(path)
    if record is not None and record.command == UP_COMMAND:
        raise GpubillError(f"gpubill up is already running (pid {record.pid})"
                           + (f", serving its database on {plain_url(record.dsn)}" if record.serving else ""))


UP_COMMAND = "gpubill up"


def plain_url(dsn: str) -> str:
    """http://user:password@host:port/ → http://host:port/ (where, not who)."""
    parts = urlsplit(dsn)
    host = f"[{parts.hostname}]" if parts.hostname and ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}:{parts.port}{parts.path or '/'}"


def banner(*, pid: int, parts: list[str], api_url: str | None, gateway_url: str | None, finance_dsn: str | None,
           metrics_port: int, metrics_host: str, settings: Settings, log_file: Path | None) -> str:
    """`up`'s start banner on a terminal: what runs and where to reach it, a few lines."""
    from warehouse.connection import redact

    rows = []
    if api_url:
        rows.append(("tenant API, web page", f"{api_url}/  (keys: gpubill key create)"))
    if gateway_url:
        rows.append(("database", f"{gateway_url}  (other gpubill commands go through it by themselves)"))
        rows.append(("finance tools", f"{redact(finance_dsn or '')}  (with its password: gpubill status --finance-url)"))
    elif database_path(settings) is not None:
        rows.append(("database", "held by this process only (GPUBILL_GATEWAY_PORT=0)"))
    if metrics_port:
        rows.append(("metrics", f"http://{metrics_host}:{metrics_port}/metrics"))
    rows.append(("Kafka", f"{settings.kafka}, consumer group {settings.group}"))
    if log_file is not None:
        rows.append(("logs", f"{log_file} (JSON lines); warnings and errors here too"))
    width = max(len(name) for name, _ in rows)
    lines = [f"gpubill up (pid {pid}): {', '.join(parts)}. Ctrl-C stops it; `gpubill status` says what runs."]
    lines += [f"  {name:<{width}}  {value}" for name, value in rows]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------- gpubill status


def broker_state(settings: Settings, timeout_s: float = 2.0) -> dict[str, Any]:
    """Whether a broker of GPUBILL_KAFKA answers (a probe, no client: never a hang)."""
    from gpubill.devenv.kafka_probe import probe_kafka, split_bootstrap

    sasl = settings.kafka_security_protocol.upper().startswith("SASL")
    tls = "SSL" in settings.kafka_security_protocol.upper()
    reachable = None if tls else any(probe_kafka(host, port, timeout_s, before_auth=sasl)
                                     for host, port in split_bootstrap(settings.kafka))
    return {"bootstrap": settings.kafka, "reachable": reachable}


def worker_lag(settings: Settings) -> dict[str, Any]:
    """The rating group's lag on the readings topics: readings on them it has not committed."""
    from schemas.topics import TOPIC_POWER, TOPIC_USAGE
    from streams.errors import KafkaUnreachable
    from streams.kafka.admin import group_offsets

    try:
        offsets = group_offsets(settings, (TOPIC_USAGE, TOPIC_POWER))
    except KafkaUnreachable as exc:
        return {"group": settings.group, "lag": None, "partitions": None, "error": str(exc).splitlines()[0]}
    lag = sum(max(0, end - committed) for committed, end in offsets.values())
    return {"group": settings.group, "lag": lag, "partitions": len(offsets)}


def database_state(settings: Settings) -> tuple[dict[str, Any], dict[str, Any] | None, str]:
    """(the database's entry, `up`'s entry or None, the DSN to read the figures through — '' when
    they cannot be read now). The DSNs in the entries are masked."""
    from warehouse import served
    from warehouse.connection import normalize_dsn, redact

    dsn = normalize_dsn(settings.clickhouse)
    path = database_path(settings)
    if path is None:
        return {"dsn": redact(dsn), "embedded": False}, None, dsn
    held, record, ignored = served.current(path)
    entry: dict[str, Any] = {"dsn": dsn, "embedded": True, "exists": path.exists(), "held_by": None,
                             "served_on": None, "finance_url": None}
    if ignored:
        entry["record_ignored"] = ignored
    up = None
    if held is not None:
        entry["held_by"] = {"pid": (record.pid if record else held.pid) or None,
                            "command": record.command if record else held.command}
    if record is not None:
        if record.serving:
            entry["served_on"] = plain_url(record.dsn)
            entry["finance_url"] = redact(record.finance_dsn)
        if record.command == UP_COMMAND:
            up = {"pid": record.pid, "since": record.started}
    if held is None:
        through = dsn if path.exists() else ""  # nothing holds it: opened here, for a moment
    else:
        through = record.dsn if record is not None and record.serving else ""
    return entry, up, through


def database_figures(dsn: str) -> dict[str, Any]:
    """The last invoice run and the drafts waiting, read through `dsn`."""
    from warehouse.connection import open_database

    with open_database(dsn, migrate=False, wait_s=0) as database:
        runs = database.query("SELECT period, completed_at, invoices FROM billing_runs FINAL "
                              "ORDER BY completed_at DESC, period DESC LIMIT 1")
        drafts = database.query("SELECT count() FROM invoices FINAL WHERE status = 'draft'")[0][0]
        books = database.query("SELECT next_offset, halted FROM books_positions FINAL WHERE topic = {t:String}",
                               {"t": TOPIC_BOOKS})
    last = None
    if runs:
        period, completed_at, invoices = runs[0]
        last = {"period": str(period), "completed_at": completed_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "invoices": int(invoices)}
    projected = {"projected_to": int(books[0][0]), "halted": books[0][1]} if books else {"projected_to": 0, "halted": ""}
    return {"last_invoice_run": last, "drafts_waiting": int(drafts), "books": projected}


def gather(settings: Settings) -> dict[str, Any]:
    """Everything `gpubill status` says, as one dict (what `--json` prints)."""
    from warehouse.errors import WarehouseError

    broker = broker_state(settings)
    database, up, through = database_state(settings)
    report: dict[str, Any] = {"broker": broker, "up": {"running": up is not None, **(up or {})}, "database": database,
                              "worker": worker_lag(settings) if broker["reachable"] is not False else None,
                              "last_invoice_run": None, "drafts_waiting": None}
    if through:
        try:
            report.update(database_figures(through))
        except WarehouseError as exc:
            report["database"]["error"] = str(exc).splitlines()[0]
    return report


def status(
    as_json: bool = typer.Option(False, "--json", help="One JSON object (the finance URL masked)."),
    finance_url: bool = typer.Option(False, "--finance-url", help="Print only the finance user's URL, password "
                                     "included, for a BI tool (read from the served database's 0600 record)."),
) -> None:
    """What runs: the broker, `gpubill up` and its pid, the database and its URL for finance tools,
    the worker's lag, the last invoice run and the drafts waiting."""
    settings = load_settings()
    if finance_url:
        out.print(_finance_url(settings), markup=False, highlight=False, soft_wrap=True)
        return
    report = gather(settings)
    if as_json:
        import orjson

        sys.stdout.write(orjson.dumps(report).decode() + "\n")
        return
    for name, value in _lines(report):
        out.print(f"{name:<17} {terminal_text(value)}", highlight=False, soft_wrap=True)


def _finance_url(settings: Settings) -> str:
    from warehouse import served

    path = database_path(settings)
    if path is None:
        raise GpubillError("GPUBILL_CLICKHOUSE names a ClickHouse server: finance tools connect to it with their own user")
    _held, record, ignored = served.current(path)
    if record is None or not record.serving:
        raise GpubillError(f"no process serves {path}" + (f" ({ignored})" if ignored else "")
                           + ": start `gpubill up` (or `gpubill clickhouse serve`)")
    return record.finance_dsn


def _lines(report: dict[str, Any]) -> list[tuple[str, str]]:
    """The human form of `gather`'s report: (label, text) rows."""
    broker, database, up = report["broker"], report["database"], report["up"]
    answers = {True: "reachable", False: "NOT reachable", None: "not probed (TLS)"}[broker["reachable"]]
    rows = [("broker", f"{broker['bootstrap']} {answers}")]
    rows.append(("gpubill up", f"running, pid {up['pid']} (since {up.get('since') or '?'})" if up["running"]
                 else "not running"))
    if not database["embedded"]:
        rows.append(("database", f"{database['dsn']} (a ClickHouse server)"))
    else:
        held = database["held_by"]
        where = database["dsn"]
        if database["served_on"]:
            rows.append(("database", f"{where}, served on {database['served_on']} by pid {held['pid']} "
                                     f"({held['command']}); every gpubill command goes through it"))
            rows.append(("finance URL", f"{database['finance_url']} (with its password: gpubill status --finance-url)"))
        elif held is not None:
            rows.append(("database", f"{where}, held by pid {held['pid'] or '?'} ({held['command'] or '?'}), not "
                                     "served: other commands wait for it"))
        else:
            rows.append(("database", f"{where}, " + ("not open (each command opens it in turn)" if database["exists"]
                                                   else "not created yet")))
        if database.get("record_ignored"):
            rows.append(("", f"record ignored: {database['record_ignored']}"))
    if database.get("error"):
        rows.append(("", f"could not read it: {database['error']}"))
    worker = report["worker"]
    if worker is None:
        rows.append(("worker lag", "unknown (the broker does not answer)"))
    elif worker["lag"] is None:
        rows.append(("worker lag", f"unknown: {worker.get('error', '')}"))
    elif not worker["partitions"]:
        rows.append(("worker lag", "no readings topics yet"))
    else:
        rows.append(("worker lag", f"{count(worker['lag'], 'reading')} behind on {count(worker['partitions'], 'partition')}"
                                   f" (group {worker['group']})"))
    run = report["last_invoice_run"]
    if run is not None:
        rows.append(("last invoice run", f"{run['period']}, {run['completed_at']}: {count(run['invoices'], 'invoice')}"))
    elif report["drafts_waiting"] is not None:
        rows.append(("last invoice run", "none yet"))
    if report["drafts_waiting"] is not None:
        rows.append(("drafts waiting", str(report["drafts_waiting"])))
    books = report.get("books")
    if books is not None:  # issue 37: how far this database has taken the books on the log
        rows.append(("books", f"{TOPIC_BOOKS} projected to offset {books['projected_to']:,}"
                              + (f"; HALTED: {books['halted']}" if books["halted"] else "")))
    return rows

