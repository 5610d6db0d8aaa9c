"""The API's access records (issue 14): one insert for many, read back newest first with
filters, outside text bounded and stored as received, printed escaped by `gpubill key
audit`, and finance's view v_api_access over the same rows."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import orjson
import pytest

from tenant_api.access_log import (
    COLUMNS,
    MAX_TEXT_CHARS,
    AccessRecord,
    InvalidAuditQuery,
    access_log,
    record_access,
)
from billing.tenants import InvalidTenant
from tenant_api.keys import InvalidKeyRequest
from tests.chdb_template import migrated_dsn
from tests.unit.cli_run import run_cli
from warehouse.connection import open_database

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
KEY_A, KEY_B = "k_aaaaaaaaaaaaaaaa", "k_bbbbbbbbbbbbbbbb"


def served(at: datetime, key: str = KEY_A, tenant: str = "acme", **changes) -> AccessRecord:
    record = AccessRecord(time=at, key_id=key, tenant=tenant, method="GET", what="/v1/usage", period="2026-11",
                          fmt="csv", bytes=1234, status=200, client="192.0.2.7", reason="")
    return replace(record, **changes)


@pytest.fixture
def db(tmp_path):
    with open_database(migrated_dsn(tmp_path / 'ch')) as database:
        yield database


class CountingDatabase:
    def __init__(self):
        self.inserts = []

    def insert(self, table, rows, columns):
        self.inserts.append((table, list(rows), tuple(columns)))


def test_many_records_are_one_insert_and_none_is_no_insert():
    fake = CountingDatabase()
    record_access(fake, [served(T0 + timedelta(seconds=s)) for s in range(50)])
    ((table, rows, columns),) = fake.inserts
    assert table == "api_access_log" and len(rows) == 50 and columns == COLUMNS
    assert columns == ("time", "key_id", "tenant", "method", "what", "period", "format", "bytes", "status",
                       "client", "reason")
    assert rows[0] == (T0, KEY_A, "acme", "GET", "/v1/usage", "2026-11", "csv", 1234, 200, "192.0.2.7", "")


@pytest.mark.parametrize("changes, fragment", [
    ({"bytes": -1}, "bytes must be a whole number"),
    ({"bytes": 1.5}, "bytes must be a whole number"),
    ({"status": "200"}, "status must be a whole number"),
    ({"status": True}, "status must be a whole number"),
    ({"status": 1000}, "is not an HTTP status"),
    ({"time": "2026-12-01"}, "time must be a datetime"),
])
def test_a_record_with_bad_numbers_stops_the_whole_batch_before_anything_is_written(changes, fragment):
    fake = CountingDatabase()
    with pytest.raises(ValueError, match=fragment):
        record_access(fake, [served(T0), served(T0, **changes)])
    assert fake.inserts == []


def test_records_read_back_newest_first_with_filters(db):
    records = [
        served(T0, KEY_A, "acme"),
        served(T0 + timedelta(minutes=1), KEY_B, "beta", fmt="pdf", bytes=99_000),
        served(T0 + timedelta(minutes=2), "", "", what="/v1/me", period="", fmt="", bytes=0, status=401,
               reason="malformed"),
        served(T0 + timedelta(minutes=3), KEY_A, "acme", what="/v1/invoices/GB-2026-000001", status=404,
               reason="not found"),
    ]
    record_access(db, records)
    assert access_log(db) == records[::-1]
    assert access_log(db, tenant="acme") == [records[3], records[0]]
    assert access_log(db, key_id=KEY_B) == [records[1]]
    assert access_log(db, since=T0 + timedelta(minutes=2)) == [records[3], records[2]]
    assert access_log(db, tenant="acme", key_id=KEY_A, since=T0 + timedelta(seconds=1)) == [records[3]]
    assert access_log(db, limit=1) == [records[3]]
    # a naive since is UTC, as the table keeps it
    assert access_log(db, since=datetime(2026, 12, 1, 9, 3)) == [records[3]]


def test_the_filters_and_limit_are_checked_not_spliced(db):
    for bad in (0, -1, 10_001, True, "5"):
        with pytest.raises(InvalidAuditQuery, match="is not a whole number from 1 to 10000"):
            access_log(db, limit=bad)
    with pytest.raises(InvalidTenant):
        access_log(db, tenant="x' OR '1'='1")
    with pytest.raises(InvalidKeyRequest):
        access_log(db, key_id="k_a' OR 1 --")


def test_outside_text_is_bounded_and_kept_as_received(db):
    hostile = served(T0, what="/v1/usage/" + "a" * 10_000, client="\x1b]0;pwned\x07" + "x" * 500,
                     reason="bad \u202e param \udcff", method="GET" * 20)
    record_access(db, [hostile])
    (back,) = access_log(db)
    assert back.what == ("/v1/usage/" + "a" * 10_000)[:MAX_TEXT_CHARS] and len(back.what) == 300
    assert back.client.startswith("\x1b]0;pwned\x07") and len(back.client) == 300  # stored as is; shown escaped
    assert back.reason == "bad \u202e param ?"  # the lone surrogate cannot be UTF-8: replaced
    assert back.method == ("GET" * 20)[:16]


def test_the_table_is_partitioned_by_month_and_sorted_by_time_and_key(db):
    ((partition, sorting),) = db.query(
        "SELECT partition_key, sorting_key FROM system.tables WHERE database = currentDatabase() "
        "AND name = 'api_access_log'")
    assert (partition, sorting) == ("toYYYYMM(time)", "time, key_id")


def test_finance_reads_the_same_rows_through_v_api_access(db):
    record_access(db, [served(T0), served(T0 + timedelta(days=40), status=429, reason="rate limited")])
    columns = [c for (c,) in db.query("SELECT name FROM system.columns WHERE database = currentDatabase() "
                                      "AND table = 'v_api_access' ORDER BY position")]
    assert tuple(columns) == COLUMNS
    rows = db.query_dicts("SELECT * FROM v_api_access ORDER BY time")
    assert [(r["status"], r["format"], r["bytes"], r["reason"]) for r in rows] == [
        (200, "csv", 1234, ""), (429, "csv", 1234, "rate limited")]
    # two months: two partitions
    assert db.query("SELECT uniqExact(_partition_id) FROM api_access_log")[0][0] == 2


# -------------------------------------------------------------------------- gpubill key audit


def audit(args, monkeypatch, capsys, dsn) -> tuple[int, str, str]:
    monkeypatch.setenv("GPUBILL_CLICKHOUSE", dsn)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "400")
    return run_cli(monkeypatch, capsys, "key", "audit", *args)


@pytest.fixture
def dsn(tmp_path):
    location = f"chdb://{tmp_path / 'cli'}"
    with open_database(location) as database:
        record_access(database, [
            served(T0, KEY_A, "acme"),
            served(T0 + timedelta(minutes=1), KEY_B, "beta", what="/v1/usage[bold]x", client="\x1b[2J203.0.113.9",
                   status=401, reason="expired\x07"),
        ])
    return location


def test_audit_prints_every_outside_value_escaped(dsn, monkeypatch, capsys):
    code, out, err = audit([], monkeypatch, capsys, dsn)
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b[2J203.0.113.9" in out and "expired\\x07" in out and "/v1/usage[bold]x" in out
    assert out.index(KEY_B) < out.index(KEY_A)  # newest first
    assert "2 records, newest first" in err


def test_audit_filters_and_json(dsn, monkeypatch, capsys):
    code, out, err = audit(["--tenant", "acme", "--json"], monkeypatch, capsys, dsn)
    assert code == 0, err
    assert orjson.loads(out) == [{
        "time": "2026-12-01T09:00:00.000Z", "key_id": KEY_A, "tenant": "acme", "method": "GET", "what": "/v1/usage",
        "period": "2026-11", "format": "csv", "bytes": 1234, "status": 200, "client": "192.0.2.7", "reason": ""}]
    code, out, err = audit(["--key", KEY_B, "--json"], monkeypatch, capsys, dsn)
    assert [r["client"] for r in orjson.loads(out)] == ["\x1b[2J203.0.113.9"]  # JSON escapes it itself
    code, out, err = audit(["--since", "2026-12-02", "--json"], monkeypatch, capsys, dsn)
    assert orjson.loads(out) == []
    code, out, err = audit(["--limit", "1"], monkeypatch, capsys, dsn)
    assert code == 0 and KEY_B in out and KEY_A not in out and "--limit shows more" in err
