"""`gpubill events deliver | deliveries`: billing events (gpu.billing-events.v1) to a webhook,
and the record of every attempt (streams/webhooks.py, billing/webhook_deliveries.py,
docs/balances.md "Webhooks").

The webhook's secret is read from GPUBILL_WEBHOOK_SECRET only — an option would show it in
`ps` and in shell histories.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

import typer

from gpubill.cli.common import connect, err, out, terminal_text
from gpubill.config import load_settings
from gpubill.logs import setup_logging

app = typer.Typer(help="Billing events: deliver them to a webhook, and list the deliveries.", no_args_is_help=True)

SECRET_VARIABLE = "GPUBILL_WEBHOOK_SECRET"


@app.command("deliver")
def events_deliver(
    url: str = typer.Option("", "--url", envvar="GPUBILL_WEBHOOK_URL", show_envvar=True,
                            help="The receiver: http:// or https://. Redirects are not followed."),
    max_attempts: int = typer.Option(8, "--max-attempts", min=1, max=100,
                                     help="Attempts per event (waiting 1, 2, 4 … 60 s between) before giving up."),
    drain: bool = typer.Option(False, "--drain", help="Deliver what is on the topic now, then exit 0."),
) -> None:
    """POST each billing event, signed (Gpubill-Signature), to --url; every attempt is recorded.
    The secret is GPUBILL_WEBHOOK_SECRET. At least once: receivers deduplicate on Gpubill-Event-Id."""
    import asyncio

    from billing.webhook_deliveries import record_attempts
    from schemas.topics import TOPIC_BILLING_EVENTS
    from schemas.webhooks import shown_url
    from streams.kafka.admin import ensure_topics
    from streams.kafka.settings import client_options
    from streams.webhooks import WebhookTarget, group_of, run_deliverer

    target = WebhookTarget(url, os.environ.get(SECRET_VARIABLE, ""), max_attempts)  # checked before anything opens
    settings = load_settings()
    setup_logging("WARNING" if drain else "INFO")
    ensure_topics(settings.kafka, {TOPIC_BILLING_EVENTS: settings.partitions},
                  options=client_options(settings, client="kafka-python"))
    with connect(settings) as database:
        if not drain:
            err.print(f"delivering {TOPIC_BILLING_EVENTS} to {terminal_text(shown_url(target.url))} "
                      f"(group {terminal_text(group_of(settings))})", highlight=False)
        done = asyncio.run(run_deliverer(settings, target, lambda attempt: record_attempts(database, [attempt]),
                                         drain=drain))
    out.print(f"{done.delivered} events delivered, {done.gave_up} given up", highlight=False)


@app.command("deliveries")
def events_deliveries(
    tenant: str = typer.Option("", "--tenant", help="Only this tenant's events."),
    event_id: str = typer.Option("", "--event-id", help="Only this event (be_…)."),
    failed: bool = typer.Option(False, "--failed", help="Only attempts that did not deliver (failed, gave_up)."),
    limit: int = typer.Option(100, "--limit", help="At most this many attempts (1 to 10000)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON array of attempts."),
) -> None:
    """Webhook delivery attempts, newest first: event, tenant, attempt, status, HTTP status, error."""
    from billing.tenants import check_tenant_id
    from billing.webhook_deliveries import deliveries

    one = check_tenant_id(tenant) if tenant else None  # checked before opening anything
    with connect(load_settings()) as database:
        found = deliveries(database, tenant=one, event_id=event_id or None, failed=failed, limit=limit)
    if as_json:
        import orjson

        sys.stdout.write(orjson.dumps([_json(a) for a in found], option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    from rich.table import Table

    table = Table("attempted at (UTC)", "event", "tenant", "kind", "#", "status", "HTTP", "ms", "error")
    for a in found:
        table.add_row(a.attempted_at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3], terminal_text(a.event_id),
                      terminal_text(a.tenant), terminal_text(a.kind), str(a.attempt), a.status,
                      _or_dash(a.http_status), str(a.duration_ms), terminal_text(a.error))
    out.print(table)
    err.print(f"{len(found)} attempts, newest first", highlight=False)


def _json(a) -> dict:
    return {"event_id": a.event_id, "tenant": a.tenant, "kind": a.kind, "url": a.url, "attempt": a.attempt,
            "status": a.status, "http_status": a.http_status, "error": a.error, "duration_ms": a.duration_ms,
            "attempted_at": a.attempted_at.isoformat(timespec="milliseconds").replace("+00:00", "Z")}


def _or_dash(value: Optional[int]) -> str:
    return "—" if value is None else str(value)
