"""The schema rendered for a ClickHouse cluster (warehouse/cluster.py, `gpubill db migrate --cluster`).

No ClickHouse server or Keeper runs here. The rendered DDL is held structurally against the
migrations, which this file parses on its own (tables, their final ORDER BY, ALTERs, views,
INSERTs), and its single-node form is executed on chDB in a child process
(tests/unit/cluster_single_node.py) beside a plain `migrate`, schema compared column by column.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import schemas
from warehouse.cluster import SHARDED, WHOLE, render_migrations
from warehouse.errors import ClusterSchemaError
from warehouse.migrations import apply_cluster, migrations

HERE = Path(__file__).parent
MIGRATIONS = sorted((Path(schemas.__file__).parent / "migrations").glob("[0-9][0-9][0-9][0-9]_*.sql"))
NAME = r"[a-z_][a-z0-9_]*"


# --- the migrations, read here without the renderer ------------------------------------------


def statements_of(path: Path) -> list[str]:
    text = re.sub(r"--[^\n]*", "", path.read_text(encoding="utf-8"))  # no '--' inside our strings
    return [" ".join(part.split()) for part in text.split(";") if part.strip()]


def order_columns(clause: str) -> list[str]:
    return [part.strip() for part in clause.strip("()").split(",")]


def read_migrations() -> dict:
    """What the migrations do, read with patterns of this file: tables created, their ORDER BY
    as the last migration leaves them, ALTERs by table, view bodies and INSERTs in order."""
    created, order_by, alters, views, inserts = set(), {}, [], [], []
    for path in MIGRATIONS:
        for statement in statements_of(path):
            if match := re.match(rf"CREATE TABLE (?:IF NOT EXISTS )?({NAME}) \(", statement):
                created.add(match.group(1))
                order_by[match.group(1)] = order_columns(re.search(r"ORDER BY (\([^()]*\)|\w+)", statement).group(1))
            elif match := re.match(rf"RENAME TABLE (.*)", statement):
                for old, new in re.findall(rf"({NAME}) TO ({NAME})", match.group(1)):
                    order_by[new] = order_by.pop(old)
            elif match := re.match(rf"DROP TABLE (?:IF EXISTS )?({NAME})$", statement):
                del order_by[match.group(1)]
            elif match := re.match(rf"ALTER TABLE ({NAME}) (.*)", statement):
                alters.append((match.group(1), match.group(2)))
                if sort := re.search(r"MODIFY ORDER BY (\([^()]*\))", statement):
                    order_by[match.group(1)] = order_columns(sort.group(1))
            elif match := re.match(rf"CREATE VIEW (?:IF NOT EXISTS )?({NAME}) AS (.*)", statement):
                views.append((match.group(1), match.group(2)))
            elif statement.startswith("INSERT INTO"):
                inserts.append(statement)
    return {"created": created, "order_by": order_by, "alters": alters, "views": views, "inserts": inserts}


SOURCE = read_migrations()
RENDERED = [" ".join(s.split()) for _version, _name, statements in render_migrations("gpubill") for s in statements]


def rendered_matching(pattern: str) -> list[re.Match]:
    return [m for s in RENDERED if (m := re.match(pattern, s))]


# --- the catalogue --------------------------------------------------------------------------


def test_every_table_a_migration_creates_is_in_the_catalogue_once_and_nothing_else_is():
    created = SOURCE["created"] | {"schema_migrations"}  # created by warehouse/migrations.py itself
    assert not set(SHARDED) & set(WHOLE)
    assert set(SHARDED) | set(WHOLE) == created
    assert len(created) == 44  # 46 CREATE TABLE in 0001 … 0030 name 43 tables (3 made twice), and schema_migrations


def test_readings_and_rated_rows_go_by_card_and_money_by_tenant():
    for table in ("readings_usage", "readings_power", "rated_seconds", "rated_hours", "conflicts", "rerate_seconds"):
        assert distributed_of(table)[1] == "cityHash64(gpu_uuid)", table
    for table in ("invoices", "invoice_lines", "allocations", "write_offs", "budgets", "live_spend"):
        assert distributed_of(table)[1] == "cityHash64(tenant)", table
    # dedup keys with neither card nor tenant: held whole, never sharded
    for table in ("payments", "credit_notes", "credit_note_lines", "invoice_journal", "corrections", "deadletters"):
        assert table in WHOLE and not any(c in ("gpu_uuid", "tenant") for c in SOURCE["order_by"][table]), table


# --- the rendered statements ------------------------------------------------------------------


def test_every_statement_but_an_insert_runs_on_the_cluster():
    for statement in RENDERED:
        if statement.startswith("INSERT INTO"):
            assert "ON CLUSTER" not in statement  # INSERT has no ON CLUSTER: it runs once, through the names
            continue
        head = statement.split(" AS ")[0].split("(")[0]
        assert head.count(" ON CLUSTER gpubill") == 1, statement[:120]


def test_the_inserts_are_the_migrations_own_once_each_in_order():
    assert [s for s in RENDERED if s.startswith("INSERT INTO")] == SOURCE["inserts"]
    assert len(SOURCE["inserts"]) == 7  # 0008 ×2, 0011, 0020 ×2, 0026, 0027


def test_every_engine_is_replicated_or_distributed():
    engines = [m.group(1) for s in RENDERED for m in re.finditer(r"ENGINE = (\w+)", s)]
    assert engines and all(e == "Distributed" or re.fullmatch(r"Replicated\w*MergeTree", e) for e in engines), engines
    assert {"ReplicatedMergeTree", "ReplicatedReplacingMergeTree", "ReplicatedAggregatingMergeTree"} <= set(engines)


def test_every_replicated_path_has_the_macros_and_is_its_tables_alone():
    made = rendered_matching(rf"CREATE TABLE (?:IF NOT EXISTS )?({NAME}) ON CLUSTER gpubill \( .* ENGINE = "
                             r"Replicated\w*MergeTree\('([^']*)', '([^']*)'")
    assert len(made) == 46 + 1  # each of the 46 CREATE TABLE statements of 0001 … 0030, and schema_migrations
    paths = [m.group(2) for m in made]
    assert len(set(paths)) == len(paths)
    for m in made:
        table, path, replica = m.groups()
        assert replica == "{replica}"
        if table.endswith("_local"):
            assert path.startswith("/clickhouse/gpubill/tables/{shard}/{database}/" + table), path
        else:
            assert path.startswith("/clickhouse/gpubill/tables/all/{database}/" + table), path
    # the successors of renamed tables: the renamed one still holds the first path in Keeper
    assert "/clickhouse/gpubill/tables/{shard}/{database}/invoices_local_0020" in paths
    assert "/clickhouse/gpubill/tables/all/{database}/invoice_journal_0026" in paths


def distributed_of(table: str) -> tuple[str, str]:
    """(the local table, the sharding key) of the last Distributed table named `table`."""
    found = rendered_matching(rf"CREATE TABLE (?:IF NOT EXISTS )?{table} ON CLUSTER gpubill AS ({NAME}) "
                              rf"ENGINE = Distributed\(gpubill, currentDatabase\(\), ({NAME}), (.+)\)$")
    assert found, table
    local, local_again, key = found[-1].groups()
    assert local == local_again == f"{table}_local"
    return local, key


def test_every_sharded_table_has_a_distributed_twin_keyed_by_columns_of_its_order_by():
    for table, order_by in SOURCE["order_by"].items():  # the tables the last migration leaves
        if table not in SHARDED:
            assert not rendered_matching(rf"CREATE TABLE (?:IF NOT EXISTS )?{table}_local "), table
            continue
        _local, key = distributed_of(table)
        columns = set(re.findall(r"\b([a-z_][a-z0-9_]*)\b(?!\s*\()", key))
        assert columns and columns <= set(order_by), (table, key, order_by)


def test_an_alter_of_a_sharded_table_goes_to_its_local_table_and_column_changes_to_both():
    for table, commands in SOURCE["alters"]:
        # a replicated table keeps its window of inserted blocks in Keeper, under the replicated name
        commands = commands.replace("non_replicated_deduplication_window", "replicated_deduplication_window")
        if table not in SHARDED:
            assert f"ALTER TABLE {table} ON CLUSTER gpubill {commands}" in RENDERED
            continue
        assert f"ALTER TABLE {table}_local ON CLUSTER gpubill {commands}" in RENDERED
        if "COLUMN" in commands:
            assert f"ALTER TABLE {table} ON CLUSTER gpubill {commands}" in RENDERED
        else:  # settings and sort keys are the local table's; a Distributed table has neither
            assert not any(s.startswith(f"ALTER TABLE {table} ON CLUSTER") and "SETTING" in s for s in RENDERED)


def test_views_read_the_names_the_application_reads():
    rendered = [(m.group(1), m.group(2)) for m in rendered_matching(rf"CREATE VIEW IF NOT EXISTS ({NAME}) ON CLUSTER gpubill AS (.*)")]
    assert rendered == SOURCE["views"]
    assert not any("_local" in body for _name, body in rendered)


def test_a_renamed_sharded_table_gets_a_distributed_table_over_its_renamed_local_one():
    at = RENDERED.index("RENAME TABLE invoices_local TO invoices_0002_local ON CLUSTER gpubill")
    assert RENDERED[at + 1:at + 3] == [
        "DROP TABLE invoices ON CLUSTER gpubill SYNC",
        "CREATE TABLE invoices_0002 ON CLUSTER gpubill AS invoices_0002_local "
        "ENGINE = Distributed(gpubill, currentDatabase(), invoices_0002_local, cityHash64(tenant))",
    ]


# --- what the renderer refuses and translates --------------------------------------------------


def with_migration(sql: str) -> list[tuple[int, str, str]]:
    return migrations() + [(9999, "9999_new.sql", sql)]


@pytest.mark.parametrize("sql, why", [
    ("ALTER TABLE readings_usage DELETE WHERE 1", "ALTER command"),
    ("CREATE MATERIALIZED VIEW mv TO x AS SELECT 1", "materialized view"),
    ("OPTIMIZE TABLE readings_usage FINAL", "does not know"),
    ("CREATE TABLE shiny (a String) ENGINE = ReplacingMergeTree ORDER BY a", "neither SHARDED nor WHOLE"),
    ("CREATE TABLE t (a String) ENGINE = Memory", "MergeTree-family"),
    ("ALTER TABLE nowhere ADD COLUMN a String", "does not exist"),
])
def test_a_statement_it_cannot_render_is_refused_naming_migration_and_statement(sql, why):
    with pytest.raises(ClusterSchemaError) as refused:
        render_migrations("gpubill", with_migration("-- a comment\n\n" + sql + ";"))
    message = str(refused.value)
    assert "migration 9999_new.sql statement 1 (" in message and why in message, message
    assert "\n" not in message


def test_a_sharding_key_outside_the_new_order_by_is_refused():
    migration = with_migration("DROP TABLE budgets;\nCREATE TABLE budgets (ref String, tenant String) "
                               "ENGINE = ReplacingMergeTree ORDER BY ref")
    with pytest.raises(ClusterSchemaError, match=r"9999_new.sql statement 2 .*tenant, not in its ORDER BY \(ref\)"):
        render_migrations("gpubill", migration)


def test_non_replicated_deduplication_window_becomes_the_replicated_one_on_the_local_table_only():
    rendered = render_migrations("gpubill", with_migration(
        "ALTER TABLE readings_usage MODIFY SETTING non_replicated_deduplication_window = 1000;\n"
        "ALTER TABLE tenants MODIFY SETTING merge_selector_base = 20, non_replicated_deduplication_window = 100"))
    assert rendered[-1] == (9999, "9999_new.sql", [
        "ALTER TABLE readings_usage_local ON CLUSTER gpubill\n    MODIFY SETTING replicated_deduplication_window = 1000",
        "ALTER TABLE tenants ON CLUSTER gpubill\n    MODIFY SETTING merge_selector_base = 20, "
        "replicated_deduplication_window = 100",
    ])


@pytest.mark.parametrize("cluster", ["a-b", "x; DROP TABLE y", "", "{cluster}"])
def test_a_cluster_name_that_is_not_an_identifier_is_refused(cluster):
    with pytest.raises(ClusterSchemaError, match="a cluster name is letters, digits and '_'"):
        render_migrations(cluster)


# --- applying ---------------------------------------------------------------------------------


class RecordingDatabase:
    """A server that answers `done` applied versions and keeps what it is sent."""

    def __init__(self, done: set[int]) -> None:
        self.done, self.sent = done, []

    def command(self, sql: str, parameters: dict | None = None, settings: dict | None = None) -> None:
        self.sent.append((sql, parameters, settings))

    def query(self, sql: str) -> list[tuple]:
        assert sql == "SELECT version FROM schema_migrations FINAL"
        return [(v,) for v in sorted(self.done)]


def test_the_catalogue_naming_a_table_no_migration_creates_is_refused(monkeypatch):
    monkeypatch.setitem(WHOLE, "tenant_notes", "a table of a migration that was never written")
    with pytest.raises(ClusterSchemaError, match="catalogue names tables no migration creates: tenant_notes$"):
        render_migrations("gpubill")


def test_apply_cluster_on_an_up_to_date_cluster_sends_only_the_record_table_statement():
    database = RecordingDatabase(done={version for version, _name, _sql in migrations()})
    assert apply_cluster(database, "gpubill") == []
    assert [sql.split(" ON CLUSTER")[0] for sql, _p, _s in database.sent] == [
        "CREATE TABLE IF NOT EXISTS schema_migrations"]


def test_apply_cluster_sends_the_pending_migrations_and_records_each():
    database = RecordingDatabase(done=set(range(1, 29)))  # 0001 … 0028 applied
    applied = apply_cluster(database, "gpubill")
    assert applied[:2] == ["0029_energy_grading.sql", "0030_rerate_seconds.sql"]  # and any shipped since
    records = [p for sql, p, _s in database.sent if sql.startswith("INSERT INTO schema_migrations")]
    assert records[:2] == [{"version": 29, "name": "0029_energy_grading.sql"}, {"version": 30, "name": "0030_rerate_seconds.sql"}]
    assert database.sent[0][0].startswith("CREATE TABLE IF NOT EXISTS schema_migrations ON CLUSTER gpubill")
    assert all(s == {"distributed_foreground_insert": 1, "distributed_product_mode": "global"} for _q, _p, s in database.sent)
    assert not any("rated_hours" in sql and "CREATE TABLE" in sql for sql, _p, _s in database.sent)  # 0008's, applied


# --- the command ------------------------------------------------------------------------------


def migrate(dsn: str, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpubill.cli", "db", "migrate", *args], capture_output=True, text=True, timeout=60,
        env={**os.environ, "GPUBILL_CLICKHOUSE": dsn, "NO_COLOR": "1", "COLUMNS": "300"}, cwd=cwd,
    )


def test_print_writes_the_statements_without_connecting(tmp_path):
    done = migrate("http://gpubill:pw-not-shown@127.0.0.1:1/gpubill", tmp_path, "--cluster", "gpubill", "--print")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "-- schema_migrations"
    assert [line[3:] for line in lines if line.startswith("-- ")][1:] == [path.name for path in MIGRATIONS]
    assert done.stdout.count(" ON CLUSTER gpubill") >= 140 and "pw-not-shown" not in done.stdout + done.stderr


def test_cluster_on_the_embedded_database_is_refused_in_one_line(tmp_path):
    done = migrate(f"chdb://{tmp_path}/ch", tmp_path, "--cluster", "gpubill")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == ("error: --cluster gpubill: the embedded database (chDB) has no cluster; point "
                                   "GPUBILL_CLICKHOUSE at one of the cluster's servers (http://user:pass@host:8123/gpubill)")
    assert not (tmp_path / "ch").exists()


def test_print_alone_is_a_usage_error(tmp_path):
    done = migrate(f"chdb://{tmp_path}/ch", tmp_path, "--print")
    assert done.returncode == 1 and "add --cluster NAME" in done.stderr and not (tmp_path / "ch").exists()


# --- the single-node form on chDB -------------------------------------------------------------


def test_the_single_node_form_runs_on_chdb_with_the_plain_schema_and_duplicates_meet(tmp_path):
    started = time.monotonic()
    script = str(HERE / "cluster_single_node.py")
    children = {mode: subprocess.Popen([sys.executable, script, mode, str(tmp_path / mode)], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True) for mode in ("cluster", "plain")}
    results = {}
    for mode, child in children.items():
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err[-2000:]
        results[mode] = json.loads(out.splitlines()[-1])
    cluster, plain = results["cluster"], results["plain"]
    assert time.monotonic() - started < 60

    assert cluster["clusters"] == [["gpubill", 1, 1]]  # one shard, this process
    tables = {name: engine for name, engine in plain["engines"].items() if engine.endswith("MergeTree")}
    assert set(tables) == set(SHARDED) | set(WHOLE)  # every table of the catalogue, none renamed away left
    expected_names = set(plain["engines"]) | {f"{name}_local" for name in tables if name in SHARDED}
    assert set(cluster["engines"]) == expected_names  # no leftovers (invoices_0002 …), nothing missing
    for name, engine in tables.items():
        if name in SHARDED:
            assert cluster["engines"][name] == "Distributed"
            assert cluster["engines"][f"{name}_local"] == engine
            assert cluster["columns"][f"{name}_local"] == plain["columns"][name], name
            assert cluster["columns"][name] == plain["columns"][name], name  # the Distributed table's, too
        else:
            assert cluster["engines"][name] == engine
            assert cluster["columns"][name] == plain["columns"][name], name
    views = {name for name, engine in plain["engines"].items() if engine == "View"}
    assert views and all(cluster["columns"][v] == plain["columns"][v] for v in views)
    assert set(cluster["views"]) == views  # each one ran
    assert cluster["executed"] == len(RENDERED) > 140

    reads = cluster["reads"]
    assert reads["readings_stored"] == [[3]]                     # e1 twice (two inserts), e2 once ...
    assert reads["readings"] == [["GPU-a", 7], ["GPU-b", 8]]     # ... and FINAL through readings_usage: one each
    assert reads["invoices"] == [["DRAFT-1", "GB-2026-000001", "issued"]]  # the later updated_at wins
    assert reads["v_invoices"] == [["DRAFT-1", "issued"]]
    assert reads["tenants"] == [["t1", "suspended"]]
