"""A tenant's invoices, as its API and web page read them: the list across periods, and the
period of one of its invoice numbers. Always filtered by the tenant, so another tenant's
number reads as no invoice."""

from __future__ import annotations

from datetime import UTC
from types import SimpleNamespace
from typing import Any

from billing.settlement import settlement_of

__all__ = ["invoice_period", "tenant_invoices"]


def tenant_invoices(db: Any, tenant: str, rules: Any = None) -> list[dict]:
    """The invoices of `tenant`, newest period first; money as strings with two decimals. With
    `rules`, each also says how it is paid (billing/settlement.py): `issue_date` (billing time
    zone), `prepaid`, `amount_due`, `due_date` (null when nothing is due), `settled`."""
    rows = db.query_dicts(
        "SELECT number, period, status, issued_at, currency, subtotal, credit_used, net, tax, total "
        "FROM invoices FINAL WHERE tenant = {t:String} ORDER BY period DESC, number DESC", {"t": tenant})
    out = []
    for row in rows:
        issued = row["issued_at"]
        issued = issued.replace(tzinfo=UTC) if issued.tzinfo is None else issued
        out.append({
            "number": row["number"], "period": row["period"], "status": row["status"],
            "issued_at": issued.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
            "currency": row["currency"],
            **{name: f"{row[name]:.2f}" for name in ("subtotal", "credit_used", "net", "tax", "total")},
        })
        if rules is not None:
            settlement = settlement_of(db, rules, SimpleNamespace(tenant=tenant, number=row["number"], total=row["total"],
                                                                  issued_at=out[-1]["issued_at"]))
            out[-1].update(issue_date=str(settlement.issue_date), prepaid=settlement.prepaid,
                           amount_due=f"{settlement.amount_due:.2f}",
                           due_date=None if settlement.due_date is None else str(settlement.due_date),
                           settled=settlement.settled)
    return out


def invoice_period(db: Any, tenant: str, number: str) -> str | None:
    """The period of invoice `number` when it is `tenant`'s, else None."""
    rows = db.query("SELECT period FROM invoices FINAL WHERE tenant = {t:String} AND number = {n:String} LIMIT 1",
                    {"t": tenant, "n": number})
    return str(rows[0][0]) if rows else None
