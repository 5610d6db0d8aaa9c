"""Look-ups of stored readings while rating: what ClickHouse holds that memory cannot answer for.

A rater holds the last `horizon_s` seconds of readings in memory; a reading older than
that, or of a card another worker rated before a rebalance, is checked against the raw
readings tables here (the first stored reading per (gpu, second), in partition order).
"""

from __future__ import annotations

from typing import Callable

_USAGE_LOOKUP_SQL = """
SELECT gpu_uuid, toUnixTimestamp(second) AS s,
       argMin(event_id, (src_partition, src_offset)), argMin(tenant, (src_partition, src_offset)),
       argMin(instance, (src_partition, src_offset)), argMin(gpu_model, (src_partition, src_offset)),
       min(src_offset)
FROM readings_usage
WHERE gpu_uuid IN {gpus:Array(String)} AND second BETWEEN {lo:UInt32} AND {hi:UInt32} {exact}
GROUP BY gpu_uuid, s
"""
_POWER_LOOKUP_SQL = """
SELECT gpu_uuid, toUnixTimestamp(second) AS s,
       argMin(event_id, (src_partition, src_offset)), argMin(site, (src_partition, src_offset)),
       argMin(node, (src_partition, src_offset)), argMin(power_mw, (src_partition, src_offset)),
       argMin(src_partition, (src_partition, src_offset)), min(src_offset),
       argMin(energy_mj, (src_partition, src_offset)), argMin(energy_epoch, (src_partition, src_offset))
FROM readings_power
WHERE gpu_uuid IN {gpus:Array(String)} AND second BETWEEN {lo:UInt32} AND {hi:UInt32} {exact}
GROUP BY gpu_uuid, s
"""
_KEPT_SQL = """
SELECT gpu_uuid, toUnixTimestamp(second) AS s, argMin(event_id, (src_partition, src_offset))
FROM {table}
WHERE gpu_uuid IN {gpus:Array(String)} AND second BETWEEN {lo:UInt32} AND {hi:UInt32} {exact}
GROUP BY gpu_uuid, s
"""
_EXACT_KEYS = "AND (gpu_uuid, toUnixTimestamp(second)) IN {keys:Array(Tuple(String, UInt32))}"
# Keys spanning at most this many seconds are fetched as a (cards × seconds) range and
# filtered here: binding thousands of (card, second) pairs into the SQL costs more.
_RANGE_S = 3600


# Both streams in one query: one round trip per batch with new cards.
_STORED_SINCE_SQL = """
SELECT 'usage', gpu_uuid, toUnixTimestamp(max(second)) FROM readings_usage
WHERE gpu_uuid IN {usage_gpus:Array(String)} AND second >= {usage_lo:UInt32} GROUP BY gpu_uuid
UNION ALL
SELECT 'power', gpu_uuid, toUnixTimestamp(max(second)) FROM readings_power
WHERE gpu_uuid IN {power_gpus:Array(String)} AND second >= {power_lo:UInt32} GROUP BY gpu_uuid
"""


class StoredLookup:
    """A `streams.rating.protocol.Lookup` reading the first stored reading per (gpu, second)."""

    def __init__(self, database, before_read: Callable[[], None] = lambda: None) -> None:
        self.database = database
        self.before_read = before_read  # e.g. wait for the writes in flight (streams/pipeline.py)

    def __call__(self, need_usage: set, need_power: set) -> tuple[list[tuple], list[tuple]]:
        self.before_read()
        return (_query_keys(self.database, _USAGE_LOOKUP_SQL, need_usage),
                _query_keys(self.database, _POWER_LOOKUP_SQL, need_power))

    def kept_event_ids(self, stream: str, keys: set[tuple[str, int]]) -> dict[tuple[str, int], str]:
        """The event id of the stored reading that counts for each (gpu, second) of `stream`
        (the first in partition order): the kept side of a conflict the Rust core found
        with a reading of an earlier batch, whose id it does not hold."""
        if not keys:
            return {}
        self.before_read()
        rows = _query_keys(self.database, _KEPT_SQL.replace("{table}", f"readings_{stream}"), keys)
        return {(gpu, int(second)): event_id for gpu, second, event_id in rows}

    def stored_since(self, cards: dict[str, dict[str, int]]) -> dict[str, set[str]]:
        """Per stream, the cards of `cards` ({stream: {gpu: since}}) with a stored reading at
        or after their `since` (see Rater.unchecked_cards)."""
        asked = {stream: since for stream, since in cards.items() if since}
        if not asked:
            return {}
        params: dict[str, object] = {}
        for stream in ("usage", "power"):
            since = asked.get(stream, {})
            params |= {f"{stream}_gpus": sorted(since), f"{stream}_lo": max(min(since.values(), default=0), 0)}
        self.before_read()
        held: dict[str, set[str]] = {stream: set() for stream in asked}
        for stream, gpu, newest in self.database.query(_STORED_SINCE_SQL, params):
            if int(newest) >= asked[stream][gpu]:
                held[stream].add(gpu)
        return held


def _query_keys(database, sql: str, keys: set) -> list[tuple]:
    if not keys:
        return []
    seconds = [second for _, second in keys]
    lo, hi = min(seconds), max(seconds)
    params = {"gpus": sorted({gpu for gpu, _ in keys}), "lo": lo, "hi": hi}
    if hi - lo <= _RANGE_S:
        rows = database.query(sql.replace("{exact}", ""), params)
        return [row for row in rows if (row[0], int(row[1])) in keys]
    return database.query(sql.replace("{exact}", _EXACT_KEYS), params | {"keys": sorted(keys)})
