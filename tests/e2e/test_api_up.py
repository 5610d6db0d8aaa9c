"""`gpubill up` serves the tenant API from the process that holds the embedded database,
beside the worker and the scheduler, and writes the access records before it stops."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import httpx
import pytest

from tenant_api.access_log import access_log
from tests.e2e.test_api_serve import free_port
from tests.unit.test_api_http import PERIOD, seed_world
from warehouse import writes
from warehouse.connection import open_database


def test_up_serves_the_api_on_the_embedded_database(gpubill, monkeypatch):
    monkeypatch.setattr(writes, "MARGIN_S", 0)
    dsn = gpubill.env["GPUBILL_CLICKHOUSE"]
    from tests.e2e.books_on import books_on

    with open_database(dsn) as db, books_on(db, gpubill.env["GPUBILL_KAFKA"]):  # its money on the test's broker
        seeded = seed_world(db)
    port = free_port()
    gpubill.env |= {"GPUBILL_HTTP_PORT": str(port), "GPUBILL_METRICS_PORT": str(free_port())}
    up = subprocess.Popen([sys.executable, "-m", "gpubill.cli", "up"], env=gpubill.env, cwd=gpubill.cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert up.poll() is None, up.stdout.read()
            try:
                if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.3)
        else:
            pytest.fail("gpubill up did not serve the API within 90 s")
        auth = {"Authorization": f"Bearer {seeded['tokens']['t01']}"}
        assert httpx.get(url + "/v1/me", headers=auth).json()["tenant"] == "t01"
        usage = httpx.get(f"{url}/v1/usage?period={PERIOD}&format=csv", headers=auth, timeout=30)
        assert usage.status_code == 200 and b"GPU-t01" in usage.content and b"GPU-t02" not in usage.content
        assert httpx.get(url + "/v1/invoices", headers={"Authorization": "Bearer nope"}).status_code == 401
    finally:
        up.send_signal(signal.SIGTERM)
        out, _ = up.communicate(timeout=60)
    assert up.returncode == 0, out
    with open_database(dsn) as db:
        records = access_log(db, key_id=seeded["keys"]["t01"].id)
        assert [(r.what, r.status, r.bytes) for r in records] == [("/v1/usage", 200, len(usage.content))]
        assert any(r.status == 401 and r.what == "/v1/invoices" for r in access_log(db))
