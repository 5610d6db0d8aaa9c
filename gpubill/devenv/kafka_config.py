"""What the local broker's home holds besides data: its configuration files and cluster id.

Pure text: `LocalBroker` writes these into its home on every start (ports may change),
and the cluster id once, when it formats the log directory.

    server.properties   `render_server_properties`: one combined broker+controller node
    log4j2.properties   `LOG4J2_PROPERTIES`: broker logging at WARN
    .formatted          the `new_cluster_id` the log directory was formatted with

By default the broker speaks PLAINTEXT on loopback. With a `SaslSetup` (`gpubill kafka up
--sasl`, the SASL e2e test) it is a small secured cluster instead: clients authenticate
with SCRAM-SHA-256/512 (SASL_PLAINTEXT: still loopback only, no TLS), the broker itself as
the SCRAM super user `broker`, the controller listener with PLAIN (SCRAM credentials live
in the metadata log, which the controller must read before anyone can log in), and
StandardAuthorizer refuses whatever no ACL allows. `scram_arguments` are the StorageTool
arguments that create the SCRAM users when the log directory is formatted.
"""

from __future__ import annotations

import base64
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from schemas.topics import replication_for

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
# Passwords go into JAAS lines and StorageTool's `[name=…,password=…]`: keep to characters
# neither quotes nor separates there.
_SAFE_SECRET = re.compile(r"[A-Za-z0-9_.~+/@%:^!*-]{8,200}")
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True)
class ScramUser:
    """A SCRAM user created when the log directory is formatted."""

    name: str
    password: str = field(repr=False)
    mechanism: str = "SCRAM-SHA-512"

    def __post_init__(self) -> None:
        if not _SAFE_NAME.fullmatch(self.name):
            raise ValueError(f"SCRAM user name {self.name!r}: use 1-64 letters, digits, '.', '_' or '-'")
        if not _SAFE_SECRET.fullmatch(self.password):
            raise ValueError(f"SCRAM user {self.name}: the password needs 8-200 characters from "
                             "letters, digits and _.~+/@%:^!*- (no quotes, spaces, commas, '=' or brackets)")
        if self.mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"SCRAM user {self.name}: mechanism must be one of {', '.join(SCRAM_MECHANISMS)}")


@dataclass(frozen=True)
class SaslSetup:
    """A SASL/SCRAM broker with StandardAuthorizer: who it is, who may log in, who is super."""

    broker: ScramUser  # the inter-broker user; always a super user
    controller_password: str = field(repr=False)  # PLAIN, user `controller`, controller listener only
    users: tuple[ScramUser, ...] = ()  # clients, each created with its mechanism
    super_users: tuple[str, ...] = ()  # besides `broker` and `controller`, e.g. ("admin",)

    def __post_init__(self) -> None:
        ScramUser("controller", self.controller_password)  # the same rules for the PLAIN secret
        names = [self.broker.name, *(u.name for u in self.users)]
        if len(set(names)) != len(names) or "controller" in names:
            raise ValueError("SCRAM user names must be distinct and not `controller`")
        for name in self.super_users:
            ScramUser(name, "x" * 8)  # checks the name

    @property
    def principals(self) -> str:
        """`super.users`: the broker, the controller and the named super users."""
        names = dict.fromkeys([self.broker.name, "controller", *self.super_users])
        return ";".join(f"User:{name}" for name in names)


def scram_arguments(sasl: SaslSetup) -> list[str]:
    """StorageTool `format` arguments that create every SCRAM user of `sasl`."""
    arguments = []
    for user in (sasl.broker, *sasl.users):
        arguments += ["--add-scram", f"{user.mechanism}=[name={user.name},password={user.password}]"]
    return arguments


def _sasl_properties(sasl: SaslSetup) -> dict[str, str]:
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required"
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule required"
    broker = f'{scram} username="{sasl.broker.name}" password="{sasl.broker.password}";'
    secret = sasl.controller_password
    return {
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": ",".join(SCRAM_MECHANISMS),
        "sasl.mechanism.inter.broker.protocol": sasl.broker.mechanism,
        # Each mechanism of the client listener needs a login module; the broker logs in
        # to itself with the inter-broker mechanism's username and password.
        **{f"listener.name.sasl_plaintext.{m.lower()}.sasl.jaas.config": broker if m == sasl.broker.mechanism
           else f"{scram};" for m in SCRAM_MECHANISMS},
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config":
            f'{plain} username="controller" password="{secret}" user_controller="{secret}";',
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": sasl.principals,
        "allow.everyone.if.no.acl.found": "false",
    }


@dataclass(frozen=True)
class Quorum:
    """Where a node stands in its cluster: its id and every node's controller port.

    One node (the default) is the single broker of development; three are the smallest
    cluster that survives one node's loss with `min.insync.replicas` 2 (`replication`)."""

    node_id: int = 1
    controller_ports: tuple[int, ...] = ()  # of nodes 1…n, in order; () = this node alone

    def voters(self, host: str, controller_port: int) -> str:
        ports = self.controller_ports or (controller_port,)
        return ",".join(f"{number}@{host}:{port}" for number, port in enumerate(ports, start=1))

    @property
    def size(self) -> int:
        return max(1, len(self.controller_ports))


def render_server_properties(
    *, log_dir: Path, port: int, controller_port: int, host: str = "localhost", num_partitions: int = 8,
    sasl: SaslSetup | None = None, quorum: Quorum = Quorum(),
) -> str:
    """server.properties of a combined broker+controller node of `quorum` (alone by default).

    Its internal topics and the topics it creates by default get `replication_for` the
    quorum's size; an unclean leader election (a replica that missed acknowledged writes
    becoming leader) is never allowed. With `sasl` the client listener is SASL_PLAINTEXT
    (SCRAM) and ACLs are enforced; the file then holds the broker's and the controller's
    passwords (the caller makes it 0600).
    """
    replication, min_insync = (str(n) for n in replication_for(quorum.size))
    lines = {
        "process.roles": "broker,controller",
        "node.id": str(quorum.node_id),
        "controller.quorum.voters": quorum.voters(host, controller_port),
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": str(num_partitions),
        "offsets.topic.replication.factor": replication,
        "transaction.state.log.replication.factor": replication,
        "transaction.state.log.min.isr": min_insync,
        "share.coordinator.state.topic.replication.factor": replication,
        "share.coordinator.state.topic.min.isr": min_insync,
        "default.replication.factor": replication,
        "min.insync.replicas": min_insync,
        "unclean.leader.election.enable": "false",
        "group.initial.rebalance.delay.ms": "0",
    }
    if quorum.size > 1:
        # A node that stops heart-beating is fenced, and its partitions get new leaders, after
        # 4 s instead of Kafka's 9: the pipeline's stall when a leader dies (the fault suite
        # measures it) is mostly this wait. Still four missed heartbeats, never one slow GC.
        lines["broker.heartbeat.interval.ms"] = "1000"
        lines["broker.session.timeout.ms"] = "4000"
    if sasl is not None:
        lines["listeners"] = f"SASL_PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}"
        lines["advertised.listeners"] = f"SASL_PLAINTEXT://{host}:{port}"
        lines.update(_sasl_properties(sasl))
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
