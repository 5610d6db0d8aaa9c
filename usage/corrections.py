"""The corrections as stored (table `corrections`, schemas/migrations/0022_corrections.sql), read and written.

    store_corrections(db, logged)                    the checked messages of gpu.corrections.v1 → ClickHouse (idempotent)
    stored_corrections(db, lo, hi, gpus=None)        the corrections touching [lo, hi), in log order: [Correction]
    covered(corrections, gpu, second)                the corrections of `gpu` covering `second`

A correction is applied per (card, second) in log order (all of a card's are on one partition,
so offset order): `reattribute` sets the usage's tenant (None: nobody) and, when given, its
instance; `void_readings` drops the stream's reading. A reattribute after a void does not bring
the voided reading back (there is nothing to attribute). `apply_to_usage` / `power_voided`
say what a second becomes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Iterable, Mapping

__all__ = ["Correction", "apply_to_usage", "covered", "power_voided", "store_corrections", "stored_corrections"]

_COLUMNS = ("event_id", "kind", "gpu_uuid", "from_s", "to_s", "tenant", "instance", "stream", "reason", "author",
            "original", "src_partition", "src_offset", "produced_at", "stored_at")
_CONFLICT_COLUMNS = ("event_id", "kept_partition", "kept_offset", "src_partition", "src_offset", "original",
                     "detected_at")


@dataclass(frozen=True)
class Correction:
    """One stored correction: [from_s, to_s) of `gpu_uuid`."""

    event_id: str
    kind: str  # reattribute | void_readings
    gpu_uuid: str
    from_s: int
    to_s: int
    tenant: str | None = None
    instance: str | None = None
    stream: str = ""  # void_readings: usage | power | both
    reason: str = ""
    author: str = ""
    partition: int = 0
    offset: int = 0

    @property
    def voids_usage(self) -> bool:
        return self.kind == "void_readings" and self.stream in ("usage", "both")

    @property
    def voids_power(self) -> bool:
        return self.kind == "void_readings" and self.stream in ("power", "both")

    def covers(self, second: int) -> bool:
        return self.from_s <= second < self.to_s


def store_corrections(db: Any, logged: Iterable[Any], now: datetime | None = None,
                      kept: Mapping[str, tuple[int, int]] | None = None) -> tuple[int, int]:
    """Store the `ok` entries of `logged` (streams.kafka.corrections.LoggedCorrection, in log order)
    in `corrections` and the `conflict` ones in `correction_conflicts`; returns (stored, conflicts).
    Idempotent: rows are keyed by Kafka position.

    A conflict names the correction that counts (the first in the log with its event_id): the
    (partition, offset) in `kept` when given (the caller read the whole log), else the `ok`
    entry of `logged`, else the one stored before; (0, 0) only when none of them knows it."""
    moment = now or datetime.now(UTC)
    rows, conflicts, first = [], [], {}
    for entry in logged:
        correction = entry.correction
        if entry.status == "ok" and correction is not None:
            first[correction.event_id] = (entry.partition, entry.offset)
            rows.append([correction.event_id, correction.kind, correction.gpu_uuid,
                         datetime.fromtimestamp(correction.from_s, UTC), datetime.fromtimestamp(correction.to_s, UTC),
                         getattr(correction, "tenant", None), getattr(correction, "instance", None),
                         getattr(correction, "stream", ""), correction.reason, correction.author,
                         entry.raw.decode("utf-8", "replace"), entry.partition, entry.offset,
                         datetime.fromtimestamp(entry.timestamp_ms / 1000, UTC), moment])
        elif entry.status == "conflict":
            conflicts.append(entry)
    if rows:
        db.insert("corrections", rows, _COLUMNS)
    if conflicts:
        ids = [_event_id_of(e.raw) for e in conflicts]
        positions = {**_kept_positions(db, set(ids) - set(kept or {}) - set(first)), **first, **(kept or {})}
        db.insert("correction_conflicts", [
            [event_id, *positions.get(event_id, (0, 0)), e.partition, e.offset, e.raw.decode("utf-8", "replace"),
             moment] for event_id, e in zip(ids, conflicts)], _CONFLICT_COLUMNS)
    return len(rows), len(conflicts)


def stored_corrections(db: Any, lo: int, hi: int, gpus: Iterable[str] | None = None) -> list[Correction]:
    """The stored corrections that touch [lo, hi) (of `gpus` only, when given), in log order."""
    where = "from_s < toDateTime({hi:UInt32}, 'UTC') AND to_s > toDateTime({lo:UInt32}, 'UTC')"
    params: dict = {"lo": int(lo), "hi": int(hi)}
    if gpus is not None:
        where += " AND gpu_uuid IN {gpus:Array(String)}"
        params["gpus"] = sorted(set(gpus))
    rows = db.query(
        "SELECT event_id, kind, gpu_uuid, toUnixTimestamp(from_s), toUnixTimestamp(to_s), tenant, instance, stream, "
        f"reason, author, src_partition, src_offset FROM corrections FINAL WHERE {where} "
        "ORDER BY src_partition, src_offset", params)
    return [Correction(str(e), str(k), str(g), int(a), int(b), t, i, str(s), str(r), str(w), int(p), int(o))
            for e, k, g, a, b, t, i, s, r, w, p, o in rows]


def covered(corrections: Iterable[Correction], gpu: str, second: int) -> list[Correction]:
    return [c for c in corrections if c.gpu_uuid == gpu and c.covers(second)]


def apply_to_usage(corrections: Iterable[Correction], tenant: str | None,
                   instance: str | None) -> tuple[bool, str | None, str | None]:
    """A usage reading's (counts, tenant, instance) after `corrections` (those covering its second, in log order)."""
    counts = True
    for c in corrections:
        if c.voids_usage:
            counts = False
        elif c.kind == "reattribute" and counts:
            tenant = c.tenant
            if c.instance is not None:
                instance = c.instance
    return counts, tenant, instance


def power_voided(corrections: Iterable[Correction]) -> bool:
    return any(c.voids_power for c in corrections)


def _kept_positions(db: Any, event_ids: set[str]) -> dict[str, tuple[int, int]]:
    """The stored position of each of `event_ids` (one row per event id: only the first in the log is stored)."""
    if not event_ids:
        return {}
    return {str(e): (int(p), int(o)) for e, p, o in db.query(
        "SELECT event_id, tupleElement(first, 1), tupleElement(first, 2) FROM ("
        "SELECT event_id, min(tuple(src_partition, src_offset)) AS first FROM corrections FINAL "
        "WHERE event_id IN {ids:Array(String)} GROUP BY event_id)", {"ids": sorted(event_ids)})}


def _event_id_of(raw: bytes) -> str:
    import orjson

    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return ""
    value = document.get("event_id") if isinstance(document, dict) else None
    return value if isinstance(value, str) else ""
