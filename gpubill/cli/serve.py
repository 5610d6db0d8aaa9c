"""`gpubill serve`: the tenant API and web page (tenant_api/) in a process of their own.

For server deployments (GPUBILL_CLICKHOUSE names a ClickHouse server, or the gateway); with
the embedded database, `gpubill up` serves the same API beside the worker, since one
process holds that database.
"""

from __future__ import annotations

import logging

from typing import Optional

import typer

from gpubill.cli.common import connect, read_rules
from gpubill.config import Settings, load_settings
from gpubill.logs import setup_logging


def default_listen(settings: Settings) -> str:
    return f"127.0.0.1:{settings.http_port}"


def open_reads(settings: Settings, database=None):
    """The API's database access: the given (shared) database, or for a server DSN
    GPUBILL_API_DB_CONNECTIONS clients (the first applies pending migrations)."""
    from tenant_api.reads import Reads
    from warehouse.connection import open_database

    if database is not None:
        return Reads([database])
    first = connect(settings)
    if first.embedded:
        return Reads([first], close=True)
    databases = [first]
    try:
        for _ in range(settings.api_db_connections - 1):
            databases.append(open_database(settings.clickhouse, migrate=False, cluster=settings.clickhouse_cluster))
    except BaseException:
        for database in databases:
            database.close()
        raise
    return Reads(databases, close=True)


def announce(url: str, host: str) -> None:
    """Where the API listens, as a log line (serve and up log in one format: gpubill/logs.py)."""
    log = logging.getLogger("gpubill.serve")
    log.info("the tenant API and web page on %s/ (OpenAPI at %s/openapi.json, keys from `gpubill key create`)", url, url)
    if host not in ("127.0.0.1", "::1", "localhost"):
        log.warning("reachable from the network without TLS: API keys travel in clear; put a TLS proxy in front "
                    "(client addresses are then the proxy's, see docs/api.md)")


def serve(
    listen: Optional[str] = typer.Option(None, "--listen", help="host:port to serve on (default 127.0.0.1:GPUBILL_HTTP_PORT, i.e. 127.0.0.1:8080)."),
) -> None:
    """Serve the tenant API and web page until Ctrl-C (server deployments; embedded database: `gpubill up`)."""
    from pathlib import Path

    from tenant_api.app import create_app
    from tenant_api.server import ApiServer, RulesReloader

    settings = load_settings()
    setup_logging("INFO")
    rules = read_rules(settings)
    server = ApiServer(listen or default_listen(settings))
    reads = None
    try:
        reads = open_reads(settings)
        server.attach(create_app(settings, reads, RulesReloader(Path(settings.rules), rules)))
        announce(server.url, server.host)
        server.run()
    finally:
        server.socket.close()
        if reads is not None:
            reads.close()
