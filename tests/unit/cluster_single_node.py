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


def plain(directory: Path) -> dict:
    from warehouse.connection import open_database

    with open_database(f"chdb://{directory / 'ch'}") as database:
        return describe(database.query)


if __name__ == "__main__":
    mode, where = sys.argv[1], Path(sys.argv[2])
    print(json.dumps({"cluster": cluster, "plain": plain}[mode](where), default=str))
