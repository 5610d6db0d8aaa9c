"""Hand-encoded Native blocks store exactly what the client's generic insert stores.

Each hot table gets the same rows twice — once through `warehouse.native_format` (what the sink
does) and once through clickhouse-connect's own `insert()` into a twin table — and the
two must read back identical, for every column type the worker writes: long and
non-ASCII strings, NULLs, decimals of both scales, DateTime and DateTime64.
"""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

import pytest

from warehouse.connection import open_database
from schemas import tables
from warehouse.native_format import leb128
from warehouse.blocks import NATIVE_TABLES

NOW = datetime(2026, 3, 1, 0, 0, 7, 123000, tzinfo=timezone.utc)
LONG = "g" * 300  # a length that needs two LEB128 bytes
T0 = 1_772_323_200  # 2026-03-01T00:00:00Z

ROWS = {
    "readings_usage": [
        ("u-1", "2026-03-01T00:00:05Z", T0 + 5, "gz-guian", "node-01", "GPU-1", "A800-80G", "acme", "i-1",
         Decimal("87.5000"), 40960, 3, 17, NOW),
        ("u-2", "2026-03-01T08:00:05+08:00", T0 + 5, "gz-guian", "节点-02", LONG, "A800-80G", None, None,
         Decimal("0.0001"), 0, 0, 2**47, NOW),
    ],
    "readings_power": [
        ("p-1", "2026-03-01T00:00:05Z", T0 + 5, "gz-guian", "node-01", "GPU-1", 312_457, 3, 18, 0, "", NOW),
        ("p-2", "2026-03-01T00:00:06Z", T0 + 6, "gz-guian", "node-01", LONG, 5_000_000, 7, 0, (1 << 63) - 1, "boot-节点",
         NOW),
    ],
    "rated_seconds": [
        ("rent", "GPU-1", T0 + 5, "2026-03", "acme", "i-1", "A800-80G", "gz-guian", "node-01", "hourly",
         Decimal("3600"), 3600, Decimal("10"), Decimal("87.5000"), 0, "", Decimal(0), Decimal(0),
         (1 << 48) - 18, 3, 17, 0, NOW),
        ("energy", LONG, T0 + 6, "2026-03", "", "", "", "gz-guian", "node-01", "", Decimal(0), 0, Decimal(0),
         Decimal(0), 5_000_000, "valley", Decimal("0.330000"), Decimal("1.12"), (10 << 51) + (1 << 50) + 7, 7, 0, 1,
         NOW),
    ],
}
COLUMNS = {"readings_usage": tables.READINGS_USAGE, "readings_power": tables.READINGS_POWER,
           "rated_seconds": tables.RATED_SECONDS}


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    with open_database(f"chdb://{tmp_path_factory.mktemp('native')}/db") as db:
        yield db


def test_the_encoders_follow_the_table_column_lists() -> None:
    for name, columns in COLUMNS.items():
        assert NATIVE_TABLES[name].column_names == columns


@pytest.mark.parametrize("table", sorted(ROWS))
def test_a_native_block_stores_what_the_generic_insert_stores(database, table: str) -> None:
    columns = COLUMNS[table]
    database.command(f"CREATE TABLE twin_{table} AS {table}")
    database.insert_native(table, columns, NATIVE_TABLES[table].block(ROWS[table]))
    database.insert(f"twin_{table}", ROWS[table], columns)
    order = ", ".join(columns)
    ours = database.query(f"SELECT {order} FROM {table} ORDER BY {order}")
    theirs = database.query(f"SELECT {order} FROM twin_{table} ORDER BY {order}")
    assert ours == theirs and len(ours) == 2


def test_values_read_back_as_sent(database) -> None:
    database.command("CREATE TABLE check_power AS readings_power")
    database.insert_native("check_power", tables.READINGS_POWER, NATIVE_TABLES["readings_power"].block(ROWS["readings_power"]))
    # 312 457 + 5 000 000 mW; the long card name survives; 00:00:07.123 kept to the millisecond
    assert database.query("SELECT sum(power_mw), max(length(gpu_uuid)), min(ingested_at) FROM check_power") == [
        (5_312_457, 300, datetime(2026, 3, 1, 0, 0, 7, 123000))]  # naive UTC, as the client returns it
    # the counter: 2^63 − 1 mJ survives to the unit; the epoch's UTF-8 too; '' is no counter
    assert database.query("SELECT max(energy_mj), max(energy_epoch), countIf(energy_epoch = '') FROM check_power") == [
        ((1 << 63) - 1, "boot-节点", 1)]


def test_leb128_lengths() -> None:
    assert leb128(0) == b"\x00" and leb128(127) == b"\x7f"
    assert leb128(300) == b"\xac\x02"  # 300 = 0b10_0101100 → 0x2C | 0x80, then 0x02


def test_stored_readings_are_found_by_key_in_narrow_and_wide_ranges(database) -> None:
    from streams.lookup import StoredLookup

    far = T0 + 86_400  # a day later: the keys then span more than an hour (asked for pair by pair)
    rows = [
        ("p-a", "ts", T0 + 5, "gz-guian", "n", "GPU-A", 100, 2, 7, 5, "b1", NOW),
        ("p-a2", "ts", T0 + 5, "gz-guian", "n", "GPU-A", 999, 2, 9, 0, "", NOW),  # a conflict, later offset
        ("p-b", "ts", T0 + 6, "gz-guian", "n", "GPU-B", 200, 2, 8, 0, "", NOW),
        ("p-c", "ts", far, "gz-guian", "n", "GPU-A", 300, 3, 1, 0, "", NOW),
    ]
    database.command("TRUNCATE TABLE readings_power")
    database.insert_native("readings_power", tables.READINGS_POWER, NATIVE_TABLES["readings_power"].block(rows))
    lookup = StoredLookup(database)
    # narrow: GPU-B at T0 + 5 is not asked for, so not returned although inside the range
    _, power = lookup(set(), {("GPU-A", T0 + 5), ("GPU-B", T0 + 6)})
    assert sorted(power) == [("GPU-A", T0 + 5, "p-a", "gz-guian", "n", 100, 2, 7, 5, "b1"),  # the first offset
                             ("GPU-B", T0 + 6, "p-b", "gz-guian", "n", 200, 2, 8, 0, "")]
    _, power = lookup(set(), {("GPU-A", T0 + 5), ("GPU-A", far), ("GPU-B", far)})
    assert sorted(power) == [("GPU-A", T0 + 5, "p-a", "gz-guian", "n", 100, 2, 7, 5, "b1"),
                             ("GPU-A", far, "p-c", "gz-guian", "n", 300, 3, 1, 0, "")]
    # once per card: does ClickHouse hold any of its readings from `since` on?
    held = lookup.stored_since({"power": {"GPU-A": T0 + 6, "GPU-B": T0 + 6, "GPU-C": T0}, "usage": {}})
    assert held == {"power": {"GPU-A", "GPU-B"}}  # A: at `far`; B: at T0 + 6 itself; C: none
    assert lookup.stored_since({"power": {"GPU-B": T0 + 7}}) == {"power": set()}
    # the kept side of a conflict: the first stored reading of the key in partition order
    assert lookup.kept_event_ids("power", {("GPU-A", T0 + 5), ("GPU-A", far), ("GPU-C", T0)}) == {
        ("GPU-A", T0 + 5): "p-a", ("GPU-A", far): "p-c"}
