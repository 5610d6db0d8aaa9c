"""The schema's migrations (schemas/migrations/NNNN_name.sql), applied in order, once each.

Applied versions are recorded in `schema_migrations`; applying is idempotent, so every
process may call `apply` at start-up and `gpubill db migrate` is the explicit way (compose
runs it once before the workers start). On a cluster (GPUBILL_CLICKHOUSE_CLUSTER) only
`gpubill db migrate --cluster NAME` applies them (`apply_cluster`); every other process checks
that none is `pending` (warehouse/connection.py).
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")

# The record of applied migrations; warehouse/cluster.py renders the same statement for a cluster.
SCHEMA_MIGRATIONS_DDL = (
    "CREATE TABLE IF NOT EXISTS schema_migrations (version UInt32, name String, "
    "applied_at DateTime64(3, 'UTC') DEFAULT now64(3)) ENGINE = ReplacingMergeTree ORDER BY version"
)


def migrations() -> list[tuple[int, str, str]]:
    """(version, file name, SQL) of every shipped migration, in order."""
    found = []
    for entry in resources.files("schemas").joinpath("migrations").iterdir():
        match = MIGRATION_NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found)


def split_statements(sql: str) -> list[str]:
    """Split a migration file into statements (no semicolons inside our DDL strings)."""
    lines = [line for line in sql.splitlines() if not line.strip().startswith("--")]
    return [stmt.strip() for stmt in "\n".join(lines).split(";") if stmt.strip()]


def pending(database: Any) -> list[str]:
    """The names of the shipped migrations `database` has not recorded, oldest first; changes
    nothing (all of them where schema_migrations does not exist yet)."""
    if not int(database.query("EXISTS TABLE schema_migrations")[0][0]):
        return [name for _version, name, _sql in migrations()]
    done = {row[0] for row in database.query("SELECT version FROM schema_migrations FINAL")}
    return [name for version, name, _sql in migrations() if version not in done]


def apply(database: Any) -> list[str]:
    """Apply the shipped migrations `database` has not recorded yet; returns the names applied."""
    database.command(SCHEMA_MIGRATIONS_DDL)
    done = {row[0] for row in database.query("SELECT version FROM schema_migrations")}
    applied = []
    for version, name, sql in migrations():
        if version in done:
            continue
        for statement in split_statements(sql):
            database.command(statement)
        # A statement, not the client's insert(): that would import pandas (≈ 0.3 s) first.
        database.command("INSERT INTO schema_migrations (version, name) SELECT {version:UInt32}, {name:String}",
                         {"version": version, "name": name})
        applied.append(name)
    return applied


def apply_cluster(database: Any, cluster: str) -> list[str]:
    """Apply, ON CLUSTER `cluster`, the shipped migrations rendered for it (warehouse/cluster.py)
    that `database`'s server has not recorded; returns the names applied. Idempotent like `apply`:
    the record is schema_migrations, itself replicated on every server."""
    from warehouse.cluster import MIGRATION_SETTINGS, render_migrations

    rendered = render_migrations(cluster)  # all of it first: a migration it cannot render stops nothing half-way
    for statement in rendered[0][2]:
        database.command(statement, settings=MIGRATION_SETTINGS)
    done = {row[0] for row in database.query("SELECT version FROM schema_migrations FINAL")}
    applied = []
    for version, name, statements in rendered[1:]:
        if version in done:
            continue
        for statement in statements:
            database.command(statement, settings=MIGRATION_SETTINGS)
        database.command("INSERT INTO schema_migrations (version, name) SELECT {version:UInt32}, {name:String}",
                         {"version": version, "name": name}, settings=MIGRATION_SETTINGS)
        applied.append(name)
    return applied
