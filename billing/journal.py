"""The invoice journal (migration 0020, invoice_journal): every change of an invoice's state, appended.

    record(db, action, invoice=, tenant=, period=, actor=, document=, reason=, detail=)
    history(db, key) -> [Entry]      the entries of an invoice (its number or draft id), oldest first
    actor_here() -> str              who is at the command line: "os:<user>"

Actions: draft_made, draft_refreshed, issued, credit_note, voided, replaced. An entry is
written after the header that makes the change (the commit point), so the journal never
names a change that did not happen; a crash between the two loses that one entry (the
header, the credit note and their times still say what happened).
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = ["ACTIONS", "Entry", "actor_here", "history", "record"]

ACTIONS = ("draft_made", "draft_refreshed", "issued", "credit_note", "voided", "replaced")
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


def record(db: Any, action: str, *, invoice: str, tenant: str, period: str, actor: str, document: str = "",
           reason: str = "", detail: str = "") -> None:
    """Append one entry, stamped with this host's clock."""
    if action not in ACTIONS:
        raise ValueError(f"journal action {action!r} is not one of {', '.join(ACTIONS)}")
    db.insert("invoice_journal", [(datetime.now(UTC), action, invoice, document, tenant, period, actor[:200],
                                   reason[:500], detail[:1000])], _COLUMNS)


def history(db: Any, keys: list[str]) -> list[Entry]:
    """The entries about any of `keys` (an invoice's number and draft id), or naming one as their
    other document, oldest first."""
    rows = db.query(f"SELECT {', '.join(_COLUMNS)} FROM invoice_journal "
                    "WHERE invoice IN {k:Array(String)} OR document IN {k:Array(String)} ORDER BY at, action",
                    {"k": [k for k in keys if k]})
    return [Entry(at.replace(tzinfo=UTC) if at.tzinfo is None else at, *rest) for at, *rest in rows]
