"""The log of corrections taken into the database on the real broker (issue 25, item 2): anyone may
produce to gpu.corrections.v1, so the pipeline checks every message as `gpubill correct` does —
`gpubill corrections sync` (and the worker, every few seconds and at start) stores the good ones
once, records an event_id reused with other content as a conflict that `gpubill audit` shows, and
dead-letters the hostile ones with their reason and original bytes.
"""

from __future__ import annotations

import json
import re

import pytest
from kafka import KafkaProducer

from tests.e2e.conftest import FIXTURES

pytestmark = pytest.mark.e2e

TOPIC = "gpu.corrections.v1"


def correction(event_id: str, gpu: str = "GA1", lo: str = "2026-03-31T15:58:00Z", hi: str = "2026-03-31T15:59:00Z",
               **fields) -> dict:
    body = {"kind": "reattribute", "tenant": "beta"} if "stream" not in fields else {"kind": "void_readings"}
    return {**body, "event_id": event_id, "gpu_uuid": gpu, "from": lo, "to": hi, "reason": "e2e",
            "author": "os:someone", **fields}


def produce(broker, documents: list[dict]) -> list[bytes]:
    """Each document keyed by its card, one after another (a card's are on one partition, in order)."""
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    values = []
    for document in documents:
        value = json.dumps(document).encode()
        producer.send(TOPIC, key=document["gpu_uuid"].encode(), value=value).get(timeout=30)
        values.append(value)
    producer.close()
    return values


def rent_difference(audited: str, tenant: str) -> int:
    """rated minus raw rent seconds of `tenant` from the audit's DIFFERENCE line."""
    raw, rated = re.search(rf"DIFFERENCE {tenant} rent_seconds: raw ([\d,]+) vs rated ([\d,]+)", audited).groups()
    return int(rated.replace(",", "")) - int(raw.replace(",", ""))


def test_hostile_corrections_are_dead_letters_a_reused_id_is_a_conflict_in_the_audit(gpubill, broker):
    from warehouse.connection import open_database

    gpubill.run("replay", str(FIXTURES / "readings_part1.ndjson"))
    gpubill.run("worker", "--drain")  # the worker's sync at start finds an empty log
    assert "audit of 2026-03: clean" in gpubill.run("audit", "--period", "2026-03").stdout

    moved = correction("e2e-move")  # GA1's minute 23:58 in Shanghai, acme's → beta's
    hostile = [
        correction("e2e-backwards", lo="2026-03-31T15:59:00Z", hi="2026-03-31T15:58:00Z"),  # to ≤ from
        correction("e2e-long", lo="2026-02-01T00:00:00Z", hi="2026-03-31T00:00:00Z"),  # over 31 days
        correction("e2e-tenant", tenant="acme corp"),  # not an id
        correction("e2e-unknown", gpu="GX9"),  # no readings of that card at all
    ]
    hijack = correction("e2e-move", tenant="mallory")  # the same id, other content
    values = produce(broker, [moved, moved,  # the same correction twice: counted once
                              correction("e2e-void", gpu="GR1", lo="2026-03-31T15:59:00Z", hi="2026-03-31T15:59:30Z",
                                         stream="power"),
                              *hostile, hijack])

    first = json.loads(gpubill.run("corrections", "sync", "--json").stdout)
    again = json.loads(gpubill.run("corrections", "sync", "--json").stdout)

    assert [row["event_id"] for row in first["stored"]] == ["e2e-move", "e2e-void"]
    assert (first["read"], first["duplicates"], first["earlier"]) == (8, 1, 0)
    reasons = [row["reason"] for row in first["deadlettered"]]
    assert len(reasons) == 4 and all(len(reason.splitlines()) == 1 for reason in reasons)
    for reason, expected in zip(reasons, ["must be after 'from'", "is over 31 days", "tenant: Value error, must be an id",
                                          "no readings of card 'GX9' are stored"]):
        assert expected in reason, reasons
    assert [row["reason"] for row in first["conflicts"]] == ["event_id e2e-move was first used with other content"]
    assert (again["stored"], again["conflicts"], again["deadlettered"], again["earlier"]) == ([], [], [], 7)
    assert ("synced 8 corrections from the log: 0 stored, 0 conflicts, 0 dead-lettered now; 1 duplicates, 7 taken "
            "before") in gpubill.run("corrections", "sync").stdout
    kept, refused = first["stored"][0], first["conflicts"][0]
    assert kept["partition"] == refused["partition"] and kept["offset"] < refused["offset"]  # one card, one partition

    with open_database(gpubill.env["GPUBILL_CLICKHOUSE"]) as db:
        assert db.query("SELECT event_id, kind, gpu_uuid, tenant, stream, original FROM corrections "
                        "ORDER BY event_id") == [
            ("e2e-move", "reattribute", "GA1", "beta", "", values[0].decode()),
            ("e2e-void", "void_readings", "GR1", None, "power", values[2].decode())]
        assert db.query("SELECT event_id, kept_partition, kept_offset, src_partition, src_offset, original "
                        "FROM correction_conflicts") == [
            ("e2e-move", kept["partition"], kept["offset"], refused["partition"], refused["offset"], values[-1].decode())]
        letters = db.query("SELECT source_partition, source_offset, reason, original FROM deadletters "
                           "WHERE source_topic = {t:String} ORDER BY source_offset, source_partition", {"t": TOPIC})
    assert sorted(original for *_, original in letters) == sorted(v.decode() for v in values[3:7])
    assert {(p, o) for p, o, *_ in letters} == {(row["partition"], row["offset"]) for row in first["deadlettered"]}
    listed = json.loads(gpubill.run("dlq", "list", "--limit", "1000", "--format", "json").stdout)
    assert sum(1 for row in listed if row.get("source_topic") == TOPIC) == 4

    audited = gpubill.run("audit", "--period", "2026-03", check=False)
    assert "correction conflicts of 2026-03: 1" in audited.stdout
    assert (f"CONFLICT event_id reused with other content: correction 'e2e-move' at partition {refused['partition']}, "
            f"offset {refused['offset']} refused; kept the one at partition {kept['partition']}, "
            f"offset {kept['offset']}") in audited.stdout
    assert "corrections dead-lettered (any period): 4" in audited.stdout
    # The raw side applies the stored corrections; the rated data is not re-rated yet (rerate
    # does that): GA1's minute moved from acme to beta, 60 GPU-seconds each way.
    assert audited.returncode == 1 and rent_difference(audited.stdout, "acme") == 60
    assert rent_difference(audited.stdout, "beta") == -60
    assert "correction conflicts of 2026-04: none" in gpubill.run("audit", "--period", "2026-04", check=False).stdout


def test_the_worker_takes_the_log_of_corrections(gpubill, broker):
    from warehouse.connection import open_database

    gpubill.run("replay", str(FIXTURES / "readings_part1.ndjson"))
    gpubill.run("worker", "--drain")
    produce(broker, [correction("w-move"), correction("w-unknown", gpu="GX9")])
    gpubill.run("replay", str(FIXTURES / "readings_part2.ndjson"))  # something for the drain to do
    gpubill.run("worker", "--drain")  # a drain waits for its sync at start

    with open_database(gpubill.env["GPUBILL_CLICKHOUSE"]) as db:
        assert db.query("SELECT event_id FROM corrections") == [("w-move",)]
        assert [reason.split(":")[0] for (reason,) in db.query(
            "SELECT reason FROM deadletters WHERE source_topic = {t:String}", {"t": TOPIC})] == [
            "no readings of card 'GX9' are stored"]
    assert json.loads(gpubill.run("corrections", "sync", "--json").stdout)["earlier"] == 2
