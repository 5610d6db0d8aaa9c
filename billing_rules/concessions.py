"""What becomes of a credit note when its invoice is voided and replaced (issue 36, item 2). Pure.

A credit note says why it credits (its `reason`). When the invoice it credits is voided —
by `gpubill invoice void`, or by `gpubill rerate --apply` because its figures change — the
replacement is built from the charges as they are now, and each earlier note either

- is **carried** (`goodwill`): a concession, given whatever the charges are. The replacement
  carries it as a line of kind `concession` naming the note (its `credit_id` is the note's
  number), before tax, after the discounts and before the credit grants; VAT is computed once
  on the replacement's net. So the tenant's bill is the corrected charges less the concessions.
  A concession never takes the replacement below zero: its line is capped at what the
  replacement still charges, and the rest stays with the period (named by `fate_lines`' callers,
  carried again by a later replacement of the same period); it is not money owed to the tenant.
- is **superseded** (`price_error`, `usage_error`, `duplicate`, and the reversals `void` and
  `rerate`): it corrected the charges, and the correction now does; the replacement does not
  carry it.

A reason not listed here is refused (`UnknownCreditReason`): whether a replacement should
carry it is not known, so a void or re-rating that would decide it stops instead.

    fate_of(reason) -> "carried" | "superseded"
    Concession(note, amount)                    one goodwill note's amount before tax, to carry
    concede(concessions, owed) -> [(concession, amount taken)]   each capped, in note order
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from billing_rules.money import is_fen_exact

__all__ = ["CARRIED", "SUPERSEDED", "Concession", "UnknownCreditReason", "concede", "fate_of"]

CARRIED = ("goodwill",)
SUPERSEDED = ("price_error", "usage_error", "duplicate", "void", "rerate")


class UnknownCreditReason(ValueError):
    """A credit note's reason is neither carried nor superseded: what a replacement owes is not known."""


def fate_of(reason: str) -> str:
    """"carried" for a concession's reason, "superseded" for a correction's; UnknownCreditReason otherwise."""
    if reason in CARRIED:
        return "carried"
    if reason in SUPERSEDED:
        return "superseded"
    raise UnknownCreditReason(f"reason {reason!r} is not one this gpubill knows ({', '.join(CARRIED + SUPERSEDED)})")


@dataclass(frozen=True)
class Concession:
    """A goodwill credit note (`note`, CN-YYYY-NNNNNN) that a replacement carries: `amount` before tax, > 0."""

    note: str
    amount: Decimal

    def __post_init__(self) -> None:
        if not (isinstance(self.amount, Decimal) and is_fen_exact(self.amount) and self.amount > 0):
            raise ValueError(f"a concession is a positive amount in whole fen, got {self.amount} ({self.note})")


def concede(concessions: tuple[Concession, ...] | list[Concession], owed: Decimal) -> list[tuple[Concession, Decimal]]:
    """Each concession with the amount an invoice owing `owed` (before tax, after discounts) takes of it:
    in order, each at most what is still owed, never below zero (so the invoice never goes negative)."""
    out, left = [], max(owed, Decimal("0.00"))
    for concession in concessions:
        take = min(concession.amount, left)
        out.append((concession, take))
        left -= take
    return out
