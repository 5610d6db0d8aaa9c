"""`gpubill audit`'s view of conflicts (reports.audit.conflicts_of): counted per reason and
shown by example, from the rows the rater wrote — a reused event_id is never invisible."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from billing_rules import DEFAULT_RULES_DIR, load_rules
from reports.audit import ConflictExample, conflicts_of
from schemas import tables
from schemas.events import PowerReading, UsageReading
from streams.rating.reference import Outcome, Rater
from tests.chdb_template import migrated_dsn
from warehouse.connection import open_database

RULES = load_rules(DEFAULT_RULES_DIR)
T = 1_772_323_200 + 3600  # 2026-03-01T01:00:00Z, inside March (Asia/Shanghai)
NOW = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


def usage(gpu: str, second: int, event_id: str, tenant: str = "acme") -> UsageReading:
    return UsageReading.model_validate({
        "kind": "usage", "event_id": event_id, "ts": datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "site": "gz-guian", "node": "node-01", "gpu_uuid": gpu, "gpu_model": "A800-80G", "tenant": tenant,
        "instance": "i-1", "util_pct": 50, "mem_used_mib": 1})


def power(gpu: str, second: int, event_id: str) -> PowerReading:
    return PowerReading.model_validate({
        "kind": "power", "event_id": event_id, "ts": datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "site": "gz-guian", "node": "node-01", "gpu_uuid": gpu, "power_w": 300})


@pytest.fixture()
def database(tmp_path):
    with open_database(migrated_dsn(tmp_path / 'db')) as db:
        yield db


def test_conflicts_of_the_period_are_counted_per_reason_with_examples(database) -> None:
    out = Outcome()
    rater = Rater(RULES)
    for offset, reading in enumerate([
        usage("G1", T, "u-1"),
        usage("G2", T, "u-1", tenant="mallory"),  # the id reused for another card: event_id reused
        usage("G1", T, "u-1", tenant="mallory"),  # the same card and second, another tenant: event_id reused
        usage("G1", T, "u-2"),  # another id for a second held: second taken
        usage("G1", T, "u-1"),  # a true duplicate: no conflict
        power("G1", T, "p-1"),
        power("G1", T + 5, "p-1"),  # event_id reused
    ]):
        rater.rate(reading, 0, offset, NOW, out)
    database.insert("conflicts", out.conflicts, tables.CONFLICTS)
    # one of another period (April, Asia/Shanghai), not counted for March
    database.insert("conflicts", [("usage", "G9", 1_775_000_000 + 86_400 * 5, "a", "b", 0, 99, NOW, "second taken")],
                    tables.CONFLICTS)

    found = conflicts_of(database, RULES, "2026-03", examples=2)

    assert found.by_reason == {"event_id reused": 3, "second taken": 1} and found.count == 4
    assert found.examples == [  # time order, then stream, card, position
        ConflictExample("event_id reused", "usage", "G1", T, "u-1", "u-1", 0, 2),
        ConflictExample("second taken", "usage", "G1", T, "u-1", "u-2", 0, 3),
    ]
    assert found.examples[0].describe() == (
        "event_id reused: usage 'u-1' for 'G1' at 2026-03-01T01:00:00Z (partition 0, offset 2); kept 'u-1'")
    assert conflicts_of(database, RULES, "2026-02").count == 0


def test_rows_written_before_the_reason_column_read_as_second_taken(database) -> None:
    old_columns = tuple(c for c in tables.CONFLICTS if c != "reason")
    database.insert("conflicts", [("power", "G1", T, "p-1", "p-2", 1, 7, NOW)], old_columns)
    assert conflicts_of(database, RULES, "2026-03").by_reason == {"second taken": 1}
