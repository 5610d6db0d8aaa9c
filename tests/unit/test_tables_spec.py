"""schemas/tables.py against the migrations: a fresh database, migrated, describes every
pipeline table exactly as its spec does (names, order, types, sorting key), and the
Native-format encoders follow the spec."""

from __future__ import annotations

import pytest

from schemas.tables import PIPELINE_TABLES
from warehouse.blocks import NATIVE_TABLES, encoder
from warehouse.connection import open_database


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    with open_database(f"chdb://{tmp_path_factory.mktemp('spec') / 'ch'}") as db:
        yield db


@pytest.mark.parametrize("name", sorted(PIPELINE_TABLES))
def test_the_migrated_table_is_its_spec(database, name: str) -> None:
    spec = PIPELINE_TABLES[name]
    described = [(row[0], row[1]) for row in database.query(f"DESCRIBE TABLE {name}")]
    assert described == [(column.name, column.type) for column in spec.columns]
    (sorting_key,) = database.query("SELECT sorting_key FROM system.tables WHERE database = currentDatabase() "
                                    "AND name = {n:String}", {"n": name})[0]
    assert sorting_key == ", ".join(spec.order_by)


def test_every_hot_table_is_encoded_column_by_column_from_its_spec() -> None:
    for name, table in NATIVE_TABLES.items():
        spec = PIPELINE_TABLES[name]
        assert [column.name for column in table.columns] == list(spec.column_names)
        wire = {"LowCardinality(String)": "String"}  # sent as String, converted on insert
        assert [column.type_name for column in table.columns] == [wire.get(c.type, c.type) for c in spec.columns]


def test_a_type_without_an_encoder_is_refused_by_name() -> None:
    from schemas.tables import Column

    with pytest.raises(ValueError, match="no Native encoder for ratio Float64"):
        encoder(Column("ratio", "Float64"))


def test_the_hot_tables_store_their_largest_columns_with_the_measured_codecs(database) -> None:
    # Migration 0007 (docs/performance.md, "Storage"): what made 57.7 bytes per GPU-second 10.1.
    codecs = {(table, name): codec for table, name, codec in database.query(
        "SELECT table, name, compression_codec FROM system.columns WHERE database = currentDatabase() "
        "AND table IN ('rated_seconds', 'readings_usage', 'readings_power')")}
    for table in ("rated_seconds", "readings_usage", "readings_power"):
        assert codecs[(table, "src_offset")] == "CODEC(DoubleDelta, ZSTD(1))"
        assert codecs[(table, "second")] == "CODEC(Delta(4), ZSTD(1))"
    assert codecs[("rated_seconds", "version")] == "CODEC(DoubleDelta, ZSTD(1))"
    assert codecs[("rated_seconds", "energy_mj")] == codecs[("readings_power", "power_mw")] == "CODEC(T64, ZSTD(1))"
    assert codecs[("readings_usage", "event_id")] == codecs[("readings_power", "ts")] == "CODEC(ZSTD(3))"


def test_the_rule_values_columns_are_the_migrated_ones(database) -> None:
    # billing_rules/files.py refuses a rule value its column cannot hold, by these types
    from schemas.tables import RULE_VALUE_COLUMNS

    for table, column in RULE_VALUE_COLUMNS.values():
        described = dict((row[0], row[1]) for row in database.query(f"DESCRIBE TABLE {table}"))
        assert described[column.name] == column.type, (table, column)
