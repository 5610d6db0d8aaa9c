"""The tables the pipeline writes, as one spec each: columns in DDL order with their types,
and the sorting key. Every column list in the project is derived from here.

The spec is held against the migrations by tests/unit/test_tables_spec.py (a fresh
database is migrated and each table described); the Native-format encoder builds its
blocks from it (warehouse/blocks.py); the Rust core's blocks are compared with those byte
for byte (tests/unit/test_native_core.py). So a column added to a migration and not here,
or here and not in the core, fails a test instead of an insert.

`repeated` marks String columns whose values repeat across rows (sites, nodes, cards,
tenants): the encoder writes each distinct value once per batch, a hint, not a type.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: str  # as ClickHouse describes it, e.g. "LowCardinality(String)", "Decimal(18, 6)"
    repeated: bool = False


@dataclass(frozen=True, slots=True)
class TableSpec:
    name: str
    columns: tuple[Column, ...]
    order_by: tuple[str, ...]  # the table's ORDER BY, by column name

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.columns)


def _columns(*pairs: tuple[str, str] | tuple[str, str, bool]) -> tuple[Column, ...]:
    return tuple(Column(*pair) for pair in pairs)


_UTC_SECOND = "DateTime('UTC')"
_UTC_MS = "DateTime64(3, 'UTC')"
_REPEATED = True

READINGS_USAGE_TABLE = TableSpec("readings_usage", _columns(
    ("event_id", "String"), ("ts", "String", _REPEATED), ("second", _UTC_SECOND),
    ("site", "LowCardinality(String)", _REPEATED), ("node", "String", _REPEATED), ("gpu_uuid", "String", _REPEATED),
    ("gpu_model", "LowCardinality(String)", _REPEATED), ("tenant", "Nullable(String)", _REPEATED),
    ("instance", "Nullable(String)", _REPEATED), ("util_pct", "Decimal(9, 4)"), ("mem_used_mib", "UInt64"),
    ("src_partition", "UInt32"), ("src_offset", "UInt64"), ("ingested_at", _UTC_MS),
), order_by=("gpu_uuid", "second", "src_partition", "src_offset"))

READINGS_POWER_TABLE = TableSpec("readings_power", _columns(
    ("event_id", "String"), ("ts", "String", _REPEATED), ("second", _UTC_SECOND),
    ("site", "LowCardinality(String)", _REPEATED), ("node", "String", _REPEATED), ("gpu_uuid", "String", _REPEATED),
    ("power_mw", "UInt64"), ("src_partition", "UInt32"), ("src_offset", "UInt64"),
    ("energy_mj", "UInt64"), ("energy_epoch", "String", _REPEATED),  # 0028: the card's counter ('' = none)
    ("ingested_at", _UTC_MS),
), order_by=("gpu_uuid", "second", "src_partition", "src_offset"))

RATED_SECONDS_TABLE = TableSpec("rated_seconds", _columns(
    ("stream", "Enum8('rent' = 1, 'energy' = 2)"), ("gpu_uuid", "String", _REPEATED), ("second", _UTC_SECOND),
    ("period", "LowCardinality(String)", _REPEATED), ("tenant", "String", _REPEATED),
    ("instance", "String", _REPEATED), ("gpu_model", "LowCardinality(String)", _REPEATED),
    ("site", "LowCardinality(String)", _REPEATED), ("node", "String", _REPEATED),
    ("plan", "LowCardinality(String)", _REPEATED), ("rent_price", "Decimal(18, 6)"), ("rent_per_s", "UInt32"),
    ("discount_pct", "Decimal(9, 4)"), ("util_pct", "Decimal(9, 4)"), ("energy_mj", "UInt64"),
    ("band", "LowCardinality(String)", _REPEATED), ("tariff_per_kwh", "Decimal(18, 6)"), ("pue", "Decimal(9, 4)"),
    ("version", "UInt64"), ("src_partition", "UInt32"), ("src_offset", "UInt64"),
    ("measured", "UInt8"),  # 0028: an energy second's energy came from the card's counter
    ("rated_at", _UTC_MS),
), order_by=("stream", "gpu_uuid", "second"))

DEADLETTERS_TABLE = TableSpec("deadletters", _columns(
    ("source_topic", "String"), ("source_partition", "Int32"), ("source_offset", "Int64"), ("source_line", "UInt64"),
    ("source_index", "UInt32"), ("reason", "String"), ("original", "String"), ("dead_at", _UTC_MS),
), order_by=("source_topic", "source_partition", "source_offset", "source_line", "source_index"))

CONFLICTS_TABLE = TableSpec("conflicts", _columns(
    ("stream", "LowCardinality(String)"), ("gpu_uuid", "String"), ("second", _UTC_SECOND),
    ("kept_event_id", "String"), ("conflicting_event_id", "String"), ("src_partition", "UInt32"),
    ("src_offset", "UInt64"), ("detected_at", _UTC_MS),
    ("reason", "LowCardinality(String)"),  # 'second taken' | 'event_id reused' (0010_conflict_reasons.sql)
), order_by=("stream", "gpu_uuid", "second", "src_partition", "src_offset"))

PIPELINE_TABLES = {spec.name: spec for spec in (
    READINGS_USAGE_TABLE, READINGS_POWER_TABLE, RATED_SECONDS_TABLE, DEADLETTERS_TABLE, CONFLICTS_TABLE)}

# The column names in insert order (what rows from the raters hold, position by position).
READINGS_USAGE = READINGS_USAGE_TABLE.column_names
READINGS_POWER = READINGS_POWER_TABLE.column_names
RATED_SECONDS = RATED_SECONDS_TABLE.column_names
DEADLETTERS = DEADLETTERS_TABLE.column_names
CONFLICTS = CONFLICTS_TABLE.column_names


# Where the numbers of the rule files are stored: billing_rules/files.py refuses a value its
# column cannot hold (22 decimals, 1e308), so that a rule edit fails `gpubill rules check`
# instead of an insert. (table, column) by the rule value; the documents' two are held
# against the migrations by tests/unit/test_tables_spec.py, as the tables above are.
_RATED = {column.name: column for column in RATED_SECONDS_TABLE.columns}
RULE_VALUE_COLUMNS: dict[str, tuple[str, Column]] = {
    "rent_price": ("rated_seconds", _RATED["rent_price"]),  # catalog.toml monthly, hourly
    "tariff_per_kwh": ("rated_seconds", _RATED["tariff_per_kwh"]),  # sites.toml price_per_kwh, tariff_cap_per_kwh
    "pue": ("rated_seconds", _RATED["pue"]),  # sites.toml pue
    "discount_pct": ("rated_seconds", _RATED["discount_pct"]),  # contracts.toml discount_pct
    "vat_rate": ("invoices", Column("vat_rate", "Decimal(9, 4)")),  # billing.toml vat rate
    "credit_amount": ("invoice_lines", Column("amount", "Decimal(18, 2)")),  # a credit's line on an invoice
}


def decimal_digits(column_type: str) -> tuple[int, int]:
    """(precision, scale) of a ClickHouse `Decimal(P, S)` column type, Nullable or not:
    at most P digits in all, S of them after the point."""
    inner = column_type.removeprefix("Nullable(").removesuffix(")") if column_type.startswith("Nullable(") else column_type
    if not (inner.startswith("Decimal(") and inner.endswith(")")):
        raise ValueError(f"{column_type} is not a Decimal type")
    precision, scale = (int(part) for part in inner[len("Decimal("):-1].split(","))
    return precision, scale
