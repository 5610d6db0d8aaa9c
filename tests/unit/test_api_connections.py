"""The API server's connection bounds, on the real uvicorn server on loopback (issue 21, findings 4
and 9): a request-head deadline, a cap on open connections, bounded log lines, and h11's refusals
of a malformed request as problem JSON (tenant_api/connections.py)."""

from __future__ import annotations

import http.client
import logging
import socket
import threading
import time
from pathlib import Path

import orjson
import pytest

from billing_rules import load_rules
from gpubill.config import Settings
from tenant_api.app import create_app
from tenant_api.connections import ConnectionLimits, fits
from tenant_api.server import ApiServer
from warehouse.connection import open_database

RULES = load_rules(Path(__file__).parents[1] / "e2e" / "rules")
CAP = 64
HEAD_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    with open_database(f"chdb://{tmp_path_factory.mktemp('api-conn') / 'ch'}") as db:
        yield db


def serve(database, limits: ConnectionLimits) -> ApiServer:
    server = ApiServer("127.0.0.1:0").attach(create_app(Settings(), database, lambda: RULES), limits)
    server.start_thread()
    return server


@pytest.fixture(scope="module")
def server(database):
    api = serve(database, ConnectionLimits(max_connections=CAP, head_timeout_s=HEAD_TIMEOUT_S, keep_alive_s=5.0))
    yield api
    api.stop()


def healthz(server: ApiServer) -> tuple[int, float]:
    started = time.monotonic()
    connection = http.client.HTTPConnection(server.host, server.port, timeout=5)
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status, time.monotonic() - started
    finally:
        connection.close()


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed `sock` (EOF or reset), waiting at most a little."""
    sock.settimeout(0.2)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def raw_answer(server: ApiServer, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send `request` as it is (from a thread, so a large one cannot block the read), read to EOF."""
    sock = socket.create_connection((server.host, server.port), timeout=5)

    def send() -> None:
        try:
            sock.sendall(request)
        except OSError:
            pass  # the server answered and closed before taking it all

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    finally:
        sender.join(5)
        sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split(" ")[1]), headers, body


def test_uvicorn_still_fits_the_adapter():
    # an upgrade of uvicorn or h11 that drops what connections.py relies on fails here, not in production
    assert fits() == ""


def test_idle_and_dripping_connections_are_closed_and_healthz_answers_for_everyone(server, caplog):
    caplog.set_level(logging.INFO)
    idle = [socket.create_connection((server.host, server.port), timeout=5) for _ in range(300)]
    stop = threading.Event()
    dripping = [socket.create_connection((server.host, server.port), timeout=5) for _ in range(3)]
    dripped: list[int] = [0]

    def drip() -> None:  # a request head one byte every 0.2 s: never complete within the deadline
        head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000
        for n in range(len(head)):
            if stop.wait(0.2):
                return
            for sock in dripping:
                try:
                    sock.send(head[n:n + 1])
                    dripped[0] += 1
                except OSError:
                    pass

    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()
    opened = time.monotonic()
    try:
        time.sleep(0.3)
        for _ in range(5):
            status, took_s = healthz(server)
            assert status == 200 and took_s < 5.0, (status, took_s)  # before: no answer at all
        assert server.guard.most_open <= CAP + 1  # the newest is counted, then the oldest waiting goes
        time.sleep(max(0.0, opened + HEAD_TIMEOUT_S + 1.0 - time.monotonic()))
        assert all(closed_by_server(sock) for sock in idle)
        assert dripped[0] >= 3 * 2  # they kept sending (each more than once), and were closed anyway
        assert all(closed_by_server(sock) for sock in dripping)
        # every idle and dripping one was closed by the guard: at the cap or, when accepting 300 took
        # longer than the deadline (a loaded machine), at the deadline
        assert server.guard.closed["cap"] + server.guard.closed["head-timeout"] >= 300 + 3
        assert server.guard.closed["head-timeout"] >= 3
        status, took_s = healthz(server)
        assert status == 200 and took_s < 5.0
    finally:
        stop.set()
        dripper.join(5)
        for sock in idle + dripping:
            sock.close()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    # one line per 10 s at most (a loaded machine takes longer), never one per connection closed
    allowed = 2 + int((time.monotonic() - opened) // 10)
    assert len(warnings) <= allowed < 300 - CAP, [r.getMessage() for r in warnings]


def test_a_kept_alive_client_asking_again_and_again_outlives_the_deadline(server):
    connection = http.client.HTTPConnection(server.host, server.port, timeout=5)
    try:
        started = time.monotonic()
        while time.monotonic() - started < HEAD_TIMEOUT_S * 2.5:  # the deadline restarts at each answer
            connection.request("GET", "/healthz")
            answer = connection.getresponse()
            assert answer.status == 200 and answer.read() == b'{"status":"ok"}'
            time.sleep(HEAD_TIMEOUT_S / 2)
        assert connection.sock is not None  # one connection throughout
    finally:
        connection.close()


@pytest.mark.parametrize("request_bytes, status, fragment", [
    ("GET /v1/usage?period=2026-03&x=中 HTTP/1.1\r\nHost: x\r\n\r\n".encode(), 400, "percent-encoded"),
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n", 431, "larger than 16 KiB"),
    (b"NOT HTTP AT ALL\r\n\r\n", 400, "not a valid HTTP/1.1 request"),
])
def test_what_h11_refuses_is_answered_as_problem_json(server, request_bytes, status, fragment):
    got, headers, body = raw_answer(server, request_bytes)
    assert got == status and headers["content-type"] == "application/problem+json"
    problem = orjson.loads(body)
    assert problem["status"] == status and fragment in problem["detail"], problem
    assert headers["connection"] == "close"


def test_a_uvicorn_that_does_not_fit_is_served_plainly_and_says_so(database, monkeypatch, caplog):
    from uvicorn.protocols.http.h11_impl import H11Protocol

    monkeypatch.delattr(H11Protocol, "send_400_response")
    assert "H11Protocol.send_400_response(msg)" in fits()
    app = create_app(Settings(), database, lambda: RULES)
    server = ApiServer("127.0.0.1:0").attach(app, ConnectionLimits(max_connections=8))
    try:
        assert server.guard is None and server.server.config.http == "h11"
        assert server.server.config.limit_concurrency == 9  # what bounds it then
        assert "serving WITHOUT the request-head deadline" in caplog.text
        assert b"gpubill_api_connection_guard 0.0" in app.state.metrics.exposition()
    finally:
        server.socket.close()


def test_connections_are_capped_below_the_descriptor_limit(monkeypatch):
    import resource

    from tenant_api import server as module

    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 4096))
    assert module._within_descriptors(100_000) == 512 and module._within_descriptors(100) == 100


def test_slow_request_bodies_are_cut_off_and_lock_nobody_out(database):
    # the sign-in form is a POST anyone may send: a body dripped slowly held its connection for
    # ever, and the whole cap of them refused every newcomer
    api = serve(database, ConnectionLimits(max_connections=8, head_timeout_s=HEAD_TIMEOUT_S, keep_alive_s=5.0))
    slow = []
    try:
        for _ in range(8):  # the whole cap, each with its head in and a body that never comes
            sock = socket.create_connection((api.host, api.port), timeout=5)
            sock.sendall(b"POST /session HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                         b"Content-Length: 100000\r\n\r\nkey=")
            slow.append(sock)
        time.sleep(0.3)
        for _ in range(3):  # a newcomer replaces the oldest slow body: never refused
            status, took_s = healthz(api)
            assert status == 200 and took_s < 2.0
        time.sleep(HEAD_TIMEOUT_S + 0.8)  # past the body deadline, whatever they send now
        assert all(closed_by_server(sock) for sock in slow)
        assert api.guard.closed["cap"] + api.guard.closed["body-timeout"] >= 8
        assert api.guard.closed["body-timeout"] >= 1 and not api.guard.receiving
    finally:
        for sock in slow:
            sock.close()
        api.stop()


def test_a_request_with_a_body_sent_in_time_is_answered(server):
    status, _, body = raw_answer(server, b"POST /session HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                         b"application/x-www-form-urlencoded\r\nContent-Length: 8\r\n"
                                         b"Connection: close\r\n\r\nkey=abcd")
    assert status in (303, 400, 401, 403) and status != 408  # the app's answer, not the guard's
    assert not server.guard.receiving
