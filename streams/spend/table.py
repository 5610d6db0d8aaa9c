"""The spend tracker's table: each round key's latest round, in memory, durable in a compacted
changelog topic (schemas/topics.py `spend_changelog_topic`), partitioned as the spend topic.

    put(key, value, partition)  in the table at once; on the changelog at the next `flush`
    flush()                     what was put since the last flush, produced (acks=all)
    recover(partitions)         the table is what the changelog holds for those partitions
    drop()                      forget everything (the partitions were revoked)

The tracker puts the rounds of a batch of spend records, flushes, and only then lets the
batch's offsets be committed (streams/spend/app.py): a crash before the flush re-delivers the
batch, and a round put again replaces itself (its value is the key's latest round, by marks).
A changelog record is the key as a JSON string and the value as a JSON object — what Faust
wrote when the table was Faust's, so a tracker upgraded in place recovers its predecessor's
state, and `gpubill spend --stream` reads either (`streams.spend.tracker.table_totals`).
"""

from __future__ import annotations

import json
import logging
from typing import Any, Awaitable, Callable, Iterable

log = logging.getLogger("gpubill.spend")

# (partitions) → the latest raw value per raw key of the changelog's partitions, read to their end
ReadChangelog = Callable[[set[int]], Awaitable[dict[bytes, bytes | None]]]


class RoundsTable:
    """Round key → {"round": "<its latest round>"}, for the spend partitions this tracker holds."""

    def __init__(self, send: Callable[[list[tuple[int, bytes, bytes | None]]], Awaitable[None]],
                 read: ReadChangelog) -> None:
        self._send, self._read = send, read
        self._values: dict[str, dict] = {}
        self._unsent: dict[str, tuple[int, dict]] = {}  # key → (partition, value) put since the last flush

    def get(self, key: str) -> dict | None:
        return self._values.get(key)

    def keys(self) -> Iterable[str]:
        return self._values.keys()

    def put(self, key: str, value: dict, partition: int) -> None:
        self._values[key] = value
        self._unsent[key] = (partition, value)

    async def flush(self) -> int:
        """Produce what was put since the last flush (a key put twice goes once, as it is now);
        returns once the broker acknowledged it, with the number of records produced."""
        if not self._unsent:
            return 0
        unsent, self._unsent = self._unsent, {}
        await self._send([(partition, json.dumps(key).encode(), json.dumps(value, separators=(",", ":")).encode())
                          for key, (partition, value) in unsent.items()])
        return len(unsent)

    async def recover(self, partitions: set[int]) -> int:
        """Replace the table by the changelog's latest entries of `partitions`; returns how many.
        An entry that is not a JSON string key and a JSON object value with a "round" is logged
        and skipped: the spend topic's next round of that key brings it back."""
        raw = await self._read(partitions)
        values: dict[str, dict] = {}
        bad = 0
        for key, value in raw.items():
            decoded = _entry(key, value)
            if decoded is None:
                bad += 1
                continue
            name, entry = decoded
            if entry is None:
                values.pop(name, None)
            else:
                values[name] = entry
        if bad:
            log.warning("%d unreadable entries of the spend table's changelog skipped", bad)
        self._values, self._unsent = values, {}
        return len(values)

    def drop(self) -> None:
        self._values, self._unsent = {}, {}


def _entry(key: bytes | None, value: bytes | None) -> tuple[str, dict | None] | None:
    """(key, value or None for a deletion) of a changelog record, or None when unreadable."""
    try:
        name = json.loads(key or b"")
        entry: Any = None if value is None else json.loads(value)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past the parser's depth
        return None
    if not isinstance(name, str) or not (entry is None or (isinstance(entry, dict)
                                                           and isinstance(entry.get("round"), str))):
        return None
    return name, entry
