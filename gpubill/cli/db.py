"""The database: `gpubill db migrate` (its schema) and `gpubill clickhouse serve` (sharing chDB).

The schema's migrations are schemas/migrations/*.sql, applied by warehouse/migrations.py;
the gateway that serves the embedded database is gpubill/devenv/ch_gateway.py.
"""

from __future__ import annotations

from typing import Optional

import typer

from gpubill.cli.common import out
from gpubill.config import load_settings
from gpubill.logs import setup_logging

app = typer.Typer(help="The database schema: ClickHouse tables and views.", no_args_is_help=True)
clickhouse_app = typer.Typer(help="Share the embedded ClickHouse (chDB) between gpubill processes.",
                             no_args_is_help=True)


@app.command("migrate")
def db_migrate(
    cluster: Optional[str] = typer.Option(
        None, "--cluster", metavar="NAME",
        help="Apply the schema for the ClickHouse cluster NAME (remote_servers): ON CLUSTER, replicated "
             "tables, Distributed tables in front of the sharded ones (docs/deployment.md)."),
    print_ddl: bool = typer.Option(
        False, "--print", help="With --cluster: write the rendered statements to stdout, connect to nothing."),
) -> None:
    """Create or update gpubill's tables and views in the database GPUBILL_CLICKHOUSE names.

    Applies, oldest first, each schema migration (a numbered SQL file in schemas/migrations/)
    that the database has not had yet, and prints its name; says the schema is up to date
    when there is none. Safe to run again: applied migrations are recorded in the table
    schema_migrations and skipped.

    Every command that opens the database applies pending migrations by itself too. Run
    this one after installing or upgrading gpubill, before several processes start against
    one ClickHouse server, so that a single process changes the schema (compose.yaml's
    `migrate` service does this once, before the workers start).

    With --cluster NAME the server is one of the cluster NAME's: every statement runs ON
    CLUSTER NAME, so every server gets the schema (docs/deployment.md, "A ClickHouse cluster").
    Add --print to review the statements first. Without --cluster, GPUBILL_CLICKHOUSE_CLUSTER
    names the cluster when it is set; on a cluster this is the only command that migrates.
    """
    if cluster is None:
        settings = load_settings()
        cluster = settings.clickhouse_cluster or None
    if cluster is not None:
        _migrate_cluster(cluster, print_ddl)
        return
    if print_ddl:
        raise typer.BadParameter("--print shows the statements rendered for a cluster: add --cluster NAME",
                                 param_hint="--print")
    from warehouse.connection import open_database, redact
    from warehouse.migrations import migrations

    with open_database(settings.clickhouse, migrate=False, cluster="") as database:
        applied = database.migrate()
        where = redact(database.dsn)
    shipped = [name for _version, name, _sql in migrations()]
    _report(applied, f"to {where}", f"at {where}", shipped)


def _report(applied: list[str], to: str, at: str, shipped: list[str]) -> None:
    """Each migration applied, or that the schema is up to date (`shipped`: every migration's name)."""
    if applied:
        _say(f"applied {len(applied)} migration{'s' if len(applied) != 1 else ''} {to}:")
        for name in applied:
            _say(f"  {name}")
        return
    _say(f"schema up to date {at}: all {len(shipped)} migrations applied, the latest {shipped[-1]}")


def _migrate_cluster(cluster: str, print_ddl: bool) -> None:
    """`db migrate --cluster NAME [--print]`: render every migration for the cluster, then print or apply."""
    from warehouse.cluster import render_migrations
    from warehouse.connection import open_database, redact
    from warehouse.errors import ClusterSchemaError
    from warehouse.migrations import apply_cluster

    rendered = render_migrations(cluster)  # refuses a statement it cannot render before anything runs
    if print_ddl:
        for _version, name, statements in rendered:
            _say(f"-- {name}")
            for statement in statements:
                _say(f"{statement};")
        return
    settings = load_settings()
    if settings.clickhouse.startswith("chdb:"):
        raise ClusterSchemaError(f"--cluster {cluster}: the embedded database (chDB) has no cluster; point "
                             "GPUBILL_CLICKHOUSE at one of the cluster's servers (http://user:pass@host:8123/gpubill)")
    with open_database(settings.clickhouse, migrate=False, cluster=cluster) as database:
        applied = apply_cluster(database, cluster)
        where = redact(database.dsn)
    _report(applied, f"on cluster {cluster} via {where}", f"on cluster {cluster} via {where}",
            [name for _version, name, _statements in rendered[1:]])


def _say(line: str) -> None:
    """One line on stdout as it is: no markup, colours or wrapping in paths and DSNs."""
    out.print(line, markup=False, highlight=False, soft_wrap=True)


@clickhouse_app.command("serve")
def clickhouse_serve(
    listen: str = typer.Option("127.0.0.1:8123", help="host:port to serve on; keep it on loopback."),
) -> None:
    """Serve the embedded database over ClickHouse's HTTP interface to other gpubill processes.

    Holds the chDB database (the one process allowed) so that workers, scheduler and
    reports can share it (`gpubill up` serves its own the same way). Users: gpubill
    (read-write) and finance (read-only); their passwords are GPUBILL_GATEWAY_PASSWORD /
    GPUBILL_GATEWAY_FINANCE_PASSWORD, or are generated on the first start into
    GPUBILL_HOME/clickhouse-gateway.credentials (0600; never logged). The other commands
    find it by themselves (the 0600 record beside the database); `gpubill status
    --finance-url` prints the finance user's URL. Refuses SYSTEM, files,
    network and external engines for every user; limits body size, statement time and
    memory (GPUBILL_GATEWAY_MAX_*). No TLS, one statement at a time. Stops on SIGTERM or
    Ctrl-C after the statement in flight.
    """
    from gpubill.devenv.ch_gateway import serve

    settings = load_settings()
    setup_logging("INFO")
    serve(settings, listen)
