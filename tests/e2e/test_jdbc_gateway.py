"""Issue 36: a BI tool reads through the gateway with the official ClickHouse JDBC driver
(com.clickhouse:clickhouse-jdbc, what DBeaver, Metabase and Superset use) as `finance`:
connect, DatabaseMetaData, plain and prepared statements and every query of docs/finance.md.

tests/jdbc/GatewayJdbcCheck.java does what the tool does, one `STEP name OK|FAIL …` line a
step, run by Java's single-file source launcher against the billed database of
tests/unit/test_finance_docs.py (the same gateway fixture). Each query's row count is held
to what clickhouse-connect, another client, reads through the same gateway; the prepared
statement's figures are worked out by hand. Skipped only where Java or Maven is missing,
and never in CI (CI=true), where that fails.

Both modes of the driver: its default (v2) and its version-1 compatibility mode (the system
property clickhouse.jdbc.v1=true). v1 asks for ClickHouse's own block compression, with
CityHash checksums, which the gateway does not write: it connects with compress=0.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from gpubill.devenv.kafka_install import JavaMissing, find_java
from tests.jdbc.driver import DriverUnavailable, driver_jars
from tests.unit.test_finance_docs import billed, billed_gateway, queries  # noqa: F401 - fixtures

CHECK = Path(__file__).parents[1] / "jdbc" / "GatewayJdbcCheck.java"
STEP = re.compile(r"^STEP (.+?) (OK|FAIL) (.*)$")


@pytest.fixture(scope="module")
def jdbc() -> tuple[str, Path]:
    """(java, the driver's jar directory), or a skip (a failure in CI)."""
    try:
        return find_java(), driver_jars()
    except (JavaMissing, DriverUnavailable) as exc:
        if os.environ.get("CI") == "true":
            raise RuntimeError(f"the JDBC driver test must run in CI: {exc}") from None
        pytest.skip(f"no Java 17 or Maven here: {exc}")


def run_check(jdbc, gateway, tmp_path: Path, url_suffix: str = "", *mode: str) -> dict[str, tuple[str, str]]:
    java, jars = jdbc
    finance = urlsplit(gateway.finance_dsn)  # the password is URL-safe (token_urlsafe)
    sql = tmp_path / "queries.sql"
    sql.write_text("\n-- next\n".join(q.strip() for q in queries()), encoding="utf-8")
    url = f"jdbc:clickhouse://127.0.0.1:{finance.port}/{url_suffix}"
    done = subprocess.run([java, "-cp", f"{jars}/*", str(CHECK), url, "finance", finance.password, str(sql), *mode],
                          capture_output=True, text=True, timeout=120, check=False)
    steps = {}
    for line in done.stdout.splitlines():
        match = STEP.match(line)
        if match:
            steps[match.group(1)] = (match.group(2), match.group(3))
    assert steps and re.search(rf"^DONE \d+/{len(steps)}$", done.stdout, re.MULTILINE), done.stdout + done.stderr[-2000:]
    return steps


@pytest.mark.parametrize("mode", ["v2", "v1"])
def test_the_jdbc_driver_reads_what_finance_reads(jdbc, billed_gateway, billed, tmp_path, mode):  # noqa: F811
    steps = run_check(jdbc, billed_gateway, tmp_path, *(("?compress=0", "v1") if mode == "v1" else ()))
    failed = {name: seen for name, (status, seen) in steps.items() if status != "OK"}
    assert not failed, failed
    assert len(steps) == 34  # connect, 11 metadata, 5 statements, 16 queries, close
    # the metadata a BI tool's tree shows
    assert "v_invoices" in steps["getTables views"][1] and "v_usage_by_tenant" in steps["getTables views"][1]
    assert steps["getColumns v_invoices"][1].startswith("19 rows: id,number,year,seq,tenant,period,status")
    assert "default" in steps["getSchemas"][1] + steps["getCatalogs"][1]
    assert re.match(r"\d+ rows: ", steps["getTypeInfo"][1]) and int(steps["getTypeInfo"][1].split()[0]) > 20
    # issued invoices: GB-2026-000001 191.65 + 000003 140.26 + 000004 59.86 + 000005 299.28 = 691.05
    # (000002 is voided, the May draft is not issued)
    assert steps["prepared"][1] == "1 rows, columns 2, first n=4|total=691.05"
    assert steps["prepared reused"][1].startswith("acme: 2 rows") and "beta: " in steps["prepared reused"][1]
    assert "nobody's: 0 rows" in steps["prepared reused"][1]
    assert steps["limited"][1].startswith("2 rows")  # setMaxRows(2) of 6 invoices
    # every documented query: as many rows as clickhouse-connect reads through the same gateway
    for number, sql in enumerate(queries(), start=1):
        expected = len(billed.query(sql))
        assert steps[f"finance query {number}"][1].startswith(f"{expected} rows,"), (number, steps[f"finance query {number}"])
    assert sum(int(steps[f"finance query {n}"][1].split()[0]) for n in range(1, 16)) > 15  # not a test of empty views
