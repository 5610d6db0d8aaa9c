"""A three-node Kafka cluster for the e2e tests that kill brokers, and what they measure.

The cluster is gpubill's own (`gpubill.devenv.kafka_cluster.LocalCluster`, what `gpubill
kafka up --brokers 3` starts): three KRaft nodes, each broker and controller, on six
reserved ports; the topics gpubill creates on it have three replicas and
min.insync.replicas 2. One cluster serves a test module; each test gets it emptied and a
consumer group of its own.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from gpubill.devenv.kafka_cluster import LocalCluster
from tests.ports import free_port_run

_groups = itertools.count(1)


def start_cluster(home, brokers: int = 3) -> LocalCluster:
    first = free_port_run(2 * brokers)
    cluster = LocalCluster(home, brokers, first)
    cluster.up(wait_s=180)
    return cluster


def leaders(bootstrap: str, topics: tuple[str, ...]) -> Counter:
    """How many partitions of `topics` each node leads now (node id → count)."""
    from gpubill.devenv.kafka_cluster import partition_health

    return Counter(h.leader for h in partition_health(bootstrap) if h.topic in topics and h.leader >= 0)


def wait_in_sync(bootstrap: str, timeout_s: float = 90.0) -> float:
    """Wait until no partition is under-replicated (every replica back in sync); the seconds it took."""
    from gpubill.devenv.kafka_cluster import partition_health
    from kafka.errors import KafkaError

    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        try:
            if not any(h.under_replicated for h in partition_health(bootstrap)):
                return time.monotonic() - started
        except KafkaError:
            pass  # a node still coming back: asked again
        time.sleep(0.5)
    raise AssertionError(f"partitions still under-replicated {timeout_s:.0f} s after a node came back")


@dataclass
class Progress:
    """The group's committed total over time, sampled by a thread: where the pipeline stalled."""

    bootstrap: str
    group: str
    samples: list[tuple[float, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> "Progress":
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        """Every 0.25 s, the group's committed total, through an admin client with short time
        bounds that is replaced after any failure: a sampler stuck on a dead node would
        itself look like a stall of the pipeline."""
        from kafka import KafkaAdminClient

        admin = None
        while not self._stop.is_set():
            try:
                if admin is None:
                    admin = KafkaAdminClient(bootstrap_servers=self.bootstrap.split(","), client_id="e2e-progress",
                                             request_timeout_ms=2000, bootstrap_timeout_ms=2000)
                offsets = admin.list_group_offsets({self.group: None}).get(self.group, {})
                total = sum(meta.offset for tp, meta in offsets.items()
                            if tp.topic in ("gpu.usage.v1", "gpu.power.v1") and meta.offset > 0)
                self.samples.append((time.monotonic(), total))
            except Exception:  # noqa: BLE001 — a node or the coordinator moving: a new client next time
                if admin is not None:
                    try:
                        admin.close()
                    except Exception:  # noqa: BLE001
                        pass
                admin = None
            self._stop.wait(0.25)
        if admin is not None:
            admin.close()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def stall_after(self, moment: float, until: float) -> float:
        """The longest time in [moment, until] during which the committed total did not move
        (from `moment` to the next advance, between advances, and from the last one to
        `until`: pass the moment the pipeline caught up, or the next fault)."""
        longest, last_move, last_total = 0.0, moment, None
        for at, total in self.samples:
            if at < moment:
                last_total = total
                continue
            if at > until:
                break
            if last_total is not None and total > last_total:
                longest = max(longest, at - last_move)
                last_move = at
            last_total = total
        return max(longest, until - last_move)  # no advance up to `until` is a stall too

    def latest(self) -> int:
        return self.samples[-1][1] if self.samples else 0

    def reached(self, total: int) -> float | None:
        """When the committed total first reached `total` (None: not yet)."""
        return next((at for at, seen in self.samples if seen >= total), None)
