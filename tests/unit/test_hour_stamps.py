"""The sink's stamps of written hours (warehouse/writes.py): ahead of the database's clock,
before the rows, and once per half-margin while an hour keeps being written."""

from __future__ import annotations

from warehouse import writes
from warehouse.writes import HourStamps


class Recorder:
    def __init__(self) -> None:
        self.stamped: list[tuple[list, list, int]] = []

    def command(self, sql: str, parameters: dict) -> None:
        assert sql.startswith("INSERT INTO rated_writes") and "now64(3, 'UTC')" in sql  # the database's clock
        self.stamped.append((parameters["periods"], parameters["hours"], parameters["ahead"]))


def test_an_hour_is_stamped_ahead_once_per_half_margin(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(writes.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(writes, "MARGIN_S", 60)
    db, stamps = Recorder(), HourStamps()
    stamps.before_write(db, [("2026-03", 7200), ("2026-03", 3600)])
    assert db.stamped == [(["2026-03", "2026-03"], [3600, 7200], 60)]
    clock[0] += 29.9  # still covered by the stamp: nothing written
    stamps.before_write(db, [("2026-03", 7200)])
    assert len(db.stamped) == 1
    stamps.before_write(db, [("2026-04", 7200)])  # another hour: stamped at once
    assert db.stamped[-1] == (["2026-04"], [7200], 60)
    clock[0] += 0.1  # half the margin since the first stamp: again
    stamps.before_write(db, [("2026-03", 7200)])
    assert db.stamped[-1] == (["2026-03"], [7200], 60)


def test_no_hours_no_stamp():
    db = Recorder()
    HourStamps().before_write(db, [])
    assert db.stamped == []
