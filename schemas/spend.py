"""Spend records, version 2: the cumulative rated quantities of every tenant of one spend
partition from one source partition, on the compacted topic `<group>.spend.v2` of the rating
group (issues 15 and 26; schemas/topics.py).

The rating worker that owns partition p of the reading topics keeps, per tenant, the sum of
everything it and its predecessors rated for that tenant from p. After a batch, for each
spend partition s that the batch changed, it produces one record — a *round* — with the key
`<p>/<s>`, to partition s of the spend topic, carrying the new sums (never deltas) of every
tenant of s it holds for p. A tenant's spend partition is chosen by the tenant alone
(`spend_partition`), so all of a tenant's quantities meet in one partition, and so in one
consumer. Because each round replaces the one before it under its key, the topic can be
compacted, a round produced twice changes nothing, and whoever reads the topic to its end
knows every tenant's totals.

Why rounds and not one record per tenant (version 1, issue 15): the records a worker
produces per batch are then at most (its source partitions × spend partitions), whatever
the number of tenants — 16 tenants gave ≈ 370 records/s at 20,000 readings/s, 1,000 would
have given ≈ 24,000 — and the tracker folds one event per round, not one per tenant.

    marks       (usage next offset, power next offset): how far the producer had consumed
                partition p of gpu.usage.v1 and gpu.power.v1 when it produced the round.
                For every tenant in it: everything that a reading below the marks caused is
                in its periods; nothing caused by a reading at or above them is. Marks only
                grow. (A tenant the batch did not change is carried with the new marks too:
                the worker rated everything it consumed, so its sums are complete to them.)
    tenants     {tenant: {period: (rent rows, energy rows)}}, exact integers:
                rent   (gpu_model, plan, list_price, per_s, discount_pct, seconds)
                energy (site, band, tariff_per_kwh, pue, energy_mj)
    oldest_ms   the Kafka timestamp of the oldest reading of the batch that produced the
                round (freshness: now − oldest_ms bounds the lag of every reading in it)

Decimals travel as strings, quantities as JSON integers; `parse_round` refuses anything
else (the topic is read by the tracker and by every worker at start-up: what is on it is
not trusted). A round is at most MAX_RECORD_BYTES: about 3,000 tenants of one spend
partition (a site with more gives the spend topic more partitions).

In memory a tenant's part of a round is a `SpendRecord` (what version 1 put on the wire).
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

import orjson

from schemas.errors import SchemaError
from schemas.ids import is_id

__all__ = ["InvalidSpendRecord", "SpendRecord", "SpendRound", "encode_round", "parse_round", "round_header",
           "round_key", "spend_partition"]

VERSION = 2
MAX_RECORD_BYTES = 512 * 1024
_PERIOD = re.compile(r"[0-9]{4}-(0[1-9]|1[0-2])")
_DECIMAL = re.compile(r"[0-9]{1,12}(\.[0-9]{1,6})?")
MAX_OFFSET = 1 << 62
MAX_QUANTITY = 1 << 62

RentRow = tuple[str, str, Decimal, int, Decimal, int]
EnergyRow = tuple[str, str, Decimal, Decimal, int]
Periods = dict[str, tuple[tuple[RentRow, ...], tuple[EnergyRow, ...]]]


class InvalidSpendRecord(SchemaError):
    """Bytes that are not a valid v2 spend record; str() says what is wrong."""


@dataclass(frozen=True)
class SpendRecord:
    """One tenant's cumulative quantities from one source partition, complete to `marks`."""

    tenant: str
    partition: int  # of the reading topics
    marks: tuple[int, int]  # (usage next offset, power next offset)
    periods: Periods
    oldest_ms: int = 0
    produced_ms: int = 0


@dataclass(frozen=True)
class SpendRound:
    """A record on the wire: every tenant of spend partition `spend_partition` held for source
    partition `partition`, all complete to the same marks."""

    partition: int  # of the reading topics
    spend_partition: int  # of the spend topic: every tenant's `spend_partition`
    marks: tuple[int, int]
    tenants: dict[str, Periods]
    oldest_ms: int = 0
    produced_ms: int = 0

    @property
    def key(self) -> str:
        return round_key(self.partition, self.spend_partition)

    def records(self) -> list[SpendRecord]:
        return [SpendRecord(tenant, self.partition, self.marks, periods, self.oldest_ms, self.produced_ms)
                for tenant, periods in sorted(self.tenants.items())]


def round_key(partition: int, spend_partition: int) -> str:
    return f"{partition}/{spend_partition}"


def spend_partition(tenant: str, partitions: int) -> int:
    """The spend topic's partition of `tenant`'s quantities: a stable hash of the tenant alone."""
    return zlib.crc32(tenant.encode()) % partitions


def encode_round(spend_round: SpendRound) -> bytes:
    """The canonical JSON of `spend_round`. Not parsed back here (the worker encodes its rounds
    after every batch): `parse_round` checks every round it reads, and tests/unit/test_spend.py
    holds the two to each other."""
    document = {
        "version": VERSION, "partition": spend_round.partition, "spend_partition": spend_round.spend_partition,
        "marks": {"usage": spend_round.marks[0], "power": spend_round.marks[1]},
        "oldest_ms": spend_round.oldest_ms, "produced_ms": spend_round.produced_ms,
        "tenants": {tenant: encode_periods(periods) for tenant, periods in spend_round.tenants.items()},
    }
    return orjson.dumps(document, option=orjson.OPT_SORT_KEYS)


# What encode_round writes before the tenants (its keys sorted): the marks and the two times.
_HEADER = re.compile(rb'\{"marks":\{"power":([0-9]{1,19}),"usage":([0-9]{1,19})\},"oldest_ms":([0-9]{1,19}),'
                     rb'"partition":[0-9]{1,10},"produced_ms":([0-9]{1,19}),')


def round_header(raw: bytes) -> tuple[tuple[int, int], int, int] | None:
    """((usage mark, power mark), oldest_ms, produced_ms) read off the start of a round as
    `encode_round` writes it, without reading the rest; None when it does not start so. Nothing
    in it is checked: it says which of several waiting rounds is the newest, and the one taken
    is then parsed whole (`parse_round`)."""
    found = _HEADER.match(raw)
    if found is None:
        return None
    power, usage, oldest, produced = (int(g) for g in found.groups())
    return (usage, power), oldest, produced


def encode_periods(periods: Periods) -> dict:
    """A tenant's periods as the round's JSON holds them (decimals as plain digit strings)."""
    return {period: {"rent": [[m, p, _text(price), per_s, _text(pct), s] for m, p, price, per_s, pct, s in rent],
                     "energy": [[site, band, _text(tariff), _text(pue), mj] for site, band, tariff, pue, mj in energy]}
            for period, (rent, energy) in periods.items()}


def parse_round(raw: bytes) -> SpendRound:
    """The round in `raw`; InvalidSpendRecord naming the first thing wrong otherwise."""
    if len(raw) > MAX_RECORD_BYTES:
        raise InvalidSpendRecord(f"a spend record is at most {MAX_RECORD_BYTES} bytes, this is {len(raw)}")
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidSpendRecord(f"not JSON: {exc}") from None
    doc = _object(document, "record", {"version", "partition", "spend_partition", "marks", "oldest_ms",
                                       "produced_ms", "tenants"})
    if doc["version"] != VERSION or type(doc["version"]) is not int:
        raise InvalidSpendRecord(f"version must be {VERSION}")
    marks = _object(doc["marks"], "marks", {"usage", "power"})
    tenants = {}
    for tenant, periods in _object(doc["tenants"], "tenants", None).items():
        if not _is_id(tenant):
            raise InvalidSpendRecord("tenant is not an id")
        tenants[tenant] = _periods(periods)
    return SpendRound(partition=_int(doc["partition"], "partition", 1 << 31),
                      spend_partition=_int(doc["spend_partition"], "spend_partition", 1 << 31),
                      marks=(_int(marks["usage"], "marks.usage", MAX_OFFSET),
                             _int(marks["power"], "marks.power", MAX_OFFSET)),
                      tenants=tenants, oldest_ms=_int(doc["oldest_ms"], "oldest_ms", MAX_OFFSET),
                      produced_ms=_int(doc["produced_ms"], "produced_ms", MAX_OFFSET))


def _periods(value: Any) -> Periods:
    periods = {}
    for period, lines in _object(value, "periods", None).items():
        if not _is_period(period):
            raise InvalidSpendRecord(f"period {period[:20]!r} is not YYYY-MM")
        if type(lines) is not dict or len(lines) != 2 or "rent" not in lines or "energy" not in lines:
            lines = _object(lines, "period", {"rent", "energy"})
        rent = tuple(_rent_row_fast(row) for row in _list(lines["rent"], "rent"))
        energy = tuple(_energy_row_fast(row) for row in _list(lines["energy"], "energy"))
        periods[period] = (rent, energy)
    return periods


# A round of a thousand tenants holds thousands of rows, read by the tracker a few hundred
# times a second: a row that is right is taken in one test of all its fields (a round of 125
# tenants in 0.59 ms, 0.76 ms field by field); one that is not goes through the checks
# below, which name the field.
def _rent_row_fast(row: Any) -> RentRow:
    if type(row) is list and len(row) == 6:
        model, plan, price, per_s, pct, seconds = row
        if (type(model) is str and type(plan) is str and type(price) is str and type(pct) is str
                and type(per_s) is int and type(seconds) is int and 1 <= per_s < 1 << 31
                and 0 <= seconds < MAX_QUANTITY and _is_id(model) and _is_id(plan)):
            list_price, discount = _decimal_of(price), _decimal_of(pct)
            if list_price is not None and discount is not None:
                return (model, plan, list_price, per_s, discount, seconds)
    return _rent_row(row)


def _energy_row_fast(row: Any) -> EnergyRow:
    if type(row) is list and len(row) == 5:
        site, band, tariff, pue, mj = row
        if (type(site) is str and type(band) is str and type(tariff) is str and type(pue) is str
                and type(mj) is int and 0 <= mj < MAX_QUANTITY and _is_id(site) and _is_id(band)):
            per_kwh, factor = _decimal_of(tariff), _decimal_of(pue)
            if per_kwh is not None and factor is not None:
                return (site, band, per_kwh, factor, mj)
    return _energy_row(row)


@lru_cache(maxsize=4096)
def _is_period(value: str) -> bool:
    return _PERIOD.fullmatch(value) is not None


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


# A round repeats the same few ids and decimals for every tenant: each is checked once per
# process, not once per row (a round of 1,000 tenants is read several times a second).
@lru_cache(maxsize=65536)
def _is_id(value: str) -> bool:
    return is_id(value)


def _id(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _is_id(value):
        raise InvalidSpendRecord(f"{what} is not an id")
    return value


@lru_cache(maxsize=4096)
def _decimal_of(value: str) -> Decimal | None:
    if not _DECIMAL.fullmatch(value):
        return None
    try:
        return Decimal(value)
    except InvalidOperation:  # pragma: no cover - the pattern admits only valid decimals
        return None


def _decimal(value: Any, what: str) -> Decimal:
    number = _decimal_of(value) if isinstance(value, str) else None
    if number is None:
        raise InvalidSpendRecord(f"{what} must be a decimal string with at most six decimals")
    return number


def _text(value: Decimal) -> str:
    """A decimal as plain digits (never an exponent: Decimal("9E+3") is "9000")."""
    return format(value, "f")
