"""`gpubill rerate --apply` (billing/rerate.py, usage/regenerate.py; issue 25 item 3): the rated data
switched to the re-rated generation in one publish, then each changed invoice voided with a credit
note of reason `rerate` and replaced; unchanged ones left alone; a second apply changes nothing.

Rows and rules are tests/unit/test_rerate_preview.py's: tenant tNN rents one A800 at ¥3600/h = ¥1/s
for N seconds from the start of its own hour of March 2026; the correction: ¥1800/h (¥0.5/s) from
2026-03-01 00:00:05 local, inside t01's hour (split from its per-second rows) and before t02's.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

from billing.credit_notes import credit_notes
from billing.invoice_store import headers
from billing.rerate import rerate_apply, rerate_preview
from billing.invoicing import run_period
from tests.unit.test_invoice_lifecycle import fen
from tests.unit.test_invoice_lock_runs import NOW, PERIOD, RULES, db, no_margin, seed_tenants  # noqa: F401 (fixtures)
from tests.unit.test_rerate_preview import VAT, corrected_rules


def published_generations(db) -> dict:
    return {int(h): int(g) for h, g in db.query(
        "SELECT toUnixTimestamp(hour), max(generation) FROM rollup_runs WHERE period = {p:String} GROUP BY hour",
        {"p": PERIOD})}


def test_apply_voids_credits_and_replaces_what_changed_and_a_second_apply_changes_nothing(db, tmp_path):
    seed_tenants(db, {"t01": 7, "t02": 30, "t03": 4})
    run_period(db, RULES, PERIOD, now=NOW)  # 000001 t01 7.42, 000002 t02 31.80, 000003 t03 4.24
    rules = corrected_rules(tmp_path, "2026-03-01T00:00:05")
    # every tenant's hour is at or after the correction: all three change
    report = rerate_apply(db, rules, PERIOD, now=NOW)
    assert report.generation > 0 and report.hours == 3
    assert [i for i, _ in report.voided] == ["GB-2026-000001", "GB-2026-000002", "GB-2026-000003"]
    notes = {n.invoice: n for n in credit_notes(db, period=PERIOD)}
    assert {n.reason for n in notes.values()} == {"rerate"}
    assert {i: n.total for i, n in notes.items()} == {"GB-2026-000001": Decimal("7.42"),
                                                       "GB-2026-000002": Decimal("31.80"),
                                                       "GB-2026-000003": Decimal("4.24")}
    issued = {h.tenant: h for h in headers(db, period=PERIOD, status="issued")}
    # t01: 5 s at ¥1 + 2 s at ¥0.5 = 6.00 → 6.36; t02: 30 × 0.5 = 15.00 → 15.90; t03: 4 × 0.5 = 2.00 → 2.12
    assert {t: (h.number, h.total, h.replaces) for t, h in issued.items()} == {
        "t01": ("GB-2026-000004", fen(Fraction(6) * (1 + VAT)), "GB-2026-000001"),
        "t02": ("GB-2026-000005", fen(Fraction(15) * (1 + VAT)), "GB-2026-000002"),
        "t03": ("GB-2026-000006", fen(Fraction(2) * (1 + VAT)), "GB-2026-000003")}
    assert all(h.rules_revision == rules.revision for h in issued.values())
    # the rated data is the new generation: the preview under the same rules shows no difference
    assert all(t.difference == 0 for t in rerate_preview(db, rules, PERIOD).tenants)
    generations = published_generations(db)
    again = rerate_apply(db, rules, PERIOD, now=NOW)
    assert (again.generation, again.hours, again.voided, again.issued) == (0, 0, [], [])
    assert published_generations(db) == generations
    assert len(credit_notes(db, period=PERIOD)) == 3


def test_an_invoice_the_correction_does_not_change_is_left_alone(db, tmp_path):
    seed_tenants(db, {"t01": 7, "t02": 30})
    run_period(db, RULES, PERIOD, now=NOW)
    rules = corrected_rules(tmp_path, "2026-03-01T01:00:00")  # t02's hour (01:00 local) on: t01 keeps ¥1/s
    report = rerate_apply(db, rules, PERIOD, now=NOW)
    assert [i for i, _ in report.voided] == ["GB-2026-000002"] and report.issued == ["GB-2026-000003"]
    issued = {h.tenant: (h.number, h.total) for h in headers(db, period=PERIOD, status="issued")}
    assert issued == {"t01": ("GB-2026-000001", Decimal("7.42")),
                      "t02": ("GB-2026-000003", fen(Fraction(15) * (1 + VAT)))}
    assert report.hours == 1  # only t02's hour is published anew: t01's rows are priced as they were


def test_a_rate_change_inside_an_hour_whose_seconds_retention_dropped_is_refused_naming_the_archive(db, tmp_path):
    import pytest

    from billing.rerate import RerateRefused
    from usage.rollup import roll_up

    seed_tenants(db, {"t01": 7})
    roll_up(db, RULES, period=PERIOD)
    # what `gpubill archive drop` leaves: the period's per-second rows gone, its archive recorded
    db.command("ALTER TABLE rated_seconds DELETE WHERE period = {p:String} SETTINGS mutations_sync = 1", {"p": PERIOD})
    db.insert("retention_runs", [[PERIOD, "/archives/2026-03", "ab" * 32, NOW]],
              ["period", "archive", "manifest", "dropped_at"])
    with pytest.raises(RerateRefused) as refused:
        rerate_apply(db, corrected_rules(tmp_path, "2026-03-01T00:00:05"), PERIOD, now=NOW)
    assert "/archives/2026-03" in str(refused.value) and "\n" not in str(refused.value)
    assert "a rate changes inside the hour 2026-02-28T16:00Z" in str(refused.value)
    # a correction on the hour edge needs no per-second row: re-priced from the rollup
    report = rerate_apply(db, corrected_rules(tmp_path / "edge", "2026-03-01T00:00:00"), PERIOD, now=NOW)
    assert report.hours == 1 and report.issued == ["GB-2026-000001"]
    assert [h.total for h in headers(db, period=PERIOD, status="issued")] == [fen(Fraction(7, 2) * (1 + VAT))]


def test_under_the_rules_that_priced_it_an_apply_with_late_data_on_a_later_invoice_changes_nothing(db):
    from datetime import UTC, datetime

    seed_tenants(db, {"t01": 7})
    run_period(db, RULES, PERIOD, now=NOW)
    seed_tenants(db, {"t01": 12})  # late March usage (5 s more), charged on April's invoice as an adjustment
    seed_tenants(db, {"t01": 3}, period="2026-04")
    run_period(db, RULES, "2026-04", now=datetime(2026, 5, 10, tzinfo=UTC))
    report = rerate_apply(db, RULES, PERIOD, now=NOW)
    # March's replacement would be 12 s less the 5.00 April charged: the same 7.42, so it stands
    assert (report.voided, report.issued) == ([], [])
    assert [(h.number, h.total) for h in headers(db, period=PERIOD, status="issued")] == [("GB-2026-000001",
                                                                                          Decimal("7.42"))]
