"""The year of books that `gpubill bench books` writes (gpubill/bench/books.py): every money fact of
`tenants` tenants over `months` months, as schemas/books.py events, in the order commands record them.

Deterministic (seeded), and built with the code the commands use where it is pure: each invoice
is `billing_rules.invoice.build_invoice` of a month's priced usage, its rows are
`billing.invoice_store.line_rows` / `header_row` as `invoice run` writes them, seller and buyer
as `store.buyer_party` keeps them. What a year holds, per tenant (1,000 tenants, 12 months: about
24,700 facts, 12,000 invoices of 4–9 lines):

- registered once, with buyer fields (legal name, tax id, address, e-mail); one in ten updated
  once, one in a hundred suspended and resumed;
- a monthly budget (one in two), changed once a year for one in ten;
- two API keys (a hash, never a secret); one in five revoked during the year and replaced;
- prepaid (three in ten): a top-up every month;
- every month its invoice: rent of one or two GPU models (monthly or hourly plan, a contract
  discount for one in four), electricity in three tariff bands, the new-tenant credit on the
  first; each month's run closed by a billing run fact;
- credit notes: a goodwill note on one invoice in fifty (a tenth of its first line), and one
  invoice in two hundred voided — its note for everything, the void, its replacement numbered
  after the month's invoices.

The rule set is recorded as the commands record it (gpubill/cli/books.py `open_books(rules=…)`).
"""

from __future__ import annotations

import hashlib
import random
from calendar import monthrange
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from billing import invoice_store as store
from billing.tenants import Tenant
from billing_rules.invoice import CreditBalance, EnergyUsage, InvoiceDraft, RentUsage, build_invoice
from billing_rules.money import round_fen
from schemas.books import (
    ApiKeyFact,
    ApiKeyRow,
    BillingRunCompleted,
    BillingRunRow,
    BooksEvent,
    BudgetRow,
    BudgetSet,
    CreditNoteIssued,
    CreditNoteLineRow,
    CreditNoteRow,
    InvoiceFact,
    JournalRow,
    Party,
    TenantFact,
    TenantRow,
    TopUpRecorded,
    TopUpRow,
)

__all__ = ["YearOfBooks", "year_of_books"]

WRITER = "bench-books:0"
ACTOR = "os:bench"
VAT = Decimal("0.06")
# (model, monthly price per card, hourly price per card-hour): list prices of the kind the catalog holds
MODELS = (("A800-80G", Decimal("3180.00"), Decimal("10.00")), ("H800-80G", Decimal("9800.00"), Decimal("22.00")),
          ("RTX4090", Decimal("1380.00"), Decimal("2.50")), ("L40S", Decimal("2600.00"), Decimal("6.80")))
# (band, tariff ¥/kWh, share of the energy): the site's time-of-use bands
BANDS = (("peak", Decimal("0.9500"), Fraction(5, 12)), ("flat", Decimal("0.6200"), Fraction(4, 12)),
         ("valley", Decimal("0.3100"), Fraction(3, 12)))
SITE, PUE = "gz-tou", Decimal("1.35")
TRIAL = CreditBalance("new-tenant", "New tenant credit", Decimal("10.00"))


@dataclass(frozen=True)
class _Profile:
    """What one tenant rents: (model index, plan, cards, discount %) per model, and how busy it is."""

    rents: tuple[tuple[int, str, int, Decimal], ...]
    busy: Fraction  # of the month's seconds, hourly plans
    watts: int  # average power per card


@dataclass
class YearOfBooks:
    """The counts of what `year_of_books` yielded, filled in as it goes."""

    facts: int = 0
    invoices: int = 0
    invoice_lines: int = 0
    credit_notes: int = 0
    voids: int = 0
    top_ups: int = 0
    keys: int = 0
    tenants: int = 0


def year_of_books(tenants: int, months: int, year: int, rules_revision: str, seller: Party | None,
                  counts: YearOfBooks, seed: int = 37) -> Iterator[list[BooksEvent]]:
    """The year's facts, a batch per command-sized step (the registrations, a month's top-ups and
    account changes, a month's invoice run, its credit notes and voids), in the order they are recorded."""
    rng = random.Random(seed)
    ids = [f"tenant-{k:04d}" for k in range(tenants)]
    registered = {t: _tenant(t, k, rng, datetime(year, 1, 1, 1, tzinfo=UTC)) for k, t in enumerate(ids)}
    profiles = {t: _profile(rng) for t in ids}
    prepaid = {t for t in ids if rng.random() < 0.3}
    keys: dict[str, list[ApiKeyRow]] = {}
    invoice_seq, note_seq = 0, {}  # the invoices' sequence (of `year`), the credit notes' by year

    def emit(batch: list[BooksEvent]) -> list[BooksEvent]:
        counts.facts += len(batch)
        return batch

    start = datetime(year, 1, 1, 1, tzinfo=UTC)
    batch = [_event(start, TenantFact(kind="tenant_registered", tenant=_row(registered[t]))) for t in ids]
    counts.tenants = len(ids)
    for t in ids:
        if rng.random() < 0.5:
            batch.append(_event(start, BudgetSet(kind="budget_set", budget=BudgetRow(
                tenant=t, amount=Decimal(rng.choice((5_000, 20_000, 80_000))), note="monthly budget",
                updated_at=start))))
        keys[t] = [_key(t, f"{t} key {n}", start, rng) for n in (1, 2)]
        batch += [_event(start, ApiKeyFact(kind="api_key_created", key_row=key)) for key in keys[t]]
        counts.keys += 2
    yield emit(batch)

    for m in range(1, months + 1):
        period = f"{year}-{m:02d}"
        first = datetime(year, m, 1, 2, tzinfo=UTC)
        batch = []
        for t in sorted(prepaid):
            at = first + timedelta(hours=rng.randrange(1, 72))
            batch.append(_event(at, TopUpRecorded(kind="top_up", top_up=TopUpRow(
                ref=f"pay-{period}-{t}", tenant=t, amount=Decimal(rng.randrange(2_000, 60_000)), note="bank transfer",
                created_at=at))))
            counts.top_ups += 1
        for t in ids:
            at = first + timedelta(days=rng.randrange(1, 27))
            roll = rng.random() * months  # each change below: that share of the tenants, once a year
            if roll < 0.1:  # buyer details updated
                registered[t] = _updated(registered[t], at, address=f"Room {rng.randrange(100, 999)}, "
                                                                    f"{registered[t].address}")
                batch.append(_event(at, TenantFact(kind="tenant_updated", tenant=_row(registered[t]))))
            elif roll < 0.2:  # the budget changed
                batch.append(_event(at, BudgetSet(kind="budget_set", budget=BudgetRow(
                    tenant=t, amount=Decimal(rng.randrange(1_000, 100_000)), note="raised", updated_at=at))))
            elif roll < 0.4:  # a key revoked and replaced
                old = keys[t].pop(0)
                batch.append(_event(at, ApiKeyFact(kind="api_key_revoked", key_row=old.model_copy(
                    update={"revoked_at": at, "updated_at": at}))))
                keys[t].append(_key(t, f"{t} key {m + 2}", at, rng))
                batch.append(_event(at, ApiKeyFact(kind="api_key_created", key_row=keys[t][-1])))
                counts.keys += 1
            elif roll < 0.41:  # suspended, and resumed a day later
                for kind, status in (("tenant_suspended", "suspended"), ("tenant_resumed", "active")):
                    registered[t] = _updated(registered[t], at, status=status)
                    batch.append(_event(at, TenantFact(kind=kind, tenant=_row(registered[t]))))
                    at += timedelta(days=1)
        yield emit(batch)

        issued_at = datetime(year + m // 12, m % 12 + 1, 1, 1, tzinfo=UTC)  # the run after the month
        run, drafts = [], {}
        for t in ids:
            draft = _draft(t, period, profiles[t], m == 1, rng)
            invoice_seq += 1
            drafts[t] = (invoice_seq, draft)
            run.append(_event(issued_at, _issued(draft, invoice_seq, issued_at, rules_revision, seller,
                                                 store.buyer_party(t, registered[t]))))
            counts.invoices += 1
            counts.invoice_lines += len(draft.lines)
        run.append(_event(issued_at, BillingRunCompleted(kind="billing_run_completed", run=BillingRunRow(
            period=period, completed_at=issued_at, invoices=len(ids)))))
        yield emit(run)

        notes = []
        for t in ids:
            roll = rng.random()
            if roll >= 0.025:
                continue
            seq, draft = drafts[t]
            number = f"GB-{year}-{seq:06d}"
            at = issued_at + timedelta(days=rng.randrange(1, 20))
            note_seq[at.year] = cn = note_seq.get(at.year, 0) + 1
            counts.credit_notes += 1
            if roll < 0.02:  # goodwill: a tenth of the first line
                amount = round_fen(draft.lines[0].amount / 10)
                notes.append(_event(at, _credit_note(draft, number, cn, at, "goodwill", "service interruption",
                                                     [(1, draft.lines[0].kind, draft.lines[0].description, amount)])))
                continue
            # voided: a note for everything (charges and what lowered it, given back), the void, a replacement
            lines = [(no, line.kind, line.description, line.amount) for no, line in enumerate(draft.lines, start=1)]
            notes.append(_event(at, _credit_note(draft, number, cn, at, "void", "wrong buyer details", lines,
                                                 tax=draft.tax)))
            header = store.header_row(draft, doc_id=number, status="voided", revision=1, issued_at=issued_at,
                                      number=number, seq=seq, rules_revision=rules_revision)
            notes.append(_event(at, InvoiceFact(kind="invoice_voided", header=header, journal=(_journal(
                at, "voided", number, t, period, document=f"CN-{at.year}-{cn:06d}",
                reason="wrong buyer details"),))))
            invoice_seq += 1
            counts.voids += 1
            counts.invoices += 1
            counts.invoice_lines += len(draft.lines)
            notes.append(_event(at, _issued(draft, invoice_seq, at, rules_revision, seller,
                                            store.buyer_party(t, registered[t]), replaces=number)))
        if notes:
            yield emit(notes)


def _event(at: datetime, fact) -> BooksEvent:
    return BooksEvent(at=at, writer=WRITER, fact=fact)


def _tenant(tenant: str, k: int, rng: random.Random, at: datetime) -> Tenant:
    city = rng.choice(("Guiyang", "Shenzhen", "Hangzhou", "Beijing", "Chengdu"))
    legal = f"{rng.choice(('深度', '星河', '云帆', 'Aurora', 'Lumen'))} Computing {k} Co., Ltd."
    return Tenant(tenant=tenant, display_name=f"Tenant {k}", status="active", created_at=at, updated_at=at,
                  legal_name=legal, tax_id=f"91520{k:013d}", address=f"{rng.randrange(1, 400)} Data Road, {city}",
                  email=f"billing@{tenant}.example")


def _updated(tenant: Tenant, at: datetime, **changes: str) -> Tenant:
    from dataclasses import replace

    return replace(tenant, updated_at=at, **changes)


def _row(tenant: Tenant) -> TenantRow:
    return TenantRow(**{column: getattr(tenant, column) for column in TenantRow.columns()})


def _key(tenant: str, label: str, at: datetime, rng: random.Random) -> ApiKeyRow:
    token = rng.getrandbits(128).to_bytes(16, "big")
    return ApiKeyRow(id="k_" + token[:10].hex(), tenant=tenant, role="tenant", label=label,
                     secret_sha256=hashlib.sha256(token).hexdigest(), created_at=at, expires_at=None, revoked_at=None,
                     updated_at=at)


def _profile(rng: random.Random) -> _Profile:
    models = rng.sample(range(len(MODELS)), rng.choice((1, 1, 2)))
    rents = tuple((i, rng.choice(("monthly", "hourly")), rng.choice((1, 2, 4, 8, 16, 32, 64)),
                   Decimal(rng.choice((0, 0, 0, 5)))) for i in models)
    return _Profile(rents=rents, busy=Fraction(rng.randrange(20, 95), 100), watts=rng.randrange(180, 420))


def _draft(tenant: str, period: str, profile: _Profile, first: bool, rng: random.Random) -> InvoiceDraft:
    """The month's invoice, priced as `invoice run` prices it (build_invoice), from a usage like the tenant's."""
    year, month = int(period[:4]), int(period[5:])
    month_s = monthrange(year, month)[1] * 86_400
    rent, card_seconds = [], 0
    for i, plan, cards, discount in profile.rents:
        model, monthly, hourly = MODELS[i]
        busy = Fraction(1) if plan == "monthly" else profile.busy * Fraction(rng.randrange(90, 110), 100)
        seconds = int(cards * month_s * min(busy, Fraction(1)))
        card_seconds += seconds
        price, per_s = (monthly, month_s) if plan == "monthly" else (hourly, 3_600)
        rent.append(RentUsage(model, plan, price, per_s, seconds, discount))
    energy_mj = card_seconds * profile.watts * 1_000
    energy = [EnergyUsage(SITE, band, tariff, PUE, int(energy_mj * share)) for band, tariff, share in BANDS]
    return build_invoice(tenant, period, rent, energy, (), [TRIAL] if first else [], VAT)


def _issued(draft: InvoiceDraft, seq: int, at: datetime, rules_revision: str, seller: Party | None, buyer: Party,
            replaces: str = "") -> InvoiceFact:
    """The invoice as `invoice run` issues it (billing/invoicing.py `_issue`)."""
    number = f"GB-{draft.period[:4]}-{seq:06d}"
    journal = [_journal(at, "issued", number, draft.tenant, draft.period, detail=f"total {draft.total} CNY")]
    if replaces:
        journal.append(_journal(at, "replaced", replaces, draft.tenant, draft.period, document=number,
                                detail=f"replaced by {number}"))
    return InvoiceFact(
        kind="invoice_issued", lines=store.line_rows(number, 1, draft, number=number), journal=tuple(journal),
        header=store.header_row(draft, doc_id=number, status="issued", revision=1, issued_at=at, number=number,
                                seq=seq, replaces=replaces, rules_revision=rules_revision),
        seller=seller, buyer=buyer)


def _credit_note(draft: InvoiceDraft, invoice: str, seq: int, at: datetime, reason: str, note: str,
                 lines: list[tuple[int, str, str, Decimal]], tax: Decimal | None = None) -> CreditNoteIssued:
    """A credit note as billing/credit_notes.py makes one on an invoice nothing was credited of before."""
    number = f"CN-{at.year}-{seq:06d}"
    subtotal = sum((amount for *_, amount in lines), Decimal("0.00"))
    tax = round_fen(Fraction(subtotal) * Fraction(draft.vat_rate)) if tax is None else tax
    return CreditNoteIssued(
        kind="credit_note_issued",
        lines=tuple(CreditNoteLineRow(number=number, line_no=n, invoice=invoice, invoice_line_no=no, kind=kind,
                                      description=description, amount=amount)
                    for n, (no, kind, description, amount) in enumerate(lines, start=1)),
        note=CreditNoteRow(number=number, year=at.year, seq=seq, invoice=invoice, tenant=draft.tenant,
                           period=draft.period, reason=reason, note=note, actor=ACTOR, issued_at=at, currency="CNY",
                           subtotal=subtotal, tax=tax, total=subtotal + tax, vat_rate=draft.vat_rate),
        journal=(_journal(at, "credit_note", invoice, draft.tenant, draft.period, document=number, reason=reason,
                          detail=f"{subtotal + tax:.2f} CNY with VAT: {note}"),))


def _journal(at: datetime, action: str, invoice: str, tenant: str, period: str, *, document: str = "",
             reason: str = "", detail: str = "") -> JournalRow:
    return JournalRow(at=at, action=action, invoice=invoice, document=document, tenant=tenant, period=period,
                      actor=ACTOR, reason=reason, detail=detail)
