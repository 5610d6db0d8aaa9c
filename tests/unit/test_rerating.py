"""One rater for every path: a card-hour rated again from its stored readings (usage/rerating.py,
what re-rating and the worker's corrected card-hours use) gives the rows the streaming
reference rater converged to — content and version — with counters, gaps, resets and late
readings; and a correction applies on top of it (voided power takes its seconds' energy
away, nothing else)."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from billing_rules import DEFAULT_RULES_DIR, load_rules
from schemas.events import PowerReading, UsageReading
from schemas.tables import RATED_SECONDS
from streams.rating.reference import Outcome, Rater
from streams.sink import ClickHouseSink
from tests.chdb_template import migrated_dsn
from usage.rerating import drop_run, rate_corrected
from warehouse.connection import open_database

RULES = load_rules(DEFAULT_RULES_DIR)
H = 1_772_323_200 + 3600  # 2026-03-01T01:00:00Z: an hour of March (2026-03 in Asia/Shanghai)
NOW = datetime(2026, 3, 1, 2, 5, tzinfo=UTC)
IDENTITY = (0, 0, "", 0, "", 0)  # (usage void, reattributed, tenant, instance given, instance, power void)


@pytest.fixture
def db(tmp_path):
    with open_database(migrated_dsn(tmp_path / "ch")) as database:
        yield database


def _ts(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _card(seed: int) -> list:
    """A card's readings over [H − 20, H + 120): lost readings, a reset, an epoch change, a
    reading without counter; rented by acme, then idle, then beta."""
    rng, readings, counter, epoch = random.Random(seed), [], 10**9, "boot-1"
    for second in range(H - 20, H + 120):
        tenant = "acme" if second < H + 40 else None if second < H + 60 else "beta"
        if rng.random() < 0.9:
            readings.append(UsageReading.model_validate({
                "kind": "usage", "event_id": f"u{second}", "ts": _ts(second), "site": "gz-guian", "node": "n1",
                "gpu_uuid": "G1", "gpu_model": "A800-80G", "tenant": tenant, "instance": "i-1" if tenant else None,
                "util_pct": 50, "mem_used_mib": 1}))
        counter += rng.randrange(200_000, 900_000)
        if second == H + 30:
            counter = 5  # the driver reloaded...
        if second == H + 31:
            epoch = "boot-2"  # ...and the agent noticed a second later
        if rng.random() < 0.7:
            doc = {"kind": "power", "event_id": f"p{second}", "ts": _ts(second), "site": "gz-guian", "node": "n1",
                   "gpu_uuid": "G1", "power_w": Decimal(rng.randrange(100_000, 900_000)) / 1000}
            if second != H + 50:
                doc |= {"energy_mj": counter, "energy_epoch": epoch}
            readings.append(PowerReading.model_validate(doc))
    return readings


def _stream(db, readings: list, seed: int) -> dict:
    """Rate in a shuffled order in batches (the offsets stay those of partition order) and write."""
    order = [(r, offset) for offset, r in enumerate(readings)]
    random.Random(seed).shuffle(order)
    rater, sink, kept = Rater(RULES), ClickHouseSink(db), {}
    for start in range(0, len(order), 37):
        out = Outcome()
        for reading, offset in sorted(order[start:start + 37], key=lambda item: item[0].kind == "power"):
            rater.rate(reading, 0, offset, NOW, out)
        sink.write(out)
        for values in out.rated:
            row = dict(zip(RATED_SECONDS, values))
            key = (row["stream"], row["second"])
            if key not in kept or row["version"] > kept[key]["version"]:
                kept[key] = row
    return kept


def _content(row: dict) -> tuple:
    second = row["second"]
    second = int(second.timestamp()) if isinstance(second, datetime) else second
    return (row["stream"], second, row["tenant"], row["instance"], row["gpu_model"], row["site"], row["node"],
            row["plan"], Decimal(row["rent_price"]), row["rent_per_s"], Decimal(row["discount_pct"]),
            Decimal(row["util_pct"]), row["energy_mj"], row["band"], Decimal(row["tariff_per_kwh"]),
            Decimal(row["pue"]), row["version"], row["src_partition"], row["src_offset"], row["measured"])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rated_again_from_the_readings_equals_what_the_stream_converged_to(db, seed) -> None:
    streamed = _stream(db, _card(seed), seed)
    assert any(row["measured"] for row in streamed.values()) and any(
        row["stream"] == "energy" and not row["measured"] for row in streamed.values())
    written = rate_corrected(db, RULES, "2026-03", 7, [("G1", H, H + 3600, *IDENTITY)])
    again = {(_content(r)) for r in db.query_dicts("SELECT * FROM rerate_seconds WHERE run = 7")}
    # the stream's rows of the hour, less the 0 mJ seconds a late reading withdrew (the
    # definition has no row for them; the switch deletes them: regenerate._rewrite_seconds;
    # every reading here draws at least 100 W, so no estimated second has 0 mJ)
    hour = [r for (_, second), r in streamed.items() if H <= second < H + 3600]
    withdrawn = [r for r in hour if r["stream"] == "energy" and not r["energy_mj"] and not r["measured"]]
    assert again == {_content(r) for r in hour} - {_content(r) for r in withdrawn}
    assert written == len(again)
    drop_run(db, 7)
    assert db.query("SELECT count() FROM rerate_seconds")[0][0] == 0


def test_voided_power_takes_away_its_seconds_energy_and_leaves_the_neighbours(db) -> None:
    readings = []
    for second, counter in ((H + 10, 0), (H + 12, 1_000_000), (H + 14, 3_000_000)):
        readings.append(PowerReading.model_validate({
            "kind": "power", "event_id": f"p{second}", "ts": _ts(second), "site": "gz-guian", "node": "n1",
            "gpu_uuid": "G1", "power_w": 100, "energy_mj": counter, "energy_epoch": "b"}))
    _stream(db, readings, 0)
    # (H+10, H+12]: 1,000,000 over 2 s → 500,000 each; (H+12, H+14]: 2,000,000 → 1,000,000 each.
    # Voiding the power of [H+12, H+13) takes away the 500,000 of H+12 only.
    rate_corrected(db, RULES, "2026-03", 8, [("G1", H, H + 12, *IDENTITY), ("G1", H + 12, H + 13, 0, 0, "", 0, "", 1),
                                             ("G1", H + 13, H + 3600, *IDENTITY)])
    energy = dict(db.query("SELECT toUnixTimestamp(second), energy_mj FROM rerate_seconds WHERE run = 8 "
                           "AND stream = 'energy' ORDER BY second"))
    assert energy == {H + 10: 100_000, H + 11: 500_000, H + 13: 1_000_000, H + 14: 1_000_000}
