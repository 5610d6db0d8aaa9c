"""Native-format blocks of the three tables written for every reading, built from their
specs in schemas/tables.py: which encoder each column takes follows from its type.

A block's rows are sorted in the table's ORDER BY first: ClickHouse then finds the block
sorted and skips sorting it (the Rust core encodes the same blocks, byte for byte).
"""

from __future__ import annotations

import re
from operator import itemgetter
from typing import Callable, Sequence

from schemas.tables import READINGS_POWER_TABLE, READINGS_USAGE_TABLE, RATED_SECONDS_TABLE, Column, TableSpec
from warehouse import native_format as native

_DECIMAL = re.compile(r"^Decimal\((\d+), (\d+)\)$")
_ENUM8 = re.compile(r"'([^']*)' = (-?\d+)")
_INTEGERS = ("UInt8", "UInt32", "UInt64", "Int64", "Int8", "DateTime('UTC')")


def encoder(column: Column) -> native.Column:
    """The Native-format column of a spec's column (LowCardinality(String) goes as String)."""
    kind = column.type
    if kind in ("String", "LowCardinality(String)"):
        return native.repeated_string(column.name) if column.repeated else native.string(column.name)
    if kind == "Nullable(String)":
        return native.nullable_string(column.name)
    if kind in _INTEGERS:
        return native.integers(column.name, kind)
    if kind == "DateTime64(3, 'UTC')":
        return native.timestamp_ms(column.name)
    if match := _DECIMAL.match(kind):
        return native.decimal(column.name, int(match.group(1)), int(match.group(2)))
    if kind.startswith("Enum8("):
        return native.enum8(column.name, {label: int(code) for label, code in _ENUM8.findall(kind)})
    raise ValueError(f"no Native encoder for {column.name} {kind}")


def native_table(spec: TableSpec) -> native.Table:
    return native.Table(spec.name, [encoder(column) for column in spec.columns])


def sort_key(spec: TableSpec) -> Callable[[tuple], tuple]:
    """The ORDER BY of `spec` as a key over its rows (an Enum8 sorts by its code)."""
    positions = [spec.column_names.index(name) for name in spec.order_by]
    take = itemgetter(*positions) if len(positions) > 1 else (lambda row: (row[positions[0]],))
    enums = [(slot, {label: int(code) for label, code in _ENUM8.findall(spec.columns[i].type)})
             for slot, i in enumerate(positions) if spec.columns[i].type.startswith("Enum8(")]
    if not enums:
        return take

    def key(row: tuple) -> tuple:
        values = list(take(row))
        for slot, codes in enums:
            values[slot] = codes[values[slot]]
        return tuple(values)

    return key


HOT_TABLES = (RATED_SECONDS_TABLE, READINGS_USAGE_TABLE, READINGS_POWER_TABLE)
NATIVE_TABLES = {spec.name: native_table(spec) for spec in HOT_TABLES}
_SORT_KEYS = {spec.name: sort_key(spec) for spec in HOT_TABLES}


def encode_rows(table: str, rows: Sequence[tuple]) -> tuple[bytes, int]:
    """(Native block, row count) of `rows` of a hot table, sorted in its ORDER BY."""
    return NATIVE_TABLES[table].block(sorted(rows, key=_SORT_KEYS[table])), len(rows)
