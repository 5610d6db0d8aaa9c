"""`gpubill dunning run [--dry-run [--as-of D]] [--json]`: one dunning pass by hand (billing/dunning.py, issue 38).

The scheduler's hourly job does the same (billing/scheduler.py); by hand it says what it sent.
A pass reads the invoices' states as of today (billing time zone) and the notices already on
the books, produces each due notice's billing event to gpu.billing-events.v1, then records it
on the books. `--dry-run` only reads: it opens neither the books nor Kafka; with `--as-of D` it shows what
would be due on another date, given the notices sent so far.
"""

from __future__ import annotations

import sys
from datetime import date

import typer

from gpubill.cli.books import open_books
from gpubill.cli.common import connect, out, read_rules, terminal_text
from gpubill.config import load_settings
from gpubill.errors import GpubillError

app = typer.Typer(help="Dunning: billing events for invoices unpaid past their due date (billing.toml's dunning "
                       "table).", no_args_is_help=True)


def _events_producer(settings):
    """The producer of billing events (streams/kafka/billing_events.py); unit tests put a fake here."""
    from streams.kafka.billing_events import EventsProducer

    return EventsProducer(settings)


def _as_of(text: str, dry_run: bool) -> date:
    """--as-of as a date; refused in one line without --dry-run or when it is not YYYY-MM-DD."""
    if not dry_run:
        raise GpubillError("--as-of is for a dry run only (notices are sent as of today): add --dry-run")
    try:
        if len(text) != 10 or not text.isascii():
            raise ValueError(text)
        return date.fromisoformat(text)
    except ValueError:
        raise GpubillError(f"--as-of {ascii(text[:40])} is not a date YYYY-MM-DD") from None


@app.command("run")
def dunning_run(
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the notices due; send and record nothing."),
    as_of: str = typer.Option("", "--as-of", help="With --dry-run: the notices that would be due on this date "
                                                   "(YYYY-MM-DD, billing time zone), given what is sent now."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object: as_of, sent, notices (with event_id)."),
) -> None:
    """Send the dunning notices due now (invoice_overdue, suspend_new_rentals), each once, and print them."""
    from billing.dunning import due, run_dunning

    on = _as_of(as_of, dry_run) if as_of else None  # checked before anything opens
    settings = load_settings()
    rules = read_rules(settings)
    with connect(settings) as database:
        if dry_run or rules.dunning is None:
            report = run_dunning(database, rules, None, dry_run=True, as_of=on)
        else:
            _, notices = due(database, rules)
            if not notices:  # nothing to send: neither the books nor Kafka are opened
                report = run_dunning(database, rules, None, dry_run=True)
            else:
                with open_books(database, settings, rules=rules), _events_producer(settings) as producer:
                    report = run_dunning(database, rules, producer.send)
    if as_json:
        import orjson

        document = {"as_of": report.as_of.isoformat(), "enabled": report.enabled, "sent": report.sent,
                    "notices": [{"kind": n.kind, "invoice": n.invoice, "tenant": n.tenant, "period": n.period,
                                 "days": n.days, "days_past_due": n.days_past_due, "due_date": n.due_on.isoformat(),
                                 "outstanding": f"{n.outstanding:.2f}", "event_id": event_id}
                                for n, event_id in zip(report.notices, report.event_ids)]}
        sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    if not report.enabled:
        out.print("dunning is off: billing.toml has no \\[dunning] table; nothing sent", highlight=False)
        return
    verb = "due" if dry_run else "sent"
    for notice in report.notices:
        out.print(f"{verb} {notice.kind} {notice.days} for {terminal_text(notice.invoice)} "
                  f"({terminal_text(notice.tenant)}, due {notice.due_on}, {notice.days_past_due} days past due, "
                  f"{notice.outstanding:.2f} CNY outstanding)", highlight=False)
    count = len(report.notices)
    summary = f"{count} notice{'s' if count != 1 else ''} {verb} as of {report.as_of}"
    out.print(summary + (" (dry run: nothing sent)" if dry_run else ""), highlight=False)
