"""A real Apache Kafka cluster of several KRaft nodes on this machine: `gpubill kafka up --brokers 3`.

Each node is a `LocalBroker` (kafka_broker.py) that is broker and controller at once, with
its own home, log directory and process; the nodes listen on consecutive ports from the
first port of GPUBILL_KAFKA (clients) and on as many after them (the controllers):

    <home>/cluster.json     the layout: node count and first port (written by `up`)
    <home>/cluster-id       the KRaft cluster id every node is formatted with
    <home>/node-<id>/       one LocalBroker home each (server.properties, data/, broker.log, broker.pid)

Three nodes are the smallest cluster in which a topic with three replicas and
`min.insync.replicas` 2 survives the loss of any one node with nothing acknowledged lost
(`kafka_config.replication_for`); the fault suite (tests/e2e/test_cluster_faults_e2e.py)
kills their leaders. One node is the development broker of `LocalBroker` itself, in
<home> directly, as before: `gpubill kafka up` without --brokers is unchanged.

`status` says which nodes run and answer, and `partition_health` which partitions have
fewer in-sync replicas than replicas (under-replicated) or than their topic's
`min.insync.replicas` (no write with acks=all is acknowledged there until a replica catches up).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpubill.devenv.kafka_broker import BrokerStartFailed, LocalBroker, _wait_gone
from gpubill.devenv.kafka_config import Quorum, new_cluster_id
from schemas.topics import replication_for
from gpubill.devenv.kafka_probe import split_bootstrap

__all__ = ["LocalCluster", "NodeStatus", "PartitionHealth", "partition_health"]

MAX_BROKERS = 9


@dataclass(frozen=True)
class NodeStatus:
    node_id: int
    port: int
    controller_port: int
    pid: int | None  # the process this home started, when it runs
    alive: bool  # it answers a Kafka metadata request


@dataclass(frozen=True)
class PartitionHealth:
    topic: str
    partition: int
    leader: int  # -1: none
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    min_insync: int

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def below_min_insync(self) -> bool:
        return len(self.isr) < self.min_insync


class LocalCluster:
    """`brokers` KRaft nodes rooted at `home`; node n (1-based) serves clients on
    `first_port + n - 1` and its controller on `first_port + brokers + n - 1`."""

    def __init__(self, home: Path, brokers: int, first_port: int, **broker_options) -> None:
        if not 1 <= brokers <= MAX_BROKERS:
            raise ValueError(f"--brokers must be 1 to {MAX_BROKERS}, got {brokers}")
        self.home = Path(home).resolve()
        self.brokers = brokers
        self.first_port = first_port
        controllers = tuple(first_port + brokers + i for i in range(brokers))
        cluster_id = self._cluster_id() if brokers > 1 else None
        self.nodes = [
            LocalBroker(self.home / f"node-{n}" if brokers > 1 else self.home,
                        bootstrap=f"localhost:{first_port + n - 1}", port=first_port + n - 1,
                        controller_port=controllers[n - 1],
                        quorum=Quorum(node_id=n, controller_ports=controllers if brokers > 1 else ()),
                        cluster_id=cluster_id, **broker_options)
            for n in range(1, brokers + 1)
        ]

    @classmethod
    def recorded(cls, home: Path, **broker_options) -> "LocalCluster | None":
        """The cluster `up` last started in `home` (its cluster.json), or None."""
        try:
            layout = json.loads((Path(home) / "cluster.json").read_text(encoding="utf-8"))
            return cls(home, int(layout["brokers"]), int(layout["first_port"]), **broker_options)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    @classmethod
    def for_bootstrap(cls, home: Path, brokers: int, bootstrap: str, **broker_options) -> "LocalCluster":
        servers = split_bootstrap(bootstrap)
        return cls(home, brokers, servers[0][1] if servers else 9092, **broker_options)

    def _cluster_id(self) -> str:
        path = self.home / "cluster-id"
        try:
            return path.read_text(encoding="ascii").strip()
        except OSError:
            self.home.mkdir(parents=True, exist_ok=True)
            made = new_cluster_id()
            path.write_text(made + "\n", encoding="ascii")
            return made

    @property
    def bootstrap(self) -> str:
        """GPUBILL_KAFKA for this cluster: every node's client address."""
        return ",".join(node.bootstrap for node in self.nodes)

    @property
    def replication(self) -> tuple[int, int]:
        """(replication factor, min.insync.replicas) of the topics created on it."""
        return replication_for(self.brokers)

    def node(self, node_id: int) -> LocalBroker:
        return self.nodes[node_id - 1]

    # lifecycle -------------------------------------------------------------
    def up(self, wait_s: float = 120.0, progress: Callable[[str], None] | None = None) -> bool:
        """Start every node that does not answer and wait until all do; False when all already did.

        The nodes start side by side (none answers before a majority of the quorum runs).
        BrokerStartFailed names the node that exited or did not answer in time."""
        if self.brokers > 1:
            self.home.mkdir(parents=True, exist_ok=True)
            (self.home / "cluster.json").write_text(
                json.dumps({"brokers": self.brokers, "first_port": self.first_port}) + "\n", encoding="utf-8")
        down = [node for node in self.nodes if not node.is_up(timeout_s=1.0)]
        if not down:
            return False
        launched = [(node, node.launch(progress)) for node in down]
        deadline = time.monotonic() + wait_s
        for node, started in launched:
            try:
                node.await_up(started, deadline)
            except BrokerStartFailed as exc:
                raise BrokerStartFailed(f"node {node.quorum.node_id} of the cluster: {exc}") from None
        return True

    def start_node(self, node_id: int, wait_s: float = 120.0) -> None:
        """Start one node again (after `kill` or `stop_node`) and wait until it answers."""
        node = self.node(node_id)
        node.await_up(node.launch(), time.monotonic() + wait_s)

    def kill(self, node_id: int, sig: int = signal.SIGKILL) -> int | None:
        """Send `sig` to one node (SIGKILL: it dies mid-write, as in a power loss); its pid, or
        None when it did not run. With SIGKILL, returns once the process is gone."""
        node = self.node(node_id)
        pid = node.running_pid()
        if pid is None:
            return None
        os.kill(pid, sig)
        if sig == signal.SIGKILL:
            _wait_gone(pid, 10.0)
        return pid

    def stop_node(self, node_id: int, wait_s: float = 30.0) -> bool:
        """A clean stop of one node (SIGTERM: it hands its leaderships over first)."""
        return self.node(node_id).down(wait_s=wait_s)

    def down(self, wait_s: float = 30.0) -> list[int]:
        """Stop every node this home started; the ids of those that ran."""
        return [node.quorum.node_id for node in self.nodes if node.down(wait_s=wait_s)]

    def status(self) -> list[NodeStatus]:
        return [NodeStatus(node.quorum.node_id, node.port, node.controller_port, node.running_pid(),
                           node.is_up(timeout_s=1.0)) for node in self.nodes]


def partition_health(bootstrap: str, options: dict | None = None, timeout_s: float = 10.0) -> list[PartitionHealth]:
    """Every partition of every topic at `bootstrap` with its leader, replicas, in-sync
    replicas and its topic's min.insync.replicas (kafka-python's admin client)."""
    from kafka.errors import KafkaConnectionError

    for attempt in range(3):
        try:
            return _describe(bootstrap, options, timeout_s)
        except KafkaConnectionError:
            # a node just lost is still in the metadata for a few seconds, and the client may
            # pick it: ask again, as a person would
            if attempt == 2:
                raise
            time.sleep(1.0)
    return []


def _describe(bootstrap: str, options: dict | None, timeout_s: float) -> list[PartitionHealth]:
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType

    timeout_ms = int(timeout_s * 1000)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), client_id="gpubill-status",
                             request_timeout_ms=timeout_ms, bootstrap_timeout_ms=timeout_ms, **(options or {}))
    try:
        topics = sorted(admin.list_topics())
        if not topics:
            return []
        described = admin.describe_topics(topics)
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name) for name in topics])
        min_insync = _min_insync(configs)
        health = []
        for topic in described:
            for part in topic["partitions"]:
                health.append(PartitionHealth(
                    topic=topic["name"], partition=part["partition_index"], leader=part["leader_id"],
                    replicas=tuple(part["replica_nodes"]), isr=tuple(part["isr_nodes"]),
                    min_insync=min_insync.get(topic["name"], 1)))
        return sorted(health, key=lambda h: (h.topic, h.partition))
    finally:
        admin.close()


def _min_insync(described: dict) -> dict[str, int]:
    """{topic: min.insync.replicas} from describe_configs' answer (kafka-python 3:
    {"topic": {name: {config: {"value": …}}}})."""
    found: dict[str, int] = {}
    for name, entries in (described or {}).get("topic", {}).items():
        value = (entries.get("min.insync.replicas") or {}).get("value")
        if value is not None:
            found[name] = int(value)
    return found
