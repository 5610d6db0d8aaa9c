"""Dunning (issue 38, item 7): the notices unpaid invoices call for, sent as billing events, each once.

    due(db, rules, now=None, as_of=None) -> (as_of, [Notice])   reads only: what a pass would send
    send_notices(db, notices, send, now=None) -> [DunningNoticeRow]   produced, then recorded on the books
    run_dunning(db, rules, send, now=None, dry_run=False, as_of=None) -> DunningPass
    sent_notices(db) -> {(invoice, kind, days)}

Which notices are due is billing_rules/dunning.py's (pure: the policy of billing.toml's
`[dunning]`, the states of the invoices as of today in the billing time zone, the notices
already sent). This module reads those and sends. A pass:

1. reads every invoice's state as of today (billing.accounts.ledger) and the notices on the
   books (dunning_notices), and asks billing.balances.has_top_ups whether a tenant with an
   invoice at the suspension day is prepaid;
2. produces each due notice's billing event to gpu.billing-events.v1 (`send`: returns once
   the broker acknowledged every one; the shell's producer, streams/kafka/billing_events.py);
3. only then records each notice on the books, one DunningNoticeSent fact each (the books
   must be open: billing/books.py).

At least once: a pass that dies between 2 and 3, or whose step 3 fails, produces those events
again at its next pass — with the same event_id, which depends on (kind, tenant, period,
days, invoice) only; consumers and webhook receivers deduplicate on it. Never "at most
once": a notice is recorded only once its event is on the topic, so none is lost. Two passes
at once (the scheduler's and `gpubill dunning run` by hand) may likewise both produce an
event; its notice is one row either way (dunning_notices is replaced by (invoice, kind, days)).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from billing import books
from billing.accounts import ledger, today
from billing.balances import has_top_ups
from billing_rules.dunning import Notice, due_notices
from schemas.billing_events import BillingEvent, observed
from schemas.books import DunningNoticeRow, DunningNoticeSent

__all__ = ["DunningPass", "due", "run_dunning", "send_notices", "sent_notices"]

Send = Callable[[list[BillingEvent]], None]  # returns once the broker acknowledged every event


@dataclass(frozen=True)
class DunningPass:
    """What one pass found due and, unless a dry run, sent; `enabled` False when billing.toml has no [dunning]."""

    as_of: date  # today in the billing time zone
    notices: tuple[Notice, ...]
    event_ids: tuple[str, ...]  # of each notice, in the same order
    sent: bool  # produced and recorded (False: a dry run, or nothing due)
    enabled: bool = True


def sent_notices(db: Any) -> set[tuple[str, str, int]]:
    """(invoice, kind, days) of every notice on the books."""
    return {(invoice, kind, int(days)) for invoice, kind, days in
            db.query("SELECT invoice, kind, days FROM dunning_notices FINAL")}


def due(db: Any, rules: Any, now: datetime | None = None, *, as_of: date | None = None) -> tuple[date, list[Notice]]:
    """(today in the billing time zone — or `as_of` —, the notices due then and not yet sent); [] when the
    rules have no [dunning]."""
    as_of = as_of or today(rules, now)
    policy = rules.dunning
    if policy is None:
        return as_of, []
    books_now = ledger(db, rules)
    return as_of, due_notices(books_now.invoices, books_now.states(as_of), policy, sent_notices(db),
                              lambda tenant: has_top_ups(db, tenant))


def send_notices(db: Any, notices: Sequence[Notice], send: Send, now: datetime | None = None) -> list[DunningNoticeRow]:
    """Produce the notices' events (`send`, acknowledged), then record each on the books; see the
    module docstring for what a failure between the two does."""
    if not notices:
        return []
    at = now or datetime.now(UTC)
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    events = [notice.event(observed(at)) for notice in notices]
    send(events)  # 1. on the topic, every replica (acks=all): from here the event exists
    rows = []
    for notice, event in zip(notices, events):  # 2. on the books: not due again. One fact per
        # record: a notice is independent of the others, and facts that take no number are appended one at a time
        row = DunningNoticeRow(invoice=notice.invoice, tenant=notice.tenant, kind=notice.kind, days=notice.days,
                               event_id=event.event_id, due_on=notice.due_on, sent_at=at)
        books.record(db, DunningNoticeSent(kind="dunning_notice", notice=row))
        rows.append(row)
    return rows


def run_dunning(db: Any, rules: Any, send: Send | None, *, now: datetime | None = None, dry_run: bool = False,
                as_of: date | None = None) -> DunningPass:
    """One pass: the notices due now, sent (`send`, then the books) unless `dry_run`. `send` may be
    None for a dry run; `as_of` (a dry run only) shows what would be due on another date."""
    if as_of is not None and not dry_run:
        raise ValueError("a dunning pass sends as of today only; another date is for a dry run")
    at = now or datetime.now(UTC)
    as_of, notices = due(db, rules, at, as_of=as_of)
    ids = tuple(notice.event(observed(at)).event_id for notice in notices)
    if rules.dunning is None or dry_run or not notices:
        return DunningPass(as_of, tuple(notices), ids, sent=False, enabled=rules.dunning is not None)
    if send is None:
        raise ValueError("a dunning pass that sends needs a producer of billing events")
    send_notices(db, notices, send, at)
    return DunningPass(as_of, tuple(notices), ids, sent=True)
