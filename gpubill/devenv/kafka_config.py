"""What the local broker's home holds besides data: its configuration files and cluster id.

Pure text: `LocalBroker` writes these into its home on every start (ports may change),
and the cluster id once, when it formats the log directory.

    server.properties   `render_server_properties`: one combined broker+controller node
    log4j2.properties   `LOG4J2_PROPERTIES`: broker logging at WARN
    .formatted          the `new_cluster_id` the log directory was formatted with
"""

from __future__ import annotations

import base64
import uuid
from pathlib import Path


def render_server_properties(
    *, log_dir: Path, port: int, controller_port: int, host: str = "localhost", num_partitions: int = 8
) -> str:
    """server.properties of a combined broker+controller node, replication 1 everywhere."""
    lines = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{host}:{controller_port}",
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": str(num_partitions),
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    body = "\n".join(f"{key}={value}" for key, value in lines.items())
    return f"# Written by gpubill on every `gpubill kafka up`; edits are overwritten.\n{body}\n"


LOG4J2_PROPERTIES = """\
# Broker logging for gpubill's local broker: warnings and errors only.
status = error
shutdownHook = disable
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
# ... except the few lines that say the broker started and stopped.
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
"""


def new_cluster_id() -> str:
    """A KRaft cluster id: the url-safe base64 of 16 random bytes, without padding (22 chars).

    Never one that starts with "-": the storage tool's argument parser would read it as an
    option ("argument --cluster-id/-t: expected one argument"), one start in 64.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id
