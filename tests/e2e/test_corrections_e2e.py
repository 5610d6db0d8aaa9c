"""Compensating events end to end on the real broker (issue 25, item 2): `gpubill correct`
checks a correction before it is produced to gpu.corrections.v1, and `gpubill corrections list`
reads the topic back, listing what another producer sent that does not count and why.
The readings (tests/e2e/fixtures) are never changed: a correction is an event of its own.
"""

from __future__ import annotations

import json

import pytest
from kafka import KafkaProducer

from tests.e2e.conftest import FIXTURES
from tests.e2e.test_corrections_sync_e2e import rent_difference
from tests.e2e.test_tenants_e2e import one_line_error

pytestmark = pytest.mark.e2e


def test_corrections_are_checked_produced_and_listed_from_the_log(gpubill, broker):
    gpubill.run("replay", str(FIXTURES / "readings_part1.ndjson"))
    gpubill.run("worker", "--drain")
    assert "audit of 2026-03: clean" in gpubill.run("audit", "--period", "2026-03").stdout  # the projection before

    # -- refused before anything is produced: one line, exit 1
    base = ("correct", "reattribute", "--gpu", "GA1", "--tenant", "beta", "--reason", "wrong tenant on gz-n1")
    refused = [
        (("--from", "2026-03-31T15:59:00Z", "--to", "2026-03-31T15:58:00Z"), "must be after 'from'"),
        (("--from", "2026-02-01T00:00:00Z", "--to", "2026-03-31T00:00:00Z"), "is over 31 days"),
        (("--from", "2026-03-31T15:58:00Z", "--to", "2099-01-01T00:00:00Z"), "over 31 days"),
        (("--from", "yesterday", "--to", "2026-03-31T15:59:00Z"), "must be an RFC 3339 timestamp"),
    ]
    for extra, message in refused:
        assert message in one_line_error(gpubill.run(*base, *extra, check=False)), extra
    assert "tenant: Value error, must be an id" in one_line_error(gpubill.run(
        "correct", "reattribute", "--gpu", "GA1", "--tenant", "acme corp", "--from", "2026-03-31T15:58:00Z",
        "--to", "2026-03-31T15:59:00Z", "--reason", "x", check=False))
    assert "no readings of card 'GX9' are stored" in one_line_error(gpubill.run(
        "correct", "void", "--gpu", "GX9", "--from", "2026-03-31T15:58:00Z", "--to", "2026-03-31T15:59:00Z",
        "--reason", "x", check=False))
    assert json.loads(gpubill.run("corrections", "list", "--json").stdout) == []

    # -- accepted: produced with an id from its content, so the same command twice is one event
    moved = gpubill.run(*base, "--from", "2026-03-31T15:58:00Z", "--to", "2026-03-31T15:59:00Z")
    assert "produced reattribute corr-" in moved.stdout
    gpubill.run(*base, "--from", "2026-03-31T15:58:00Z", "--to", "2026-03-31T15:59:00Z")
    gpubill.run("correct", "void", "--gpu", "GR1", "--from", "2026-03-31T15:59:00Z", "--to", "2026-03-31T15:59:30Z",
                "--stream", "power", "--reason", "meter fault")

    # -- another producer's messages: one malformed, one reusing an event id with other content
    listed = json.loads(gpubill.run("corrections", "list", "--json").stdout)
    first_id = listed[0]["event_id"]
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    producer.send("gpu.corrections.v1", key=b"GA1", value=b'{"kind": "reattribute", "gpu_uuid": "GA1"}')
    hijack = {"kind": "reattribute", "event_id": first_id, "gpu_uuid": "GA1", "from": "2026-03-31T15:58:00Z",
              "to": "2026-03-31T15:59:00Z", "tenant": "mallory", "reason": "mine now", "author": "os:mallory"}
    producer.send("gpu.corrections.v1", key=b"GA1", value=json.dumps(hijack).encode())
    producer.flush()
    producer.close()

    listed = json.loads(gpubill.run("corrections", "list", "--json").stdout)
    assert [(row["status"], row.get("kind"), row.get("tenant")) for row in listed] == [
        ("ok", "reattribute", "beta"), ("duplicate", "reattribute", "beta"), ("ok", "void_readings", None),
        ("invalid", None, None), ("conflict", None, None)]
    assert listed[0]["periods"] == ["2026-03"] and listed[0]["author"].startswith("os:")  # 23:58 in Shanghai
    assert listed[2]["stream"] == "power" and listed[2]["from"] == "2026-03-31T15:59:00Z"
    assert "event_id: Field required" in listed[3]["reason_refused"]  # the first of what it lacks
    assert f"event_id {first_id} was first used with other content" == listed[4]["reason_refused"]
    assert [row["status"] for row in json.loads(gpubill.run("corrections", "list", "--period", "2026-04",
                                                            "--json").stdout)] == []
    text = gpubill.run("corrections", "list").stdout
    assert "→ beta" in text and "void power" in text and "[conflict]" in text

    # the readings and what was rated from them are as they were: a correction is its own event.
    # The audit takes the log of corrections to its end first (issue 36; before, it found the month
    # clean until a worker ran): the corrected raw side moves GA1's minute to beta, 60 s, while the
    # rated data (not re-rated yet) still bills it to acme
    audited = gpubill.run("audit", "--period", "2026-03", check=False)
    assert audited.returncode == 1 and "corrections taken from the log first: 2 stored" in audited.stderr
    assert rent_difference(audited.stdout, "acme") == 60 and rent_difference(audited.stdout, "beta") == -60
