"""streams/corrections_sync.py: the checked log of corrections (hand-built here, as read_corrections
returns it) taken into real chDB — stored once however often it is synced, conflicts naming the
correction that counts (and shown by the audit), malformed ones and those of unknown cards
dead-lettered with the reason and the original bytes."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from billing_rules import DEFAULT_RULES_DIR, load_rules
from reports.audit import CorrectionConflict, correction_findings
from schemas import tables
from schemas.corrections import parse_correction
from schemas.topics import TOPIC_CORRECTIONS
from streams.corrections_sync import take_corrections
from streams.kafka.corrections import LoggedCorrection
from tests.chdb_template import migrated_dsn
from usage.corrections import stored_corrections
from warehouse.connection import open_database

RULES = load_rules(DEFAULT_RULES_DIR)
T = 1_772_323_200 + 3600  # 2026-03-01T01:00:00Z, inside March (Asia/Shanghai)
NOW_S = T + 86_400
NOW = datetime.fromtimestamp(NOW_S, UTC)


def iso(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def reattribute(event_id: str, gpu: str = "G1", tenant: str | None = "beta", lo: int = T, hi: int = T + 600) -> bytes:
    return json.dumps({"kind": "reattribute", "event_id": event_id, "gpu_uuid": gpu, "from": iso(lo), "to": iso(hi),
                       "tenant": tenant, "reason": "wrong tenant", "author": "os:finance"}).encode()


def void(event_id: str, gpu: str = "G1", stream: str = "power", lo: int = T, hi: int = T + 60) -> bytes:
    return json.dumps({"kind": "void_readings", "event_id": event_id, "gpu_uuid": gpu, "from": iso(lo), "to": iso(hi),
                       "stream": stream, "reason": "meter fault", "author": "os:finance"}).encode()


def logged(partition: int, offset: int, raw: bytes, status: str = "ok", reason: str = "") -> LoggedCorrection:
    correction = parse_correction(raw, NOW_S) if status in ("ok", "duplicate") else None
    return LoggedCorrection(partition, offset, NOW_S * 1000 - 5000, correction, status, reason, raw)


@pytest.fixture()
def db(tmp_path):
    with open_database(migrated_dsn(tmp_path / "db")) as database:
        for gpu in ("G1", "G2"):  # cards with readings: one usage reading of G1, one power reading of G2
            if gpu == "G1":
                database.insert("readings_usage", [("u-1", iso(T), datetime.fromtimestamp(T, UTC), "gz-guian", "n1", gpu,
                                                    "A800-80G", "acme", "i-1", 50, 1, 0, 0, NOW)], tables.READINGS_USAGE)
            else:
                database.insert("readings_power", [("p-1", iso(T), datetime.fromtimestamp(T, UTC), "gz-guian", "n1", gpu,
                                                    300_000, 0, 0, 0, "", NOW)], tables.READINGS_POWER)
        yield database


def deadletters(db) -> list[tuple]:
    """The rows, the original as hex: its bytes exactly (not all of them are UTF-8)."""
    return db.query("SELECT source_topic, source_partition, source_offset, source_line, source_index, reason, "
                    "lower(hex(original)) FROM deadletters FINAL ORDER BY source_partition, source_offset")


def test_a_log_synced_twice_is_stored_once(db) -> None:
    log = [logged(0, 0, reattribute("c-1")), logged(0, 1, reattribute("c-1"), "duplicate"),
           logged(1, 0, void("c-2", gpu="G2"))]

    first = take_corrections(db, log, NOW_S)
    again = take_corrections(db, log, NOW_S + 5)

    assert [(e.partition, e.offset) for e in first.stored] == [(0, 0), (1, 0)]
    assert (first.read, first.duplicates, first.earlier, first.changed) == (3, 1, 0, True)
    assert (again.stored, again.conflicts, again.dead, again.earlier, again.changed) == ((), (), (), 2, False)
    assert db.query("SELECT count() FROM corrections")[0][0] == 2  # not merely collapsed by FINAL: written once
    assert [(c.event_id, c.kind, c.gpu_uuid, c.tenant, c.stream, c.partition, c.offset)
            for c in stored_corrections(db, T, T + 3600)] == [
        ("c-1", "reattribute", "G1", "beta", "", 0, 0), ("c-2", "void_readings", "G2", None, "power", 1, 0)]
    (original,), = db.query("SELECT original FROM corrections WHERE event_id = 'c-1'")
    assert original == reattribute("c-1").decode()
    assert deadletters(db) == []


def test_a_reused_event_id_is_a_conflict_naming_the_kept_position_and_the_audit_shows_it(db) -> None:
    hijack = reattribute("c-1", tenant="mallory")
    take_corrections(db, [logged(2, 7, reattribute("c-1"))], NOW_S)  # the first sync saw only the first
    report = take_corrections(db, [logged(2, 7, reattribute("c-1")),
                                   logged(2, 9, hijack, "conflict", "event_id c-1 was first used with other content")],
                              NOW_S)

    assert [(e.partition, e.offset) for e in report.conflicts] == [(2, 9)] and report.stored == ()
    assert db.query("SELECT event_id, kept_partition, kept_offset, src_partition, src_offset, original "
                    "FROM correction_conflicts FINAL") == [("c-1", 2, 7, 2, 9, hijack.decode())]
    assert [c.tenant for c in stored_corrections(db, T, T + 3600)] == ["beta"]  # the first counts

    findings = correction_findings(db, RULES, "2026-03")
    assert findings.conflicts == [CorrectionConflict("c-1", 2, 7, 2, 9)] and findings.deadlettered == 0
    assert findings.conflicts[0].describe() == (
        "event_id reused with other content: correction 'c-1' at partition 2, offset 9 refused; "
        "kept the one at partition 2, offset 7")
    assert correction_findings(db, RULES, "2026-04").conflicts == []  # both spans are in March


def test_a_conflict_whose_first_correction_is_refused_still_names_it(db) -> None:
    report = take_corrections(db, [logged(0, 3, reattribute("c-9", gpu="GX")),
                                   logged(0, 4, reattribute("c-9", gpu="G1"), "conflict", "reused")], NOW_S)
    assert [e.offset for e in report.dead] == [3] and [e.offset for e in report.conflicts] == [4]
    assert db.query("SELECT kept_partition, kept_offset FROM correction_conflicts FINAL") == [(0, 3)]


def test_invalid_corrections_and_unknown_cards_are_dead_letters_with_their_reason(db) -> None:
    junk = b'{"kind": "reattribute", "gpu_uuid": "G1"}'
    not_utf8 = b"\xff\xfe not json"
    log = [logged(0, 0, junk, "invalid", "event_id: Field required"),
           logged(0, 1, not_utf8, "invalid", "not valid UTF-8"),
           logged(3, 2, void("c-5", gpu="GX9")),  # no readings of GX9 at all
           logged(3, 3, void("c-6", gpu="G2", stream="both"))]

    report = take_corrections(db, log, NOW_S)
    take_corrections(db, log, NOW_S + 5)  # again: nothing new

    assert [(e.partition, e.offset, e.status) for e in report.dead] == [(0, 0, "invalid"), (0, 1, "invalid"),
                                                                       (3, 2, "invalid")]
    assert [e.offset for e in report.stored] == [3]
    assert deadletters(db) == [
        (TOPIC_CORRECTIONS, 0, 0, 0, 0, "event_id: Field required", junk.hex()),
        (TOPIC_CORRECTIONS, 0, 1, 0, 0, "not valid UTF-8", not_utf8.hex()),
        (TOPIC_CORRECTIONS, 3, 2, 0, 0, "no readings of card 'GX9' are stored: a correction names a card as its "
                                        "readings do", void("c-5", gpu="GX9").hex())]
    assert db.query("SELECT count() FROM deadletters")[0][0] == 3  # written once
    assert [c.event_id for c in stored_corrections(db, T, T + 3600)] == ["c-6"]
    assert correction_findings(db, RULES, "2026-03").deadlettered == 3
