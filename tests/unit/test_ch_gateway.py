"""`gpubill clickhouse serve`: the embedded chDB behind ClickHouse's HTTP interface.

The gateway runs as a child process on a free port with its own tmp database (chDB allows
one engine per process, and this one is not the test's); clickhouse-connect's HTTP client
talks to it exactly as gpubill does against a ClickHouse server.
"""

from __future__ import annotations

import fcntl
import gzip
import os
import signal
import subprocess
import sys
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import clickhouse_connect
import lz4.frame
import pytest
from clickhouse_connect.driver.exceptions import ClickHouseError

from gpubill.devenv.ch_gateway import SpawnedGateway, parse_listen, spawn
from gpubill.devenv.gateway.request import GatewayError, decode_body, read_statement, split_inline_data
from warehouse.connection import open_database
from warehouse.migrations import migrations
from gpubill.errors import ConfigError
from tests.ports import free_port  # reserved: never another test process's (pytest-xdist)

# --------------------------------------------------------------------- the request parser


def test_query_in_the_body_with_parameters_settings_and_database():
    statement = read_statement(
        {"database": "gpubill", "param_p": "2026-05", "max_threads": "2", "query_id": "q1", "session_id": "s",
         "wait_end_of_query": "1", "http_headers_progress_interval_ms": "9000"},
        {}, b"SELECT 1 WHERE {p:String} != ''\n FORMAT Native")
    assert statement.sql == "SELECT 1 WHERE {p:String} != ''\n FORMAT Native"
    assert statement.params == {"p": "2026-05"}
    assert statement.settings == {"max_threads": "2"}  # transport parameters are not settings
    assert (statement.database, statement.query_id, statement.data) == ("gpubill", "q1", b"")


def test_insert_data_after_the_statement_in_the_body():
    # what clickhouse-connect's insert() sends: statement line, then Native bytes
    body = b"INSERT INTO t (`a`, `b`) FORMAT Native\n\x02\x01\x01a\x06String\x01x\n"
    assert split_inline_data(body) == ("INSERT INTO t (`a`, `b`) FORMAT Native", b"\x02\x01\x01a\x06String\x01x\n")
    statement = read_statement({}, {}, body)
    assert statement.data.startswith(b"\x02\x01")


def test_insert_data_with_the_statement_in_the_url():
    statement = read_statement({"query": "INSERT INTO t FORMAT CSV"}, {}, b"1,2\n")
    assert (statement.sql, statement.data) == ("INSERT INTO t FORMAT CSV", b"1,2\n")


def test_a_query_parameter_and_a_body_that_is_not_data_are_one_statement():
    statement = read_statement({"query": "SELECT"}, {}, b"1")
    assert (statement.sql, statement.data) == ("SELECT\n1", b"")


@pytest.mark.parametrize("encoding, encode", [
    ("lz4", lambda b: lz4.frame.compress(b[:10]) + lz4.frame.compress(b[10:])),  # a frame per block, as the client
    ("gzip", gzip.compress),
    ("", lambda b: b),
])
def test_request_bodies_are_decompressed(encoding, encode):
    body = b"INSERT INTO t FORMAT Native\n" + bytes(range(256))
    assert decode_body(encode(body), encoding) == body


def test_an_unreadable_encoding_is_refused_with_what_to_do():
    with pytest.raises(GatewayError, match="compress=False"):
        decode_body(b"x", "snappy")


@pytest.mark.parametrize("listen, expected", [
    ("127.0.0.1:8123", ("127.0.0.1", 8123)), (":9000", ("127.0.0.1", 9000)), ("[::1]:8123", ("::1", 8123)),
])
def test_listen_addresses(listen, expected):
    assert parse_listen(listen) == expected


@pytest.mark.parametrize("listen", ["8123x", "localhost", "h:99999"])
def test_bad_listen_addresses(listen):
    with pytest.raises(ConfigError, match="--listen"):
        parse_listen(listen)


# ------------------------------------------------------------------------ a real gateway



def start_gateway(directory: Path, port: int, **env_extra: str) -> SpawnedGateway:
    """A gateway on `port` over a chDB database in `directory`; its DSNs carry the passwords
    (`spawn` makes them up and hands them to the child in its environment)."""
    env = {**os.environ, "GPUBILL_CLICKHOUSE": f"chdb://{directory / 'clickhouse'}", "GPUBILL_HOME": str(directory / "var"),
           "NO_COLOR": "1", **env_extra}
    for name in ("GPUBILL_GATEWAY_PASSWORD", "GPUBILL_GATEWAY_FINANCE_PASSWORD"):
        if name not in env_extra:
            env.pop(name, None)
    return spawn(env, port, cwd=directory)


def stop_gateway(gateway: SpawnedGateway) -> tuple[int, str]:
    process = gateway.process
    process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return code, process.stderr.read()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    directory = tmp_path_factory.mktemp("gateway")
    port = free_port()
    spawned = start_gateway(directory, port)
    yield spawned.dsn, directory
    if spawned.process.poll() is None:
        stop_gateway(spawned)


@pytest.fixture
def client(gateway):
    url, _ = gateway
    client = clickhouse_connect.get_client(dsn=url)  # compression as clickhouse-connect chooses (lz4 here)
    yield client
    client.close()


COLUMNS = ["tenant", "instance", "site", "rent_price", "second", "dead_at", "energy_mj", "stream"]
ROWS = [
    ["acme", "i-A1", "gz-guian", Decimal("3600.000000"), datetime(2026, 5, 12, 1, 0, 0),
     datetime(2026, 5, 12, 1, 0, 0, 123000), 301_038, "rent"],
    ["", None, "gz-guian", Decimal("0.000001"), datetime(2026, 5, 31, 23, 59, 59),
     datetime(2026, 6, 1, 0, 0, 0, 999000), 2**64 - 1, "energy"],
    ["beta", "i-B1", "sh-east", Decimal("999999999999.999999"), datetime(2026, 6, 1, 0, 0, 0),
     datetime(2026, 6, 1, 0, 0, 0), 0, "rent"],
]


def create_table(client, name: str) -> None:
    client.command(f"DROP TABLE IF EXISTS {name}")
    client.command(f"""
        CREATE TABLE {name} (
            tenant String, instance Nullable(String), site LowCardinality(String), rent_price Decimal(18, 6),
            second DateTime('UTC'), dead_at DateTime64(3, 'UTC'), energy_mj UInt64, stream Enum8('rent' = 1, 'energy' = 2)
        ) ENGINE = ReplacingMergeTree ORDER BY (stream, tenant, second)""")


@pytest.mark.parametrize("compress", [True, False, "zstd", "gzip"])
def test_rows_of_every_type_gpubill_uses_round_trip(gateway, compress):
    url, _ = gateway
    client = clickhouse_connect.get_client(dsn=url, compress=compress)
    table = f"types_{compress}".lower()
    create_table(client, table)
    client.insert(table, ROWS, column_names=COLUMNS)
    got = client.query(f"SELECT {', '.join(COLUMNS)} FROM {table} FINAL ORDER BY energy_mj DESC").result_rows
    assert [list(row) for row in got] == [ROWS[1], ROWS[0], ROWS[2]]
    client.close()


def test_server_side_parameters(client):
    create_table(client, "params")
    client.insert("params", ROWS, column_names=COLUMNS)
    rows = client.query(
        "SELECT tenant, rent_price FROM params FINAL WHERE site = {site:String} AND second < {before:DateTime('UTC')} "
        "AND stream = {stream:String} AND instance IS NOT NULL",
        parameters={"site": "gz-guian", "before": datetime(2026, 6, 1, tzinfo=timezone.utc), "stream": "rent"},
    ).result_rows
    assert rows == [("acme", Decimal("3600.000000"))]


def test_parameters_too_long_for_a_url_go_as_form_fields(client):
    # the sink's look-up sends thousands of (gpu, second) keys: clickhouse-connect moves
    # them into a multipart body once they pass 4 KiB
    keys = [(f"GPU-{i:04d}", 1_778_547_600 + i) for i in range(3000)]
    sql = "SELECT count() FROM (SELECT arrayJoin({keys:Array(Tuple(String, UInt32))}) AS k) WHERE k.2 % 2 = 0"
    assert client.query(sql, parameters={"keys": keys}).result_rows == [(1500,)]


def test_a_ready_native_block_inserts_raw(client):
    create_table(client, "raw")
    block = client.raw_query("SELECT 'acme' AS tenant, 'i' AS instance, 'gz-guian' AS site, toDecimal64(1, 6) AS rent_price, "
                             "toDateTime('2026-05-12 01:00:00', 'UTC') AS second, now64(3, 'UTC') AS dead_at, "
                             "toUInt64(7) AS energy_mj, 'rent' AS stream", fmt="Native")
    client.raw_insert("raw", COLUMNS, block, fmt="Native")
    assert client.query("SELECT tenant, energy_mj FROM raw").result_rows == [("acme", 7)]


def test_bad_sql_is_a_clickhouse_error_with_its_code(client):
    with pytest.raises(ClickHouseError, match="SYNTAX_ERROR") as raised:
        client.query("SELEC 1")
    assert raised.value.code == 62
    with pytest.raises(ClickHouseError, match="UNKNOWN_TABLE") as raised:
        client.command("INSERT INTO no_such_table VALUES (1)")
    assert raised.value.code == 60


def test_commands_tell_result_sets_from_statements(client):
    assert client.command("SELECT 41 + 1") == 42
    assert client.command("SELECT 1 WHERE 0") == ""  # a result set without rows
    assert not isinstance(client.command("CREATE TABLE IF NOT EXISTS c (a UInt8) ENGINE = Memory"), (str, int))


def test_settings_hold_for_one_request_only(client):
    sql = "SELECT getSetting('max_threads')"
    default = client.query(sql).result_rows
    assert client.query(sql, settings={"max_threads": 3}).result_rows == [(3,)]
    assert client.query(sql).result_rows == default != [(3,)]


def test_open_database_migrates_through_the_gateway(gateway):
    url, _ = gateway
    with open_database(url) as database:
        assert not database.embedded
        applied = {row[0] for row in database.query("SELECT name FROM schema_migrations FINAL")}
    assert applied == {name for _, name, _ in migrations()}
    with open_database(url, migrate=False) as database:
        assert database.migrate() == []  # the gateway itself migrated when it opened the database


def test_a_taken_port_is_a_one_line_error(gateway, tmp_path):
    url, _ = gateway
    port = url.rsplit(":", 1)[1].strip("/")
    assert port.isdigit()
    env = {**os.environ, "GPUBILL_CLICKHOUSE": f"chdb://{tmp_path / 'other'}", "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, "-m", "gpubill.cli", "clickhouse", "serve", "--listen", f"127.0.0.1:{port}"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == f"error: cannot listen on 127.0.0.1:{port}: address already in use " \
                                  "(another gateway or ClickHouse server?)"
    assert not (tmp_path / "other").exists()  # the database was never opened


def test_sigterm_stops_the_gateway_and_releases_the_database(tmp_path):
    port = free_port()
    spawned = start_gateway(tmp_path, port)
    with open_database(spawned.dsn) as database:
        database.insert("schema_migrations", [[9999, "9999_probe.sql"]], ["version", "name"])
    code, stderr = stop_gateway(spawned)
    assert code == 0, stderr
    assert "gateway stopped; database closed" in stderr
    with open(tmp_path / "clickhouse.lock", "rb+") as lock:  # no process holds the embedded database now
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
