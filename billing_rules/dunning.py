"""Dunning (issue 38): which billing events an unpaid invoice calls for, as days pass its due date.

    DunningPolicy.of(entry) -> DunningPolicy              billing.toml's [dunning], indexed
    due_notices(invoices, states, policy, sent, prepaid) -> [Notice]
    Notice.event(observed_at) -> BillingEvent             the notice as a billing event (schemas/billing_events.py)

The policy (billing.toml):

    [dunning]
    overdue_days = [1, 7, 14]          # an `invoice_overdue` when an invoice is this many days past due
    suspend_new_rentals_days = 30      # optional: a `suspend_new_rentals` at this many days

An invoice calls for a notice while it is issued (not voided) and something of it is
outstanding (billing_rules/accounts.py: its total less payments, credit notes and
write-offs). So an invoice settled from prepaid credit, paid, credited or written off calls
for none. Days past due are counted in the billing time zone: on its due date an invoice is
0 days past due, on the next day 1.

**Each notice once.** A notice is one (invoice, kind, days); those already sent (`sent`, the
books' dunning_notices) are never due again.

**Only the latest step, never a backlog.** An invoice 20 days past due with the policy
[1, 7, 14] and nothing sent yet (a scheduler that was down, a policy added to books with old
debts, a payment reversed) calls for the 14-day notice alone: the step due is the highest
policy day reached, and it is due unless a notice of that day or a later one was sent for
the invoice. The missed 1- and 7-day notices are skipped, never sent later. A reminder says
the invoice is at least N days late with what it still asks: the latest says all the earlier
ones would, and three reminders in one minute — "first reminder" after "final reminder" —
are noise to a customer and to whoever escalates on them. A consumer reads `threshold` as a
level (at least N days), not as a sequence with no gaps.

**Suspension** (`suspend_new_rentals`) is due once per invoice, at `suspend_new_rentals_days`
or later, independently of the reminders (a catch-up sends the latest reminder and the
suspension together) — and never for a prepaid tenant (`prepaid(tenant)`: it has top-ups,
billing.balances.has_top_ups): its service runs on its balance, and the balance events
(balance_low, balance_exhausted) are what stop it. A prepaid tenant's invoice that the
balance did not cover still gets its reminders.

Pure: no clock, no database; the states are computed as of a date by the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from billing_rules.accounts import InvoiceDoc, InvoiceState
from billing_rules.files import DunningEntry
from schemas.billing_events import INVOICE_OVERDUE, SUSPEND_NEW_RENTALS, BillingEvent

__all__ = ["DunningPolicy", "INVOICE_OVERDUE", "Notice", "SUSPEND_NEW_RENTALS", "due_notices"]


@dataclass(frozen=True)
class DunningPolicy:
    """billing.toml's [dunning]: the days past due of each reminder (increasing) and of the suspension."""

    overdue_days: tuple[int, ...]
    suspend_new_rentals_days: int | None = None

    @classmethod
    def of(cls, entry: DunningEntry) -> "DunningPolicy":
        """From billing.toml's validated [dunning] (the loader checked the order of the days)."""
        return cls(tuple(entry.overdue_days), entry.suspend_new_rentals_days)

    def step(self, days_past_due: int) -> int | None:
        """The highest reminder day reached at `days_past_due`; None before the first."""
        reached = [day for day in self.overdue_days if day <= days_past_due]
        return reached[-1] if reached else None


@dataclass(frozen=True)
class Notice:
    """A dunning event due for one invoice: `kind` at the policy's `days`, the invoice as it stands."""

    kind: str  # invoice_overdue | suspend_new_rentals
    invoice: str  # GB-YYYY-NNNNNN
    tenant: str
    period: str  # the invoice's billing period
    days: int  # the policy day (the event's threshold)
    days_past_due: int  # as of the pass, ≥ days
    due_on: date
    outstanding: Decimal  # CNY with VAT, > 0

    def event(self, observed_at: str) -> BillingEvent:
        """The billing event of this notice; its event_id depends on (kind, tenant, period, days, invoice) only."""
        return BillingEvent(kind=self.kind, tenant=self.tenant, period=self.period, threshold=str(self.days),
                            observed_at=observed_at, invoice=self.invoice, days_overdue=str(self.days_past_due),
                            outstanding=f"{self.outstanding:.2f}", due_date=self.due_on.isoformat())


def due_notices(invoices: Iterable[InvoiceDoc], states: Mapping[str, InvoiceState], policy: DunningPolicy,
                sent: Iterable[tuple[str, str, int]], prepaid: Callable[[str], bool]) -> list[Notice]:
    """The notices due now, in (tenant, due date, invoice, kind) order; see the module docstring.

    `states`: every invoice's state as of today (billing_rules.accounts.invoice_states), an
    invoice without one is not issued yet as of then; `sent`: the (invoice, kind, days) already
    sent; `prepaid(tenant)`: asked only for a tenant with an invoice at the suspension day."""
    reminded: dict[str, int] = {}  # invoice → the latest reminder day sent
    suspended: set[str] = set()
    for invoice, kind, days in sent:
        if kind == INVOICE_OVERDUE:
            reminded[invoice] = max(days, reminded.get(invoice, 0))
        elif kind == SUSPEND_NEW_RENTALS:
            suspended.add(invoice)
    notices = []
    prepaid_of: dict[str, bool] = {}
    for doc in invoices:
        state = states.get(doc.number)
        if doc.status != "issued" or state is None or state.outstanding <= 0:
            continue
        late = state.days_past_due
        step = policy.step(late)
        if step is not None and reminded.get(doc.number, 0) < step:
            notices.append(_notice(INVOICE_OVERDUE, step, doc, state))
        suspend_at = policy.suspend_new_rentals_days
        if suspend_at is not None and late >= suspend_at and doc.number not in suspended:
            if doc.tenant not in prepaid_of:
                prepaid_of[doc.tenant] = prepaid(doc.tenant)
            if not prepaid_of[doc.tenant]:
                notices.append(_notice(SUSPEND_NEW_RENTALS, suspend_at, doc, state))
    order = {INVOICE_OVERDUE: 0, SUSPEND_NEW_RENTALS: 1}
    return sorted(notices, key=lambda n: (n.tenant, n.due_on, n.invoice, order[n.kind]))


def _notice(kind: str, days: int, doc: InvoiceDoc, state: InvoiceState) -> Notice:
    return Notice(kind, doc.number, doc.tenant, doc.period, days, state.days_past_due, state.due_on, state.outstanding)
