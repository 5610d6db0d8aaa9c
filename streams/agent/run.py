"""Builds the agent from its options and runs it until it is done or told to stop."""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from schemas.ids import is_id
from streams.agent.agent import Agent
from streams.agent.assignments import AssignmentsFile
from streams.agent.errors import AgentError
from streams.agent.metrics import AgentMetrics, Faults
from streams.agent.models import ModelMap
from streams.agent.sender import Producer, Sender, kafka_producer
from streams.agent.settings import kafka_settings, producer_options
from streams.agent.sources import make_source
from streams.agent.spool import Spool


@dataclass(frozen=True)
class AgentConfig:
    """`gpubill agent`'s options (gpubill/cli/agent.py says what each means)."""

    source: str
    assignments: Path
    site: str
    node: str
    spool: Path
    spool_max_bytes: int = 1024 << 20
    kafka: str | None = None  # None: GPUBILL_KAFKA, the settings file, localhost:9092
    metrics_port: int = 0
    metrics_address: str = "127.0.0.1"
    speed: float = 1.0
    model_map: Path | None = None


def build_agent(config: AgentConfig, *, stop: threading.Event | None = None, metrics: AgentMetrics | None = None,
                connect: Callable[[], Producer] | None = None) -> Agent:
    """The agent of `config`, not started; AgentError for an option that cannot work."""
    if not is_id(config.site):
        raise AgentError(f"--site {config.site!r}: must be a site id of the rules (a letter or digit, then up to 63 "
                         "letters, digits, '.', '_' or '-')")
    if not config.node or len(config.node) > 253 or not config.node.isprintable():
        raise AgentError(f"--node {config.node!r}: must be the node's host name (1–253 printable characters)")
    stop = stop or threading.Event()
    metrics = metrics or AgentMetrics()
    faults = Faults(metrics)
    settings = kafka_settings()
    bootstrap = config.kafka or settings.kafka
    if connect is None:
        options = producer_options(settings)

        def connect() -> Producer:
            return kafka_producer(bootstrap, options)

    models = ModelMap.from_file(config.model_map)
    source = make_source(config.source, models=models, faults=faults, speed=config.speed, sleep=stop.wait)
    spool = Spool(config.spool, max_bytes=config.spool_max_bytes,
                  on_torn=lambda message: faults.report("spool_torn", message, key=message))
    assignments = AssignmentsFile(config.assignments, faults=faults)
    assignments.load()
    sender = Sender(spool, connect, metrics=metrics, faults=faults, bootstrap=bootstrap)
    return Agent(source=source, spool=spool, sender=sender, assignments=assignments, metrics=metrics, faults=faults,
                 site=config.site, node=config.node, stop=stop)


def run_agent(config: AgentConfig) -> int:
    """Run the agent of `config` until SIGTERM/SIGINT (or a trace's end); its exit status."""
    stop = threading.Event()
    agent = build_agent(config, stop=stop)
    agent.metrics.serve(config.metrics_port, config.metrics_address)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return agent.run()
