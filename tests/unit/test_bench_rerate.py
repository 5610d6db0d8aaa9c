"""`gpubill bench rerate` (gpubill/bench/rerate.py): its corrections are what it says, and a tiny run
reports every figure with its checks passing.

1. The price correction is an edit of a copy of the rule files: a new revision, the corrected
   model's price from 00:00 of the day in the billing time zone, every other rate as before.
2. The reattribution is a correction the pipeline would take (parse_correction), of a card of
   tenant-0 to tenant-1.
3. A tiny month end to end (16 cards in two 8-card tenants: tenant-0 on an RTX 4090 node,
   tenant-1 on an A800 node; 2 days, 2 per-second hours), built once with `keep` and re-rated
   twice on copies of it: the figures' keys, and its correctness checks (not its timings).
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from billing_rules import load_rules
from gpubill.bench.month_fleet import EXAMPLE_TOU_DIR, make_fleet
from gpubill.bench.rerate import CORRECTED_MODEL, bench_rerate, corrected_rules_dir, reattribution
from warehouse import writes

PERIOD = "2026-04"
APRIL_10_LOCAL = 1775750400  # 2026-04-09T16:00:00Z = 2026-04-10 00:00 Asia/Shanghai


def test_the_price_correction_is_a_new_version_of_one_model_from_the_day(tmp_path) -> None:
    before = load_rules(EXAMPLE_TOU_DIR)
    after = load_rules(corrected_rules_dir(EXAMPLE_TOU_DIR, tmp_path / "rules", PERIOD, 10))
    assert after.revision != before.revision
    start, end = after.period_bounds(PERIOD)
    # tenant-3 rents A800s hourly: ¥10.00 until the 10th, ¥9.50 from 00:00 local of the 10th
    pieces = after.rent_segments("tenant-3", CORRECTED_MODEL, start, end)
    assert [(lo, hi, rate.plan, rate.list_price) for lo, hi, rate in pieces] == [
        (start, APRIL_10_LOCAL, "hourly", Decimal("10.00")), (APRIL_10_LOCAL, end, "hourly", Decimal("9.50"))]
    # tenant-0 rents them monthly: ¥3,180.00 a month, then ¥3,000.00
    monthly = after.rent_segments("tenant-0", CORRECTED_MODEL, start, end)
    assert [rate.list_price for _, _, rate in monthly] == [Decimal("3180.00"), Decimal("3000.00")]
    for tenant, model in (("tenant-3", "RTX4090"), ("tenant-1", "H800-80G")):
        assert after.rent_segments(tenant, model, start, end) == before.rent_segments(tenant, model, start, end)
    assert after.energy_segments("gz-tou", start, end) == before.energy_segments("gz-tou", start, end)


def test_the_reattribution_is_a_correction_the_pipeline_takes() -> None:
    rules = load_rules(EXAMPLE_TOU_DIR)
    fleet = make_fleet(rules, PERIOD, 16, tenant_cards=8)
    logged = reattribution(fleet, fleet.start, fleet.start + 3 * 3600, now_s=fleet.end + 86_400)
    correction = logged.correction
    assert logged.status == "ok" and correction.kind == "reattribute"
    card = next(c for c in fleet.cards if c.gpu_uuid == correction.gpu_uuid)
    assert card.tenant == "tenant-0" and not card.released and logged.partition == card.partition
    assert correction.tenant == "tenant-1"
    assert correction.instance in {c.instance for c in fleet.cards if c.tenant == "tenant-1"}
    assert (correction.from_s, correction.to_s) == (fleet.start, fleet.start + 3 * 3600)
    assert correction.event_id.startswith("corr-")


KEYS = ("gpus", "days", "per_second_hours", "tenants", "build_s", "invoice_run_first_s", "invoices",
        "invoice_run_s_before", "usage_report_s_before", "rules_revision_before", "rules_revision_after",
        "touched_tenants", "dry_run_price_only_s", "dry_run_price_only_ok", "reattribution", "dry_run_s",
        "dry_run_differences", "dry_run_reattribution_moves", "dry_run_ok", "apply_s", "second_preview_differences",
        "invoices_voided", "credit_notes", "replacements", "invoice_run_s_after", "usage_report_s_after",
        "invoice_run_ratio", "usage_report_ratio", "total_s")


def test_a_tiny_month_re_rated_twice_from_one_kept_build(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(writes, "MARGIN_S", 0)
    keep = tmp_path / "keep"

    def run() -> dict:
        return bench_rerate(16, 2, per_second_hours=2, tenant_cards=8, keep=keep, settle_s=5, margin_s=1.1)

    first, second = run(), run()
    assert first["build_s"] is not None and second["build_s"] is None  # the second run reused the month
    for result in (first, second):
        for key in KEYS:
            assert key in result, key
        assert (result["gpus"], result["days"], result["tenants"], result["invoices"]) == (16, 2, 2, 2)
        assert result["rules_revision_before"] != result["rules_revision_after"]
        assert result["touched_tenants"] == ["tenant-0", "tenant-1"]
        # the A800 price cut (from the 2nd: the month is 2 days) lowers tenant-1's invoice only
        assert result["dry_run_price_only_ok"] is True
        assert Decimal(result["dry_run_differences"]["tenant-1"]) < 0
        assert result["dry_run_ok"] is True
        # the card-day moves money from tenant-0 to tenant-1 (beside the price cut)
        moves = {t: Decimal(d) for t, d in result["dry_run_reattribution_moves"].items()}
        assert set(moves) == {"tenant-0", "tenant-1"} and moves["tenant-0"] < 0 < moves["tenant-1"]
        assert Decimal(result["dry_run_differences"]["tenant-0"]) == moves["tenant-0"]
        assert result["apply_s"] is not None and result["second_preview_differences"] == 0
        # both issued invoices changed: each voided by a rerate credit note and replaced
        assert (result["invoices_voided"], result["credit_notes"], result["replacements"]) == (2, 2, 2)
    # each run re-rated a fresh copy: the same differences
    assert first["dry_run_differences"] == second["dry_run_differences"]
    assert (keep / "month" / "clickhouse").is_dir() and (keep / "run" / "clickhouse").is_dir()
