"""The earlier credit notes of a period when its invoice is voided and replaced: which the
replacement carries (concessions) and which the correction supersedes. The rule is
billing_rules/concessions.py's; this module reads the notes and says what becomes of each.

    period_notes(db, tenant, period) -> [CreditNote]      every note on the tenant's invoices of the period,
                                                          refused (UnknownCreditNote) when one has a reason not known
    concessions_of(notes, standing="") -> [Concession]    what a replacement carries: the goodwill notes of the
                                                          period's invoices but the one that stays
    fates(notes, standing, built, replaced) -> [NoteFate] each earlier note and what becomes of it
    voided_fates(db, invoice, void_note) -> [NoteFate]    the same for an invoice just voided (its own note left out)

    UnknownCreditNote(BillingError)   a note whose reason this gpubill does not know; nothing was written
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Iterable

from billing.credit_notes import CreditNote, credit_notes
from billing.errors import BillingError
from billing_rules import Concession, InvoiceDraft, UnknownCreditReason, fate_of

__all__ = ["NoteFate", "UnknownCreditNote", "check_reasons", "concessions_of", "fates", "period_notes", "voided_fates"]


class UnknownCreditNote(BillingError):
    """An earlier credit note of a reason this gpubill does not know: a void or re-rating would not
    know whether its replacement carries it, so it is refused and nothing is written."""


@dataclass(frozen=True)
class NoteFate:
    """An earlier credit note and what becomes of it when its invoice is replaced.

    fate: "carried" (a concession: the replacement has a line for `carried` of its `subtotal`),
    "superseded" (the correction replaces it) or "stands" (its invoice is not replaced)."""

    number: str
    invoice: str
    reason: str
    subtotal: Decimal  # before tax
    total: Decimal  # with VAT
    fate: str
    carried: Decimal = Decimal("0.00")  # carried: the amount before tax the replacement's line takes

    @property
    def unused(self) -> Decimal:
        """Carried: what the replacement could not take (it charges less); it stays with the period."""
        return self.subtotal - self.carried if self.fate == "carried" else Decimal("0.00")

    def text(self, *, planned: bool = False) -> str:
        """One line for people: the note and what becomes of it (`planned`: the replacement is not
        built yet, so the amount it takes is not known; a void says this)."""
        what = f"credit note {self.number} on {self.invoice} ({self.reason}, {self.total:.2f} CNY with VAT)"
        if self.fate == "superseded":
            return f"{what}: superseded by the correction (the replacement does not carry it)" if not planned else \
                f"{what}: superseded (the replacement is built from the charges as they are now and does not carry it)"
        if self.fate == "stands":
            return f"{what}: stands (its invoice is not replaced)"
        if planned:
            return (f"{what}: carried by the replacement as a concession of {self.subtotal:.2f} before VAT "
                    "(never more than the replacement charges)")
        unused = (f"; {self.unused:.2f} unused (the replacement charges less) stays with the period"
                  if self.unused else "")
        return f"{what}: carried as a concession, {self.carried:.2f} of {self.subtotal:.2f} before VAT{unused}"


def period_notes(db: Any, tenant: str, period: str) -> list[CreditNote]:
    """The credit notes on `tenant`'s invoices of `period`, in number order; UnknownCreditNote (one line)
    when one has a reason that is neither carried nor superseded."""
    notes = credit_notes(db, tenant=tenant, period=period)
    check_reasons(notes)
    return notes


def check_reasons(notes: Iterable[CreditNote]) -> None:
    """UnknownCreditNote for the first note whose reason is not known (billing_rules/concessions.py)."""
    for note in notes:
        try:
            fate_of(note.reason)
        except UnknownCreditReason:
            raise UnknownCreditNote(
                f"credit note {note.number} on {note.invoice} has reason {note.reason!r}, which this gpubill does not "
                "know: whether a replacement carries it is not known, so nothing was voided or re-rated") from None


def concessions_of(notes: Iterable[CreditNote], standing: str = "") -> list[Concession]:
    """The concessions a replacement carries, in note order: the goodwill notes of the period's
    invoices but `standing` (the issued invoice that stays; "" when it is, or is about to be, replaced).
    A period has at most one issued invoice, so the others are the voided ones it replaces."""
    return [Concession(n.number, n.subtotal) for n in notes
            if n.invoice != standing and fate_of(n.reason) == "carried" and n.subtotal > 0]


def fates(notes: Iterable[CreditNote], standing: str, built: InvoiceDraft | None, replaced: bool) -> list[NoteFate]:
    """What becomes of each earlier note: every note on the `standing` invoice (superseded or carried
    when it is `replaced`, else it stands) and the goodwill notes of the voided ones (carried again).
    `built` is the replacement (or the invoice as it would be now): its concession lines say how much of
    each note it takes. A voided invoice's other notes were settled by its void and are not listed."""
    taken = {line.credit_id: -line.amount for line in (built.lines if built is not None else ())
             if line.kind == "concession"}
    out = []
    for note in notes:
        if standing and note.invoice == standing:
            fate = fate_of(note.reason) if replaced else "stands"
        elif fate_of(note.reason) == "carried":
            fate = "carried"
        else:
            continue
        carried = taken.get(note.number, Decimal("0.00")) if fate == "carried" else Decimal("0.00")
        out.append(NoteFate(note.number, note.invoice, note.reason, note.subtotal, note.total, fate, carried))
    return out


def voided_fates(db: Any, invoice: Any, void_note: str = "") -> list[NoteFate]:
    """What becomes of the earlier credit notes of `invoice` (just voided; its own void note
    `void_note` left out) and the concessions its period already carried, once it is replaced."""
    notes = [n for n in period_notes(db, invoice.tenant, invoice.period) if n.number != void_note]
    return fates(notes, invoice.number, None, replaced=True)
