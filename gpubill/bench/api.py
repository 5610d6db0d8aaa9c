"""`gpubill bench api`: the tenant API's latency on a month at the operator's size, over real HTTP.

What it builds, in a private embedded ClickHouse (chDB) in a temporary directory (`keep`
keeps it, and a later run with the same `keep` reuses it): April 2026 of `gpus` cards with
the example time-of-use rules, as `gpubill bench month` builds it (gpubill/bench/month*.py:
the first hour as the per-second rows the pipeline writes, rolled up by the real rollup step,
the rest of the month as exactly the rollups those rows would give). Tenant `tenant-0` (64
cards; a Chinese display name) is registered and gets one API key per client, as fifty
people of one customer each with their own key, so no per-key limit is what is measured. The
registration and the keys are facts on the books (issue 37), recorded as `gpubill tenant add`
and `gpubill key create` record them, on a private Kafka broker that runs while the month is
built (gpubill/bench/broker.py); the API only reads them.

What it times: the real app (`tenant_api.create_app`) served by uvicorn in a child process
(the embedded database is one process's), asked by `clients` concurrent clients (each its
own kept-alive connection and key):

    GET /v1/usage?period=2026-04&format=F     the month's usage report of tenant-0, each format F
    GET /v1/usage/current                      its month-to-date figures

The service's clock is fixed at 2026-04-30 23:00 (billing clock), so "month to date" is the
whole month — the largest month-to-date read there is. Each figure is measured twice, on
two servers: with the API's answer cache off (`cache_s = 0`: every request reads and
renders) and on (`cache_s`, the API's default: concurrent identical requests share one
build, and its result is reused for that long). The clients run in this process, beside
the server on the same machine: their CPU is the server's loss, so the figures are
conservative. Every answer is checked: status 200 and the same bytes as the first (the
reports' `generated_at` is the service's clock, fixed here).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from gpubill.errors import GpubillError

__all__ = ["bench_api"]

Say = Callable[[str], None]
PERIOD = "2026-04"
TENANT = "tenant-0"
TENANT_NAME = "深度求索智算 (tenant-0)"
CLOCK = "2026-04-30T15:00:00+00:00"  # 23:00 in Asia/Shanghai, the example rules' billing zone
FORMATS = ("csv", "json", "parquet", "pdf")
WARM_S = 10.0  # after /readyz: the PDF font warm-up takes 4-7 s of a core (reports/render/fonts.py)
STATE = "bench-api.json"  # in `keep`: the keys of a built month, for a later run to reuse
BROKER_PORT = 28592  # the private broker's (and + 1 its controller's) while the month is built: `--port`


def bench_api(gpus: int = 1280, *, days: int = 30, clients: int = 50, requests: int = 4, sequential: int = 10,
              cache_s: float = 10.0, keep: Path | None = None, port: int = BROKER_PORT,
              say: Say = lambda _: None) -> dict:
    """Build (or reuse) the month, then time the downloads and month-to-date at 1 and `clients` clients
    (the month's books on a private broker on `port` and port + 1, while it is built)."""
    if clients < 1 or requests < 1 or sequential < 1:
        raise GpubillError("--clients, --requests and --sequential must be at least 1")
    directory = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="gpubill-bench-api-"))
    directory.mkdir(parents=True, exist_ok=True)
    try:
        began = time.perf_counter()
        keys = _month(directory, gpus, days, clients, port, say)
        figures: dict[str, Any] = {"gpus": gpus, "days": days, "period": PERIOD, "tenant": TENANT, "tenant_cards": 64,
                                   "clients": clients, "build_s": round(time.perf_counter() - began, 1)}
        for label, ttl in (("cache_off", 0.0), ("cache_on", cache_s)):
            say(f"serving the month ({label}, cache_s = {ttl:g})")
            with _Server(directory, ttl) as url:
                figures[label] = asyncio.run(_measure(url, keys, clients, requests, sequential, say))
        figures["cache_s"] = cache_s
        figures["target_met"] = _targets(figures["cache_on"][str(clients)])
        return figures
    finally:
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)


def _month(directory: Path, gpus: int, days: int, clients: int, port: int, say: Say) -> list[str]:
    """The month's database under `directory` and `clients` keys of tenant-0 (reused when there)."""
    state = directory / STATE
    if state.is_file():
        saved = json.loads(state.read_text())
        if saved.get("gpus") == gpus and saved.get("days") == days and len(saved.get("keys", ())) >= clients:
            say(f"reusing the month in {directory}")
            return saved["keys"][:clients]
        raise GpubillError(f"{directory} holds another bench month ({saved.get('gpus')} cards, {saved.get('days')} "
                           "days); give another --keep directory")
    from billing_rules import load_rules
    from gpubill.bench.broker import temporary_broker
    from gpubill.bench.month import write_month
    from gpubill.bench.month_fleet import DAY_S, EXAMPLE_TOU_DIR, HOUR_S, make_fleet
    from gpubill.cli.books import open_books
    from tenant_api.keys import create_key
    from usage.rollup import roll_up
    from billing.tenants import add_tenant
    from warehouse import writes
    from warehouse.connection import open_database

    rules = load_rules(EXAMPLE_TOU_DIR)
    fleet = make_fleet(rules, PERIOD, gpus)
    if not fleet.pairs:
        raise GpubillError(f"{gpus} cards make no 64-card tenant")
    with open_database(_dsn(directory)) as db:
        db.command("SET max_query_size = 67108864")  # the fleet's cards are constant arrays in the SQL
        say(f"{gpus:,} cards × {days} days of {PERIOD}: one hour of per-second rows, the rest as rollups")
        _, _, last_write = write_month(db, fleet, fleet.start + HOUR_S, fleet.start + days * DAY_S, say)
        margin = max(writes.MARGIN_S, 60) + 1 - (time.monotonic() - last_write)
        if margin > 0:
            say(f"waiting {margin:.0f} s: the rollup step takes an hour once it has been quiet for its margin")
            time.sleep(margin)
        roll_up(db, rules, period=PERIOD)
        db.command("DROP TABLE IF EXISTS bench_minutes")
        with temporary_broker(port, _dsn(directory), rules=EXAMPLE_TOU_DIR, group="bench-api", say=say) as settings, \
                open_books(db, settings):  # as `gpubill tenant add` and `gpubill key create` open them
            add_tenant(db, TENANT, TENANT_NAME)
            keys = [create_key(db, tenant=TENANT, label=f"bench client {i}")[1] for i in range(clients)]
    fd = os.open(state, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        json.dump({"gpus": gpus, "days": days, "keys": keys}, file)
    return keys


def _dsn(directory: Path) -> str:
    return f"chdb://{directory.resolve() / 'clickhouse'}"


class _Server:
    """`python -m gpubill.bench.api serve …` (see `_serve`) on a free port, until the block ends."""

    def __init__(self, directory: Path, cache_s: float) -> None:
        self.directory, self.cache_s = directory, cache_s

    def __enter__(self) -> str:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        env = {**os.environ, "GPUBILL_API_CACHE_S": str(self.cache_s)}
        self.process = subprocess.Popen([sys.executable, "-m", "gpubill.bench.api", "serve", _dsn(self.directory),
                                         str(port)], env=env)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise GpubillError(f"the API server exited with status {self.process.returncode}")
            try:
                with urllib.request.urlopen(f"{url}/readyz", timeout=2) as answer:  # noqa: S310 - our own URL
                    ready = answer.status == 200
                if ready:
                    time.sleep(WARM_S)  # the server's start-up work (the CJK font's warm-up thread) is done
                    return url
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.__exit__()
        raise GpubillError("the API server did not become ready within 120 s")

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _serve(dsn: str, port: int) -> None:
    """The child: the real app over the month, the service's clock fixed at CLOCK."""
    from billing_rules import load_rules
    from tenant_api.app import create_app
    from tenant_api.reads import Reads
    from tenant_api.records import AccessRecorder
    from tenant_api.server import ApiServer
    from tenant_api.service import Limits, Service
    from gpubill.bench.month_fleet import EXAMPLE_TOU_DIR
    from gpubill.config import load_settings
    from tenant_api.access_log import record_access
    from warehouse.connection import open_database

    settings = load_settings()
    rules = load_rules(EXAMPLE_TOU_DIR)
    clock = datetime.fromisoformat(CLOCK)
    with open_database(dsn) as db:
        reads = Reads([db])
        recorder = AccessRecorder(lambda records: reads.run(lambda d: record_access(d, records)))
        service = Service(reads, lambda: rules, recorder, limits=Limits.from_settings(settings), now=lambda: clock)
        app = create_app(settings, reads, lambda: rules, service=service)
        ApiServer(f"127.0.0.1:{port}").attach(app).run()  # as `gpubill serve` runs it


async def _measure(url: str, keys: list[str], clients: int, requests: int, sequential: int, say: Say) -> dict:
    paths = {fmt: f"/v1/usage?period={PERIOD}&format={fmt}" for fmt in FORMATS}
    paths["current"] = "/v1/usage/current"
    figures: dict[str, dict] = {"1": {}, str(clients): {}}
    connections = [_Client(url, key) for key in keys[:clients]]
    try:
        for what, path in paths.items():
            # fresh connections for each phase: the server closes one idle for 5 s (keep-alive timeout)
            await connections[0].connect()
            expected, _ = await connections[0].get(path)  # also warms what a first request warms
            say(f"{what}: 1 client × {sequential}")
            one = [await connections[0].timed(path, expected) for _ in range(sequential)]
            say(f"{what}: {clients} clients × {requests}")
            await asyncio.gather(*(c.connect() for c in connections))

            async def client(connection: _Client) -> list[tuple[float, float]]:
                return [await connection.timed(path, expected) for _ in range(requests)]

            many = [t for ts in await asyncio.gather(*(client(c) for c in connections)) for t in ts]
            figures["1"][what] = _summary(one) | {"bytes": len(expected)}
            figures[str(clients)][what] = _summary(many) | {"bytes": len(expected)}
    finally:
        for connection in connections:
            connection.close()
    return figures


class _Client:
    """One client: a kept-alive HTTP/1.1 connection with its own key. Deliberately minimal
    (a request line, a status line, Content-Length, one readexactly of the body): a full
    Python HTTP client parsing fifty bodies of half a megabyte in one event loop costs more
    CPU than the server it measures, on the same two cores."""

    def __init__(self, url: str, key: str) -> None:
        self.host, self.key = url.removeprefix("http://"), key
        self.writer: asyncio.StreamWriter | None = None

    async def connect(self) -> None:
        """A new connection (the one before, if any, closed)."""
        self.close()
        host, _, port = self.host.partition(":")
        self.reader, self.writer = await asyncio.open_connection(host, int(port), limit=1 << 20)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    async def get(self, path: str) -> tuple[bytes, float]:
        """(the body of a 200, the server's Server-Timing in seconds); GpubillError otherwise."""
        self.writer.write(f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {self.key}\r\n"
                          "Connection: keep-alive\r\n\r\n".encode())
        head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        headers = dict(line.split(":", 1) for line in head[1:] if ":" in line)
        headers = {name.strip().lower(): value.strip() for name, value in headers.items()}
        body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        status = head[0].split(" ")[1]
        if status != "200":
            raise GpubillError(f"GET {path}: {status} {body[:300].decode('utf-8', 'replace')}")
        return body, float(headers.get("server-timing", "").partition("dur=")[2] or "nan") / 1000

    async def timed(self, path: str, expected: bytes) -> tuple[float, float]:
        """(seconds until the whole answer was read here, seconds the server says it took to its first byte)."""
        t0 = time.perf_counter()
        body, server_s = await self.get(path)
        took = time.perf_counter() - t0
        if body != expected:
            raise GpubillError(f"GET {path}: an answer differed from the first one")
        return took, server_s


def _summary(timings: list[tuple[float, float]]) -> dict:
    """p50/p95 as the client saw them, and as the server measured them (`server_*`): the gap is
    the clients' own queueing on the shared cores, and the transfer."""
    figures = {"n": len(timings)}
    for name, values in (("", [t for t, _ in timings]), ("server_", [s for _, s in timings])):
        ordered = sorted(values)
        figures[f"{name}p50_s"] = round(statistics.median(ordered), 4)
        figures[f"{name}p95_s"] = round(ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)], 4)
    return figures


def _targets(at_many: dict) -> dict:
    """Issue 14's targets at 50 clients: p95 ≤ 1 s for each download, ≤ 100 ms for month-to-date."""
    met = {fmt: at_many[fmt]["p95_s"] <= 1.0 for fmt in FORMATS}
    met["current"] = at_many["current"]["p95_s"] <= 0.1
    return met


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "serve":
    _serve(sys.argv[2], int(sys.argv[3]))
