"""Spend records, version 1: one tenant's cumulative rated quantities from one source
partition, on the compacted topic `<group>.spend.v1` of the rating group (issue 15; schemas/topics.py).

The rating worker that owns partition p of the reading topics keeps, per tenant, the sum of
everything it and its predecessors rated for that tenant from p, and after each batch that
changed it produces the new sum — never a delta — with the key `<tenant>/<p>`, to the
spend topic's partition chosen by the tenant alone (`spend_partition`): all of a tenant's
records meet in one partition, and so in one consumer. Because each record replaces the
one before it, the topic can be compacted, a record produced twice changes nothing, and
whoever reads the topic to its end knows every tenant's totals.

    marks       (usage next offset, power next offset): how far the producer had consumed
                partition p of gpu.usage.v1 and gpu.power.v1 when it produced the record.
                Everything that a reading below the marks caused is in `periods`; nothing
                caused by a reading at or above them is. Marks only grow.
    periods     {period: (rent rows, energy rows)}, exact integers:
                rent   (gpu_model, plan, list_price, per_s, discount_pct, seconds)
                energy (site, band, tariff_per_kwh, pue, energy_mj)
    oldest_ms   the Kafka timestamp of the oldest reading of the batch that produced the
                record (freshness: now − oldest_ms bounds the lag of every reading in it)

Decimals travel as strings, quantities as JSON integers; `parse_record` refuses anything
else (the topic is read by the tracker and by every worker at start-up: what is on it is
not trusted).
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from schemas.errors import SchemaError
from schemas.ids import is_id

__all__ = ["InvalidSpendRecord", "SpendRecord", "encode_record", "parse_record", "record_key", "spend_partition"]

VERSION = 1
MAX_RECORD_BYTES = 512 * 1024
_PERIOD = re.compile(r"[0-9]{4}-(0[1-9]|1[0-2])")
_DECIMAL = re.compile(r"[0-9]{1,12}(\.[0-9]{1,6})?")
MAX_OFFSET = 1 << 62
MAX_QUANTITY = 1 << 62

RentRow = tuple[str, str, Decimal, int, Decimal, int]
EnergyRow = tuple[str, str, Decimal, Decimal, int]


class InvalidSpendRecord(SchemaError):
    """Bytes that are not a valid v1 spend record; str() says what is wrong."""


@dataclass(frozen=True)
class SpendRecord:
    tenant: str
    partition: int  # of the reading topics
    marks: tuple[int, int]  # (usage next offset, power next offset)
    periods: dict[str, tuple[tuple[RentRow, ...], tuple[EnergyRow, ...]]]
    oldest_ms: int = 0
    produced_ms: int = 0

    @property
    def key(self) -> str:
        return record_key(self.tenant, self.partition)


def record_key(tenant: str, partition: int) -> str:
    return f"{tenant}/{partition}"


def spend_partition(tenant: str, partitions: int) -> int:
    """The spend topic's partition of `tenant`'s records: a stable hash of the tenant alone."""
    return zlib.crc32(tenant.encode()) % partitions


def encode_record(record: SpendRecord) -> bytes:
    """The canonical JSON of `record`. Not parsed back here (the worker encodes a record per
    tenant and partition after every batch): `parse_record` checks every record it reads, and
    tests/unit/test_spend.py holds the two to each other."""
    document = {
        "version": VERSION, "tenant": record.tenant, "partition": record.partition,
        "marks": {"usage": record.marks[0], "power": record.marks[1]},
        "oldest_ms": record.oldest_ms, "produced_ms": record.produced_ms,
        "periods": {period: {"rent": [[m, p, _text(price), per_s, _text(pct), s] for m, p, price, per_s, pct, s in rent],
                             "energy": [[site, band, _text(tariff), _text(pue), mj] for site, band, tariff, pue, mj in energy]}
                    for period, (rent, energy) in sorted(record.periods.items())},
    }
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def parse_record(raw: bytes) -> SpendRecord:
    """The record in `raw`; InvalidSpendRecord naming the first thing wrong otherwise."""
    if len(raw) > MAX_RECORD_BYTES:
        raise InvalidSpendRecord(f"a spend record is at most {MAX_RECORD_BYTES} bytes, this is {len(raw)}")
    try:
        document = json.loads(raw, parse_float=_no_float, parse_constant=_no_float)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidSpendRecord(f"not JSON: {exc}") from None
    doc = _object(document, "record", {"version", "tenant", "partition", "marks", "oldest_ms", "produced_ms", "periods"})
    if doc["version"] != VERSION or type(doc["version"]) is not int:
        raise InvalidSpendRecord(f"version must be {VERSION}")
    if not is_id(doc["tenant"]):
        raise InvalidSpendRecord("tenant is not an id")
    marks = _object(doc["marks"], "marks", {"usage", "power"})
    periods = {}
    for period, lines in _object(doc["periods"], "periods", None).items():
        if not _PERIOD.fullmatch(period):
            raise InvalidSpendRecord(f"period {period[:20]!r} is not YYYY-MM")
        lines = _object(lines, "period", {"rent", "energy"})
        rent = tuple(_rent_row(row) for row in _list(lines["rent"], "rent"))
        energy = tuple(_energy_row(row) for row in _list(lines["energy"], "energy"))
        periods[period] = (rent, energy)
    return SpendRecord(tenant=doc["tenant"], partition=_int(doc["partition"], "partition", 1 << 31),
                       marks=(_int(marks["usage"], "marks.usage", MAX_OFFSET), _int(marks["power"], "marks.power", MAX_OFFSET)),
                       periods=periods, oldest_ms=_int(doc["oldest_ms"], "oldest_ms", MAX_OFFSET),
                       produced_ms=_int(doc["produced_ms"], "produced_ms", MAX_OFFSET))


def _rent_row(row: Any) -> RentRow:
    row = _list(row, "rent row")
    if len(row) != 6:
        raise InvalidSpendRecord("a rent row is [gpu_model, plan, list_price, per_s, discount_pct, seconds]")
    return (_id(row[0], "gpu_model"), _id(row[1], "plan"), _decimal(row[2], "list_price"),
            _int(row[3], "per_s", 1 << 31, minimum=1), _decimal(row[4], "discount_pct"), _int(row[5], "seconds", MAX_QUANTITY))


def _energy_row(row: Any) -> EnergyRow:
    row = _list(row, "energy row")
    if len(row) != 5:
        raise InvalidSpendRecord("an energy row is [site, band, tariff_per_kwh, pue, energy_mj]")
    return (_id(row[0], "site"), _id(row[1], "band"), _decimal(row[2], "tariff_per_kwh"), _decimal(row[3], "pue"),
            _int(row[4], "energy_mj", MAX_QUANTITY))


def _object(value: Any, what: str, fields: set[str] | None) -> dict:
    if not isinstance(value, dict):
        raise InvalidSpendRecord(f"{what} must be a JSON object")
    if fields is not None and set(value) != fields:
        odd = sorted(set(value) ^ fields)[0]
        raise InvalidSpendRecord(f"{what}: {'unknown' if odd in value else 'missing'} field {odd!r}")
    return value


def _list(value: Any, what: str) -> list:
    if not isinstance(value, list):
        raise InvalidSpendRecord(f"{what} must be a JSON array")
    return value


def _int(value: Any, what: str, limit: int, *, minimum: int = 0) -> int:
    if type(value) is not int or not minimum <= value < limit:
        raise InvalidSpendRecord(f"{what} must be an integer from {minimum} below {limit}")
    return value


def _id(value: Any, what: str) -> str:
    if not is_id(value):
        raise InvalidSpendRecord(f"{what} is not an id")
    return value


def _decimal(value: Any, what: str) -> Decimal:
    if not isinstance(value, str) or not _DECIMAL.fullmatch(value):
        raise InvalidSpendRecord(f"{what} must be a decimal string with at most six decimals")
    try:
        return Decimal(value)
    except InvalidOperation:  # pragma: no cover - the pattern admits only valid decimals
        raise InvalidSpendRecord(f"{what} is not a decimal") from None


def _no_float(text: str) -> Any:
    raise InvalidSpendRecord(f"{text[:20]} is not an integer (quantities are exact)")


def _text(value: Decimal) -> str:
    """A decimal as plain digits (never an exponent: Decimal("9E+3") is "9000")."""
    return format(value, "f")
