"""The cluster schema's single-node form, run on chDB in a child process (one engine per process).

`python tests/unit/cluster_single_node.py cluster DIR` renders every migration for the cluster
`gpubill` (warehouse/cluster.py), turns it into its single-node form and executes it, in order,
on a fresh chDB at DIR, given a config of one cluster `gpubill` of one shard, this process
(`tcp_port` makes clickhouse-local take `localhost:9000` for itself, so the Distributed
tables read and write the local ones without a network), and the macros {shard} and {replica}.
The single-node form is the rendered text with
  - ` ON CLUSTER gpubill` removed (no Keeper: no distributed DDL queue);
  - `Replicated<Kind>MergeTree('<path>', '{replica}'[, args])` → `<Kind>MergeTree([args])`
    (no Keeper: no replication);
  - `Distributed(gpubill, currentDatabase(), <name>_local, <key>)` kept as it is.
Then it writes rows, duplicates among them, through the names the application uses and reads
them back. `plain DIR` applies the migrations as `gpubill db migrate` does. Each prints one JSON
object: the tables' engines and columns, the views' columns and what the reads returned.
`mutations DIR` builds the same cluster schema, writes rows through the Distributed names and
runs the application's own deletes (usage/rollup.py, usage/rerating.py, reports/retention.py,
billing/invoice_store.py, billing/credit_notes.py) through a `Database` whose cluster is
`gpubill`: their statements as sent, then in single-node form, and what the names read after.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

CONFIG = """<clickhouse>
  <tcp_port>9000</tcp_port>
  <remote_servers><gpubill><shard><replica><host>localhost</host><port>9000</port></replica></shard></gpubill>
  </remote_servers>
  <macros><shard>01</shard><replica>ch-s1r1</replica></macros>
</clickhouse>
"""

REPLICATED = re.compile(r"Replicated(\w*MergeTree)\('[^']*', '\{replica\}'(?:, )?")

# Rows written through the application's names, each twice or with a later version: FINAL
# must give one row of each key (the duplicate met its twin on its shard).
WRITES = [
    "INSERT INTO readings_usage (event_id, ts, second, site, node, gpu_uuid, gpu_model, tenant, instance, util_pct, "
    "mem_used_mib, src_partition, src_offset, ingested_at) VALUES "
    "('e1', '', '2026-12-01 00:00:00', 's', 'n', 'GPU-a', 'H100', 't1', 'i', 50, 1, 0, 7, now64(3)), "
    "('e2', '', '2026-12-01 00:00:01', 's', 'n', 'GPU-b', 'H100', 't2', 'i', 60, 1, 1, 8, now64(3))",
    # the first reading again, in an insert of its own (a worker's retry): a second row stored
    "INSERT INTO readings_usage (event_id, ts, second, site, node, gpu_uuid, gpu_model, tenant, instance, util_pct, "
    "mem_used_mib, src_partition, src_offset, ingested_at) VALUES "
    "('e1', '', '2026-12-01 00:00:00', 's', 'n', 'GPU-a', 'H100', 't1', 'i', 50, 1, 0, 7, now64(3))",
    "INSERT INTO invoices (id, number, year, seq, tenant, period, status, revision, issued_at, updated_at, currency, "
    "subtotal, credit_used, net, tax, total, vat_rate) VALUES "
    "('DRAFT-1', '', 0, 0, 't1', '2026-11', 'draft', 1, now64(3), '2026-12-01 00:00:00', 'CNY', 10, 0, 10, 1.3, 11.3, 0.13), "
    "('DRAFT-1', 'GB-2026-000001', 2026, 1, 't1', '2026-11', 'issued', 1, now64(3), '2026-12-02 00:00:00', 'CNY', "
    "10, 0, 10, 1.3, 11.3, 0.13)",
    "INSERT INTO tenants (tenant, display_name, status, created_at, updated_at) VALUES "
    "('t1', 'One', 'active', now64(3), '2026-12-01 00:00:00'), ('t1', 'One', 'suspended', now64(3), '2026-12-02 00:00:00')",
]
READS = {
    "readings": "SELECT gpu_uuid, src_offset FROM readings_usage FINAL ORDER BY gpu_uuid",
    "readings_stored": "SELECT count() FROM readings_usage_local",
    "invoices": "SELECT id, number, status FROM invoices FINAL",
    "v_invoices": "SELECT id, status FROM v_invoices",
    "tenants": "SELECT tenant, status FROM tenants FINAL",
}


def single_node(statement: str) -> str:
    """The single-node form of one rendered statement (module docstring)."""
    return REPLICATED.sub(r"\1(", statement.replace(" ON CLUSTER gpubill", ""))


def describe(run) -> dict:
    """Engines and columns of every table and view in the current database."""
    tables = {name: engine for name, engine in run("SELECT name, engine FROM system.tables WHERE database = currentDatabase()")}
    columns: dict[str, list] = {}
    for table, name, type_, kind, expression in run(
            "SELECT table, name, type, default_kind, default_expression FROM system.columns "
            "WHERE database = currentDatabase() ORDER BY table, position"):
        columns.setdefault(table, []).append([name, type_, kind, expression])
    return {"engines": tables, "columns": columns}


def cluster(directory: Path) -> dict:
    import chdb

    from warehouse.cluster import MIGRATION_SETTINGS, render_migrations

    config = directory / "config.xml"
    directory.mkdir(parents=True, exist_ok=True)
    config.write_text(CONFIG, encoding="utf-8")
    connection = chdb.connect(f"{directory / 'ch'}?config-file={config}")
    cursor = connection.cursor()

    def run(sql: str) -> list:
        cursor.execute(sql)
        return [list(row) for row in cursor.fetchall()]

    for name, value in MIGRATION_SETTINGS.items():
        run(f"SET {name} = {value!r}")
    executed = 0
    for _version, _name, statements in render_migrations("gpubill"):
        for statement in statements:
            run(single_node(statement))
            executed += 1
    out = describe(run)
    for write in WRITES:
        run(write)
    out["reads"] = {key: run(sql) for key, sql in READS.items()}
    out["views"] = {name: run(f"SELECT count() FROM {name}") for name, engine in out["engines"].items() if engine == "View"}
    out["clusters"] = run("SELECT cluster, shard_num, is_local FROM system.clusters")
    out["executed"] = executed
    return out


MUTATION_ROWS = [
    # rated_hours of 2026-11-30 23:00Z in generations 1 (superseded) and 2 (published), two cards
    "INSERT INTO rated_hours (period, hour, generation, gpu_uuid, tenant) VALUES "
    "('2026-11', '2026-11-30 23:00:00', 1, 'GPU-a', 't1'), ('2026-11', '2026-11-30 23:00:00', 1, 'GPU-b', 't2'), "
    "('2026-11', '2026-11-30 23:00:00', 2, 'GPU-a', 't1'), ('2026-11', '2026-11-30 23:00:00', 2, 'GPU-b', 't2')",
    "INSERT INTO rollup_runs (period, hour, generation) VALUES ('2026-11', '2026-11-30 23:00:00', 2)",
    "INSERT INTO rerate_seconds (run, gpu_uuid) VALUES (7, 'GPU-a'), (7, 'GPU-b'), (8, 'GPU-a')",
    # readings of 2026-11-15, 2026-12-01 12:00 and 2026-12-05 (partitions 202611, 202612)
    "INSERT INTO readings_usage (event_id, second, gpu_uuid) VALUES ('n', '2026-11-15 00:00:00', 'GPU-a'), "
    "('d1', '2026-12-01 12:00:00', 'GPU-b'), ('d5', '2026-12-05 00:00:00', 'GPU-a')",
    # lines of two invoices, of which only DRAFT-1 revision 2 has a header
    "INSERT INTO invoices (id, revision, tenant, period) VALUES ('DRAFT-1', 2, 't1', '2026-11')",
    "INSERT INTO invoice_lines (id, revision, tenant, period) VALUES ('DRAFT-1', 1, 't1', '2026-11'), "
    "('DRAFT-1', 2, 't1', '2026-11'), ('DRAFT-9', 1, 't2', '2026-11')",
    "INSERT INTO credit_notes (number) VALUES ('CN-1')",
    "INSERT INTO credit_note_lines (number) VALUES ('CN-1'), ('CN-2')",
]
MUTATION_READS = {
    "rated_hours": "SELECT gpu_uuid, generation FROM rated_hours ORDER BY gpu_uuid, generation",
    "rerate_seconds": "SELECT run, gpu_uuid FROM rerate_seconds ORDER BY run, gpu_uuid",
    "readings_usage": "SELECT event_id FROM readings_usage ORDER BY event_id",
    "invoice_lines": "SELECT id, revision FROM invoice_lines ORDER BY id, revision",
    "credit_note_lines": "SELECT number FROM credit_note_lines ORDER BY number",
}


class SingleNodeClient:
    """A clickhouse-connect client that sends every statement in its single-node form and
    keeps the statements as the application sent them."""

    def __init__(self, client) -> None:
        self.client, self.sent = client, []

    def command(self, sql: str, parameters=None, settings=None):
        self.sent.append(sql)
        return self.client.command(single_node(sql), parameters=parameters, settings=settings)

    def __getattr__(self, name: str):
        return getattr(self.client, name)


def mutations(directory: Path) -> dict:
    from clickhouse_connect.driver._chdbclient import ChdbClient

    from billing.credit_notes import delete_stray_credit_note_lines
    from billing.invoice_store import delete_stray_lines
    from reports.retention import _drop
    from usage.rerating import drop_run
    from usage.rollup import drop_superseded
    from warehouse.cluster import MIGRATION_SETTINGS, render_migrations
    from warehouse.connection import Database

    config = directory / "config.xml"
    directory.mkdir(parents=True, exist_ok=True)
    config.write_text(CONFIG, encoding="utf-8")
    client = ChdbClient(path=str(directory / "ch"), chdb_options={"config-file": str(config)})
    for _version, _name, statements in render_migrations("gpubill"):
        for statement in statements:
            client.command(single_node(statement), settings=MIGRATION_SETTINGS)
    for write in MUTATION_ROWS:
        client.command(write, settings=MIGRATION_SETTINGS)
    recording = SingleNodeClient(client)
    db = Database(dsn=f"chdb://{directory / 'ch'}", client=recording, cluster="gpubill")
    out: dict = {"before": {key: db.query(sql) for key, sql in MUTATION_READS.items()}}
    try:  # what the application sent before: a Distributed table takes no DELETE
        client.command("DELETE FROM rated_hours WHERE generation = 1")
        out["distributed_delete"] = "accepted"
    except Exception as exc:  # noqa: BLE001 - its message is the result
        out["distributed_delete"] = str(exc)
    drop_superseded(db, ["2026-11"])
    drop_run(db, 7)
    nov, dec, dec2 = 1793491200, 1796083200, 1796169600  # 2026-11-01, 2026-12-01, 2026-12-02 00:00Z
    _drop(db, "readings_usage", "2026-11", nov, dec)    # all of 202611: DROP PARTITION
    _drop(db, "readings_usage", "2026-12", dec, dec2)   # a day of 202612: ALTER … DELETE IN PARTITION
    out["stray_lines"] = delete_stray_lines(db)
    out["stray_credit_note_lines"] = delete_stray_credit_note_lines(db)
    out["sent"] = recording.sent
    out["after"] = {key: db.query(sql) for key, sql in MUTATION_READS.items()}
    return out


def plain(directory: Path) -> dict:
    from warehouse.connection import open_database

    with open_database(f"chdb://{directory / 'ch'}") as database:
        return describe(database.query)


if __name__ == "__main__":
    mode, where = sys.argv[1], Path(sys.argv[2])
    print(json.dumps({"cluster": cluster, "plain": plain, "mutations": mutations}[mode](where), default=str))
