"""The application on a ClickHouse cluster (GPUBILL_CLICKHOUSE_CLUSTER): its mutations go to the
shards' local tables (warehouse/cluster.py `mutation_target`), and no process but `gpubill db
migrate --cluster` applies a migration (warehouse/connection.py `open_database`).

No ClickHouse server runs here: the start-up checks run against a fake client, the mutations on
chDB with the cluster schema's single-node form (tests/unit/cluster_single_node.py).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import schemas
from billing.credit_notes import delete_stray_credit_note_lines
from billing.invoice_store import delete_stray_lines
from reports.retention import _drop
from usage.regenerate import drop_terms
from usage.rerating import drop_run
from usage.rollup import drop_superseded
from warehouse import connection
from warehouse.cluster import SHARDED, WHOLE, mutation_target
from warehouse.connection import Database, open_database
from warehouse.errors import ClusterSchemaError, DsnInvalid, SchemaNotReady

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
MIGRATION_FILES = sorted((Path(schemas.__file__).parent / "migrations").glob("[0-9][0-9][0-9][0-9]_*.sql"))


# --- mutation_target --------------------------------------------------------------------------


@pytest.mark.parametrize("table, cluster, target", [
    ("rated_hours", "", "rated_hours"),                                   # a single server: as before
    ("credit_note_lines", "", "credit_note_lines"),
    ("rated_hours", "gpubill", "rated_hours_local ON CLUSTER gpubill"),     # sharded: every shard's local table
    ("invoice_lines", "prod_1", "invoice_lines_local ON CLUSTER prod_1"),
    ("credit_note_lines", "gpubill", "credit_note_lines"),                 # whole: replicated by Keeper
    ("retention_runs", "gpubill", "retention_runs"),
])
def test_mutation_target(table, cluster, target):
    assert mutation_target(table, cluster) == target


def test_every_catalogued_table_is_itself_on_a_single_server():
    # With no cluster an f-string "DELETE FROM {mutation_target(t, '')} …" is byte for byte "DELETE FROM t …".
    assert all(mutation_target(table, "") == table for table in [*SHARDED, *WHOLE])


@pytest.mark.parametrize("table, cluster", [("rated_hour", ""), ("rated_hour", "gpubill"),
                                            ("rated_hours", "gpubill; DROP"), ("rated_hours", "a-b")])
def test_an_unknown_table_or_a_cluster_name_that_is_no_identifier_is_refused(table, cluster):
    with pytest.raises(ClusterSchemaError):
        mutation_target(table, cluster)


# --- every mutation the application writes goes through it --------------------------------------

PACKAGES = ["billing", "usage", "reports", "streams", "gpubill", "tenant_api", "warehouse"]
NOT_APPLICATION = {
    "warehouse/cluster.py": "renders the migrations for a cluster",
    "warehouse/migrations.py": "applies the migrations",
    "gpubill/devenv/gateway": "the SQL guard names statement kinds it allows and refuses",
    "gpubill/bench": "benchmarks on a chDB of their own (OPTIMIZE, scratch tables)",
}
MUTATION = re.compile(r"\b(DELETE\s+FROM|ALTER\s+TABLE|DROP\s+PARTITION|TRUNCATE|OPTIMIZE\s+TABLE)\b", re.I)
ROUTED = "\x00target\x00"


def _literal_text(node: ast.AST) -> str:
    """A string literal's text; in an f-string a `{mutation_target(…)}` reads ROUTED, any other field `{}`."""
    if isinstance(node, ast.Constant):
        return node.value
    parts = []
    for value in node.values:
        if isinstance(value, ast.Constant):
            parts.append(value.value)
        elif (isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Call)
              and isinstance(value.value.func, ast.Name) and value.value.func.id == "mutation_target"):
            parts.append(ROUTED)
        else:
            parts.append("{}")
    return "".join(parts)


def unrouted_mutations(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string literal (docstrings aside) that names a mutation whose table
    does not come from `mutation_target`: DELETE FROM / ALTER TABLE followed by anything else,
    TRUNCATE or OPTIMIZE at all, DROP PARTITION without a routed ALTER TABLE."""
    tree = ast.parse(source)
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    inner = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    found = []
    for node in ast.walk(tree):
        if id(node) in docstrings or id(node) in inner:
            continue
        if not (isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))):
            continue
        text = _literal_text(node)
        for match in MUTATION.finditer(text):
            word = " ".join(match.group(1).upper().split())
            after = text[match.end():]
            routed = (after.startswith(" " + ROUTED) if word in ("DELETE FROM", "ALTER TABLE")
                      else word == "DROP PARTITION" and f"ALTER TABLE {ROUTED}" in text[:match.start()])
            if not routed:
                found.append((node.lineno, " ".join(text.replace(ROUTED, "{mutation_target(…)}").split())[:100]))
    return found


def application_files() -> list[Path]:
    files = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if not any(relative == skip or relative.startswith(skip + "/") for skip in NOT_APPLICATION):
                files.append(path)
    return files


def test_the_scan_finds_an_unrouted_mutation_and_passes_a_routed_one():
    bad = '''
db.command("DELETE FROM rated_hours WHERE 1")
db.command(f"ALTER TABLE {table} DROP PARTITION {month}")
db.command("OPTIMIZE TABLE rated_hours FINAL")
db.command(f"ALTER TABLE {mutation_target('rated_seconds', c)} " f"DROP PARTITION '{p}'")
'''
    assert [line for line, _ in unrouted_mutations(bad)] == [2, 3, 3, 4]  # line 3: its ALTER and its DROP
    assert unrouted_mutations('''"""DELETE FROM x in a docstring"""\nlog("deleted")''') == []


def test_every_mutation_the_application_writes_names_its_table_through_mutation_target():
    files = application_files()
    assert len(files) > 100  # the scan reads the packages, not an empty glob
    found = {f"{path.relative_to(ROOT)}:{line}": text for path in files
             for line, text in unrouted_mutations(path.read_text(encoding="utf-8"))}
    assert found == {}, "route these through warehouse.cluster.mutation_target"
    routed = sum(path.read_text(encoding="utf-8").count("mutation_target(") for path in files)
    assert routed >= 10  # the ten statements of billing/, usage/ and reports/ (grep at the time of writing)


# --- the statements as sent ------------------------------------------------------------------


class Recorder:
    """A database that keeps the statements sent to it; `query` answers from `rows`."""

    def __init__(self, cluster: str, rows: list | None = None) -> None:
        self.cluster, self.rows, self.sent = cluster, rows or [], []

    def command(self, sql: str, parameters: dict | None = None, settings: dict | None = None) -> None:
        self.sent.append(sql)

    def query(self, sql: str, parameters: dict | None = None) -> list:
        return self.rows


NOV, DEC, DEC2 = 1793491200, 1796083200, 1796169600  # 2026-11-01, 2026-12-01, 2026-12-02 00:00Z


def send_every_mutation(db: Recorder) -> list[str]:
    drop_superseded(db, ["2026-11"])
    drop_terms(db, 7)  # rerate_terms, then rerate_seconds
    _drop(db, "rated_seconds", "2026-11", NOV, DEC)
    _drop(db, "readings_usage", "2026-11", NOV, DEC)
    _drop(db, "readings_power", "2026-12", DEC, DEC2)
    delete_stray_lines(db)
    delete_stray_credit_note_lines(db)
    return db.sent


# The statements as the application sent them before clusters (main at 23d0be9), copied here.
SINGLE_SERVER = [
    "DELETE FROM rated_hours WHERE period IN {periods:Array(String)} AND (period, hour, generation) IN ("
    " SELECT h.period, h.hour, h.generation FROM (SELECT DISTINCT period, hour, generation FROM rated_hours"
    "  WHERE period IN {periods:Array(String)}) AS h"
    " INNER JOIN (SELECT period, hour, max(generation) AS published FROM rollup_runs"
    "  WHERE period IN {periods:Array(String)} GROUP BY period, hour) AS r"
    " ON h.period = r.period AND h.hour = r.hour WHERE h.generation < r.published)",
    "DELETE FROM rerate_terms WHERE run = {run:UInt64}",
    "DELETE FROM rerate_seconds WHERE run = {run:UInt64}",
    "ALTER TABLE rated_seconds DROP PARTITION '2026-11'",
    "ALTER TABLE readings_usage DROP PARTITION 202611",
    "ALTER TABLE readings_power DELETE IN PARTITION 202612 WHERE (second >= toDateTime(1796083200, 'UTC') "
    "AND second < toDateTime(1796169600, 'UTC')) SETTINGS mutations_sync = 2",
    "DELETE FROM invoice_lines WHERE (id, revision, tenant, period) NOT IN "
    "(SELECT id, revision, tenant, period FROM invoices FINAL)",
    "DELETE FROM credit_note_lines WHERE number NOT IN (SELECT number FROM credit_notes)",
]


def test_on_a_single_server_every_statement_is_what_it_was():
    stray = [("DRAFT-1", 1, "t1", "2026-11")]  # one stray row: both stray deletes run
    assert send_every_mutation(Recorder("", stray)) == SINGLE_SERVER


def test_on_a_cluster_sharded_tables_are_deleted_from_on_every_shard_and_whole_ones_once():
    sent = send_every_mutation(Recorder("gpubill", [("DRAFT-1", 1, "t1", "2026-11")]))
    on = " ON CLUSTER gpubill"
    expected = [
        SINGLE_SERVER[0].replace("DELETE FROM rated_hours ", f"DELETE FROM rated_hours_local{on} ", 1),
        SINGLE_SERVER[1],                                               # rerate_terms: whole
        f"DELETE FROM rerate_seconds_local{on} WHERE run = {{run:UInt64}}",
        f"ALTER TABLE rated_seconds_local{on} DROP PARTITION '2026-11'",
        f"ALTER TABLE readings_usage_local{on} DROP PARTITION 202611",
        SINGLE_SERVER[5].replace("readings_power ", f"readings_power_local{on} ", 1),
        SINGLE_SERVER[6].replace("invoice_lines ", f"invoice_lines_local{on} ", 1),
        SINGLE_SERVER[7],                                               # credit_note_lines: whole
    ]
    assert sent == expected


def test_the_cluster_form_runs_on_chdb_and_deletes_what_the_distributed_names_show(tmp_path):
    result = subprocess.run([sys.executable, str(HERE / "cluster_single_node.py"), "mutations", str(tmp_path)],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    # A Distributed table takes no DELETE: why the statements go to the local tables.
    assert "DELETE query is not supported" in out["distributed_delete"]
    assert all(" ON CLUSTER gpubill" in sql for sql in out["sent"][:5])  # sharded ones
    assert out["sent"][5].startswith("DELETE FROM credit_note_lines WHERE")  # whole
    assert out["before"]["rated_hours"] == [["GPU-a", 1], ["GPU-a", 2], ["GPU-b", 1], ["GPU-b", 2]]
    assert out["after"] == {
        "rated_hours": [["GPU-a", 2], ["GPU-b", 2]],              # generation 1 < published 2: deleted
        "rerate_seconds": [[8, "GPU-a"]],                         # run 7 dropped
        "readings_usage": [["d5"]],                               # 202611 dropped, 2026-12-01 deleted
        "invoice_lines": [["DRAFT-1", 2]],                        # revision 1 and DRAFT-9 have no header
        "credit_note_lines": [["CN-1"]],                          # CN-2 has no header
    }
    assert out["stray_lines"] == [["DRAFT-1", 1, "t1", "2026-11"], ["DRAFT-9", 1, "t2", "2026-11"]]
    assert out["stray_credit_note_lines"] == ["CN-2"]


# --- start-up: no migration on a cluster, the schema's form both ways ------------------------


class Answer:
    def __init__(self, rows: list) -> None:
        self.result_rows, self.column_names = rows, ()


class FakeServer:
    """A ClickHouse server for open_database: schema_migrations' engine (None: no table) and the
    versions it records; keeps every statement."""

    def __init__(self, engine: str | None, recorded: list[int]) -> None:
        self.engine, self.recorded, self.sent = engine, recorded, []

    def command(self, sql: str, parameters=None, settings=None):
        self.sent.append(sql)
        return 1

    def query(self, sql: str, parameters=None) -> Answer:
        self.sent.append(sql)
        if sql.startswith("SELECT engine FROM system.tables"):
            return Answer([] if self.engine is None else [(self.engine,)])
        if sql == "EXISTS TABLE schema_migrations":
            return Answer([(int(self.engine is not None),)])
        if sql.startswith("SELECT version FROM schema_migrations"):
            return Answer([(v,) for v in self.recorded])
        raise AssertionError(f"unexpected query {sql}")

    def close(self) -> None:
        pass


DSN = "http://gpubill:secret@ch-s1r1:8123/gpubill"
ALL = [int(path.name[:4]) for path in MIGRATION_FILES]


@pytest.fixture
def server(monkeypatch):
    servers = []

    def serve(engine: str | None, recorded: list[int]) -> FakeServer:
        fake = FakeServer(engine, recorded)
        servers.append(fake)
        monkeypatch.setattr(connection.clickhouse_connect, "get_client", lambda **kwargs: fake)
        return fake

    monkeypatch.delenv("GPUBILL_CLICKHOUSE_CLUSTER", raising=False)
    return serve


def changes(fake: FakeServer) -> list[str]:
    return [sql for sql in fake.sent if not sql.startswith(("SELECT", "EXISTS"))]


def test_on_a_cluster_with_migrations_pending_a_process_refuses_and_applies_none(server):
    fake = server("ReplicatedReplacingMergeTree", ALL[:-2])  # the last two not applied
    with pytest.raises(SchemaNotReady) as refused:
        open_database(DSN, cluster="gpubill")
    assert str(refused.value) == ("2 migrations are pending on the cluster gpubill: "
                                  "run `gpubill db migrate --cluster gpubill` first")
    assert changes(fake) == []


def test_on_a_new_cluster_every_migration_is_pending(server, monkeypatch):
    fake = server(None, [])
    monkeypatch.setenv("GPUBILL_CLICKHOUSE_CLUSTER", "gpubill")  # the setting, read by open_database itself
    with pytest.raises(SchemaNotReady, match=rf"^{len(MIGRATION_FILES)} migrations are pending on the cluster gpubill"):
        open_database(DSN)
    assert changes(fake) == []


def test_on_a_migrated_cluster_a_process_opens_and_knows_its_cluster(server):
    fake = server("ReplicatedReplacingMergeTree", ALL)
    database = open_database(DSN, cluster="gpubill")
    assert database.cluster == "gpubill"
    assert changes(fake) == []


def test_a_cluster_schema_without_the_setting_is_refused_even_without_migrating(server):
    for migrate in (True, False):
        fake = server("ReplicatedReplacingMergeTree", ALL)
        with pytest.raises(SchemaNotReady, match="is a ClickHouse cluster's .*set GPUBILL_CLICKHOUSE_CLUSTER"):
            open_database(DSN, migrate=migrate)
        assert changes(fake) == []


def test_the_setting_on_a_single_servers_schema_is_refused(server):
    fake = server("ReplacingMergeTree", ALL)
    with pytest.raises(SchemaNotReady, match="is a single server's .*unset GPUBILL_CLICKHOUSE_CLUSTER"):
        open_database(DSN, cluster="gpubill")
    assert changes(fake) == []


def test_a_single_server_still_migrates_at_start_up(server):
    fake = server("ReplacingMergeTree", ALL[:-1])
    open_database(DSN, cluster="")
    assert changes(fake)[-1].startswith("INSERT INTO schema_migrations")  # the last migration applied
    assert not any("ON CLUSTER" in sql for sql in changes(fake))


def test_migrate_on_a_cluster_database_applies_the_cluster_form(server):
    fake = server(None, [])
    database = open_database(DSN, migrate=False, cluster="gpubill")
    applied = database.migrate()
    assert applied == [path.name for path in MIGRATION_FILES]
    creates = [sql for sql in changes(fake) if sql.startswith("CREATE TABLE")]
    assert creates and all(" ON CLUSTER gpubill" in sql for sql in creates)


def test_the_embedded_database_has_no_cluster(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBILL_CLICKHOUSE_CLUSTER", "gpubill")
    with pytest.raises(DsnInvalid, match="has no cluster"):
        open_database(f"chdb://{tmp_path / 'ch'}")
    assert not (tmp_path / "ch").exists()  # refused before it was opened


def test_the_setting_is_a_plain_name(monkeypatch):
    from gpubill.config import Settings
    from pydantic import ValidationError

    monkeypatch.setenv("GPUBILL_CLICKHOUSE_CLUSTER", "prod_1")
    assert Settings().clickhouse_cluster == "prod_1"
    monkeypatch.setenv("GPUBILL_CLICKHOUSE_CLUSTER", "prod-1")
    with pytest.raises(ValidationError):
        Settings()
    monkeypatch.delenv("GPUBILL_CLICKHOUSE_CLUSTER")
    assert Settings().clickhouse_cluster == ""


def test_a_database_opened_without_a_cluster_has_none():
    assert Database(dsn="chdb:///x", client=None).cluster == ""
