"""Issue 21: the gateway's boundaries, second pass. Each finding of the attack review is here
as its reproduction, and the harm is looked for where it would show: the file's content in
the answer, the request at the listener, the writer's answer time, the table that would hold
a copy, the second request that would run.

Pure parts first (the connection table with real sockets, no gateway), then one real gateway
child process with small limits.
"""

from __future__ import annotations

import http.client
import http.server
import socket
import threading
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from gpubill.devenv.gateway.connections import BodyBudget, Connections
from tests.unit.test_ch_gateway import free_port, start_gateway, stop_gateway
from tests.unit.test_gateway_security import Gateway, basic

# ------------------------------------------------------------------ the connection table


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def socket_pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair()


def test_a_full_table_replaces_the_oldest_connection_without_a_request_head():
    clock = Clock()
    table = Connections(3, head_timeout_s=10, clock=clock)
    pairs = [socket_pair() for _ in range(5)]
    first = table.admit(pairs[0][0])
    clock.now += 1
    second = table.admit(pairs[1][0])
    table.reading_body(second)  # busy: never evicted
    clock.now += 1
    third = table.admit(pairs[2][0])
    clock.now += 1
    fourth = table.admit(pairs[3][0])  # full: the oldest still waiting for its head goes (first)
    assert fourth is not None and first.closed and not second.closed and not third.closed
    assert pairs[0][1].recv(1) == b""  # the evicted client sees its connection end
    assert table.evicted == 1 and len(table) == 3
    table.running(third, lambda: None)
    table.running(fourth, lambda: None)
    assert table.admit(pairs[4][0]) is None  # every one busy: only now is a newcomer refused (503)
    for a, b in pairs:
        a.close()
        b.close()


def test_a_head_deadline_is_not_restarted_by_bytes():
    clock = Clock()
    table = Connections(8, head_timeout_s=10, clock=clock)
    server_side, client_side = socket_pair()
    connection = table.admit(server_side)
    for _ in range(9):  # a byte a second: a slowloris client
        client_side.send(b"X")
        clock.now += 1
        table.sweep()
    assert not connection.closed
    clock.now += 1.5
    table.sweep()
    assert connection.closed and table.timed_out == 1
    server_side.close()
    client_side.close()


def test_a_body_earns_time_by_the_bytes_it_delivers():
    clock = Clock()
    table = Connections(8, head_timeout_s=5, body_grace_s=5, body_min_rate=1000, clock=clock)
    server_side, client_side = socket_pair()
    connection = table.admit(server_side)
    table.reading_body(connection)
    clock.now += 4
    table.body_progress(connection, 10_000)  # 10 s more earned
    clock.now += 10
    table.sweep()
    assert not connection.closed
    clock.now += 1.1
    table.sweep()
    assert connection.closed
    server_side.close()
    client_side.close()


def test_a_statement_whose_client_left_is_cancelled_until_it_ends():
    table = Connections(8)
    server_side, client_side = socket_pair()
    connection = table.admit(server_side)
    cancelled = []
    table.running(connection, lambda: cancelled.append(1))
    client_side.send(b"GET / HTTP/1.1\r\n")  # data sent ahead is not leaving
    table.sweep()
    assert cancelled == []
    server_side.recv(100)
    client_side.close()
    table.sweep()
    table.sweep()  # again: the first may have come while the statement was still being parsed
    assert cancelled == [1, 1] and table.cancelled == 1  # counted once
    table.idle(connection)  # it ended
    table.sweep()
    assert cancelled == [1, 1]
    server_side.close()


def test_the_body_budget_is_shared_and_given_back():
    budget = BodyBudget(100)
    assert budget.reserve(60) and not budget.reserve(41) and budget.reserve(40)
    budget.release(60)
    assert budget.reserve(60) and budget.held == 100


# ------------------------------------------------------------------------ a real gateway

LIMITS = {"GPUBILL_GATEWAY_MAX_EXECUTION_S": "30", "GPUBILL_GATEWAY_MAX_MEMORY_MB": "256",
          "GPUBILL_GATEWAY_MAX_BODY_MB": "12", "GPUBILL_GATEWAY_MAX_CONNECTIONS": "16",
          "GPUBILL_GATEWAY_HEAD_TIMEOUT_S": "2", "GPUBILL_GATEWAY_BODY_BUDGET_MB": "20"}
SECRET = "gpubill-secret-marker-5150"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    yield from boundaries_gateway(tmp_path_factory)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A second gateway like `gateway` for issue 36's tests: after the tests above, the first
    one stalls statements that read the process list (`SELECT 1 IN system.processes` waits
    past 60 s there, answers at once on a fresh one; see the issue-36 report)."""
    yield from boundaries_gateway(tmp_path_factory)


def boundaries_gateway(tmp_path_factory):
    directory = tmp_path_factory.mktemp("boundaries")
    # files a table name could open: in the gateway's working directory and by absolute path
    (directory / "secret").write_text(f"{SECRET}\n")
    (directory / "secret.csv").write_text(f"{SECRET},1\n")
    spawned = start_gateway(directory, free_port(), **LIMITS)
    gw = Gateway(spawned, directory)
    gw.rows("CREATE TABLE IF NOT EXISTS ledger (tenant String, fen Int64) ENGINE = MergeTree ORDER BY tenant")
    gw.rows("INSERT INTO ledger VALUES ('acme', 100), ('beta', 250)")
    yield gw
    if spawned.process.poll() is None:
        stop_gateway(spawned)


def tables(gw: Gateway) -> str:
    return gw.rows("SELECT groupArray(name) FROM (SELECT name FROM system.tables "
                   "WHERE database = currentDatabase() ORDER BY name)")


FILE_AS_TABLE = [
    "SELECT * FROM `{secret}`",
    'SELECT * FROM "{secret}"',
    "SELECT * FROM default.`{secret}`",
    "SELECT * FROM `default`.`{secret}`",
    "SELECT * FROM `{secret_csv}`",
    "SELECT * FROM secret",  # a plain name: a file in the gateway's working directory
    "SELECT * FROM `secret.csv`",
    "SELECT * FROM `/etc/passwd`",
    "SELECT count() FROM `/etc/passwd`",
    "SELECT * FROM (SELECT * FROM `{secret}`)",
    "SELECT * FROM ledger WHERE tenant IN (SELECT * FROM `{secret}`)",
    "SELECT * FROM ledger JOIN `{secret}` USING tenant",
    "SELECT * FROM view(SELECT * FROM `{secret}`)",
    "DESCRIBE TABLE `{secret}`",
    "SHOW CREATE TABLE `{secret}`",
    "EXISTS TABLE `{secret}`",
    "WITH x AS (SELECT 1) SELECT * FROM x, `{secret}`",
    # WITH names count only in their scope: a file of the same name outside it is still a file
    "SELECT * FROM (WITH secret AS (SELECT 1) SELECT * FROM secret), secret",
    "WITH secret AS (SELECT * FROM secret) SELECT * FROM secret",  # inside its own definition
    "WITH x AS (SELECT * FROM secret), secret AS (SELECT 1) SELECT * FROM x",  # defined after its use
    "SELECT sum(1) OVER secret FROM secret WINDOW secret AS (ORDER BY 1)",  # a window is no table
    "SELECT 'secret AS (' FROM secret",
    "WITH RECURSIVE secret AS (SELECT 1) SELECT * FROM secret",
    # a UNION's first WITH is visible in its later SELECTs (the parser copies it there), nowhere else
    "WITH secret AS (SELECT * FROM secret) SELECT * FROM secret UNION ALL SELECT * FROM secret",
    "WITH x AS (SELECT * FROM secret), secret AS (SELECT 1) SELECT * FROM x UNION ALL SELECT * FROM x",
    "SELECT 1 UNION ALL WITH secret AS (SELECT 1) SELECT * FROM secret",
    "SELECT * FROM secret UNION ALL (WITH secret AS (SELECT 1) SELECT * FROM secret)",
    "SELECT * FROM (WITH a AS (SELECT 1) SELECT * FROM a UNION ALL SELECT * FROM a), secret",
]


@pytest.mark.parametrize("sql", FILE_AS_TABLE)
@pytest.mark.parametrize("user", ["gpubill", "finance"])
def test_no_file_can_stand_in_for_a_table(gateway, sql, user):
    sql = sql.format(secret=gateway.directory / "secret", secret_csv=gateway.directory / "secret.csv")
    for method in ("POST", "GET"):
        status, headers, text = gateway.request(sql, user=user, method=method)
        assert status in (403, 404) and headers["x-clickhouse-exception-code"] in ("497", "60"), text
        assert SECRET not in text and "root:" not in text


@pytest.mark.parametrize("sql", [
    "CREATE TABLE copied ENGINE = MergeTree ORDER BY tuple() AS SELECT * FROM `{secret}`",
    "CREATE TABLE copied ENGINE = Memory AS SELECT * FROM \"/etc/hostname\"",
    "CREATE TABLE copied AS `{secret}`",
    "CREATE TABLE copied AS file('{secret}')",
    "INSERT INTO ledger (tenant) SELECT * FROM `{secret}`",
    "CREATE VIEW copied AS SELECT * FROM `{secret}`",
    "CREATE MATERIALIZED VIEW copied TO `{secret_csv}` AS SELECT tenant FROM ledger",
    "RENAME TABLE `{secret}` TO copied",
])
def test_no_file_is_copied_into_the_database(gateway, sql):
    before = tables(gateway)
    sql = sql.format(secret=gateway.directory / "secret", secret_csv=gateway.directory / "secret.csv")
    status, headers, text = gateway.request(sql)
    assert status in (403, 404), text
    assert tables(gateway) == before
    assert SECRET not in gateway.rows("SELECT groupArray(tenant) FROM ledger")
    assert (gateway.directory / "secret.csv").read_text() == f"{SECRET},1\n"


def test_a_table_named_by_a_parameter_is_checked_too(gateway):
    params = "param_t=" + quote(str(gateway.directory / "secret"))
    status, _, text = gateway.request("SELECT * FROM {t:Identifier}", params=params, user="finance")
    assert status in (403, 404) and SECRET not in text, text
    status, _, text = gateway.request("SELECT tenant FROM {t:Identifier} ORDER BY tenant", params="param_t=ledger",
                                      user="finance")
    assert (status, text) == (200, "acme\nbeta\n")


def test_the_projects_tables_and_new_ones_are_served(gateway):
    gateway.rows("CREATE TABLE IF NOT EXISTS made_now (a UInt8) ENGINE = Memory")
    assert gateway.rows("SELECT count() FROM made_now", user="finance") == "0\n"  # known at once
    gateway.rows("DROP TABLE made_now")
    status, headers, _ = gateway.request("SELECT count() FROM made_now", user="finance")
    assert (status, headers["x-clickhouse-exception-code"]) == (404, "60")
    assert gateway.rows("SELECT count() FROM system.tables WHERE name = 'ledger'", user="finance") == "1\n"


class Listener(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802
        Listener.hits.append(self.path)
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def listener():
    Listener.hits = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Listener)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("user", ["gpubill", "finance"])
def test_the_gateway_fetches_no_url(gateway, listener, user):
    registry = "format_avro_schema_registry_url=" + quote(listener)
    attempts = [
        dict(sql="SELECT * FROM format(AvroConfluent, '\\x00\\x00\\x00\\x00\\x07\\x02')", params=registry),
        dict(sql="SELECT * FROM format(AvroConfluent, 'x')"),
        dict(sql=f"SELECT 1 SETTINGS format_avro_schema_registry_url = '{listener}'"),
        dict(sql="", body=b"INSERT INTO ledger FORMAT AvroConfluent\n\x00\x00\x00\x00\x07\x02", params=registry),
        dict(sql="", body=b"INSERT INTO ledger (tenant, fen) FORMAT AvroConfluent\n\x00\x00\x00\x00\x07\x02",
             params=registry),
        dict(sql="", body=b"\x00\x00\x00\x00\x07\x02", params=registry + "&query=" +
             quote("INSERT INTO ledger (tenant, fen) FORMAT AvroConfluent")),
        dict(sql="SELECT 1", params="default_format=AvroConfluent&" + registry),
        dict(sql="SELECT * FROM ledger FORMAT Protobuf", params="format_schema=x:y"),
    ]
    for attempt in attempts:
        status, _, text = gateway.request(attempt["sql"], user=user, params=attempt.get("params", ""),
                                          body=attempt.get("body"))
        assert status in (403, 404), (attempt, text)
    time.sleep(0.3)
    assert Listener.hits == []


def test_finance_cannot_change_settings(gateway):
    # (max_execution_time up to the gateway's own is a JDBC query timeout, served since issue 36:
    # test_harmless_client_settings_are_accepted_by_value)
    for params in ["max_threads=3", "max_execution_time=0", "extremes=1", "format_avro_schema_registry_url=http%3A%2F%2Fx",
                   "log_comment=x", "join_use_nulls=1"]:
        status, headers, text = gateway.request("SELECT getSetting('max_threads')", user="finance", params=params)
        assert (status, headers["x-clickhouse-exception-code"]) == (403, "452"), (params, text)
    status, _, text = gateway.request("SELECT 1 SETTINGS max_threads = 1", user="finance")
    assert status == 403, text
    # what the pipeline's own statements set still passes for its user
    assert gateway.rows("SELECT getSetting('join_use_nulls') SETTINGS join_use_nulls = 1") in ("1\n", "true\n")


def test_the_pipeline_user_cannot_set_what_is_not_listed(gateway):
    for params in ["log_comment=gpubill-gateway%3Ax", "format_avro_schema_registry_url=http%3A%2F%2Fx",
                   "max_bytes_to_read=1", "allow_experimental_analyzer=0"]:
        status, _, text = gateway.request("SELECT 1", params=params)
        assert status == 403, (params, text)


def test_a_slow_drip_of_headers_locks_nobody_out(gateway):
    drips = []
    try:
        for _ in range(16):  # the whole cap, each sending a header line now and then
            drip = socket.create_connection(("127.0.0.1", gateway.port))
            drip.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            drips.append(drip)
        time.sleep(0.3)
        for _ in range(5):
            for drip in drips:
                try:
                    drip.sendall(b"X-Drip: 1\r\n")
                except OSError:
                    pass
            started = time.monotonic()
            assert gateway.request("SELECT 1")[0] == 200
            assert time.monotonic() - started < 1.5
            time.sleep(0.3)
        time.sleep(2.5)  # past the head deadline (2 s), whatever they send
        for drip in drips:  # every one closed: replaced by a newcomer, or at its deadline
            drip.settimeout(2)
            try:
                assert drip.recv(4096) == b""
            except ConnectionResetError:
                pass  # reset: closed as well
    finally:
        for drip in drips:
            drip.close()
    assert gateway.alive()


def test_silent_connections_are_closed_at_the_head_deadline(gateway):
    with socket.create_connection(("127.0.0.1", gateway.port)) as silent:
        silent.settimeout(10)
        started = time.monotonic()
        assert silent.recv(10) == b""
        assert 1.5 < time.monotonic() - started < 5


def slow_finance_query(gateway: Gateway) -> socket.socket:
    sql = b"SELECT count() FROM system.numbers WHERE number < 40000000000"
    raw = socket.create_connection(("127.0.0.1", gateway.port))
    raw.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: %s\r\nContent-Length: %d\r\n\r\n%s"
                % (basic("finance", gateway.passwords["finance"]).encode(), len(sql), sql))
    return raw


def test_a_long_finance_query_never_holds_the_writer(gateway):
    raw = slow_finance_query(gateway)
    try:
        time.sleep(1.0)  # it runs now (30 s limit)
        for _ in range(3):
            started = time.monotonic()
            assert gateway.request("SELECT 1")[0] == 200
            assert time.monotonic() - started < 2.0  # not behind the finance query (30 s)
    finally:
        raw.close()


def test_an_abandoned_query_is_cancelled(gateway):
    raw = slow_finance_query(gateway)
    time.sleep(1.0)
    raw.close()  # the client gives up
    started = time.monotonic()
    # the finance lane is free again once the abandoned query is cancelled (else: its 30 s limit)
    assert gateway.request("SELECT 1", user="finance")[0] == 200
    assert time.monotonic() - started < 5


def open_body(gateway: Gateway, length: int, user: str = "gpubill") -> socket.socket:
    raw = socket.create_connection(("127.0.0.1", gateway.port))
    raw.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: %s\r\nContent-Length: %d\r\n\r\n"
                b"INSERT INTO ledger FORMAT CSV\n" % (basic(user, gateway.passwords[user]).encode(), length))
    return raw


def read_until_closed(raw: socket.socket, wait_s: float) -> bytes:
    raw.settimeout(wait_s)
    answer = b""
    try:
        while part := raw.recv(65536):
            answer += part
    except (TimeoutError, ConnectionResetError):
        pass
    return answer


def test_bodies_held_open_cannot_take_more_than_the_budget(gateway):
    held = [open_body(gateway, 9 << 20), open_body(gateway, 9 << 20)]  # 18 of the 20 MiB budget
    try:
        time.sleep(0.3)
        third = open_body(gateway, 9 << 20)
        reply = read_until_closed(third, 5)  # the answer says Connection: close
        assert reply.startswith(b"HTTP/1.1 503") and b"TOO_MANY_SIMULTANEOUS_QUERIES" in reply, reply
        third.close()
        assert gateway.request("SELECT 1")[0] == 200  # small requests still pass
    finally:
        for raw in held:
            raw.close()
    time.sleep(0.5)
    third = open_body(gateway, 9 << 20)  # given back: a big body is accepted again (then cut off)
    third.settimeout(10)
    reply = third.recv(4096)  # the body stalls: cut at the deadline, never 503
    assert not reply.startswith(b"HTTP/1.1 503"), reply
    third.close()


def test_a_stalled_body_is_cut_off(gateway):
    raw = open_body(gateway, 1000)
    raw.settimeout(10)
    started = time.monotonic()
    try:
        reply = raw.recv(4096)
    except ConnectionResetError:
        reply = b""
    assert reply == b"" or b" 400 " in reply.split(b"\r\n")[0], reply
    assert time.monotonic() - started < 6
    raw.close()
    assert "\n" not in gateway.rows("SELECT groupArray(tenant) FROM ledger").strip()


def test_the_finance_user_sends_no_big_bodies(gateway):
    raw = open_body(gateway, 9 << 20, user="finance")
    raw.settimeout(5)
    assert raw.recv(4096).startswith(b"HTTP/1.1 413")
    raw.close()


def raw_exchange(gateway: Gateway, request: bytes, wait_s: float = 1.0) -> bytes:
    with socket.create_connection(("127.0.0.1", gateway.port)) as raw:
        raw.sendall(request)
        raw.settimeout(wait_s)
        answer = b""
        try:
            while True:
                part = raw.recv(65536)
                if not part:
                    break
                answer += part
        except (TimeoutError, ConnectionResetError):
            pass
    return answer


def auth_line(gateway: Gateway) -> bytes:
    return b"Authorization: " + basic("gpubill", gateway.passwords["gpubill"]).encode() + b"\r\n"


SMUGGLED = b"INSERT INTO ledger VALUES ('smuggled', 1)"


@pytest.mark.parametrize("framing", [
    # both Transfer-Encoding and Content-Length: read as chunked, the rest ran as a second request
    b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n",
    b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
    b"Transfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n",
    b"Content-Length: 1_0\r\n\r\n",
    b"Content-Length: +10\r\n\r\n",
    b"Content-Length: 0x0\r\n\r\n",
    b"Transfer-Encoding: chunked\r\n\r\n+0\r\n\r\n",
    b"Transfer-Encoding: chunked\r\n\r\n0_0\r\n\r\n",
    b"X-Folded: a\r\n b\r\nContent-Length: 0\r\n\r\n",
])
def test_request_framing_is_strict(gateway, framing):
    request = b"POST /?query=SELECT%201 HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth_line(gateway) + framing
    smuggled = (b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth_line(gateway)
                + b"Content-Length: %d\r\n\r\n" % len(SMUGGLED) + SMUGGLED)
    answer = raw_exchange(gateway, request + smuggled)
    first = answer.split(b"\r\n")[0]
    assert first.startswith((b"HTTP/1.1 400", b"HTTP/1.1 501")), answer[:300]
    assert answer.count(b"HTTP/1.1 ") == 1  # nothing after it was read as a request
    assert "smuggled" not in gateway.rows("SELECT groupArray(tenant) FROM ledger")


def test_well_framed_chunked_bodies_still_insert(gateway):
    data = b"INSERT INTO ledger FORMAT CSV\nchunked,7\n"
    body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data)
    answer = raw_exchange(gateway, b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth_line(gateway)
                          + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + body)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
    assert gateway.rows("SELECT fen FROM ledger WHERE tenant = 'chunked'") == "7\n"
    gateway.rows("ALTER TABLE ledger DELETE WHERE tenant = 'chunked' SETTINGS mutations_sync = 2")


@pytest.mark.parametrize("database", ["default%5C%60%20%3B%20SELECT%202", "system", "other", "default`", "INFORMATION_SCHEMA"])
def test_the_database_parameter_names_only_the_projects_database(gateway, database):
    status, headers, text = gateway.request("SELECT 1", params="database=" + database, user="finance")
    assert (status, headers["x-clickhouse-exception-code"]) == (404, "81"), text
    assert gateway.request("SELECT 1", params="database=default", user="finance")[2] == "1\n"


def test_unauthenticated_connections_are_not_kept_alive(gateway):
    answer = raw_exchange(gateway, b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 8\r\n\r\nSELECT 1"
                                   b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 8\r\n\r\nSELECT 1", 3)
    assert answer.startswith(b"HTTP/1.1 401") and answer.count(b"HTTP/1.1 ") == 1
    assert b"Connection: close" in answer


def test_the_product_statements_still_pass(gateway):
    """The reads the pipeline and reports make (functions, FINAL, joins, settings, formats)."""
    gateway.rows("SELECT tenant, sumIf(fen, fen > 0) AS total, argMax(fen, tenant), uniqExact(tenant), "
                 "toStartOfHour(now64(3)), toDecimal256(sum(fen), 6) / 3600, cityHash64(tuple(tenant, max(fen))) % 7 "
                 "FROM ledger GROUP BY tenant ORDER BY tenant SETTINGS join_use_nulls = 1 FORMAT TSV")
    gateway.rows("SELECT l.tenant, r.fen FROM ledger AS l LEFT JOIN (SELECT tenant, max(fen) AS fen FROM ledger "
                 "GROUP BY tenant) AS r USING tenant ORDER BY l.tenant", user="finance")
    gateway.rows("SELECT SUM(fen), COUNT(), IF(1, 'a', 'b') FROM ledger", user="finance")  # any case
    gateway.rows("SELECT row_number() OVER (ORDER BY tenant), lagInFrame(fen) OVER (ORDER BY tenant) FROM ledger",
                 user="finance")
    assert gateway.rows("WITH u AS (SELECT tenant FROM ledger), v AS (SELECT * FROM u WHERE tenant != '') "
                        "SELECT count() FROM v", user="finance") == "2\n"
    assert gateway.rows("WITH u AS (SELECT tenant FROM ledger), p AS (SELECT tenant, fen FROM ledger) "
                        "SELECT count() FROM u UNION ALL SELECT count() FROM p LEFT JOIN u USING tenant",
                        user="finance") == "2\n2\n"  # the audit's shape: the UNION reads the first WITH
    for fmt in ["JSONEachRow", "CSVWithNames", "Parquet", "Native", "PrettyCompact"]:
        assert gateway.request(f"SELECT * FROM ledger FORMAT {fmt}", user="finance")[0] == 200


def test_the_audits_own_statement_passes(gateway):
    """`gpubill audit` through the gateway (it failed CI once: a UNION reading the first WITH)."""
    from reports.audit import _RAW_SQL

    params = "param_lo=1780000000&param_hi=1780003600"
    status, _, text = gateway.request(_RAW_SQL, params=params)
    assert (status, text) == (200, ""), text  # no readings in that hour: no rows


def test_the_incremental_audits_statements_pass(gateway):
    """The prints and stored hours `gpubill audit` reads (reports/audit_hours.py) and its raw side for a
    list of hours, through the gateway."""
    from reports import audit_hours as hours
    from reports.audit import raw_sql

    where = "second >= toDateTime(1780000000, 'UTC') AND second < toDateTime(1780003600, 'UTC')"
    params = "param_period=2026-06&param_lo=1780000000&param_hi=1780003600"
    for sql in (hours._USAGE_PRINT, hours._POWER_PRINT, hours._SECONDS_PRINT, hours._ROLLUP_PRINT,
                hours._CORRECTIONS, hours._STORED, raw_sql([1780000000, 1780003600, 1780010800])):
        status, _, text = gateway.request(sql.replace("SECONDS", where), params=params)
        assert (status, text) == (200, ""), text  # nothing stored in those hours: no rows


def test_a_with_name_shadows_a_file_of_the_same_name(gateway):
    # the guard lets a WITH name in scope through unchecked as a table: ClickHouse must read the
    # subquery, never the file `secret` in the gateway's working directory
    for user in ("gpubill", "finance"):
        text = gateway.rows("WITH secret AS (SELECT 'from the subquery' AS line) SELECT * FROM secret", user=user)
        assert text == "from the subquery\n" and SECRET not in text
        text = gateway.rows("WITH secret AS (SELECT 'first' AS line) SELECT * FROM secret "
                            "UNION ALL SELECT * FROM secret", user=user)
        assert text == "first\nfirst\n" and SECRET not in text


# ------------------------------------------------------- issue 36: what reads around a table


@pytest.mark.parametrize("sql", [
    "SELECT '{marker}' IN secret",  # chDB opened the file `secret` of the working directory: 1
    "SELECT '{marker}' GLOBAL IN secret",
    "SELECT '{marker}' NOT IN secret",
    "SELECT nullIn('{marker}', secret)",
    "SELECT '{marker}' IN (secret)",
    "SELECT '{marker}' IN default.secret",
    "SELECT tenant FROM ledger WHERE '{marker}' IN secret",
    "SELECT 1 IN system.processes",
])
@pytest.mark.parametrize("user", ["gpubill", "finance"])
def test_the_name_right_of_in_is_a_table_the_gateway_serves(fresh, sql, user):
    status, headers, text = fresh.request(sql.format(marker=SECRET), user=user)
    assert (status, headers["x-clickhouse-exception-code"]) == (403, "497"), text
    assert "reads" in text and text.strip() != "1"


def test_in_still_reads_tables_subqueries_and_with_names(fresh):
    assert fresh.rows("SELECT 'acme' IN (SELECT tenant FROM ledger)", user="finance") == "1\n"
    assert fresh.rows("SELECT tenant FROM ledger WHERE (tenant, fen) IN ledger ORDER BY tenant",
                        user="finance") == "acme\nbeta\n"
    assert fresh.rows("WITH secret AS (SELECT 'acme') SELECT 'acme' IN secret", user="finance") == "1\n"
    assert fresh.rows("SELECT 0 IN system.one", user="finance") == "1\n"


@pytest.mark.parametrize("sql", [
    # each reads system.processes (the other user's statements) through a table of its own
    "CREATE TABLE peek (query String, user String) ENGINE = Buffer(system, processes, 1, 1, 1, 1, 1, 1, 1)",
    "CREATE TABLE peek (query String) ENGINE = Merge(system, '^processes$')",
    "CREATE TABLE peek (query String) ENGINE = Distributed(default, system, processes)",
    "CREATE TABLE peek (name String) ENGINE = Dictionary(secret)",
    "CREATE TABLE peek AS system.processes",
    "CREATE TABLE peek ENGINE = Memory AS SELECT query FROM system.processes",
    "CREATE VIEW peek AS SELECT query FROM system.processes",
    # and in a read: table functions, subqueries and EXISTS around IN
    "SELECT 1 IN merge(system, '^processes$')",
    "SELECT 1 IN numbers(3)",
    "SELECT 'x' IN (SELECT query FROM system.processes)",
    "SELECT 'x' GLOBAL IN (SELECT query FROM system.processes)",
    "SELECT EXISTS (SELECT query FROM system.processes)",
    "SELECT * FROM ledger WHERE EXISTS (SELECT * FROM `secret`)",
])
def test_no_engine_or_operator_reads_an_unlisted_table(fresh, sql):
    before = tables(fresh)
    status, headers, text = fresh.request(sql)
    assert status in (403, 404) and headers["x-clickhouse-exception-code"] in ("497", "60"), text
    assert tables(fresh) == before


def test_the_finance_user_never_reads_the_api_keys_secret_hashes(fresh):
    fresh.rows("INSERT INTO api_keys (id, tenant, role, label, secret_sha256, created_at, updated_at) VALUES "
                 f"('k_aaaaaaaaaaaaaaaa', 'acme', 'tenant', 'bi', '{SECRET}', '2026-12-01 00:00:00.000', '2026-12-01 00:00:00.000')")
    for sql in ["SELECT secret_sha256 FROM api_keys", "SELECT * FROM api_keys", "SELECT k.* FROM api_keys AS k",
                "SELECT COLUMNS('secret') FROM api_keys", "SELECT * EXCEPT (id) FROM api_keys",
                "SELECT id FROM api_keys WHERE startsWith(secret_sha256, 'g')", "SELECT api_keys.secret_sha256 FROM api_keys",
                "SELECT `secret_sha256` FROM default.api_keys", "SELECT x.1 FROM (SELECT tuple(*) AS x FROM api_keys)",
                "SELECT * FROM (SELECT * FROM api_keys)", "WITH k AS (SELECT * FROM api_keys) SELECT id FROM k",
                "SELECT length(secret_sha256) FROM api_keys"]:
        status, headers, text = fresh.request(sql, user="finance")
        assert (status, headers["x-clickhouse-exception-code"]) == (403, "497"), (sql, text)
        assert SECRET not in text
    # the rest of the table is finance's, and the pipeline reads the hash it checks keys against
    assert fresh.rows("SELECT id, tenant, label FROM api_keys", user="finance") == "k_aaaaaaaaaaaaaaaa\tacme\tbi\n"
    assert fresh.rows("SELECT secret_sha256 FROM api_keys") == f"{SECRET}\n"


# ------------------------------------------- issue 36: what the JDBC driver sends, honoured


def test_the_format_and_database_headers_are_read_as_clickhouse_reads_them(fresh):
    # the JDBC driver names its format and database in headers, never in the URL
    status, headers, text = fresh.request("SELECT tenant, fen FROM ledger ORDER BY tenant", user="finance", headers={
        "X-ClickHouse-Format": "JSONEachRow", "X-ClickHouse-Database": "default"})
    assert (status, headers["x-clickhouse-format"]) == (200, "JSONEachRow"), text
    assert text == '{"tenant":"acme","fen":100}\n{"tenant":"beta","fen":250}\n'
    status, _, text = fresh.request("SELECT 1", user="finance", headers={"X-ClickHouse-Database": "system"})
    assert status == 404 and "UNKNOWN_DATABASE" in text
    status, _, text = fresh.request("SELECT 1", user="finance", params="default_format=CSV",
                                      headers={"X-ClickHouse-Format": "JSON"})
    assert status == 400 and "X-ClickHouse header" in text  # two answers to one question
    status, _, text = fresh.request("SELECT 1", user="finance", headers={"X-ClickHouse-Format": "Avro"})
    assert status == 403 and "UNKNOWN_FORMAT" in text


def test_compress_1_is_answered_in_an_encoding_http_clients_read(fresh):
    import gzip

    for sql, status_expected in [("SELECT tenant FROM ledger ORDER BY tenant", 200), ("SELECT * FROM nowhere", 404)]:
        connection = http.client.HTTPConnection("127.0.0.1", fresh.port, timeout=60)
        connection.request("POST", "/?compress=1", body=sql.encode(),
                           headers={"Authorization": basic("finance", fresh.passwords["finance"])})
        response = connection.getresponse()
        body = response.read()
        connection.close()
        assert (response.status, response.getheader("Content-Encoding")) == (status_expected, "gzip")
        text = gzip.decompress(body).decode()
        assert text == "acme\nbeta\n" if status_expected == 200 else "UNKNOWN_TABLE" in text


def test_harmless_client_settings_are_accepted_by_value(fresh):
    assert fresh.rows("SELECT * FROM VALUES('a UInt8', 1, 2)", user="finance") == "1\n2\n"  # the driver's getTypeInfo
    assert fresh.rows("SELECT count() FROM VIEW(SELECT 1)", user="finance") == "1\n"
    for params in ["extremes=0", "max_execution_time=5", "max_execution_time=30"]:
        status, _, text = fresh.request("SELECT 1", user="finance", params=params)
        assert (status, text) == (200, "1\n"), (params, text)
    for params in ["extremes=1", "max_execution_time=0", "max_execution_time=31", "max_execution_time=1e9",
                   "max_execution_time=-1"]:
        status, _, text = fresh.request("SELECT 1", user="finance", params=params)
        assert status == 403 and "SETTING_CONSTRAINT_VIOLATION" in text, (params, text)
    # a client's shorter limit is kept: 1 s, not the gateway's 30
    started = time.monotonic()
    status, headers, text = fresh.request("SELECT count() FROM numbers(1000000000000)", params="max_execution_time=1")
    assert (status, headers["x-clickhouse-exception-code"]) == (500, "159"), text
    assert time.monotonic() - started < 10
