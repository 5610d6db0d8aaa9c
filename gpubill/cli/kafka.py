"""`gpubill kafka up|status|down`: the local broker, or a local cluster of several, for
development, the demo and the fault suite.

The broker itself (install, configure, start, probe) is gpubill/devenv/kafka_broker.py;
`kafka up --brokers 3` starts a three-node KRaft cluster (gpubill/devenv/kafka_cluster.py)
on consecutive ports from GPUBILL_KAFKA's, in GPUBILL_HOME/kafka-cluster, and prints the
GPUBILL_KAFKA that names all of them.
`gpubill kafka up --sasl` starts it with SASL/SCRAM and ACLs instead of PLAINTEXT: the
user of GPUBILL_KAFKA_USERNAME/GPUBILL_KAFKA_PASSWORD is created as a super user, and the
broker's own secrets are generated once into <home>/kafka/sasl-secrets.json (0600).
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import typer

from gpubill.cli.common import err, out, terminal_text
from gpubill.config import Settings, load_settings
from gpubill.errors import ConfigError

app = typer.Typer(help="The local Kafka broker (KRaft), or a local cluster of several, for development, the demo "
                  "and the fault suite.", no_args_is_help=True)


def _local_broker(settings: Settings, sasl: bool = False):
    from gpubill.devenv.kafka_broker import LocalBroker

    home = settings.home_path / "kafka"
    return LocalBroker(home, bootstrap=settings.kafka, sasl=_sasl_setup(settings, home) if sasl else None)


def _sasl_setup(settings: Settings, home: Path):
    """The SASL broker for `settings`' user, with the broker's secrets kept in `home`."""
    from gpubill.devenv.kafka_config import SaslSetup, ScramUser

    if settings.kafka_security_protocol != "SASL_PLAINTEXT" or not settings.kafka_sasl_mechanism.startswith("SCRAM-"):
        raise ConfigError("`gpubill kafka up --sasl` needs GPUBILL_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT, a SCRAM "
                          "GPUBILL_KAFKA_SASL_MECHANISM, GPUBILL_KAFKA_USERNAME and GPUBILL_KAFKA_PASSWORD")
    stored = _broker_secrets(home)
    try:
        user = ScramUser(settings.kafka_username or "", settings.kafka_password.get_secret_value(),
                         settings.kafka_sasl_mechanism)
        return SaslSetup(broker=ScramUser("broker", stored["broker"]), controller_password=stored["controller"],
                         users=(user,), super_users=(user.name,))
    except ValueError as exc:
        raise ConfigError(f"GPUBILL_KAFKA_USERNAME/GPUBILL_KAFKA_PASSWORD: {exc}") from None


def _broker_secrets(home: Path) -> dict[str, str]:
    """The broker's and the controller's passwords: made once, then read back (0600 file)."""
    path = home / "sasl-secrets.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    home.mkdir(parents=True, exist_ok=True)
    made = {"broker": secrets.token_hex(24), "controller": secrets.token_hex(24)}
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump(made, handle)
    return made


def _local_cluster(settings: Settings, brokers: int | None = None):
    """The cluster `kafka up --brokers N` started in GPUBILL_HOME/kafka-cluster (its recorded
    layout), or the one `brokers` asks for on GPUBILL_KAFKA's first port; None for neither."""
    from gpubill.devenv.kafka_cluster import LocalCluster

    home = settings.home_path / "kafka-cluster"
    if brokers is not None:
        try:
            return LocalCluster.for_bootstrap(home, brokers, settings.kafka.split(",")[0])
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return LocalCluster.recorded(home)


@app.command("up")
def kafka_up(
    wait_s: float = typer.Option(90.0, help="How long to wait for the broker (every node) to answer."),
    sasl: bool = typer.Option(False, "--sasl", help="SASL/SCRAM and ACLs (StandardAuthorizer) instead of PLAINTEXT; "
                              "GPUBILL_KAFKA_USERNAME becomes a super user. Only for a fresh home (`kafka down`, "
                              "then remove GPUBILL_HOME/kafka). One broker only."),
    brokers: int = typer.Option(1, "--brokers", min=1, max=9,
                                help="Nodes (each broker and controller): 3 is a cluster whose topics have three "
                                     "replicas and min.insync.replicas 2. Ports: GPUBILL_KAFKA's and the next ones."),
) -> None:
    """Start the local broker, or a cluster of --brokers nodes (idempotent), and wait until it answers."""
    settings = load_settings()
    progress = lambda msg: err.print(f"[dim]{terminal_text(msg)}[/dim]")  # noqa: E731
    if brokers > 1:
        if sasl:
            raise ConfigError("`gpubill kafka up --sasl` starts one broker; a SASL cluster is compose.yaml's "
                              "(docs/deployment.md)")
        cluster = _local_cluster(settings, brokers)
        started = cluster.up(wait_s=max(wait_s, 60.0), progress=progress)
        replication, min_insync = cluster.replication
        out.print(f"Kafka cluster of {brokers} {'started' if started else 'already up'}: topics get replication "
                  f"{replication}, min.insync.replicas {min_insync}", highlight=False)
        out.print(f"GPUBILL_KAFKA={cluster.bootstrap}", markup=False, highlight=False, soft_wrap=True)
        return
    broker = _local_broker(settings, sasl=sasl)
    started = broker.up(wait_s=wait_s, progress=progress)
    how = f" (SASL/SCRAM, super user {settings.kafka_username})" if sasl else ""
    out.print(f"Kafka broker {'started' if started else 'already up'} at {terminal_text(settings.kafka)}{terminal_text(how)}")


@app.command("status")
def kafka_status(
    as_json: bool = typer.Option(False, "--json", help="One JSON object: nodes, and the partitions short of replicas."),
) -> None:
    """Each node (id, port, pid, alive), and the partitions that are under-replicated (fewer
    in-sync replicas than replicas) or below min.insync.replicas (writes with acks=all wait
    there). The nodes are those `kafka up --brokers N` started, else the servers GPUBILL_KAFKA
    names (no pid: not started here). Exits 1 when a node is down or a partition is below
    min.insync."""
    from gpubill.devenv.kafka_cluster import NodeStatus, partition_health
    from streams.kafka.settings import client_options, kafka_security

    settings = load_settings()
    cluster = _local_cluster(settings)
    if cluster is not None:
        nodes, bootstrap = cluster.status(), cluster.bootstrap
    elif "," in settings.kafka:  # a cluster not started here: its servers as GPUBILL_KAFKA names them
        from gpubill.devenv.kafka_probe import probe_kafka, split_bootstrap

        bootstrap = settings.kafka
        sasl = kafka_security(settings).sasl
        nodes = [NodeStatus(number, port, 0, None, probe_kafka(host, port, 1.0, before_auth=sasl))
                 for number, (host, port) in enumerate(split_bootstrap(bootstrap), start=1)]
    else:
        broker = _local_broker(settings)
        nodes = [NodeStatus(1, broker.port, broker.controller_port, broker.running_pid(), broker.is_up(timeout_s=1.0))]
        bootstrap = settings.kafka
    alive = [node for node in nodes if node.alive]
    health = []
    if alive:
        try:
            health = partition_health(",".join(f"localhost:{n.port}" for n in alive) if cluster is not None
                                      else bootstrap,
                                      client_options(settings, client="kafka-python"))
        except Exception as exc:  # noqa: BLE001 — any client failure is "cannot tell", said once
            raise ConfigError(f"the brokers at {bootstrap} answer but could not be described: "
                              f"{type(exc).__name__}: {exc}") from None
    short = [h for h in health if h.under_replicated or h.below_min_insync]
    if as_json:
        print(json.dumps({
            "bootstrap": bootstrap,
            "nodes": [{"id": n.node_id, "port": n.port, "controller_port": n.controller_port, "pid": n.pid,
                       "alive": n.alive} for n in nodes],
            "partitions": len(health),
            "under_replicated": [_partition_json(h) for h in health if h.under_replicated],
            "below_min_insync": [_partition_json(h) for h in health if h.below_min_insync],
        }, indent=2))
    else:
        for n in nodes:
            state = "alive" if n.alive else ("running, not answering" if n.pid else "down")
            out.print(f"node {n.node_id}  localhost:{n.port}  pid {n.pid or '-'}  {state}", highlight=False)
        out.print(f"{len(health)} partitions; {sum(h.under_replicated for h in health)} under-replicated, "
                  f"{sum(h.below_min_insync for h in health)} below min.insync.replicas", highlight=False)
        for h in short:
            out.print(f"  {h.topic}[{h.partition}] leader {h.leader} replicas {list(h.replicas)} isr {list(h.isr)} "
                      f"min.insync {h.min_insync}", markup=False, highlight=False)
    if len(alive) < len(nodes) or any(h.below_min_insync for h in health):
        raise typer.Exit(1)


def _partition_json(h) -> dict:
    return {"topic": h.topic, "partition": h.partition, "leader": h.leader, "replicas": list(h.replicas),
            "isr": list(h.isr), "min_insync": h.min_insync}


@app.command("down")
def kafka_down() -> None:
    """Stop the local broker, and the local cluster, started by `gpubill kafka up`."""
    settings = load_settings()
    cluster = _local_cluster(settings)
    if cluster is not None:
        stopped = cluster.down()
        left = [node.node_id for node in cluster.status() if node.pid is not None or node.alive]
        if left:
            raise ConfigError(f"nodes {left} of the local Kafka cluster still run after `kafka down`; stop them by "
                              f"hand (their logs: {cluster.home}/node-*/broker.log)")
        out.print(f"Kafka cluster stopped (nodes {stopped} have exited)" if stopped
                  else "no node of the local Kafka cluster was running", highlight=False)
    broker = _local_broker(settings)
    pid = broker.running_pid()
    stopped = broker.down()
    # "stopped" only once it has: its process gone and nothing answering on its port any more
    if stopped and (broker.running_pid() is not None or _still_answers(broker)):
        raise ConfigError(f"the broker (pid {pid}) still answers at {settings.kafka} after `kafka down`; "
                          f"stop it by hand (its log: {broker.log_file})")
    if cluster is None or stopped:
        out.print(f"Kafka broker stopped (pid {pid} has exited)" if stopped else "no local Kafka broker was running")


def _still_answers(broker, wait_s: float = 10.0) -> bool:
    """True while something answers at the broker's address `wait_s` after it was stopped."""
    import time

    deadline = time.monotonic() + wait_s
    while broker.is_up(timeout_s=1.0):
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.2)
    return False
