"""The spend tracker's table (streams/spend/table.py) with a stand-in changelog: what is put
reaches the changelog once per flush, keyed as Faust keyed it; recovery takes each key's
latest entry, honours deletions, skips what it cannot read, and replaces what was held."""

from __future__ import annotations

import asyncio
import json

from streams.spend.table import RoundsTable


class Changelog:
    def __init__(self) -> None:
        self.records: list[tuple[int, bytes, bytes | None]] = []

    async def send(self, records: list[tuple[int, bytes, bytes | None]]) -> None:
        self.records += records

    async def read(self, partitions: set[int]) -> dict[bytes, bytes | None]:
        latest: dict[bytes, bytes | None] = {}
        for partition, key, value in self.records:
            if partition in partitions:
                latest[key] = value
        return latest


def test_entries_put_reach_the_changelog_at_the_flush_once_each_as_they_are_then():
    changelog = Changelog()
    table = RoundsTable(changelog.send, changelog.read)

    async def scenario() -> None:
        table.put("0/3", {"round": "a"}, 3)
        table.put("0/3", {"round": "b"}, 3)  # the same key twice before a flush: once, as it is now
        table.put("1/2", {"round": "c"}, 2)
        assert table.get("0/3") == {"round": "b"}  # in the table at once
        assert changelog.records == []  # on the changelog only at the flush
        assert await table.flush() == 2
        assert await table.flush() == 0

    asyncio.run(scenario())
    assert changelog.records == [(3, b'"0/3"', b'{"round":"b"}'), (2, b'"1/2"', b'{"round":"c"}')]
    # what `gpubill spend --stream` and a Faust-era tracker read: a JSON string key, a JSON object
    assert json.loads(changelog.records[0][1]) == "0/3" and json.loads(changelog.records[0][2]) == {"round": "b"}


def test_recovery_takes_the_latest_entry_of_each_key_of_the_partitions_and_nothing_else():
    changelog = Changelog()
    changelog.records = [
        (3, b'"0/3"', b'{"round": "old"}'),
        (3, b'"0/3"', b'{"round": "new"}'),  # Faust's spacing reads the same
        (3, b'"1/3"', b'{"round": "gone"}'),
        (3, b'"1/3"', None),  # deleted
        (3, b'not json', b'{"round": "x"}'),  # unreadable: skipped, the spend topic brings it back
        (3, b'"2/3"', b'{"no round": 1}'),
        (3, b'7', b'{"round": "key not a string"}'),
        (3, b'"3/3"', b"[" * 100_000 + b"]" * 100_000),  # nested past the parser's depth
        (3, b'"4/3"', b'{"round": "\xff"}'),  # not UTF-8
        (2, b'"0/2"', b'{"round": "other partition"}'),
    ]
    table = RoundsTable(changelog.send, changelog.read)
    table.put("5/5", {"round": "held before"}, 5)

    assert asyncio.run(table.recover({3})) == 1
    assert dict((key, table.get(key)) for key in table.keys()) == {"0/3": {"round": "new"}}
    assert asyncio.run(table.flush()) == 0  # what was put before the recovery is not written after it
    table.drop()
    assert list(table.keys()) == []
