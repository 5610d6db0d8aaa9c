"""Issue 13: nobody gets into `gpubill clickhouse serve` who should not, and nobody inside
does what the gateway does not serve.

Each attack that was found against the gateway is here as a request that now does no harm,
and the harm is checked where it would show (the file that would be written, the process
that would die, the rows that would go), not only the error code. Pure parts first (no
gateway), then one real gateway child process with small limits.
"""

from __future__ import annotations

import base64
import gzip
import http.client
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import quote, urlsplit

import clickhouse_connect
import pytest
from clickhouse_connect.driver.exceptions import ClickHouseError

from gpubill.devenv.gateway.auth import (
    CREDENTIALS_FILE,
    BrowserGuard,
    Credentials,
    authenticate,
    load_credentials,
)
from gpubill.devenv.gateway.request import GatewayError, decode_body, url_parameters
from gpubill.devenv.gateway.sql_guard import Limits, SqlGuard
from gpubill.errors import ConfigError
from tests.unit.test_ch_gateway import free_port, start_gateway, stop_gateway

# ------------------------------------------------------------------------- credentials

CREDENTIALS = Credentials({"gpubill": "pipeline-secret", "finance": "finance-secret"})


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize("headers, params, user", [
    ({"authorization": basic("gpubill", "pipeline-secret")}, {}, "gpubill"),  # clickhouse-connect, Grafana
    ({"x-clickhouse-user": "finance", "x-clickhouse-key": "finance-secret"}, {}, "finance"),  # clickhouse-client, DBeaver
    ({}, {"user": "finance", "password": "finance-secret"}, "finance"),  # URL parameters
    ({"authorization": basic("finance", "finance-secret"), "x-clickhouse-user": "finance",
      "x-clickhouse-key": "finance-secret"}, {}, "finance"),  # two ways that agree
])
def test_every_way_clients_send_credentials_is_accepted(headers, params, user):
    assert authenticate(headers, params, CREDENTIALS) == user


@pytest.mark.parametrize("headers, params", [
    ({}, {}),  # nobody: there is no default user to fall back to
    ({"authorization": basic("finance", "WRONG")}, {}),
    ({"authorization": basic("default", "")}, {}),
    ({"authorization": basic("gpubill", "")}, {}),
    ({"authorization": basic("gpubill", "pipeline-secret ")}, {}),
    ({"authorization": "Basic !!!"}, {}),
    ({"authorization": "Basic " + base64.b64encode(b"no-colon").decode()}, {}),
    ({"authorization": "Bearer pipeline-secret"}, {}),
    ({"x-clickhouse-user": "finance"}, {}),
    ({}, {"user": "gpubill"}),
    # the finance user's password with the pipeline's name in another place: not the pipeline
    ({"authorization": basic("finance", "finance-secret")}, {"user": "gpubill", "password": "finance-secret"}),
])
def test_wrong_missing_or_contradicting_credentials_fail_with_516(headers, params):
    with pytest.raises(GatewayError) as refused:
        authenticate(headers, params, CREDENTIALS)
    assert (refused.value.code, refused.value.status) == (516, 401)
    assert "AUTHENTICATION_FAILED" in str(refused.value)


def test_passwords_are_generated_once_into_a_private_file(tmp_path):
    credentials, created = load_credentials(tmp_path / "var", {"gpubill": None, "finance": None})
    path = tmp_path / "var" / CREDENTIALS_FILE
    assert created == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == credentials.passwords
    assert len(set(credentials.passwords.values())) == 2 and all(len(p) >= 32 for p in credentials.passwords.values())
    again, created_again = load_credentials(tmp_path / "var", {"gpubill": None, "finance": None})
    assert (again, created_again) == (credentials, None)  # the same passwords, not shown again


def test_configured_passwords_win_and_need_no_file(tmp_path):
    credentials, created = load_credentials(tmp_path, {"gpubill": "a", "finance": "b"})
    assert (credentials.passwords, created) == ({"gpubill": "a", "finance": "b"}, None)
    assert not (tmp_path / CREDENTIALS_FILE).exists()
    mixed, _ = load_credentials(tmp_path, {"gpubill": "a", "finance": None})
    assert mixed.passwords["gpubill"] == "a" and mixed.passwords["finance"] not in ("a", "b")


def test_a_credentials_file_others_can_read_is_refused(tmp_path):
    load_credentials(tmp_path, {"gpubill": None, "finance": None})
    (tmp_path / CREDENTIALS_FILE).chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_credentials(tmp_path, {"gpubill": None, "finance": None})


def test_the_dsn_quotes_the_password():
    assert Credentials({"gpubill": "p@ss:/w", "finance": "x"}).dsn("127.0.0.1", 8123) == \
        "http://gpubill:p%40ss%3A%2Fw@127.0.0.1:8123/"


# ----------------------------------------------------------------------------- browsers


@pytest.mark.parametrize("headers", [
    {},
    {"host": "127.0.0.1:8123"}, {"host": "localhost:8123"}, {"host": "[::1]:8123"}, {"host": "localhost"},
    {"host": "127.0.0.1:18123"},  # a mapped port
    {"host": "localhost:8123", "origin": "http://localhost:8123", "sec-fetch-site": "same-origin"},
    {"sec-fetch-site": "none"},  # typed into the address bar
])
def test_clients_and_the_gateways_own_origin_pass(headers):
    BrowserGuard("127.0.0.1", 8123).check(headers)


@pytest.mark.parametrize("headers", [
    {"host": "evil.example:8123"},  # DNS rebinding: a name that resolves to 127.0.0.1
    {"host": "localhost.evil.example"},
    {"host": "127.0.0.1:8123@evil"},
    {"origin": "http://evil.example"},
    {"origin": "null"},  # a sandboxed frame or a file:// page
    {"origin": "http://localhost:3000"},  # another local web app is another origin
    {"origin": "https://localhost:8123"},
    {"sec-fetch-site": "cross-site"},
    {"sec-fetch-site": "same-site"},
])
def test_web_pages_are_refused(headers):
    with pytest.raises(GatewayError) as refused:
        BrowserGuard("127.0.0.1", 8123).check(headers)
    assert (refused.value.code, refused.value.status) == (497, 403)


# ------------------------------------------------------------------------- request limits


def test_a_gzip_bomb_stops_at_the_cap():
    bomb = gzip.compress(b"\0" * (256 << 20), 9)  # 256 MiB in about 250 KB
    assert len(bomb) < 300_000
    with pytest.raises(GatewayError) as refused:
        decode_body(bomb, "gzip", 8 << 20)
    assert refused.value.status == 413


def test_a_body_over_the_cap_is_refused_before_decompression():
    with pytest.raises(GatewayError, match="larger than"):
        decode_body(b"x" * 1001, "", 1000)
    assert decode_body(b"x" * 1000, "", 1000) == b"x" * 1000


@pytest.mark.parametrize("pairs", [[("readonly", "1"), ("readonly", "0")], [("user", "finance"), ("user", "gpubill")]])
def test_a_url_parameter_given_twice_is_refused(pairs):
    with pytest.raises(GatewayError, match="given twice"):
        url_parameters(pairs)


def test_forced_settings_end_with_readonly():
    forced = Limits(max_execution_s=7, max_memory_bytes=1 << 20).forced_settings(readonly=1)
    assert forced["max_execution_time"] == "7" and forced["max_memory_usage"] == str(1 << 20)
    assert list(forced)[-1] == "readonly" and forced["readonly"] == "1"
    assert "readonly" not in Limits().forced_settings(readonly=0)


# --------------------------------------------------------------------------- the SQL guard

GUARD = SqlGuard(tables={"rated_seconds", "t"}, aggregates={"sum", "count"}, combinators={"If"},
                 engines={"MergeTree", "File"})


@pytest.mark.parametrize("sql", [
    "INSERT INTO rated_seconds (`tenant`, `second`) FORMAT Native",  # clickhouse-connect's insert
    "INSERT INTO `gpubill`.`rated_seconds` (`a`,`b`) FORMAT RowBinary",
    "insert into t (a) format CSV",
])
def test_plain_inserts_take_the_fast_path(sql):
    assert GUARD.is_plain_insert(sql)


@pytest.mark.parametrize("sql", [
    "INSERT INTO FUNCTION file('/tmp/x', 'CSV', 'a String') (a) FORMAT CSV",
    "INSERT INTO FUNCTION (a) FORMAT Native",
    "INSERT INTO t (a) FROM INFILE '/etc/passwd' FORMAT CSV",
    "INSERT INTO t (a) SETTINGS readonly=0 FORMAT Native",
    "INSERT INTO t (a) FORMAT Native; SYSTEM SHUTDOWN",
    "INSERT INTO t (a) FORMAT Native\nSYSTEM SHUTDOWN",
    "INSERT INTO t (`a\\x60`) FORMAT Native",
    "INSERT INTO t /* */ (a) FORMAT Native",
    "INSERT INTO t SELECT * FROM file('/etc/passwd')",
])
def test_anything_else_is_not_a_plain_insert(sql):
    assert not GUARD.is_plain_insert(sql)


@pytest.mark.parametrize("sql", [
    "SELECT 1; SYSTEM SHUTDOWN", "SELECT 1;SELECT 2;", "INSERT INTO t VALUES ('a'); DROP TABLE t",
    "INSERT INTO t FROM INFILE '/etc/passwd' FORMAT CSV", "insert into t from /* x */ infile '/etc/passwd'",
    "SELECT 1 INTO OUTFILE '/tmp/x'", "SELECT 1 into\toutfile '/tmp/x' TRUNCATE",
])
def test_the_raw_text_holds_one_statement_and_no_file_keyword(sql):
    with pytest.raises(GatewayError) as refused:
        GUARD.check_text(sql)
    assert refused.value.code == 497


@pytest.mark.parametrize("sql", ["SELECT 1", "SELECT 1;", "SELECT 1 ;  \n", "SELECT 'profile' AS infile_name"])
def test_plain_text_passes(sql):
    GUARD.check_text(sql)


def test_url_settings_the_gateway_fixes_are_refused_under_any_spelling():
    for name in ["readonly", "READONLY", "max_execution_time", "max_memory_usage", "format_schema",
                 "max_execution_time_alias", "input_format_values_interpret_expressions", "Max_Threads"]:
        with pytest.raises(GatewayError) as refused:
            GUARD.check_settings({"max_threads": "2", name: "0"}, "gpubill")
        assert refused.value.code == 452
    GUARD.check_settings({"max_threads": "2", "optimize_on_insert": "0"}, "gpubill")
    with pytest.raises(GatewayError):  # the reader sets nothing of its own (issue 21)
        GUARD.check_settings({"max_threads": "2"}, "finance")


def test_a_guard_that_no_longer_fits_chdb_stops_the_start():
    from gpubill.devenv.ch_gateway import GUARD_PASSES, GUARD_PROBES, check_guard
    from gpubill.errors import GpubillError

    class Engine:  # a chDB whose EXPLAIN AST the guard cannot read any more: nothing gets refused
        version = "99.1"

        def run(self, statement, inspect):
            inspect("SELECT 1", "SelectWithUnionQuery (children 1)")

    class Refusing(Engine):
        def run(self, statement, inspect):
            if statement.sql != GUARD_PASSES:
                GUARD.check_text("SELECT 1; x")  # refuses

    class RefusingAll(Engine):  # refuses the product's own statement too: it does not fit either
        def run(self, statement, inspect):
            GUARD.check_text("SELECT 1; x")

    assert len(GUARD_PROBES) >= 3
    with pytest.raises(GpubillError, match="does not fit chDB 99.1"):
        check_guard(Engine(), GUARD)
    with pytest.raises(GpubillError, match="refuses the product's own"):
        check_guard(RefusingAll(), GUARD)
    check_guard(Refusing(), GUARD)


def test_an_ast_the_guard_cannot_read_is_refused():
    with pytest.raises(GatewayError, match="cannot inspect"):
        GUARD.inspect("SELECT 1", '{"meta": []}', "gpubill")  # EXPLAIN's output in another FORMAT


# ------------------------------------------------------------------------ a real gateway

LIMITS = {"GPUBILL_GATEWAY_MAX_EXECUTION_S": "2", "GPUBILL_GATEWAY_MAX_MEMORY_MB": "256",
          "GPUBILL_GATEWAY_MAX_BODY_MB": "8", "GPUBILL_GATEWAY_MAX_CONNECTIONS": "64"}


class Gateway:
    """A spawned gateway and raw HTTP to it, headers and all."""

    def __init__(self, spawned, directory: Path) -> None:
        self.spawned, self.directory = spawned, directory
        parts = {u.username: u.password for u in map(urlsplit, (spawned.dsn, spawned.finance_dsn))}
        self.port = urlsplit(spawned.dsn).port
        self.passwords = parts

    def request(self, sql: str = "", *, user: str | None = "gpubill", password: str | None = None,
                method: str = "POST", params: str = "", headers: dict | None = None,
                body: bytes | None = None) -> tuple[int, dict, str]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        sent = dict(headers or {})
        if user is not None:
            sent["Authorization"] = basic(user, self.passwords[user] if password is None else password)
        path = "/?" + params
        if method == "GET":
            path += ("&" if params else "") + "query=" + quote(sql)
            connection.request("GET", path, headers=sent)
        else:
            connection.request("POST", path, body=sql.encode() if body is None else body, headers=sent)
        response = connection.getresponse()
        text = response.read().decode("utf-8", "replace")
        connection.close()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, text

    def rows(self, sql: str, user: str = "gpubill") -> str:
        status, _, text = self.request(sql, user=user)
        assert status == 200, text
        return text

    def alive(self) -> bool:
        return self.spawned.process.poll() is None and self.request("SELECT 1")[0] == 200


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    directory = tmp_path_factory.mktemp("guarded")
    spawned = start_gateway(directory, free_port(), **LIMITS)
    gw = Gateway(spawned, directory)
    gw.rows("CREATE TABLE IF NOT EXISTS ledger (tenant String, fen Int64) ENGINE = MergeTree ORDER BY tenant")
    gw.rows("INSERT INTO ledger VALUES ('acme', 100), ('beta', 250)")
    yield gw
    if spawned.process.poll() is None:
        stop_gateway(spawned)


def ledger(gw: Gateway) -> str:
    return gw.rows("SELECT tenant, fen FROM ledger ORDER BY tenant")


def test_no_credentials_reads_nothing(gateway):
    for user, password in [(None, None), ("finance", "WRONG"), ("default", ""), ("gpubill", "")]:
        status, headers, text = gateway.request("SELECT tenant FROM ledger", user=user, password=password)
        assert (status, headers["x-clickhouse-exception-code"]) == (401, "516"), text
        assert "acme" not in text
    status, _, _ = gateway.request("SELECT 1", user=None, params=f"user=finance&password={gateway.passwords['finance']}")
    assert status == 200
    status, _, _ = gateway.request("SELECT 1", user=None, headers={
        "X-ClickHouse-User": "finance", "X-ClickHouse-Key": gateway.passwords["finance"]})
    assert status == 200


@pytest.mark.parametrize("sql, harm", [
    ("SELECT * FROM file('/etc/passwd')", "root:"),
    ("SELECT file('/etc/passwd')", "root:"),
    ("SeLeCt * FrOm /* a */ FILE /* b */ ('/etc/passwd', 'LineAsString')", "root:"),
    ("SELECT * FROM (SELECT * FROM (SELECT * FROM file('/etc/passwd', 'LineAsString')))", "root:"),
    ("WITH p AS (SELECT * FROM file('/etc/passwd', 'LineAsString')) SELECT * FROM p", "root:"),
    ("SELECT * FROM view(SELECT * FROM file('/etc/passwd', 'LineAsString'))", "root:"),
    ("SELECT * FROM merge(REGEXP('x'), file('/etc/passwd'))", "root:"),
    ("DESCRIBE TABLE file('/etc/passwd', 'LineAsString')", "String"),
    ("SELECT * FROM url('http://127.0.0.1:{port}/?query=SELECT+1')", "1"),
    ("SELECT * FROM remote('127.0.0.1', system.one)", "0"),
    ("SELECT * FROM s3('http://127.0.0.1:1/b/k', 'CSV')", ""),
    ("SELECT * FROM input('a String')", ""),
    ("SELECT 1 SETTINGS readonly = 0", ""),
    ("SELECT 1 SETTINGS `read\\x6fnly` = 0, max_execution_time = 0", ""),
    ("SET max_memory_usage = 0", ""),
    ("SELECT * FROM file('/etc/passwd') SETTINGS max_threads = 1 FORMAT TSV", "root:"),
])
def test_files_network_and_fixed_settings_are_refused_for_everyone(gateway, sql, harm):
    sql = sql.replace("{port}", str(gateway.port))
    for user in ("gpubill", "finance"):
        status, headers, text = gateway.request(sql, user=user)
        assert status in (403, 500) and headers["x-clickhouse-exception-code"] in ("497", "452", "164"), text
        assert not harm or harm not in text.split("Code:")[0]


@pytest.mark.parametrize("sql", [
    "INSERT INTO FUNCTION file('{out}', 'CSV', 'a String') SELECT 'pwned' SETTINGS engine_file_truncate_on_insert = 1",
    "SELECT 'pwned' INTO OUTFILE '{out}'",
    "SELECT 'pwned' into /* */ OutFile '{out}' TRUNCATE",
    "CREATE TABLE pwn (a String) ENGINE = File(CSV, '{out}')",
    "CREATE TABLE pwn (a String) ENGINE = MergeTree ORDER BY a SETTINGS disk = disk(type = local, path = '{dir}/')",
    "CREATE DICTIONARY pwn (a String) PRIMARY KEY a SOURCE(FILE(path '{out}' format 'CSV')) LAYOUT(FLAT()) LIFETIME(0)",
    "CREATE DATABASE pwn ENGINE = Filesystem('{dir}')",
    "BACKUP TABLE ledger TO File('{out}')",
    "ATTACH TABLE pwn FROM '{dir}' (a String) ENGINE = MergeTree ORDER BY a",
])
def test_nothing_writes_files_on_the_gateways_host(gateway, tmp_path, sql):
    out = tmp_path / "pwned.csv"
    status, headers, text = gateway.request(sql.format(out=out, dir=tmp_path))
    assert status == 403 and headers["x-clickhouse-exception-code"] in ("497", "452"), text
    assert list(tmp_path.iterdir()) == []
    assert "pwn" not in gateway.rows("SHOW TABLES")


def test_infile_and_values_data_cannot_read_files(gateway):
    for sql in ["INSERT INTO ledger FROM INFILE '/etc/passwd' FORMAT CSV",
                "INSERT INTO ledger (tenant) FROM\n-- x\ninfile '/etc/passwd' FORMAT LineAsString",
                "INSERT INTO ledger VALUES (file('/etc/passwd'), 1)"]:
        status, _, text = gateway.request(sql)
        assert status != 200, text
    assert "root" not in gateway.rows("SELECT groupArray(tenant) FROM ledger")


def test_plain_insert_data_cannot_call_functions(gateway):
    # the fast path skips the parser: its Values data must stay literals
    status, _, text = gateway.request(body=b"INSERT INTO ledger (tenant, fen) FORMAT Values\n(file('/etc/passwd'), 1)")
    assert status == 500 and "SUPPORT_IS_DISABLED" in text, text
    status, _, text = gateway.request(body=b"INSERT INTO ledger (tenant, fen) FORMAT Values\n('literal', 1)")
    assert status == 200, text
    assert gateway.rows("SELECT count() FROM ledger WHERE tenant = 'literal'") == "1\n"
    gateway.rows("ALTER TABLE ledger DELETE WHERE tenant = 'literal' SETTINGS mutations_sync = 2")


def test_the_schemas_own_statements_pass_the_guard(gateway):
    from warehouse.migrations import migrations, split_statements

    statements = [statement for _, _, sql in migrations() for statement in split_statements(sql)]
    assert len(statements) > 10
    for statement in statements:  # idempotent; what matters is that the guard lets each through
        _, headers, text = gateway.request(statement)
        assert headers.get("x-clickhouse-exception-code") not in ("497", "452", "62"), (statement, text)


@pytest.mark.parametrize("sql", ["SYSTEM SHUTDOWN", "SYSTEM KILL", "sYsTeM /* x */ shutdown",
                                 "SELECT 1; SYSTEM SHUTDOWN", "SELECT 1;\nSYSTEM KILL",
                                 "INSERT INTO ledger VALUES ('x', 1); SYSTEM SHUTDOWN", "KILL QUERY WHERE 1"])
def test_one_request_cannot_stop_the_gateway(gateway, sql):
    status, _, text = gateway.request(sql)
    assert status == 403, text
    time.sleep(0.2)
    assert gateway.alive()
    assert "x\t1" not in ledger(gateway)


def test_get_is_read_only(gateway):
    before = ledger(gateway)
    for sql in ["INSERT INTO ledger VALUES ('get', 1)", "DROP TABLE ledger", "CREATE TABLE g (a UInt8) ENGINE = Memory"]:
        status, _, text = gateway.request(sql, method="GET")
        assert status != 200 and "READONLY" in text, text
    assert gateway.request("SELECT count() FROM ledger", method="GET")[2] == "2\n"
    assert ledger(gateway) == before


@pytest.mark.parametrize("headers", [
    {"Origin": "http://evil.example", "Content-Type": "text/plain"},
    {"Host": "rebound.evil.example:8123"},
    {"Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"},
])
def test_web_pages_cannot_write(gateway, headers):
    status, _, text = gateway.request("INSERT INTO ledger VALUES ('web', 1)", headers=headers)
    assert status == 403, text
    assert "web" not in ledger(gateway)


@pytest.mark.parametrize("query_id", ["a\r\nSet-Cookie: x=1", "a\nX-Evil: 1", "é", "x" * 200, ""])
def test_headers_never_echo_client_input(gateway, query_id):
    status, headers, _ = gateway.request("SELECT 1", params="query_id=" + quote(query_id))
    assert status == 200
    assert "set-cookie" not in headers and "x-evil" not in headers
    assert headers["x-clickhouse-query-id"] != query_id and "\n" not in headers["x-clickhouse-query-id"]
    assert gateway.request("SELECT 1", params="query_id=my-query.1")[1]["x-clickhouse-query-id"] == "my-query.1"


def test_slow_and_greedy_statements_stop_at_the_limits(gateway):
    started = time.monotonic()
    status, headers, text = gateway.request("SELECT count() FROM numbers(1000000000000)")
    assert (status, headers["x-clickhouse-exception-code"]) == (500, "159"), text  # TIMEOUT_EXCEEDED at 2 s
    assert time.monotonic() - started < 10
    # one array of 200 million UInt32 (763 MiB, over the 256 MiB cap) is refused at its first
    # allocation, however loaded the machine (a growing groupArray could meet the 2 s first)
    status, headers, text = gateway.request("SELECT length(range(200000000))")
    assert (status, headers["x-clickhouse-exception-code"]) == (500, "241"), text  # MEMORY_LIMIT_EXCEEDED
    for params in ["max_execution_time=0", "max_memory_usage=0", "readonly=0", "timeout_overflow_mode=break"]:
        status, _, text = gateway.request("SELECT count() FROM numbers(1000000000000)", params=params)
        assert status == 403 and "SETTING_CONSTRAINT_VIOLATION" in text, text
    assert gateway.alive()


def test_bodies_over_the_cap_are_refused_compressed_or_not(gateway):
    bomb = gzip.compress(b"INSERT INTO ledger FORMAT CSV\n" + b"a,1\n" * (4 << 20), 9)  # 16 MiB, cap 8
    assert len(bomb) < 1 << 20
    status, _, text = gateway.request(body=bomb, headers={"Content-Encoding": "gzip"})
    assert status == 413, text
    with socket.create_connection(("127.0.0.1", gateway.port)) as raw:  # refused before the body is read
        raw.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\nAuthorization: %s\r\n\r\n"
                    % (9 << 20, basic("gpubill", gateway.passwords["gpubill"]).encode()))
        raw.settimeout(10)
        assert raw.recv(4096).startswith(b"HTTP/1.1 413")
    assert gateway.alive() and "\na\t1" not in ledger(gateway)


def test_forty_concurrent_clients_are_all_answered(gateway):
    barrier, results = threading.Barrier(40), []

    def client() -> None:
        barrier.wait()
        try:
            results.append(gateway.request("SELECT count() FROM ledger")[0])
        except OSError as exc:  # a reset or refused connection
            results.append(type(exc).__name__)

    threads = [threading.Thread(target=client) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results == [200] * 40


def test_the_listen_backlog_holds_a_burst():
    from gpubill.devenv.ch_gateway import GatewayServer

    assert GatewayServer.request_queue_size >= 128  # http.server's 5 reset clients of a 40-client burst


def test_connections_over_the_cap_replace_the_idle_and_the_rest_go_on(gateway):
    # issue 21: 64 connections that send nothing no longer hold the cap; a newcomer takes the
    # place of the oldest (503 only when every connection is busy: test_gateway_boundaries.py)
    held = []
    try:
        for _ in range(64):
            held.append(socket.create_connection(("127.0.0.1", gateway.port)))
        time.sleep(0.3)  # let the gateway accept them all
        assert gateway.request("SELECT 1")[0] == 200
        held[0].settimeout(10)
        assert held[0].recv(4096) == b""  # the oldest made room
    finally:
        for connection in held:
            connection.close()
    time.sleep(0.3)
    assert gateway.alive()


def test_the_gateway_has_its_own_process_group(gateway):
    pid = gateway.spawned.process.pid
    assert os.getpgid(pid) == pid != os.getpgid(0)


# -------------------------------------------------------------------------- the finance user


@pytest.fixture(scope="module")
def finance(gateway):
    client = clickhouse_connect.get_client(dsn=gateway.spawned.finance_dsn)
    yield client
    client.close()


def test_finance_reads_every_view(gateway, finance):
    views = [name for (name,) in finance.query(
        "SELECT name FROM system.tables WHERE database = currentDatabase() AND engine = 'View' ORDER BY name").result_rows]
    assert views  # the migrations create the report views
    for view in views:
        finance.query(f"SELECT * FROM `{view}` LIMIT 1")


@pytest.mark.parametrize("sql", [
    "INSERT INTO ledger VALUES ('finance', 1)", "ALTER TABLE ledger DELETE WHERE 1", "ALTER TABLE ledger DROP COLUMN fen",
    "DELETE FROM ledger WHERE 1", "TRUNCATE TABLE ledger", "DROP TABLE ledger", "RENAME TABLE ledger TO gone",
    "CREATE TABLE finance_made (a UInt8) ENGINE = Memory", "OPTIMIZE TABLE ledger FINAL",
    "SET readonly = 0", "SET max_execution_time = 0", "SELECT 1 SETTINGS readonly = 0",
    "SELECT 1 SETTINGS max_memory_usage = 0", "SELECT 1 SETTINGS max_threads = 1",
])
def test_finance_changes_nothing(gateway, finance, sql):
    before = ledger(gateway)
    with pytest.raises(ClickHouseError):
        finance.command(sql)
    assert ledger(gateway) == before
    assert "finance_made" not in gateway.rows("SHOW TABLES")


@pytest.mark.parametrize("params", ["readonly=0", "readonly=2", "readonly=1&readonly=0", "max_execution_time=0",
                                    "max_memory_usage=0", "allow_ddl=1"])
def test_finance_cannot_lift_readonly_or_its_limits_by_url(gateway, params):
    status, _, text = gateway.request("INSERT INTO ledger VALUES ('url', 1)", user="finance", params=params)
    assert status in (400, 403), text
    assert "url" not in ledger(gateway)


def test_finance_reads_under_readonly(gateway):
    status, _, text = gateway.request("SELECT getSetting('readonly')", user="finance")
    assert (status, text) == (200, "1\n")
    status, _, text = gateway.request("SELECT 1", user="finance", params="max_threads=3")  # issue 21: fixed
    assert status == 403 and "SETTING_CONSTRAINT_VIOLATION" in text, text


# -------------------------------------------------------------------- first start from the shell


def test_first_start_generates_the_passwords_into_a_private_file_and_never_logs_them(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUBILL_GATEWAY_")}
    env.update({"GPUBILL_CLICKHOUSE": f"chdb://{tmp_path / 'ch'}", "GPUBILL_HOME": str(tmp_path / "state"),
                "NO_COLOR": "1"})
    outputs = []
    for _ in range(2):
        port = free_port()
        process = subprocess.Popen([sys.executable, "-m", "gpubill.cli", "clickhouse", "serve", "--listen",
                                    f"127.0.0.1:{port}"], env=env, cwd=tmp_path, stderr=subprocess.PIPE,
                                   stdout=subprocess.DEVNULL, text=True, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.1)
            path = tmp_path / "state" / CREDENTIALS_FILE
            passwords = json.loads(path.read_text())
            dsn = f"http://gpubill:{passwords['gpubill']}@127.0.0.1:{port}/"
            client = clickhouse_connect.get_client(dsn=dsn)
            assert client.command("SELECT 42") == 42
            client.close()
        finally:
            process.terminate()
            outputs.append(process.communicate(timeout=30)[1])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for output in outputs:  # issue 36: a log line is no place for a password, not even the first one
        assert passwords["gpubill"] not in output and passwords["finance"] not in output
    assert f"generated the gateway's passwords into {path} (mode 0600)" in outputs[0]
    assert str(path) in outputs[1]  # where to find them
