"""The log proves the projections (issue 25, item 5), end to end on the real broker and chDB:
`gpubill verify-log --period P` replays the readings topics and gpu.corrections.v1 into a
scratch database, prices them under the current rules, and sets each tenant's charges for the
period (rent + electricity + discounts, before credits and VAT) beside what the live database
bills for it now; exit 1 naming every tenant that differs.

The fixture and its figures are tests/e2e/test_pipeline_e2e.py's, worked out there by hand:

    acme  March 120 s × ¥1 = 120.00; 120 s × 1000 W × 1.12 × ¥330/kWh = 12.32      → 132.32
          late March data (+10 s, part 3): 130 s → 130.00 + 13.3466… → 13.35      → 143.35,
          charged on April's invoice as adjustments +10.00 and +1.03
          April 60 s → 60.00 + 6.16                                               →  66.16
    beta  March 60 s × ¥1 = 60.00, discount −6.00, 60 s × 400.5 W → 2.46708 → 2.47 →  56.47
          April 100 s × 31/30 → 103.33, discount −10.33, 100 s × 400.5 W → 4.11   →  97.11
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from decimal import Decimal
from fractions import Fraction

import pytest

from tests.e2e.conftest import FIXTURES
from tests.e2e.test_pipeline_e2e import electricity, fen
from tests.e2e.test_tenants_e2e import one_line_error

pytestmark = pytest.mark.e2e


def charges(*parts: str) -> str:
    """The sum of rounded lines (each already "x.yz"), as text with two decimals."""
    return f"{sum(Decimal(p) for p in parts):.2f}"


# Each line as the invoice rounds it, from the fixture by hand (Fraction, half up: fen()).
ACME_MARCH = charges(fen(Fraction(120)), fen(electricity(120, Fraction(1000))))                        # 132.32
ACME_MARCH_LATE = charges(fen(Fraction(130)), fen(electricity(130, Fraction(1000))))                   # 143.35
ACME_APRIL = charges(fen(Fraction(60)), fen(electricity(60, Fraction(1000))))                          # 66.16
BETA_MARCH = charges(fen(Fraction(60)), "-" + fen(Fraction(6)), fen(electricity(60, Fraction(4005, 10))))  # 56.47
BETA_APRIL = charges(fen(Fraction(100 * 31, 30)), "-" + fen(Fraction(100 * 31, 30) / 10),
                     fen(electricity(100, Fraction(4005, 10))))                                         # 97.11


def verified(gpubill, period: str):
    done = gpubill.run("verify-log", "--period", period, "--json", check=False)
    assert done.returncode in (0, 1), (done.stdout, done.stderr)
    report = json.loads(done.stdout)
    assert report["period"] == period and report["clean"] == (done.returncode == 0)
    assert f"verify-log {period}: replayed" in done.stderr  # progress while replaying
    return done.returncode, {t["tenant"]: (t["log"], t["billed"], t["difference"]) for t in report["tenants"]}


def test_verify_log_is_clean_on_true_projections_and_names_what_differs(gpubill):
    assert (ACME_MARCH, ACME_MARCH_LATE, ACME_APRIL, BETA_MARCH, BETA_APRIL) == (
        "132.32", "143.35", "66.16", "56.47", "97.11")
    for part in ("readings_part1.ndjson", "readings_part2.ndjson"):
        gpubill.run("replay", str(FIXTURES / part))
        gpubill.run("worker", "--drain")
    gpubill.run("tenant", "add", "acme", "--name", "Acme")
    gpubill.run("tenant", "add", "beta", "--name", "Beta 有限公司")
    gpubill.run("invoice", "run", "--period", "2026-03")  # GB-2026-000001 acme, GB-2026-000002 beta

    # -- 1. clean: the invoices' credits (acme's onboarding ¥150, beta's trial ¥10) are not charges
    code, tenants = verified(gpubill, "2026-03")
    assert code == 0
    assert tenants == {"acme": (ACME_MARCH, ACME_MARCH, "0.00"), "beta": (BETA_MARCH, BETA_MARCH, "0.00")}
    text = gpubill.run("verify-log", "--period", "2026-03").stdout
    assert "verify-log 2026-03: clean" in text and "132.32" in text

    # -- 2. late March data, charged on April's invoices: March is billed 132.32 + 10.00 + 1.03
    gpubill.run("replay", str(FIXTURES / "readings_part3.ndjson"))
    gpubill.run("worker", "--drain")
    gpubill.run("invoice", "run", "--period", "2026-04")  # GB-2026-000003 acme, GB-2026-000004 beta
    code, tenants = verified(gpubill, "2026-03")
    assert code == 0
    assert tenants["acme"] == (ACME_MARCH_LATE, ACME_MARCH_LATE, "0.00")
    code, tenants = verified(gpubill, "2026-04")  # April's own lines only, not March's adjustments
    assert code == 0
    assert tenants == {"acme": (ACME_APRIL, ACME_APRIL, "0.00"), "beta": (BETA_APRIL, BETA_APRIL, "0.00")}

    # -- 3. a goodwill credit note of 5.00 on beta's March rent: billed 56.47 − 5.00 = 51.47, exit 1
    gpubill.run("credit-note", "create", "--invoice", "GB-2026-000002", "--reason", "goodwill", "--line", "1=5.00")
    done = gpubill.run("verify-log", "--period", "2026-03", check=False)
    assert done.returncode == 1
    assert "DIFFERENCE beta: billed 51.47, the log 56.47 (-5.00 CNY before credits and VAT)" in done.stdout
    assert "DIFFERENCE acme" not in done.stdout
    assert "1 tenant(s) billed otherwise than the log proves" in done.stderr
    code, tenants = verified(gpubill, "2026-03")
    assert code == 1 and tenants["beta"] == (BETA_MARCH, "51.47", "-5.00") and tenants["acme"][2] == "0.00"

    # -- 4. void it (the void's note credits the rest) and issue the replacement: the voided
    #   invoice and both its notes count for nothing, the replacement bills 56.47 again
    gpubill.run("invoice", "void", "GB-2026-000002", "--reason", "billed under the wrong contract")
    gpubill.run("invoice", "run", "--period", "2026-03")  # GB-2026-000005, replacing GB-2026-000002
    code, tenants = verified(gpubill, "2026-03")
    assert code == 0 and tenants["beta"] == (BETA_MARCH, BETA_MARCH, "0.00")

    # -- 5. a reattribution on the log: beta's RTX 4090 in 15:59:00–15:59:30 (30 of its 60 March
    #   seconds) was acme's. The log proves the corrected figures at once; the live database bills
    #   them once the period is re-rated (`rerate --apply`: void, credit note, replacement).
    #   beta: 30 s × ¥1 = 30.00, discount −3.00, 30 s × 400.5 W → 1.23354 → 1.23          = 28.23
    #   acme: A800 130.00; RTX 4090 on the hourly default, 30 s × ¥1.25/3600 = 0.0104… → 0.01;
    #         one electricity line (same site, band, PUE): 130 s × 1000 W + 30 s × 400.5 W
    #         = 142,015 J → 14.5802… → 14.58                                              = 144.59
    beta_moved = charges(fen(Fraction(30)), "-" + fen(Fraction(3)), fen(electricity(30, Fraction(4005, 10))))
    acme_moved = charges(fen(Fraction(130)), fen(Fraction(30) * Fraction(125, 100) / 3600),
                         fen(electricity(130, Fraction(1000)) + electricity(30, Fraction(4005, 10))))
    assert (beta_moved, acme_moved) == ("28.23", "144.59")
    gpubill.run("correct", "reattribute", "--gpu", "GR1", "--from", "2026-03-31T15:59:00Z",
                "--to", "2026-03-31T15:59:30Z", "--tenant", "acme", "--reason", "card lent to acme")
    code, tenants = verified(gpubill, "2026-03")
    assert code == 1
    assert tenants == {"acme": (acme_moved, ACME_MARCH_LATE, "-1.24"), "beta": (beta_moved, BETA_MARCH, "28.24")}
    gpubill.run("corrections", "sync")
    gpubill.run("rerate", "--period", "2026-03", "--apply")
    code, tenants = verified(gpubill, "2026-03")
    assert code == 0
    assert tenants == {"acme": (acme_moved, acme_moved, "0.00"), "beta": (beta_moved, beta_moved, "0.00")}

    # -- 6. a rated second no reading supports, in the live database, then billed: the next
    #   invoice run charges it on acme's May invoice as March's late data (+¥1.00 of rent)
    from schemas.tables import RATED_SECONDS
    from warehouse.connection import open_database
    from warehouse.writes import stamp_hours

    second = 1774972000  # 2026-03-31T15:46:40Z: 23:46:40 in Shanghai, March
    with open_database(gpubill.env["GPUBILL_CLICKHOUSE"]) as database:
        bogus = {c: 0 for c in RATED_SECONDS} | {
            "stream": "rent", "gpu_uuid": "GHOST", "second": second, "period": "2026-03", "tenant": "acme",
            "instance": "", "gpu_model": "A800-80G", "site": "gz-guian", "node": "", "plan": "hourly",
            "rent_price": Decimal(3600), "rent_per_s": 3600, "discount_pct": Decimal(0), "util_pct": Decimal(0),
            "band": "", "tariff_per_kwh": Decimal(0), "pue": Decimal(0), "rated_at": datetime.now(timezone.utc)}
        database.insert("rated_seconds", [tuple(bogus[c] for c in RATED_SECONDS)], RATED_SECONDS)
        stamp_hours(database, [("2026-03", second // 3600 * 3600)])
    gpubill.run("invoice", "run", "--period", "2026-05")
    code, tenants = verified(gpubill, "2026-03")
    assert code == 1
    assert tenants["acme"] == (acme_moved, charges(acme_moved, fen(Fraction(1))), "1.00")  # 145.59
    assert tenants["beta"][2] == "0.00"
    done = gpubill.run("verify-log", "--period", "2026-03", check=False)
    assert "DIFFERENCE acme: billed 145.59, the log 144.59 (+1.00 CNY" in done.stdout


def test_verify_log_refuses_an_unfinished_period_a_truncated_log_and_an_unreachable_broker(gpubill, broker):
    assert "--period 2099-01 has not ended" in one_line_error(
        gpubill.run("verify-log", "--period", "2099-01", check=False))

    # retention (or anyone) dropped the oldest message of a readings partition: no proof is possible
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

    gpubill.run("replay", str(FIXTURES / "readings_part2.ndjson"))
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    partitions = [TopicPartition("gpu.usage.v1", p) for p in sorted(consumer.partitions_for_topic("gpu.usage.v1"))]
    used = next(tp for tp, end in consumer.end_offsets(partitions).items() if end > 0)
    consumer.close()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.delete_records({used: 1})
    admin.close()
    assert f"the readings log is not whole (gpu.usage.v1[{used.partition}] starts at offset 1)" in one_line_error(
        gpubill.run("verify-log", "--period", "2026-03", check=False))

    gpubill.env["GPUBILL_KAFKA"] = "localhost:1"  # nothing listens there
    assert "no Kafka broker answers at localhost:1" in one_line_error(
        gpubill.run("verify-log", "--period", "2026-03", check=False))
