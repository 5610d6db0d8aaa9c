"""`gpubill serve` as a user runs it: a real uvicorn socket, the command line's own reports
to compare with, fifty concurrent clients, and the access records written at the stop.

The world is tests/unit/test_api_http.py's `seed_world` (three tenants renting one A800 at
¥1/s in March 2026, invoiced), written into a chDB directory that the commands then open.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import orjson
import pyarrow.parquet as pq
import pytest

from tenant_api.access_log import access_log
from tenant_api.keys import create_key
from tests.unit.test_api_http import PERIOD, RULES, RULES_DIR, SECONDS, seed_world
from warehouse import writes
from warehouse.connection import open_database

CLIENTS = 50
ROUNDS = 4  # downloads per client


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def served(tmp_path, monkeypatch, broker):
    """The seeded database (its money on the broker's books), the command line's env, and a running `gpubill serve`."""
    from tests.e2e.books_on import books_on

    monkeypatch.setattr(writes, "MARGIN_S", 0)
    dsn = f"chdb://{tmp_path / 'ch'}"
    with open_database(dsn) as db, books_on(db, broker.bootstrap):
        seeded = seed_world(db)
        # fifty clients, each with a key of its own, spread over the three tenants
        clients = []
        for n in range(CLIENTS):
            tenant = sorted(SECONDS)[n % len(SECONDS)]
            clients.append((tenant, create_key(db, tenant=tenant, label=f"client {n}")[1]))
    env = {**os.environ, "GPUBILL_CLICKHOUSE": dsn, "GPUBILL_RULES": str(RULES_DIR), "GPUBILL_HOME": str(tmp_path / "var"),
           "GPUBILL_KAFKA": broker.bootstrap,
           "GPUBILL_OUT": str(tmp_path / "out"), "NO_COLOR": "1", "COLUMNS": "200"}
    port = free_port()
    yield {"env": env, "tmp": tmp_path, "seeded": seeded, "clients": clients, "dsn": dsn, "port": port,
           "url": f"http://127.0.0.1:{port}"}


def cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "gpubill.cli", *args], env=env, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    return done


def start_serve(served: dict) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-m", "gpubill.cli", "serve", "--listen", f"127.0.0.1:{served['port']}"],
                               env=served["env"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"gpubill serve exited {process.returncode}: {process.stdout.read().decode()}")
        try:
            if httpx.get(served["url"] + "/readyz", timeout=2).status_code == 200:
                return process
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    pytest.fail("gpubill serve did not become ready within 60 s")


def stop(process: subprocess.Popen) -> str:
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0, out.decode()
    return out.decode()


def test_serve_downloads_equal_the_cli_reports_and_fifty_clients_are_answered(served):
    env, tmp = served["env"], served["tmp"]
    tokens, numbers = served["seeded"]["tokens"], served["seeded"]["numbers"]
    # the command line's reports first (the database is free: nothing serves it yet)
    expected: dict[tuple[str, str], bytes] = {}
    for tenant in SECONDS:
        for fmt in ("csv", "json", "parquet"):
            path = tmp / f"cli-{tenant}.{fmt}"
            cli(env, "report", "usage", "--tenant", tenant, "--period", PERIOD, "--format", fmt, "--out", str(path))
            expected[tenant, fmt] = path.read_bytes()
        for fmt in ("json", "csv"):
            expected[tenant, f"invoice-{fmt}"] = cli(env, "invoice", "show", "--period", PERIOD, "--tenant", tenant,
                                                     "--format", fmt).stdout

    server = start_serve(served)
    try:
        url = served["url"]
        with httpx.Client(base_url=url, timeout=30) as http:
            api_json = {}
            for tenant in SECONDS:
                auth = {"Authorization": f"Bearer {tokens[tenant]}"}
                csv = http.get(f"/v1/usage?period={PERIOD}&format=csv", headers=auth)
                assert csv.status_code == 200 and csv.content == expected[tenant, "csv"]  # byte for byte
                got = http.get(f"/v1/usage?period={PERIOD}&format=json", headers=auth)
                api_json[tenant] = orjson.loads(got.content)
                cli_json = orjson.loads(expected[tenant, "json"])
                # byte for byte but for the moment each was generated
                assert got.content == expected[tenant, "json"].replace(
                    cli_json["generated_at"].encode(), api_json[tenant]["generated_at"].encode())
                parquet = http.get(f"/v1/usage?period={PERIOD}&format=parquet", headers=auth)
                (tmp / "api.parquet").write_bytes(parquet.content)
                (tmp / "cli.parquet").write_bytes(expected[tenant, "parquet"])
                assert pq.read_table(tmp / "api.parquet").equals(pq.read_table(tmp / "cli.parquet"))  # same data
                for fmt in ("json", "csv"):
                    invoice = http.get(f"/v1/invoices/{numbers[tenant]}?format={fmt}", headers=auth)
                    assert invoice.content == expected[tenant, f"invoice-{fmt}"].rstrip(b"\n") or \
                        invoice.content == expected[tenant, f"invoice-{fmt}"], (tenant, fmt)
                pdf = http.get(f"/v1/usage?period={PERIOD}&format=pdf", headers=auth)
                assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF-")
                api_json[tenant, "pdf"] = pdf.content

        # fifty clients at once, each with its own key, ROUNDS downloads each in every format
        def client(n: int) -> list[tuple[int, float, bool]]:
            tenant, token = served["clients"][n]
            results = []
            with httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {token}"}) as http:
                for round_ in range(ROUNDS):
                    fmt = ("csv", "json", "parquet", "csv")[round_]
                    started = time.perf_counter()
                    answer = http.get(f"/v1/usage?period={PERIOD}&format={fmt}")
                    elapsed = time.perf_counter() - started
                    ok = answer.status_code == 200 and (
                        answer.content == expected[tenant, "csv"] if fmt == "csv" else
                        orjson.loads(answer.content)["rows"] == orjson.loads(expected[tenant, "json"])["rows"]
                        if fmt == "json" else answer.content.startswith(b"PAR1"))
                    results.append((answer.status_code, elapsed, ok))
            return results

        with ThreadPoolExecutor(CLIENTS) as pool:
            results = [r for rs in pool.map(client, range(CLIENTS)) for r in rs]
        assert [s for s, _, _ in results] == [200] * CLIENTS * ROUNDS  # none refused below the limits
        assert all(ok for _, _, ok in results)
        latencies = sorted(e for _, e, _ in results)
        print(f"{CLIENTS} clients × {ROUNDS} downloads: p50 {statistics.median(latencies) * 1000:.0f} ms, "
              f"p95 {latencies[int(len(latencies) * 0.95)] * 1000:.0f} ms")
    finally:
        log = stop(server)
    assert "tenant API" in log

    # the stop wrote every download's record; the PDF is the same data, rendered the same way
    with open_database(served["dsn"]) as db:
        downloads = [r for r in access_log(db, limit=10_000) if r.status == 200]
        assert len(downloads) == len(SECONDS) * 6 + CLIENTS * ROUNDS
        from reports.render import render_usage
        from reports.usage_report import usage_report

        for tenant in SECONDS:
            report = dataclasses.replace(usage_report(db, RULES, tenant, PERIOD),
                                         generated_at=api_json[tenant]["generated_at"])
            assert render_usage(report, "pdf") == api_json[tenant, "pdf"]


def test_serve_refuses_a_taken_port_before_opening_the_database(served):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", served["port"]))
        taken.listen()
        done = subprocess.run([sys.executable, "-m", "gpubill.cli", "serve", "--listen", f"127.0.0.1:{served['port']}"],
                              env=served["env"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "address already in use" in done.stderr
    assert "database" not in done.stderr
