"""`gpubill bench month` (gpubill/bench/month*.py): its shortcuts write exactly what the pipeline would.

1. The per-second rows its INSERT … SELECTs write equal, column by column (all but the
   wall-clock ingested_at / rated_at), the rows the Python reference rater makes of the
   same readings sent as the JSON a node agent sends, at the Kafka positions the bench
   assumes — across a contract turning monthly, a price and tariff change, a holiday, a
   tariff band edge in the middle of an hour and a node released in the middle of an hour.
2. The rollups it writes for days without per-second rows equal what the real rollup step
   makes of per-second rows of those hours (and a changed per-second row is noticed).
3. A small run end to end: the figures are there and the invoice run invoiced every tenant.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from billing_rules import load_rules
from gpubill.bench.month import FORMATS, bench_month
from gpubill.bench.month_fleet import EXAMPLE_TOU_DIR, make_fleet, readings_sql, write_seconds
from gpubill.bench.month_rollups import synthetic_differences, write_minutes
from usage.rollup import roll_up_hour
from schemas.tables import (
    RATED_SECONDS_TABLE,
    READINGS_POWER_TABLE,
    READINGS_USAGE_TABLE,
)
from schemas.topics import TOPIC_POWER, TOPIC_USAGE
from streams.kafka.message import Message
from streams.rating.reference_batch import PythonRater
from warehouse import writes
from warehouse.connection import open_database

PERIOD = "2026-04"


def _at(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp())


# Windows of a few seconds around what changes prices or tenants (Asia/Shanghai = UTC+8).
WINDOWS = [
    ("2026-04-10T09:59:30Z", "2026-04-10T10:00:30Z"),  # 18:00 local: tenant-2's A800s turn monthly
    ("2026-04-14T18:29:40Z", "2026-04-14T18:30:20Z"),  # 02:30 local: the last card of each tenant is released
    ("2026-04-15T00:29:40Z", "2026-04-15T00:30:20Z"),  # 08:30 local: valley → peak (edge moved off the hour)
    ("2026-04-15T03:59:40Z", "2026-04-15T04:00:20Z"),  # 12:00 local: RTX 4090 price cut, new tariff
    ("2026-04-05T15:59:40Z", "2026-04-05T16:00:20Z"),  # midnight local: Sunday → Qingming holiday
]
# Whole hours for the rollups (UTC starts): the same events, inside or at the edge of an hour.
HOURS = ["2026-04-10T10:00:00Z", "2026-04-14T18:00:00Z", "2026-04-14T20:00:00Z", "2026-04-15T00:00:00Z",
         "2026-04-15T04:00:00Z", "2026-04-05T16:00:00Z"]


@pytest.fixture(scope="module")
def rules(tmp_path_factory):
    """The example time-of-use rules with the weekday valley → peak edge moved to 08:30 (mid-hour)."""
    directory = tmp_path_factory.mktemp("rules")
    for path in EXAMPLE_TOU_DIR.iterdir():
        shutil.copy(path, directory / path.name)
    sites = (directory / "sites.toml").read_text()
    edge = 'end = "08:00", price_per_kwh = 0.25 },\n  { name = "peak",   start = "08:00"'
    assert sites.count(edge) == 1
    (directory / "sites.toml").write_text(sites.replace(edge, edge.replace("08:00", "08:30")))
    return load_rules(directory)


@pytest.fixture(scope="module")
def fleet(rules):
    # one card a node, so the models alternate card by card; 5-card tenants: 3 tenants, 1 spare card
    return make_fleet(rules, PERIOD, 16, tenant_cards=5, node_cards=1)


@pytest.fixture(scope="class")
def database(tmp_path_factory):
    """One chDB for the class (a process can hold one chDB path at a time: closed before the end-to-end test)."""
    with open_database(f"chdb://{tmp_path_factory.mktemp('bench-month')}/db") as db:
        db.command("SET max_query_size = 67108864")
        yield db


def _messages(db, fleet, lo: int, hi: int) -> list[Message]:
    """The readings of [lo, hi) as the JSON messages a node agent sends, usage first, at the bench's positions."""
    rows = db.query(
        "SELECT sec, gpu_uuid, node, gpu_model, tenant, instance, util_t, power_dw, mem_used_mib, src_partition, "
        f"src_offset FROM ({readings_sql(fleet, lo, hi)}) ORDER BY sec, c")
    usage, power = [], []
    for sec, uuid, node, model, tenant, instance, util_t, power_dw, mem, partition, offset in rows:
        ts = datetime.fromtimestamp(sec, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        common = {"ts": ts, "site": fleet.site, "node": node, "gpu_uuid": uuid}
        # util_t / 10 and power_dw / 10 as floats print as their one-decimal text (95.3), as an agent sends
        reading = {"kind": "usage", "event_id": f"{uuid}-{sec}-u", **common, "gpu_model": model, "tenant": tenant,
                   "instance": instance, "util_pct": util_t / 10, "mem_used_mib": mem}
        usage.append(Message(TOPIC_USAGE, partition, offset, uuid.encode(), orjson.dumps(reading)))
        reading = {"kind": "power", "event_id": f"{uuid}-{sec}-p", **common, "power_w": power_dw / 10}
        power.append(Message(TOPIC_POWER, partition, offset, uuid.encode(), orjson.dumps(reading)))
    return usage + power


def _plain(row: tuple) -> tuple:
    """Values comparable across Python and ClickHouse: epoch seconds, text of enums (Decimals compare by value)."""
    return tuple(int(v.replace(tzinfo=UTC).timestamp()) if isinstance(v, datetime) else v for v in row)


def _stored(db, table, columns: tuple[str, ...], lo: int, hi: int) -> set[tuple]:
    rows = db.query(f"SELECT {', '.join(columns)} FROM {table} FINAL "
                    f"WHERE second >= toDateTime({lo}, 'UTC') AND second < toDateTime({hi}, 'UTC')")
    return {_plain(row) for row in rows}


class TestTheShortcuts:
    @pytest.mark.parametrize("window", WINDOWS, ids=[w[0] for w in WINDOWS])
    def test_rows_equal_the_reference_raters(self, database, rules, fleet, window) -> None:
        lo, hi = _at(window[0]), _at(window[1])
        write_seconds(database, fleet, lo, hi)
        result = PythonRater(rules).rate_batch(_messages(database, fleet, lo, hi), now=datetime.now(UTC))
        assert result.deadletters == []
        outcome = result.outcome
        for table, spec, rows in ((RATED_SECONDS_TABLE.name, RATED_SECONDS_TABLE, outcome.rated),
                                  ("readings_usage", READINGS_USAGE_TABLE, outcome.readings_usage),
                                  ("readings_power", READINGS_POWER_TABLE, outcome.readings_power)):
            columns = spec.column_names[:-1]  # all but rated_at / ingested_at (wall clock)
            expected = {_plain(row[:-1]) for row in rows}
            stored = _stored(database, table, columns, lo, hi)
            assert len(expected) == len(rows)
            assert stored == expected, f"{table}: {sorted(stored - expected, key=str)[:2]} vs {sorted(expected - stored, key=str)[:2]}"
        # 16 cards × 40 or 60 s: rent rows for the rented seconds, an energy row for every second
        seconds = hi - lo
        assert sum(1 for row in outcome.rated if row[0] == "energy") == 16 * seconds
        assert 0 < sum(1 for row in outcome.rated if row[0] == "rent") < 16 * seconds


    def test_synthetic_rollups_equal_the_real_rollup(self, database, fleet, monkeypatch) -> None:
        monkeypatch.setattr(writes, "MARGIN_S", 0)
        hours = [_at(h) for h in HOURS]
        for hour in hours:
            write_seconds(database, fleet, hour, hour + 3600)
            roll_up_hour(database, fleet.tz, PERIOD, hour)
        write_minutes(database, fleet)
        for hour in hours:
            assert synthetic_differences(database, fleet, hour, hour + 3600) == [], HOURS[hours.index(hour)]
        # The mid-hour events split groups: a released card's hour has rows with and without its tenant,
        # the 08:30 band edge gives two energy rows per card in that hour.
        split = dict(database.query(
            "SELECT toUnixTimestamp(hour), count() FROM rated_hours WHERE stream = 'energy' AND hour IN "
            f"({', '.join(f'toDateTime({h}, {chr(39)}UTC{chr(39)})' for h in hours)}) GROUP BY hour"))
        assert split[_at("2026-04-15T00:00:00Z")] == 2 * 16
        assert split[_at("2026-04-14T18:00:00Z")] == 16 + 3  # 3 tenants' released cards: tenant, then ''

        # A test that can fail: one second's energy changed (a late re-write with a higher version) and re-rolled.
        hour = _at("2026-04-15T04:00:00Z")
        database.command(
            "INSERT INTO rated_seconds SELECT * REPLACE (energy_mj + 1 AS energy_mj, version + 1 AS version) "
            f"FROM rated_seconds FINAL WHERE stream = 'energy' AND second = toDateTime({hour + 7}, 'UTC') LIMIT 1")
        roll_up_hour(database, fleet.tz, PERIOD, hour)
        assert synthetic_differences(database, fleet, hour, hour + 3600) == [hour]


def test_a_small_month_end_to_end(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(writes, "MARGIN_S", 0)
    # 16 cards, 4-card tenants: 4 tenants; 2 hours of per-second rows, the other 22 of the day as rollups
    result = bench_month(16, 1, per_second_hours=2, tenant_cards=4, settle_s=5, margin_s=1.1,
                         keep=tmp_path / "month")
    for key in ("rollup_s_per_hour", "invoice_run_s", "cost_share_s", "usage_report_s", "finance_view_s",
                "audit_first_s", "audit_incremental_s", "audit_full_s", "audit_prints_s", "bytes_per_gpu_second",
                "gpus", "days"):
        assert key in result, key
    # April's 720 hours: the 2 per-second hours and the 696 hours after the built day (no rows on
    # either side) agree and are stored the first time, taken the second; the day's 22 synthetic
    # hours (rollups, no readings) differ every time, so every run recomputes them
    assert result["audit_hours"] == {"first": {"hours": 720, "recomputed": 720, "taken": 0, "stored": 698},
                                     "incremental": {"hours": 720, "recomputed": 22, "taken": 698, "stored": 0},
                                     "full": {"hours": 720, "recomputed": 720, "taken": 0, "stored": 698}}
    assert len(set(result["audit_differences"].values())) == 1 and result["audit_differences"]["first"] > 0
    assert (result["gpus"], result["days"], result["per_second_hours"]) == (16, 1, 2)
    assert result["invoices"] == 4
    assert set(result["usage_report_s"]) == set(FORMATS)
    assert result["usage_report_rows"] > 0 and result["finance_view_rows"] > 0
    sizes = result["bytes_per_gpu_second"]
    assert sizes["total"] == pytest.approx(sum(v for k, v in sizes.items() if k != "total"), abs=0.01)
    assert result["rows"]["rated_hours"] > 0
    # the rented seconds: 2 h of per-second rows (16 cards; the released cards are rented at 00:00–02:00 local)
    assert result["rows"]["readings_usage"] == 16 * 7200
    assert Path(tmp_path / "month" / "clickhouse").is_dir()
