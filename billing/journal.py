"""The invoice journal (migration 0020, invoice_journal): every change of an invoice's state, appended.

    entry(action, invoice=, tenant=, period=, actor=, document=, reason=, detail=) -> JournalRow
    history(db, key) -> [Entry]      the entries of an invoice (its number or draft id), oldest first
    actor_here() -> str              who is at the command line: "os:<user>"

Actions: draft_made, draft_refreshed, issued, credit_note, voided, replaced. An entry is part
of the fact that makes the change (schemas/books.py): it is on the books with its change or
not at all, and the journal never names a change that did not happen.
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from schemas.books import JournalRow

__all__ = ["ACTIONS", "Entry", "actor_here", "entry", "history"]

ACTIONS = ("draft_made", "draft_refreshed", "issued", "credit_note", "voided", "replaced", "written_off")
_COLUMNS = ("at", "action", "invoice", "document", "tenant", "period", "actor", "reason", "detail")


@dataclass(frozen=True)
class Entry:
    at: datetime
    action: str
    invoice: str
    document: str
    tenant: str
    period: str
    actor: str
    reason: str
    detail: str


def actor_here() -> str:
    """The OS user running this command, as the journal names actors: "os:<user>"."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no user name for this uid (a bare container)
        user = "unknown"
    return f"os:{user}"[:100]


def entry(action: str, *, invoice: str, tenant: str, period: str, actor: str, document: str = "",
          reason: str = "", detail: str = "") -> JournalRow:
    """One entry, stamped with this host's clock, for the fact that makes the change."""
    if action not in ACTIONS:
        raise ValueError(f"journal action {action!r} is not one of {', '.join(ACTIONS)}")
    return JournalRow(at=datetime.now(UTC), action=action, invoice=invoice, document=document, tenant=tenant,
                      period=period, actor=actor[:200], reason=reason[:500], detail=detail[:1000])


def history(db: Any, keys: list[str]) -> list[Entry]:
    """The entries about any of `keys` (an invoice's number and draft id), or naming one as their
    other document, oldest first."""
    rows = db.query(f"SELECT {', '.join(_COLUMNS)} FROM invoice_journal FINAL "
                    "WHERE invoice IN {k:Array(String)} OR document IN {k:Array(String)} ORDER BY at, action",
                    {"k": [k for k in keys if k]})
    return [Entry(at.replace(tzinfo=UTC) if at.tzinfo is None else at, *rest) for at, *rest in rows]
