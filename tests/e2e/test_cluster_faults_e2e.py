"""The pipeline on a three-broker cluster while brokers die (issue 40): nothing acknowledged
is lost, nothing is billed twice.

Kafka's own system test of this promise (tests/kafkatest/tests/core/replication_test.py)
runs three brokers, replication 3, min.insync.replicas 2, kills the partition leader while
producing, and passes if every acknowledged message is consumed, duplicates allowed. A bill
allows no duplicate, so each case here ends as the fault suite's do (test_faults.py):
every acknowledged reading stored once (counted with FINAL and without), `audit` clean,
seconds and millijoules per tenant equal to the batch join computed here in plain Python,
invoices equal to figures computed here with Fractions (faults_helpers.py). That is stricter
than comparing with a fault-free run of the same code: the figures do not come from it.

The cluster is `gpubill kafka up --brokers 3`'s (cluster_helpers.py), one per module;
readings are produced by the test itself (acks=all, idempotent, as the product's
producers), so that "acknowledged" is exactly the records whose send succeeded.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from schemas.topics import TOPIC_POWER, TOPIC_USAGE
from tests.e2e.cluster_helpers import Progress, _groups, leaders, start_cluster, wait_in_sync
from tests.e2e.conftest import TEST_RULES, Gpubill, empty_topics
from tests.e2e.faults_helpers import (
    PERIOD,
    count_rows,
    dumps,
    expected_invoice,
    fleet,
    invoice_figures,
    make_readings,
    stored_figures,
    truth_figures,
    truth_of,
    wait_until,
)

pytestmark = pytest.mark.e2e

SEED = int(os.environ.get("GPUBILL_FAULTS_SEED", "20260512"))
READING_TOPICS = (TOPIC_USAGE, TOPIC_POWER)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = start_cluster(tmp_path_factory.mktemp("kafka-cluster"))
    yield cluster
    cluster.down(wait_s=20)


@pytest.fixture
def on_cluster(cluster, tmp_path) -> Gpubill:
    """`gpubill` against the cluster (all three nodes in GPUBILL_KAFKA), with a fresh
    database, an emptied cluster and a consumer group of this test's own."""
    for node in cluster.nodes:  # a test that failed half-way may have left one down
        if not node.is_up(timeout_s=1.0):
            cluster.start_node(node.quorum.node_id)
    empty_topics(cluster.bootstrap)
    print(f"GPUBILL_FAULTS_SEED={SEED}")
    env = {
        **os.environ,
        "GPUBILL_KAFKA": cluster.bootstrap,
        "GPUBILL_CLICKHOUSE": f"chdb://{tmp_path / 'clickhouse'}",
        "GPUBILL_RULES": str(TEST_RULES),
        "GPUBILL_HOME": str(tmp_path / "var"),
        "GPUBILL_OUT": str(tmp_path / "out"),
        "GPUBILL_GROUP": f"e2e-cluster-{next(_groups)}",
        "GPUBILL_PARTITIONS": "4",
        "GPUBILL_ROLLUP_MARGIN_S": "0",
        "GPUBILL_HTTP_PORT": "0",
        "GPUBILL_GATEWAY_PORT": "0",
        "GPUBILL_METRICS_PORT": "0",
        "NO_COLOR": "1",
        "COLUMNS": "200",
    }
    return Gpubill(env=env, cwd=tmp_path)


def big_fleet(copies: int):
    """`copies` of the fault suite's eight cards (faults_helpers.fleet), renamed: 8 × copies cards."""
    return [dataclasses.replace(card, gpu=f"{card.gpu}-{k:03d}") for k in range(copies) for card in fleet(60)]


class Producer:
    """Produces readings second by second from a thread, acks=all and idempotent; keeps
    exactly the readings Kafka acknowledged."""

    def __init__(self, bootstrap: str, readings: list[dict], pace_s: float, tail: int = 0) -> None:
        from kafka import KafkaProducer

        self.readings, self.pace_s = readings, pace_s
        self.producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all", enable_idempotence=True,
                                      linger_ms=20, batch_size=256 * 1024, request_timeout_ms=30_000)
        self.futures: list = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        # the last `tail` seconds wait for `release`: the faults all happen while readings are produced
        self.tail, self.release = tail, threading.Event()

    def _run(self) -> None:
        try:
            by_second: dict[str, list[dict]] = {}
            for reading in self.readings:
                by_second.setdefault(reading["ts"], []).append(reading)
            seconds = sorted(by_second)
            for index, second in enumerate(seconds):
                if index == len(seconds) - self.tail:
                    self.release.wait(timeout=600)
                started = time.monotonic()
                for reading in by_second[second]:
                    topic = TOPIC_USAGE if reading["kind"] == "usage" else TOPIC_POWER
                    future = self.producer.send(topic, key=reading["gpu_uuid"].encode(), value=dumps(reading).encode())
                    self.futures.append((reading, future))
                time.sleep(max(0.0, self.pace_s - (time.monotonic() - started)))
            self.producer.flush(timeout=180)
        except BaseException as exc:  # noqa: BLE001 — reported by `acknowledged`
            self.error = exc

    def start(self) -> "Producer":
        self.thread.start()
        return self

    def acknowledged(self) -> list[dict]:
        self.release.set()
        self.thread.join(timeout=300)
        assert not self.thread.is_alive() and self.error is None, f"the producer failed: {self.error!r}"
        self.producer.close(timeout=30)
        acked = [reading for reading, future in self.futures if future.is_done and future.succeeded()]
        failed = [future.exception for _reading, future in self.futures if future.is_done and future.failed()]
        print(f"produced {len(self.futures):,}, acknowledged {len(acked):,}, failed {len(failed):,}"
              + (f" (first: {failed[0]!r})" if failed else ""))
        return acked


def start_long_worker(gpubill: Gpubill, log) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gpubill.cli", "worker"], env=gpubill.env, cwd=gpubill.cwd,
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)


def stop_worker(worker: subprocess.Popen, log) -> None:
    os.killpg(worker.pid, signal.SIGTERM)
    try:
        code = worker.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(worker.pid, signal.SIGKILL)
        raise AssertionError(f"the worker did not stop on SIGTERM\n{log.read_text()[-3000:]}") from None
    assert code == 0, f"the worker exited {code}\n{log.read_text()[-3000:]}"


def assert_stored_once(gpubill: Gpubill, acked: list[dict]) -> None:
    """Every acknowledged reading is in ClickHouse exactly once: with FINAL and without."""
    dsn = gpubill.env["GPUBILL_CLICKHOUSE"]
    for kind in ("usage", "power"):
        expected = sum(1 for r in acked if r["kind"] == kind)
        stored = count_rows(dsn, f"SELECT count() FROM readings_{kind}")
        final = count_rows(dsn, f"SELECT count() FROM readings_{kind} FINAL")
        assert (stored, final) == (expected, expected), (kind, stored, final, expected)


def assert_billed_exactly(gpubill: Gpubill, truth) -> None:
    """Nothing left to drain, audit and verify-log clean, figures per tenant exact, invoices to the fen."""
    dsn = gpubill.env["GPUBILL_CLICKHOUSE"]
    assert stored_figures(dsn) == truth_figures(truth)
    assert count_rows(dsn, "SELECT count() FROM conflicts FINAL") == 0
    assert count_rows(dsn, "SELECT count() FROM deadletters FINAL") == 0
    # one process for the commands (each still opens the database itself): the interpreter and
    # the imports are paid once
    drained, audited, *_added, created, acme, beta, verified = gpubill.many(
        ("worker", "--drain"), ("audit", "--period", PERIOD),
        ("tenant", "add", "acme", "--name", "Acme"), ("tenant", "add", "beta", "--name", "Beta"),
        ("invoice", "run", "--period", PERIOD),
        *(("invoice", "show", "--period", PERIOD, "--tenant", t, "--format", "json") for t in ("acme", "beta")),
        ("verify-log", "--period", PERIOD, "--json"), timeout=600)
    assert "nothing to drain" in drained.stdout, drained.stdout + drained.stderr
    assert audited.returncode == 0 and "clean" in audited.stdout, audited.stdout + audited.stderr
    assert "2 invoices created" in created.stdout, created.stdout + created.stderr
    for tenant, shown in (("acme", acme), ("beta", beta)):
        assert invoice_figures(json.loads(shown.stdout)) == expected_invoice(truth, tenant), tenant
    assert verified.returncode == 0 and json.loads(verified.stdout)["clean"], verified.stdout + verified.stderr


def test_leader_killed_five_times_during_a_drain(cluster, on_cluster, tmp_path):
    """1,280 cards × 60 s produced while the worker rates them; five times the node that leads
    most readings partitions is SIGKILLed, left dead 2 s, restarted, and given time to catch
    up (its replicas back in sync) before the next kill. Every acknowledged reading is rated
    once; the longest stall of the committed offsets after each kill is printed."""
    rng = random.Random(SEED + 40)
    began = time.monotonic()
    phase = lambda name: print(f"{time.monotonic() - began:6.1f} s  {name}")  # noqa: E731
    cards = big_fleet(160)
    readings = make_readings(60, cards)
    assert len(cards) == 1280 and len(readings) == 60 * (1280 + 1120)  # P1 copies send power only
    # the worker creates the pipeline's topics (replication 3); every node alive, nothing short of replicas
    _drained, shown = on_cluster.many(("worker", "--drain"), ("kafka", "status", "--json"))
    assert shown.returncode == 0, shown.stdout + shown.stderr
    status = json.loads(shown.stdout)
    assert status["partitions"] >= 12 and not status["under_replicated"], status

    phase("topics created")
    log = tmp_path / "worker.log"
    worker = start_long_worker(on_cluster, log)
    progress = Progress(cluster.bootstrap, on_cluster.env["GPUBILL_GROUP"]).start()
    producer = Producer(cluster.bootstrap, readings, pace_s=0.5, tail=10).start()
    kills: list[tuple[int, float]] = []
    try:
        assert wait_until(lambda: progress.latest() > 0, 120, 0.3), log.read_text()[-3000:]
        for _ in range(5):
            node = leaders(cluster.bootstrap, READING_TOPICS).most_common(1)[0][0]
            kills.append((node, time.monotonic()))
            cluster.kill(node)
            time.sleep(2.0 + rng.uniform(0, 1.0))
            cluster.start_node(node)
            wait_in_sync(cluster.bootstrap)
            phase(f"node {node} killed, back and in sync")
            assert worker.poll() is None, f"the worker exited {worker.returncode}\n{log.read_text()[-3000:]}"
        assert producer.thread.is_alive(), "the readings were all produced before the fifth kill"
        acked = producer.acknowledged()
        assert wait_until(lambda: progress.latest() >= len(acked), 240, 0.5), log.read_text()[-3000:]
        phase("every acknowledged reading committed")
    finally:
        progress.stop()
        if worker.poll() is None:
            stop_worker(worker, log)
    caught_up = progress.reached(len(acked)) or time.monotonic()
    ends = [at for _, at in kills[1:]] + [caught_up]
    stalls = [progress.stall_after(at, end) for (_, at), end in zip(kills, ends)]
    print("leader kills (node):", [node for node, _ in kills], "longest stall after each (s):",
          [round(s, 1) for s in stalls])
    assert len(acked) == len(readings), "an idempotent producer with retries must get every reading acknowledged"
    assert max(stalls) < 90, stalls  # the target is 15 s (reported); this bound only catches a wedged pipeline

    assert_stored_once(on_cluster, acked)
    assert_billed_exactly(on_cluster, truth_of(acked))
    phase("billed exactly")
