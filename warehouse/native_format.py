"""Rows → one block of ClickHouse's Native format, written by hand for the worker's tables.

Why not the client's own `insert()`: clickhouse-connect converts every value through
generic code (each `Decimal` goes through `str` and back), which cost the worker ≈ 8 µs
per row, eight times what ClickHouse itself needs to take the rows. Our columns are
few and their types known, so each is encoded here with C-speed building blocks
(`array`, `bytes.join`, dict look-ups for repeated values) and the finished block is
sent with `raw_insert(fmt="Native")`, to chDB and to a server alike.

Native format (input side): LEB128 column count, LEB128 row count, then per column its
name, its type (both LEB128-length-prefixed UTF-8) and its values, little-endian.
`LowCardinality(String)` columns are sent as `String`: ClickHouse converts on insert.
"""

from __future__ import annotations

from array import array
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from itertools import chain
from typing import Callable, Sequence

_ONE_BYTE = [bytes((n,)) for n in range(128)]
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MILLISECOND = timedelta(milliseconds=1)
_MEMO_LIMIT = 1 << 16  # distinct repeated values kept per column (sites, nodes, cards, prices…)


def leb128(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _prefixed(data: bytes) -> bytes:
    size = len(data)
    return (_ONE_BYTE[size] if size < 128 else leb128(size)) + data


class _Memo(dict):
    """value → encoded bytes, for values that repeat across rows; bounded (cleared when full)."""

    def __init__(self, encode: Callable) -> None:
        super().__init__()
        self.encode = encode

    def __missing__(self, value):
        if len(self) >= _MEMO_LIMIT:
            self.clear()
        encoded = self[value] = self.encode(value)
        return encoded


def _strings(values: Sequence[str]) -> bytes:
    encoded = [v.encode() if v.__class__ is str else bytes(v) for v in values]
    if max(map(len, encoded), default=0) < 128:
        return b"".join(chain.from_iterable(zip([_ONE_BYTE[len(e)] for e in encoded], encoded)))
    return b"".join(_prefixed(e) for e in encoded)


class Column:
    """How one column is typed in the block and how its values become bytes."""

    def __init__(self, name: str, type_name: str, encode: Callable[[Sequence], bytes]) -> None:
        self.name, self.type_name, self.encode = name, type_name, encode
        self.header = _prefixed(name.encode()) + _prefixed(type_name.encode())


def string(name: str) -> Column:
    """String or LowCardinality(String) of values that are mostly distinct (event ids)."""
    return Column(name, "String", _strings)


def repeated_string(name: str) -> Column:
    """A String whose values repeat (site, node, card, tenant, …): encoded once each."""
    memo = _Memo(lambda value: _prefixed(value.encode()))
    return Column(name, "String", lambda values: b"".join([memo[v] for v in values]))


def nullable_string(name: str) -> Column:
    memo = _Memo(lambda value: _prefixed(value.encode()))

    def encode(values: Sequence[str | None]) -> bytes:
        nulls = bytes([v is None for v in values])
        return nulls + b"".join([memo[v] if v is not None else b"\x00" for v in values])

    return Column(name, "Nullable(String)", encode)


def scaled(value: Decimal | int, scale: int) -> int:
    """The integer a Decimal(P, `scale`) column stores for `value`: value × 10^scale (exact:
    prices, rates and readings carry at most `scale` decimals)."""
    return int(Decimal(value).scaleb(scale))


def epoch_ms(moment: datetime) -> int:
    """A timezone-aware datetime as DateTime64(3) stores it: whole milliseconds since 1970."""
    return (moment - _EPOCH) // _MILLISECOND


def integers(name: str, type_name: str) -> Column:
    """UInt8, UInt32, UInt64, Int64 and DateTime (UInt32 epoch seconds) columns of Python ints."""
    code = {"UInt8": "B", "UInt32": "I", "DateTime('UTC')": "I", "UInt64": "Q", "Int64": "q", "Int8": "b"}[type_name]
    return Column(name, type_name, lambda values: array(code, values).tobytes())


def decimal(name: str, precision: int, scale: int) -> Column:
    """Decimal(P, S) of Python Decimals (or ints), stored as the integer value × 10^S."""
    code = "i" if precision <= 9 else "q"
    memo = _Memo(lambda value: scaled(value, scale))
    return Column(name, f"Decimal({precision}, {scale})", lambda values: array(code, [memo[v] for v in values]).tobytes())


def timestamp_ms(name: str) -> Column:
    """DateTime64(3, 'UTC') of timezone-aware datetimes (one per batch, so memoized)."""
    memo = _Memo(epoch_ms)
    return Column(name, "DateTime64(3, 'UTC')", lambda values: array("q", [memo[v] for v in values]).tobytes())


def enum8(name: str, codes: dict[str, int]) -> Column:
    type_name = "Enum8(" + ", ".join(f"'{label}' = {code}" for label, code in codes.items()) + ")"
    return Column(name, type_name, lambda values: array("b", [codes[v] for v in values]).tobytes())


class Table:
    """A table's columns in insert order; `block(rows)` is the Native block of those rows."""

    def __init__(self, name: str, columns: Sequence[Column]) -> None:
        self.name, self.columns = name, tuple(columns)
        self.column_names = tuple(c.name for c in self.columns)

    def block(self, rows: Sequence[tuple]) -> bytes:
        parts = [leb128(len(self.columns)), leb128(len(rows))]
        for column, values in zip(self.columns, zip(*rows)):
            parts.append(column.header)
            parts.append(column.encode(values))
        return b"".join(parts)
