"""Webhook delivery of billing events (issue 15): the signature against an independent HMAC,
the retry schedule, a real local HTTP receiver and a real (embedded) ClickHouse recording
every attempt, hostile receivers and messages, the thin Kafka loop's commit order on a fake
consumer, and `gpubill events deliver | deliveries`."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import orjson
import pytest

from billing.tenants import InvalidTenant
from billing.webhook_deliveries import COLUMNS, InvalidDeliveryQuery, deliveries, record_attempts
from schemas.billing_events import BillingEvent, encode_event
from schemas.webhooks import (
    DeliveryAttempt, InvalidWebhookTarget, backoff_s, check_url, shown_url, sign, verify,
)
from streams.webhooks import WebhookTarget, deliver, group_of, run_deliverer
from tests.chdb_template import migrated_dsn
from tests.unit.cli_run import run_cli
from warehouse.connection import open_database

SECRET = "whsec-0123456789abcdef"
EVENT = BillingEvent(kind="budget_threshold", tenant="acme", period="2026-12", threshold="80",
                     observed_at="2026-12-01T09:00:00.000Z", spend="1600.00", budget="2000.00")
BODY = encode_event(EVENT)
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


# ------------------------------------------------------------------ a real local receiver


@dataclass
class Received:
    path: str
    headers: dict
    body: bytes


class Receiver:
    """An HTTP server on 127.0.0.1 answering POSTs from a script of (status, body, headers, delay_s);
    the last entry repeats. Every request is kept in `received`."""

    def __init__(self, *script: tuple) -> None:
        self.script = list(script)
        self.received: list[Received] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 — http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.received.append(Received(self.path, dict(self.headers), body))
                status, answer, headers, delay_s = (receiver.script.pop(0) if len(receiver.script) > 1
                                                    else receiver.script[0])
                time.sleep(delay_s)
                try:
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading: what a bounded reader does

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/billing"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "Receiver":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def answer(status: int, body: bytes = b"", headers: dict | None = None, delay_s: float = 0.0) -> tuple:
    return status, body, headers or {}, delay_s


@pytest.fixture
def db(tmp_path):
    with open_database(migrated_dsn(tmp_path / 'ch')) as database:
        yield database


def run_deliver(raw: bytes, target: WebhookTarget, record, *, clock=time.time) -> tuple[DeliveryAttempt, list]:
    """deliver() with a real httpx client and a sleep that only notes the waits."""
    waits: list[float] = []

    async def no_sleep(seconds: float) -> None:
        waits.append(seconds)

    async def go() -> DeliveryAttempt:
        async with httpx.AsyncClient(follow_redirects=False, timeout=target.timeout_s) as client:
            return await deliver(raw, target, client=client, record=record, sleep=no_sleep, clock=clock)

    return asyncio.run(go()), waits


def independent_signature_ok(headers: dict, body: bytes, secret: str) -> bool:
    """The receiver's check, written from the documented format, not with schemas.webhooks."""
    header = headers["Gpubill-Signature"]
    t_part, v1_part = header.split(",")
    assert t_part.startswith("t=") and v1_part.startswith("v1=")
    expected = hmac.new(secret.encode(), t_part[2:].encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, v1_part[3:])


# ------------------------------------------------------------------ the required test


def test_a_receiver_failing_twice_then_answering_200_gets_one_delivery_recorded_as_three_attempts(db):
    with Receiver(answer(500, b"boom"), answer(500, b"boom again"), answer(200, b"ok")) as receiver:
        target = WebhookTarget(receiver.url, SECRET, max_attempts=8)
        last, waits = run_deliver(BODY, target, lambda a: record_attempts(db, [a]))

    assert last.status == "delivered" and last.attempt == 3
    # three POSTs, the same event each time; only the third was answered 2xx: one delivery
    assert len(receiver.received) == 3
    for request in receiver.received:
        assert request.path == "/hooks/billing" and request.body == BODY
        assert request.headers["Gpubill-Event-Id"] == EVENT.event_id
        assert request.headers["Content-Type"] == "application/json"
        assert independent_signature_ok(request.headers, request.body, SECRET)
        assert not independent_signature_ok(request.headers, request.body, SECRET + "x")
    assert waits == [1, 2]  # after attempt 1: 1 s × 2^0; after attempt 2: 1 s × 2^1

    rows = deliveries(db, event_id=EVENT.event_id)
    assert [(r.attempt, r.status, r.http_status, r.error) for r in rows] == [  # newest first
        (3, "delivered", 200, ""),
        (2, "failed", 500, "HTTP 500: boom again"),
        (1, "failed", 500, "HTTP 500: boom"),
    ]
    assert {(r.tenant, r.kind, r.url) for r in rows} == {("acme", "budget_threshold", receiver.url)}
    assert all(r.duration_ms >= 0 and abs(r.attempted_at - datetime.now(UTC)) < timedelta(minutes=1) for r in rows)


@pytest.mark.parametrize("kind, threshold", [("invoice_overdue", "7"), ("suspend_new_rentals", "30")])
def test_a_dunning_event_is_delivered_as_it_was_produced(db, kind, threshold):
    # issue 38: the dunning kinds pass through the deliverer like the others — the body the
    # producer wrote (canonical), its id in the header, its kind and tenant in the record
    event = BillingEvent(kind=kind, tenant="beta", period="2026-03", threshold=threshold,
                         observed_at="2026-05-25T02:00:00.000Z", invoice="GB-2026-000002", due_date="2026-04-25",
                         days_overdue="30", outstanding="212.00")
    body = encode_event(event)
    with Receiver(answer(204)) as receiver:
        last, _ = run_deliver(body, WebhookTarget(receiver.url, SECRET), lambda a: record_attempts(db, [a]))
    assert last.status == "delivered"
    (request,) = receiver.received
    assert request.body == body and orjson.loads(request.body)["invoice"] == "GB-2026-000002"
    assert request.headers["Gpubill-Event-Id"] == event.event_id
    assert independent_signature_ok(request.headers, request.body, SECRET)
    (row,) = deliveries(db, event_id=event.event_id)
    assert (row.tenant, row.kind, row.status) == ("beta", kind, "delivered")


def test_each_attempt_signs_with_its_own_time(db):
    clock = iter([1_767_000_000.25, 1_767_000_001.5])  # the t= of attempt 1 and 2
    with Receiver(answer(503), answer(204)) as receiver:
        run_deliver(BODY, WebhookTarget(receiver.url, SECRET), lambda a: None, clock=lambda: next(clock))
    stamps = [r.headers["Gpubill-Signature"].split(",")[0] for r in receiver.received]
    assert stamps == ["t=1767000000", "t=1767000001"]  # whole seconds, rounded down


# ------------------------------------------------------------------ the signature, the schedule, the URL


def test_the_signature_is_hmac_sha256_of_timestamp_dot_body():
    body = b'{"a":1}'
    # by hand: HMAC-SHA256(key="k" * 16, msg=b'1767000000.{"a":1}'), hex
    expected = hmac.new(b"k" * 16, b'1767000000.{"a":1}', hashlib.sha256).hexdigest()
    assert sign("k" * 16, 1_767_000_000, body) == f"t=1767000000,v1={expected}"


@pytest.mark.parametrize("header_of, body, now_s, ok", [
    (lambda: sign(SECRET, 1_000, BODY), BODY, 1_000, True),
    (lambda: sign(SECRET, 1_000, BODY), BODY, 1_300, True),  # 300 s late: the tolerance's edge
    (lambda: sign(SECRET, 1_000, BODY), BODY, 1_301, False),  # a replay too late
    (lambda: sign(SECRET, 1_000, BODY), BODY + b" ", 1_000, False),  # the body changed
    (lambda: sign("another-secret-0123", 1_000, BODY), BODY, 1_000, False),
    (lambda: "t=1000", BODY, 1_000, False),
    (lambda: "v1=" + "0" * 64 + ",t=1000", BODY, 1_000, False),
])
def test_verify_is_what_a_receiver_checks(header_of, body, now_s, ok):
    assert verify(SECRET, header_of(), body, now_s=now_s) is ok


@pytest.mark.parametrize("attempt, wait_s", [
    (1, 1), (2, 2), (3, 4), (4, 8), (5, 16), (6, 32),
    (7, 60),  # 2^6 = 64 > 60: capped
    (8, 60), (1000, 60),
])
def test_backoff_doubles_from_one_second_and_is_capped_at_a_minute(attempt, wait_s):
    assert backoff_s(attempt) == wait_s


@pytest.mark.parametrize("url, fragment", [
    ("", "no webhook URL"),
    ("file:///etc/passwd", "http:// or https:// (it has file:)"),
    ("ftp://example.com/x", "(it has ftp:)"),
    ("javascript:alert(1)", "(it has javascript:)"),
    ("example.com/hook", "(it has no scheme)"),
    ("http://", "has no host"),
    ("http://example.com:99999/", "cannot be read"),
    ("http://exa mple.com/", "blanks or control characters"),
    ("http://example.com/\x1b[2J", "blanks or control characters"),
])
def test_a_url_that_is_not_http_is_refused_at_start(url, fragment):
    with pytest.raises(InvalidWebhookTarget) as raised:
        check_url(url)
    assert fragment in str(raised.value) and "\n" not in str(raised.value)


def test_a_short_or_missing_secret_is_refused_and_never_shown():
    with pytest.raises(InvalidWebhookTarget, match="set GPUBILL_WEBHOOK_SECRET"):
        WebhookTarget("https://example.com/h", "")
    with pytest.raises(InvalidWebhookTarget, match="is 5 characters"):
        WebhookTarget("https://example.com/h", "short")
    assert SECRET not in repr(WebhookTarget("https://example.com/h", SECRET))


@pytest.mark.parametrize("url, shown", [
    ("https://hooks.example.com/billing", "https://hooks.example.com/billing"),
    ("https://user:pa55@hooks.example.com:8443/b", "https://user:***@hooks.example.com:8443/b"),
    ("https://hooks.example.com/b?token=s3cret#frag", "https://hooks.example.com/b?***"),
])
def test_a_url_is_recorded_without_its_password_or_query(url, shown):
    assert shown_url(url) == shown


# ------------------------------------------------------------------ hostile receivers and messages


def test_after_max_attempts_the_event_is_given_up_with_its_last_answer(db):
    with Receiver(answer(500, b"down")) as receiver:
        last, waits = run_deliver(BODY, WebhookTarget(receiver.url, SECRET, max_attempts=3),
                                  lambda a: record_attempts(db, [a]))
    assert (last.attempt, last.status, last.http_status) == (3, "gave_up", 500)
    assert waits == [1, 2]  # no wait after the last
    assert [(r.attempt, r.status) for r in deliveries(db, failed=True)] == [(3, "gave_up"), (2, "failed"),
                                                                             (1, "failed")]


def test_a_redirect_is_not_followed_and_is_a_failed_attempt():
    with Receiver(answer(302, b"", {"Location": "http://127.0.0.1:1/elsewhere"})) as receiver:
        last, _ = run_deliver(BODY, WebhookTarget(receiver.url, SECRET, max_attempts=1), lambda a: None)
    assert (last.status, last.http_status) == ("gave_up", 302)
    assert last.error == "HTTP 302 → http://127.0.0.1:1/elsewhere: "
    assert len(receiver.received) == 1


def test_a_huge_answer_is_kept_to_200_characters(db):
    with Receiver(answer(500, b"x" * 5_000_000)) as receiver:
        last, _ = run_deliver(BODY, WebhookTarget(receiver.url, SECRET, max_attempts=1),
                              lambda a: record_attempts(db, [a]))
    assert len(last.error) == 200 and last.error.startswith("HTTP 500: xxx")
    (row,) = deliveries(db)
    assert row.error == last.error


def test_a_receiver_slower_than_the_timeout_is_a_failed_attempt():
    with Receiver(answer(200, b"late", delay_s=2.0)) as receiver:
        target = WebhookTarget(receiver.url, SECRET, max_attempts=1, timeout_s=0.3)
        started = time.monotonic()
        last, _ = run_deliver(BODY, target, lambda a: None)
    assert time.monotonic() - started < 1.5
    assert (last.status, last.http_status) == ("gave_up", None)
    assert "timed out" in last.error or "Timeout" in last.error


def test_no_receiver_at_all_is_a_connection_error():
    with Receiver(answer(200)) as receiver:
        url = receiver.url
    last, waits = run_deliver(BODY, WebhookTarget(url, SECRET, max_attempts=2), lambda a: None)
    assert (last.status, last.http_status) == ("gave_up", None)
    assert last.error.startswith("ConnectError") and waits == [1]


@pytest.mark.parametrize("raw, reason", [
    (b"not json", "not JSON"),
    (b'{"version":1}', "missing field"),
    (BODY.replace(b'"80"', b'"81"'), "event_id is not the hash"),  # a threshold changed, the id not
    (b"\xff" * 10_000, "at most 4096 bytes"),
])
def test_an_invalid_message_is_recorded_as_given_up_and_nothing_is_sent(db, raw, reason):
    with Receiver(answer(200)) as receiver:
        last, waits = run_deliver(raw, WebhookTarget(receiver.url, SECRET), lambda a: record_attempts(db, [a]))
    assert receiver.received == [] and waits == []
    (row,) = deliveries(db)
    assert (row.attempt, row.status, row.event_id, row.tenant, row.http_status) == (0, "gave_up", "", "", None)
    assert row.error.startswith("not a billing event: ") and reason in row.error


# ------------------------------------------------------------------ the record


def test_attempts_are_one_insert_checked_first():
    inserts = []

    class Fake:
        def insert(self, table, rows, columns):
            inserts.append((table, list(rows), tuple(columns)))

    good = DeliveryAttempt("be_" + "0" * 32, "acme", "balance_low", "https://h/x", 1, "failed", None, "E", 7, T0)
    record_attempts(Fake(), [good, good])
    ((table, rows, columns),) = inserts
    assert table == "webhook_deliveries" and columns == COLUMNS == (
        "event_id", "tenant", "kind", "url", "attempt", "status", "http_status", "error", "duration_ms", "attempted_at")
    assert rows[0] == ("be_" + "0" * 32, "acme", "balance_low", "https://h/x", 1, "failed", None, "E", 7, T0)
    for bad, fragment in (({"status": "ok"}, "status 'ok'"), ({"attempt": -1}, "attempt must be"),
                          ({"http_status": 42}, "not an HTTP status"), ({"duration_ms": 1.5}, "duration_ms must be"),
                          ({"attempted_at": "2026-12-01"}, "attempted_at must be a datetime")):
        with pytest.raises(ValueError, match=fragment):
            record_attempts(Fake(), [good, DeliveryAttempt(**{**good.__dict__, **bad})])
    assert len(inserts) == 1


def test_deliveries_filter_and_refuse_bad_filters(db):
    other = BillingEvent(kind="balance_exhausted", tenant="beta", period="2026-12", threshold="0",
                         observed_at="2026-12-01T10:00:00.000Z", balance="0.00")
    attempts = [
        DeliveryAttempt(EVENT.event_id, "acme", EVENT.kind, "https://h/x", 1, "delivered", 200, "", 5, T0),
        DeliveryAttempt(other.event_id, "beta", other.kind, "https://h/x", 1, "failed", None, "E", 5,
                        T0 + timedelta(seconds=1)),
        DeliveryAttempt(other.event_id, "beta", other.kind, "https://h/x", 2, "delivered", 204, "", 5,
                        T0 + timedelta(seconds=2)),
    ]
    record_attempts(db, attempts)
    assert deliveries(db) == attempts[::-1]
    assert deliveries(db, tenant="acme") == attempts[:1]
    assert deliveries(db, event_id=other.event_id, failed=True) == attempts[1:2]
    assert deliveries(db, limit=1) == attempts[2:]
    with pytest.raises(InvalidDeliveryQuery):
        deliveries(db, limit=0)
    with pytest.raises(InvalidDeliveryQuery, match="is not be_"):
        deliveries(db, event_id="be_x' OR 1=1 --")
    with pytest.raises(InvalidTenant):
        deliveries(db, tenant="a'b")


# ------------------------------------------------------------------ the Kafka loop, on a fake consumer


@dataclass
class Message:
    topic: str
    partition: int
    offset: int
    value: bytes


class FakeConsumer:
    """What run_deliverer uses of aiokafka's consumer; `log` interleaves commits with records."""

    def __init__(self, messages: dict[int, list[bytes]], log: list) -> None:
        from aiokafka import TopicPartition

        self.tps = {p: TopicPartition("gpu.billing-events.v1", p) for p in messages}
        self.pending = {self.tps[p]: [Message("gpu.billing-events.v1", p, o, v) for o, v in enumerate(values)]
                        for p, values in messages.items()}
        self.ends = {tp: len(m) for tp, m in self.pending.items()}
        self.log = log
        self.committed: dict = {}

    async def start(self) -> None:
        self.log.append("start")

    async def stop(self) -> None:
        self.log.append("stop")

    def assignment(self):
        return set(self.tps.values())

    async def getmany(self, timeout_ms: int = 0):
        fetched = {tp: messages[:2] for tp, messages in self.pending.items() if messages}  # two at a time
        for tp in fetched:
            self.pending[tp] = self.pending[tp][2:]
        return fetched

    async def end_offsets(self, partitions):
        return {tp: self.ends[tp] for tp in partitions}

    async def position(self, tp):
        return self.ends[tp] - len(self.pending[tp])

    async def commit(self, offsets):
        for tp, offset in offsets.items():
            self.committed[tp.partition] = offset
            self.log.append(("commit", tp.partition, offset))


@dataclass
class Settings:
    kafka: str = "127.0.0.1:1"
    group: str = "gpubill-rating"
    partitions: int = 2


def test_the_loop_commits_each_event_only_after_its_attempts_are_recorded_and_skips_invalid_ones():
    log: list = []
    consumer = FakeConsumer({0: [BODY, b"garbage", BODY], 1: [BODY]}, log)

    def record(attempt: DeliveryAttempt) -> None:
        log.append(("record", attempt.attempt, attempt.status))

    async def no_sleep(_s: float) -> None:
        pass

    with Receiver(answer(500), answer(200)) as receiver:  # the first POST fails, every later one delivers
        async def go():
            async with httpx.AsyncClient(follow_redirects=False) as client:
                return await run_deliverer(Settings(), WebhookTarget(receiver.url, SECRET), record, drain=True,
                                           consumer=consumer, client=client, sleep=no_sleep)

        done = asyncio.run(go())
    assert (done.delivered, done.gave_up) == (3, 1)
    per_partition = defaultdict(list)
    for entry in log:
        if entry[0] == "commit":
            per_partition[entry[1]].append(entry[2])
    assert per_partition == {0: [1, 2, 3], 1: [1]}  # every event committed, in order
    assert log == [
        "start",
        ("record", 1, "failed"), ("record", 2, "delivered"), ("commit", 0, 1),  # partition 0, offset 0
        ("record", 0, "gave_up"), ("commit", 0, 2),  # offset 1: garbage, recorded and skipped
        ("record", 1, "delivered"), ("commit", 1, 1),  # partition 1, offset 0 (fetched in the same round)
        ("record", 1, "delivered"), ("commit", 0, 3),  # partition 0, offset 2
        "stop",
    ]
    assert group_of(Settings()) == "gpubill-rating.webhooks"


class AbortedTail(FakeConsumer):
    """Partition 0 ends with an aborted transaction's two records and its marker (offsets 1–3):
    read committed, none is fetched, and the position moves past them to the end offset, 4."""

    def __init__(self, log: list) -> None:
        super().__init__({0: [BODY]}, log)
        self.ends = {tp: 4 for tp in self.ends}

    async def position(self, tp):
        return self.ends[tp] if not self.pending[tp] else self.pending[tp][0].offset

    async def getmany(self, timeout_ms: int = 0):
        await asyncio.sleep(0.01)  # a real fetch waits: a deliverer that never ends times out below
        return await super().getmany(timeout_ms)


def test_a_drain_ends_where_only_an_aborted_transaction_lies_before_the_end_offset():
    log: list = []
    consumer = AbortedTail(log)

    async def go():
        async with httpx.AsyncClient(follow_redirects=False) as client:
            return await asyncio.wait_for(run_deliverer(Settings(), WebhookTarget(receiver.url, SECRET),
                                                        lambda attempt: None, drain=True, consumer=consumer,
                                                        client=client), 5)

    with Receiver(answer(200)) as receiver:
        done = asyncio.run(go())
    assert (done.delivered, consumer.committed) == (1, {0: 1})  # the event at offset 0, and no hang


# ------------------------------------------------------------------ gpubill events


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    location = f"chdb://{tmp_path / 'cli'}"
    with open_database(location) as database:
        record_attempts(database, [
            DeliveryAttempt(EVENT.event_id, "acme", EVENT.kind, "https://h/x", 1, "failed", 500,
                            "HTTP 500: \x1b[2J[bold]no", 12, T0),
            DeliveryAttempt(EVENT.event_id, "acme", EVENT.kind, "https://h/x", 2, "delivered", 200, "", 8,
                            T0 + timedelta(seconds=1)),
        ])
    monkeypatch.setenv("GPUBILL_CLICKHOUSE", location)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.delenv("GPUBILL_WEBHOOK_URL", raising=False)
    monkeypatch.delenv("GPUBILL_WEBHOOK_SECRET", raising=False)
    return lambda *args: run_cli(monkeypatch, capsys, "events", *args)


def test_deliveries_lists_attempts_newest_first_escaped_and_as_json(cli):
    code, out, err = cli("deliveries")
    assert code == 0, err
    assert "\x1b" not in out and "\\x1b[2J[bold]no" in out
    assert out.index("delivered") < out.index("failed")
    assert "2 attempts, newest first" in err
    code, out, err = cli("deliveries", "--failed", "--json")
    assert code == 0, err
    assert orjson.loads(out) == [{
        "event_id": EVENT.event_id, "tenant": "acme", "kind": "budget_threshold", "url": "https://h/x", "attempt": 1,
        "status": "failed", "http_status": 500, "error": "HTTP 500: \x1b[2J[bold]no", "duration_ms": 12,
        "attempted_at": "2026-12-01T09:00:00.000Z"}]
    code, out, err = cli("deliveries", "--tenant", "beta", "--json")
    assert (code, orjson.loads(out)) == (0, [])


@pytest.mark.parametrize("args, env, fragment", [
    (["deliver", "--url", "file:///etc/passwd"], {"GPUBILL_WEBHOOK_SECRET": SECRET}, "http:// or https://"),
    (["deliver"], {"GPUBILL_WEBHOOK_SECRET": SECRET}, "give --url or set GPUBILL_WEBHOOK_URL"),
    (["deliver", "--url", "https://h/x"], {}, "set GPUBILL_WEBHOOK_SECRET"),
    (["deliveries", "--event-id", "nope"], {}, "is not be_"),
    (["deliveries", "--tenant", "a b"], {}, "tenant"),
])
def test_bad_input_is_one_line_and_exit_1_before_any_broker_is_asked(cli, monkeypatch, args, env, fragment):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("GPUBILL_KAFKA", "127.0.0.1:1")  # would hang or fail differently if it were reached
    code, out, err = cli(*args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], err
    assert SECRET not in err
