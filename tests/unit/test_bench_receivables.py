"""`gpubill bench receivables` (gpubill/bench/receivables.py): a tiny year (40 tenants, 4 months) reports
every figure with its check passing, and the year it projects is one the commands could have recorded:
no invoice is allocated more than its total, no payment or credit note spends more than it holds,
and every allocation counts from the later of its source's date and its invoice's issue."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from billing.accounts import ledger
from billing_rules import DEFAULT_RULES_DIR, load_rules
from gpubill.bench.receivables import bench_receivables
from warehouse.connection import open_database

KEYS = ("tenants", "months", "invoices", "payments", "partial_payments", "allocations", "credit_notes", "refunds",
        "reversals", "write_offs", "as_of", "owing", "outstanding", "unapplied", "build_s", "receivables_s",
        "receivables_max_s", "command_s", "identical", "target_s", "target_met")


def test_a_tiny_year_is_timed_and_checked_and_could_have_been_recorded(tmp_path):
    figures = bench_receivables(40, 4, runs=2, command_runs=1, as_of=date(2025, 5, 10), keep=tmp_path)
    assert tuple(figures) == KEYS
    assert figures["identical"] is True and figures["target_met"] is True
    assert figures["invoices"] >= 160 and figures["payments"] > figures["partial_payments"] > 0  # 40 × 4, and voids
    assert figures["as_of"] == "2025-05-10"
    with open_database(f"chdb://{tmp_path / 'clickhouse'}") as db:
        books = ledger(db, load_rules(DEFAULT_RULES_DIR))
        totals = {d.number: d.total for d in books.invoices}
        issued = {d.number: d.issued_on for d in books.invoices}
        on_invoice: dict[str, Decimal] = {}
        from_source: dict[str, Decimal] = {}
        for a in books.allocations:
            on_invoice[a.invoice] = on_invoice.get(a.invoice, Decimal(0)) + a.amount
            from_source[a.source] = from_source.get(a.source, Decimal(0)) + a.amount
            assert a.effective_on >= issued[a.invoice], a
        written: dict[str, Decimal] = {}
        for w in books.write_offs:
            written[w.invoice] = written.get(w.invoice, Decimal(0)) + w.amount
        assert all(0 <= on_invoice.get(n, 0) + written.get(n, 0) <= total for n, total in totals.items())
        held = {p.ref: p.amount for p in books.payments} | {n.number: n.total for n in books.credit_notes}
        refunded = {r.credit_note: r.amount for r in books.refunds}
        assert all(0 <= from_source.get(ref, 0) + refunded.get(ref, 0) <= amount for ref, amount in held.items())
    # kept: a second run times the same year without building it
    again = bench_receivables(40, 4, runs=1, command_runs=1, as_of=date(2025, 5, 10), keep=tmp_path)
    assert again["build_s"] == 0.0 and again["identical"] is True
    assert (again["outstanding"], again["allocations"]) == (figures["outstanding"], figures["allocations"])
