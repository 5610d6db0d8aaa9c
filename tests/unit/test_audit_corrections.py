"""The audit's raw side applies the period's stored corrections (reports/audit.py, _RAW_SQL), per card
in log order as usage/corrections.py says — so that data rated as corrected audits clean, and the
figures are the hand-worked ones below."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

import pytest

from billing_rules import DEFAULT_RULES_DIR, load_rules, round_fen
from reports.audit import Difference, Figures, audit
from schemas.corrections import parse_correction
from schemas.events import PowerReading, UsageReading
from streams.corrections_sync import take_corrections
from streams.kafka.corrections import LoggedCorrection
from streams.rating.reference import Outcome, Rater
from streams.sink import ClickHouseSink
from tests.chdb_template import migrated_dsn
from usage.corrections import apply_to_usage, covered, power_voided, stored_corrections
from warehouse.connection import open_database

RULES = load_rules(DEFAULT_RULES_DIR)
T = 1_772_323_200 + 3600  # 2026-03-01T01:00:00Z, inside March (Asia/Shanghai)
NOW_S = T + 86_400
NOW = datetime.fromtimestamp(NOW_S, UTC)
U = 600  # a block of ten minutes: G1 runs ten blocks, G2 one
W = 1000  # every card draws 1000 W: 1,000,000 mJ a second


def iso(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def usage(gpu: str, second: int, tenant: str | None) -> UsageReading:
    return UsageReading.model_validate({
        "kind": "usage", "event_id": f"{gpu}-u-{second}", "ts": iso(second), "site": "gz-guian", "node": "n1",
        "gpu_uuid": gpu, "gpu_model": "A800-80G", "tenant": tenant, "instance": "i-1", "util_pct": 50,
        "mem_used_mib": 1})


def power(gpu: str, second: int) -> PowerReading:
    return PowerReading.model_validate({
        "kind": "power", "event_id": f"{gpu}-p-{second}", "ts": iso(second), "site": "gz-guian", "node": "n1",
        "gpu_uuid": gpu, "power_w": W})


# G1's corrections in log order (partition 0, these offsets), by block of U seconds from T:
CORRECTIONS = [
    (0, {"kind": "reattribute", "from": 2, "to": 6, "tenant": "beta"}),
    (1, {"kind": "void_readings", "from": 4, "to": 5, "stream": "usage"}),
    (2, {"kind": "reattribute", "from": 4, "to": 5, "tenant": "mallory"}),  # after the void: nothing to move
    (3, {"kind": "reattribute", "from": 8, "to": 10, "tenant": None}),  # nobody
    (4, {"kind": "void_readings", "from": 9, "to": 10, "stream": "power"}),
    (5, {"kind": "reattribute", "from": 5, "to": 6, "tenant": "acme"}),  # later in the log: back to acme
]


def logged_corrections() -> list[LoggedCorrection]:
    out = []
    for offset, spec in CORRECTIONS:
        document = {**spec, "event_id": f"c-{offset}", "gpu_uuid": "G1", "from": iso(T + spec["from"] * U),
                    "to": iso(T + spec["to"] * U), "reason": "test", "author": "os:finance"}
        raw = json.dumps(document).encode()
        out.append(LoggedCorrection(0, offset, NOW_S * 1000, parse_correction(raw, NOW_S), "ok", "", raw))
    # another card's correction in April changes nothing of March
    raw = json.dumps({"kind": "void_readings", "event_id": "c-april", "gpu_uuid": "G2", "from": "2026-04-02T00:00:00Z",
                      "to": "2026-04-03T00:00:00Z", "stream": "both", "reason": "x", "author": "os:finance"}).encode()
    out.append(LoggedCorrection(1, 0, NOW_S * 1000, parse_correction(raw, NOW_S + 40 * 86_400), "ok", "", raw))
    return out


def readings() -> list:
    """G1: acme for ten blocks, G2: acme for one; usage then power, second by second."""
    out = []
    for gpu, blocks in (("G1", 10), ("G2", 1)):
        for second in range(T, T + blocks * U):
            out += [usage(gpu, second, "acme"), power(gpu, second)]
    return out


def as_corrected(stored) -> list:
    """The readings as a re-rating with the corrections sees them (usage/corrections.py's functions)."""
    out = []
    for reading in readings():
        on_it = covered(stored, reading.gpu_uuid, reading.second)
        if reading.kind == "power":
            if not power_voided(on_it):
                out.append(reading)
            continue
        counts, tenant, _ = apply_to_usage(on_it, reading.tenant, reading.instance)
        if counts:
            out.append(usage(reading.gpu_uuid, reading.second, tenant))
    return out


def rate(items) -> Outcome:
    out, rater = Outcome(), Rater(RULES)
    for offset, reading in enumerate(items):
        rater.rate(reading, 0, offset, NOW, out)
    return out


@pytest.fixture()
def db(tmp_path):
    with open_database(migrated_dsn(tmp_path / "db")) as database:
        yield database


def test_the_raw_side_applies_reattributions_and_voids_in_log_order(db) -> None:
    # The raw readings as they came (a correction of a card without readings is refused), the
    # rated rows as a re-rating with the corrections makes them.
    raw = rate(readings())
    ClickHouseSink(db).write(Outcome(raw.readings_usage, raw.readings_power))
    take_corrections(db, logged_corrections(), NOW_S + 40 * 86_400)
    stored = stored_corrections(db, T, T + 10 * U)
    assert [c.event_id for c in stored] == [f"c-{n}" for n in range(6)]
    ClickHouseSink(db).write(Outcome(rated=rate(as_corrected(stored)).rated))
    figures, differences = audit(db, RULES, "2026-03")

    # G1's blocks: 0 1 acme · 2 3 beta · 4 voided usage (energy unallocated; mallory's move after
    # the void brings nothing back) · 5 beta, then acme again (the later correction) · 6 7 acme ·
    # 8 nobody (energy unallocated) · 9 nobody, its power voided (no energy). G2's one block: acme.
    acme_s, beta_s, unallocated_s = (5 + 1) * U, 2 * U, 2 * U  # 3,600 s, 1,200 s, 1,200 s
    mj = 1_000_000  # a second at 1000 W
    # acme's monthly A800: ¥3180 over March's 2,678,400 s; beta list price ¥10/h
    acme_rent = Fraction(3180) * acme_s / 2_678_400  # = 3180/744 = ¥4.274… → ¥4.27
    beta_rent = Fraction(10) * beta_s / 3600  # = ¥3.333… → ¥3.33
    # energy: mJ / 3.6e9 kWh × PUE 1.12 × ¥0.33/kWh
    kwh_price = Fraction("1.12") * Fraction("0.33") / 3_600_000_000
    assert figures == {
        "acme": Figures(acme_s, acme_s * mj, round_fen(acme_rent), round_fen(acme_s * mj * kwh_price)),  # 1 kWh: ¥0.37
        "beta": Figures(beta_s, beta_s * mj, round_fen(beta_rent), round_fen(beta_s * mj * kwh_price)),  # ¥0.1232
        "": Figures(0, unallocated_s * mj, Decimal("0.00"), round_fen(unallocated_s * mj * kwh_price)),
    }
    assert (figures["acme"].rent, figures["beta"].rent, figures["acme"].electricity) == (
        Decimal("4.27"), Decimal("3.33"), Decimal("0.37"))
    assert differences == []  # rated as corrected: the audit is clean


def test_data_rated_without_the_corrections_differs_where_they_apply(db) -> None:
    raw = rate(readings())
    ClickHouseSink(db).write(Outcome(raw.readings_usage, raw.readings_power, raw.rated))
    assert audit(db, RULES, "2026-03")[1] == []  # no corrections stored yet: clean
    take_corrections(db, logged_corrections(), NOW_S + 40 * 86_400)

    differences = audit(db, RULES, "2026-03")[1]

    # rated: acme 11 blocks = 6,600 s; raw with the corrections: acme 3,600 s, beta 1,200 s
    assert Difference("acme", "rent_seconds", 3600, 6600) in differences
    assert Difference("beta", "rent_seconds", 1200, 0) in differences
    assert Difference("", "energy_mj", 1_200_000_000, 0) in differences
