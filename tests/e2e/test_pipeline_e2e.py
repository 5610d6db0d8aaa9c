"""Readings in Kafka → Faust worker → chDB → invoices, on real parts, checked to the fen.

The fixture (tests/e2e/fixtures/make_readings.py says what is in it) is replayed into a
real broker and drained by `gpubill worker --drain` into chDB. Every expected figure below
is worked out by hand from the fixture and the test rules (tests/e2e/rules):

    acme  A800-80G hourly  ¥3600/h = ¥1 per second; onboarding credit ¥150 usable in March only
    beta  RTX4090 monthly  ¥2,678,400/month: ¥1/s in March (31 d = 2,678,400 s),
                           ¥2,678,400 / 2,592,000 = ¥31/30 per second in April (30 d);
                           contract discount 10 % (its own invoice line)
    gz-guian  PUE 1.12, ¥330/kWh;  1 kWh = 3,600,000,000 mJ;  VAT 6 %;  trial credit ¥10
              (both tenants are registered before the first invoice run: `gpubill tenant add`)
"""

from __future__ import annotations

import json
from decimal import Decimal
from fractions import Fraction

import pytest

from tests.e2e.conftest import FIXTURES

pytestmark = pytest.mark.e2e

PUE, TARIFF, MJ_PER_KWH = Fraction(112, 100), Fraction(330), 3_600_000_000


def fen(x: Fraction) -> str:
    """Half up to two decimals, written independently of billing_rules.round_fen."""
    return str(Decimal(x.numerator * 100 // x.denominator + (1 if (x * 100) % 1 >= Fraction(1, 2) else 0)) / 100
               ) if x >= 0 else "-" + fen(-x)


def electricity(seconds: int, watts: Fraction) -> Fraction:
    return seconds * watts * 1000 * PUE * TARIFF / MJ_PER_KWH


def lines_by_kind(invoice: dict) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for line in invoice["lines"]:
        grouped.setdefault(line["kind"], []).append(line)
    return grouped


def test_fen_helper_is_half_up():
    assert [fen(Fraction(x)) for x in ("2.46708", "7.3392", "3.1482", "0.005", "103.33333")] == [
        "2.47", "7.34", "3.15", "0.01", "103.33"]


def test_readings_to_invoices_to_the_fen(gpubill):
    # -- 1. replay and drain; part 2 brings late usage and old duplicates to a new worker
    replayed = gpubill.run("replay", str(FIXTURES / "readings_part1.ndjson"))
    assert "2 dead-lettered by replay" in replayed.stdout
    gpubill.run("worker", "--drain")
    gpubill.run("replay", str(FIXTURES / "readings_part2.ndjson"))
    gpubill.run("worker", "--drain")

    # -- 2. invoice March: acme first (sorted), then beta; numbers are gap-free. Both are
    #   registered first, as customers are: only a registered, active tenant gets the trial
    gpubill.run("tenant", "add", "acme", "--name", "Acme")
    gpubill.run("tenant", "add", "beta", "--name", "Beta 有限公司")
    gpubill.run("invoice", "run", "--period", "2026-03")
    acme = gpubill.json("invoice", "show", "--period", "2026-03", "--tenant", "acme", "--format", "json")
    beta = gpubill.json("invoice", "show", "--period", "2026-03", "--tenant", "beta", "--format", "json")
    assert (acme["number"], beta["number"]) == ("GB-2026-000001", "GB-2026-000002")
    assert acme["status"] == beta["status"] == "issued"  # review = "auto": issued at once

    # acme March: 120 s × ¥1 = ¥120.00 rent; 120 s × 1000 W = 1.2e8 mJ → 0.037333 billed kWh
    #   × ¥330 = ¥12.32; subtotal 132.32; the onboarding credit expires first, so it is spent
    #   first: −132.32 (¥17.68 of it left, lost after March); the trial ¥10 is untouched;
    #   net 0.00; VAT 0.00; total 0.00
    lines = lines_by_kind(acme)
    assert [(l["gpu_model"], l["plan"], l["quantity"], l["unit_price"], l["amount"]) for l in lines["rent"]] == [
        ("A800-80G", "hourly", "0.033333", "3600.000000", "120.00")]
    assert [(l["site"], l["band"], l["pue"], l["quantity"], l["amount"]) for l in lines["electricity"]] == [
        ("gz-guian", "flat", "1.12", "0.037333", fen(electricity(120, Fraction(1000))))]
    assert fen(electricity(120, Fraction(1000))) == "12.32"
    assert [(l["credit_id"], l["description"], l["amount"]) for l in lines["credit"]] == [
        ("acme-onboarding", "Onboarding credit, contract 2026-001", "-132.32")]
    assert (acme["subtotal"], acme["net"], acme["tax"], acme["total"]) == ("132.32", "0.00", "0.00", "0.00")

    # beta March: 60 s × ¥1 = ¥60.00 (the conflicting 4999 W reading does not count);
    #   discount 10 % of 60.00 = −6.00; 60 s × 400.5 W = 24,030,000 mJ → × 1.12 × 330 / 3.6e9
    #   = ¥2.46708 → 2.47; subtotal 60.00 + 2.47 = 62.47; − 6.00 − 10.00 credit = net 46.47;
    #   VAT 2.7882 → 2.79; total 49.26
    lines = lines_by_kind(beta)
    assert [(l["gpu_model"], l["plan"], l["amount"]) for l in lines["rent"]] == [("RTX4090", "monthly", "60.00")]
    assert [(l["gpu_model"], l["amount"]) for l in lines["discount"]] == [("RTX4090", "-6.00")]
    assert [l["amount"] for l in lines["electricity"]] == [fen(electricity(60, Fraction(4005, 10)))] == ["2.47"]
    assert [l["amount"] for l in lines["credit"]] == ["-10.00"]
    assert (beta["subtotal"], beta["net"], beta["tax"], beta["total"]) == ("62.47", "46.47", "2.79", "49.26")

    # the run rolled March's hours up first, and read them from the rollups
    assert "0 hours rolled up" in gpubill.run("rollup", "--period", "2026-03").stdout

    # -- 3. late March data for acme after March was finalized and rolled up: March does not change
    gpubill.run("replay", str(FIXTURES / "readings_part3.ndjson"))
    gpubill.run("worker", "--drain")
    rolled = gpubill.run("rollup")  # the hours the late data landed in are rolled up again
    assert "0 hours rolled up" not in rolled.stdout and "2026-03" in rolled.stderr
    # every offset a drain processed was committed: a second drain finds nothing to do
    assert "nothing to drain" in gpubill.run("worker", "--drain").stdout
    rerun = gpubill.run("invoice", "run", "--period", "2026-03")
    assert "0 invoices created, 2 already final" in rerun.stdout
    assert gpubill.json("invoice", "show", "--period", "2026-03", "--tenant", "acme", "--format", "json") == acme

    # -- 4. April carries the late March data as adjustments referencing 2026-03
    gpubill.run("invoice", "run", "--period", "2026-04")
    acme4 = gpubill.json("invoice", "show", "--period", "2026-04", "--tenant", "acme", "--format", "json")
    beta4 = gpubill.json("invoice", "show", "--period", "2026-04", "--tenant", "beta", "--format", "json")
    assert (acme4["number"], beta4["number"]) == ("GB-2026-000003", "GB-2026-000004")

    # acme April: 60 s → ¥60.00; 6e7 mJ → ¥6.16. Adjustments for March: rent 130 − 120 = +10.00
    #   (10 s = 0.002778 GPU-h at ¥3600/h); electricity 130 s × 1000 W → ¥13.3466… → 13.35, minus
    #   12.32 already billed = +1.03. subtotal 60.00 + 6.16 + 10.00 + 1.03 = 77.19; the onboarding
    #   credit expired with March; the trial ¥10 is spent: net 67.19; VAT 4.0314 → 4.03; total 71.22
    lines = lines_by_kind(acme4)
    assert [l["amount"] for l in lines["rent"]] == ["60.00"]
    assert [l["amount"] for l in lines["electricity"]] == [fen(electricity(60, Fraction(1000)))] == ["6.16"]
    assert sorted((l["ref_period"], l.get("gpu_model", ""), l.get("site", ""), l["quantity"], l["amount"])
                  for l in lines["adjustment"]) == sorted([
        ("2026-03", "A800-80G", "", "0.002778", "10.00"),
        ("2026-03", "", "gz-guian", "0.003111",  # 10 s × 1000 W = 1e7 mJ × 1.12 / 3.6e9 kWh
         fen(Fraction(Decimal(fen(electricity(130, Fraction(1000)))) - Decimal("12.32")))),
    ])
    assert [(l["credit_id"], l["amount"]) for l in lines["credit"]] == [("trial", "-10.00")]
    assert (acme4["subtotal"], acme4["net"], acme4["tax"], acme4["total"]) == ("77.19", "67.19", "4.03", "71.22")

    # beta April: 100 s × 31/30 = ¥103.333… → 103.33 (80 s arrived in part 1, the last 20 s of
    #   usage only in part 2, after their power had been rated unallocated by another worker);
    #   discount 10 % of 103.333… = −10.3333… → −10.33; electricity 100 s × 400.5 W → ¥4.1118 → 4.11;
    #   subtotal 107.44; net 107.44 − 10.33 = 97.11 (the trial credit went in March);
    #   VAT 5.8266 → 5.83; total 102.94
    lines = lines_by_kind(beta4)
    assert [(l["plan"], l["quantity"], l["amount"]) for l in lines["rent"]] == [
        ("monthly", "0.027778", fen(Fraction(100 * 31, 30)))]
    assert [l["amount"] for l in lines["electricity"]] == [fen(electricity(100, Fraction(4005, 10)))] == ["4.11"]
    assert [l["amount"] for l in lines["discount"]] == ["-" + fen(Fraction(100 * 31, 30) / 10)] == ["-10.33"]
    assert (beta4["subtotal"], beta4["net"], beta4["tax"], beta4["total"]) == ("107.44", "97.11", "5.83", "102.94")

    # -- 5. dead letters: 2 refused by replay (kind unreadable), 6 by the worker, each with a reason
    dead = gpubill.json("dlq", "list", "--limit", "50", "--format", "json")
    reasons = sorted(d["reason"] for d in dead)
    assert len(dead) == 8, reasons
    part1 = (FIXTURES / "readings_part1.ndjson").read_text().splitlines()
    not_json = part1.index("this is not json") + 1
    for expected in (f"line {not_json}: kind", f"line {not_json + 1}: kind", "gpu_uuid: missing field", "power_w: must be between 0 and 5000",
                     "site: unknown site 'mars-1'", "gpu_model: unknown model 'TPUv9'", "ts: must carry a UTC offset",
                     "more than 10 minutes in the future"):
        assert any(expected in reason for reason in reasons), (expected, reasons)
    assert {d["original"] for d in dead} >= {"this is not json"}
    assert all(d["source_topic"] in ("gpu.usage.v1", "gpu.power.v1") for d in dead if not d["source_line"])

    # -- 6. cost share: GA2's 60 s × 300 W are idle cost: 1.8e7 mJ → ¥1.848 → 1.85 (never billed)
    share = gpubill.json("report", "cost-share", "--period", "2026-03", "--format", "json")["rows"]
    a800 = next(r for r in share if r["gpu_model"] == "A800-80G")
    assert a800["cards"] == 2
    assert a800["electricity_unallocated"] == fen(electricity(60, Fraction(300))) == "1.85"
    assert a800["rent_revenue"] == "130.00"  # 130 s of acme after the late data

    # what-if under the shipped rules: there acme's A800 is on a ¥3,180/month contract:
    #   130 s × 3180 / 2,678,400 s = ¥0.15434 → 0.15; energy of both A800 cards at ¥0.33/kWh:
    #   (130 s × 1000 W + 60 s × 300 W) = 1.48e8 mJ × 1.12 × 0.33 / 3.6e9 = ¥0.015195 → 0.02
    from billing_rules import DEFAULT_RULES_DIR

    compared = gpubill.json("report", "cost-share", "--period", "2026-03", "--format", "json",
                            "--what-if-rules", str(DEFAULT_RULES_DIR))["what_if"]
    a800_then = next(r for r in compared if r["gpu_model"] == "A800-80G")
    assert (a800_then["what_if_rent"], a800_then["what_if_electricity"]) == (
        fen(Fraction(130 * 3180, 2_678_400)), fen(Fraction(148_000_000) * Fraction(112, 100) * Fraction(33, 100) / MJ_PER_KWH))
    assert (a800_then["what_if_rent"], a800_then["what_if_electricity"]) == ("0.15", "0.02")

    # -- 7. usage report: only acme's card, never beta's
    report = gpubill.run("report", "usage", "--tenant", "acme", "--period", "2026-03", "--format", "json",
                         "--out", str(gpubill.cwd / "acme.json"))
    assert report.returncode == 0
    rows = json.loads((gpubill.cwd / "acme.json").read_text())["rows"]
    assert {r["gpu_uuid"] for r in rows} == {"GA1"}
    assert sum(Decimal(r["rent"]) for r in rows) == Decimal("130.00")

    # -- 8. the self-audit recomputes both months from the raw readings: no difference
    for period in ("2026-03", "2026-04"):
        assert "clean" in gpubill.run("audit", "--period", period).stdout

    # -- 9. finance reads the same figures from ClickHouse views (the CLI has exited: no lock)
    from warehouse.connection import open_database

    with open_database(gpubill.env["GPUBILL_CLICKHOUSE"]) as database:
        rows = database.query(
            "SELECT tenant, rented_seconds, energy_mj_total, rent_cny_unrounded FROM v_usage_by_tenant "
            "WHERE period = '2026-03' AND tenant != '' ORDER BY tenant"
        )
    # acme: 130 s (after the late data) × ¥1; 130 × 1,000,000 mJ. beta: 60 s × ¥1; 60 × 400,500 mJ
    assert [(t, int(s), int(mj), Decimal(rent)) for t, s, mj, rent in rows] == [
        ("acme", 130, 130_000_000, Decimal(130)), ("beta", 60, 24_030_000, Decimal(60))]

    # -- 10. the audit can fail: a rated second no reading supports is found
    from datetime import datetime, timezone

    from schemas.tables import RATED_SECONDS
    from warehouse.writes import stamp_hours

    with open_database(gpubill.env["GPUBILL_CLICKHOUSE"]) as database:
        bogus = {c: 0 for c in RATED_SECONDS} | {
            "stream": "rent", "gpu_uuid": "GHOST", "second": 1774972000, "period": "2026-03", "tenant": "acme",
            "instance": "", "gpu_model": "A800-80G", "site": "gz-guian", "node": "", "plan": "hourly",
            "rent_price": Decimal(3600), "rent_per_s": 3600, "discount_pct": Decimal(0), "util_pct": Decimal(0),
            "band": "", "tariff_per_kwh": Decimal(0), "pue": Decimal(0), "rated_at": datetime.now(timezone.utc)}
        database.insert("rated_seconds", [tuple(bogus[c] for c in RATED_SECONDS)], RATED_SECONDS)
        stamp_hours(database, [("2026-03", 1774972000 // 3600 * 3600)])  # as every writer does (warehouse/writes.py)
    audited = gpubill.run("audit", "--period", "2026-03", check=False)
    assert audited.returncode == 1
    assert "DIFFERENCE acme rent_seconds: raw 130 vs rated 131" in audited.stdout

    # -- 11. ... and so can a rolled-up hour that no longer equals the per-second rows it came from
    gpubill.run("rollup")
    with open_database(gpubill.env["GPUBILL_CLICKHOUSE"]) as database:
        database.command("ALTER TABLE rated_hours UPDATE seconds = seconds + 1 WHERE tenant = 'beta' "
                         "SETTINGS mutations_sync = 1")
    audited = gpubill.run("audit", "--period", "2026-03", check=False)
    assert audited.returncode == 1
    assert "DIFFERENCE (unallocated) rollup of hour 2026-03-" in audited.stdout
