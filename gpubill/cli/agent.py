"""`gpubill agent`: sample a node's cards every second into Kafka through a spool (streams/agent/).

This module imports typer only; the agent's package is imported when the command runs,
and it imports no Faust, ClickHouse client, pydantic or worker code (docs/agent.md has
the figures: CPU, memory, the drain of an hour's spool).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Optional

import typer

SOURCE_HELP = ("nvml: the node's cards through NVML (nvidia-ml-py), sampled on each wall-clock second; "
               "trace:FILE: replay a recorded trace (one JSON sample per line: ts, gpu_uuid, gpu_model, util_pct, "
               "mem_used_mib, power_mw, energy_mj, energy_epoch), then exit 0 once Kafka acknowledged all of it.")


def _default_spool() -> Path:
    return Path(os.environ.get("GPUBILL_HOME", "var")) / "agent-spool"


def agent(
    source: str = typer.Option(..., "--source", help=SOURCE_HELP, metavar="nvml|trace:FILE"),
    assignments: Path = typer.Option(..., "--assignments", metavar="FILE", help=(
        'Who rents which card, written by the control plane: {"cards": {"<gpu_uuid>": {"tenant": "<id>", '
        '"instance": "<id>"}}}. Re-read when it changes; a card absent from it is not rented.')),
    site: str = typer.Option(..., "--site", help="The site of this node, as named in the rules (e.g. guian-1)."),
    node: str = typer.Option(None, "--node", help="This node's name in the readings. Default: the host name "
                             "(in Kubernetes, the node's name from the downward API)."),
    spool: Path = typer.Option(None, "--spool", metavar="DIR", help="Where readings wait for Kafka (local disk, "
                               "kept across restarts). Default: $GPUBILL_HOME/agent-spool (./var/agent-spool)."),
    spool_max_mb: int = typer.Option(1024, "--spool-max-mb", min=1, help="Past this size the agent stops "
                                     "sampling (it never evicts a reading) until Kafka takes what it holds. One hour "
                                     "of 8 cards is about 17 MB."),
    kafka: Optional[str] = typer.Option(None, "--kafka", metavar="HOST:PORT[,...]", help="Kafka bootstrap servers. "
                                        "Default: GPUBILL_KAFKA (localhost:9092). Security: GPUBILL_KAFKA_SECURITY_"
                                        "PROTOCOL and friends, as for every gpubill client."),
    metrics_port: int = typer.Option(9465, "--metrics-port", min=0, max=65535, help="Prometheus /metrics port (0: off)."),
    metrics_address: str = typer.Option("127.0.0.1", "--metrics-address", help="Address to serve metrics on "
                                        "(0.0.0.0 for a scraper on the node's network)."),
    speed: float = typer.Option(1.0, "--speed", min=0.0, help="Trace only: trace seconds per wall-clock second "
                                "(0: as fast as possible)."),
    model_map: Optional[Path] = typer.Option(None, "--model-map", metavar="FILE", help='Extra card names → catalog '
                                             'ids, JSON {"NVIDIA A800 80GB PCIe": "A800-80G"}; RTX 4090, A800 80GB and '
                                             'H800 are known already.'),
    log_level: str = typer.Option("INFO", "--log-level", help="DEBUG, INFO, WARNING or ERROR (JSON lines on stderr)."),
) -> None:
    """Sample a node's cards every second into Kafka through a spool that never loses a reading.

    Each card-second becomes a usage and a power reading (SPEC §3) with deterministic event ids, written to fsync'd segments in --spool before it is sent and removed only after Kafka acknowledged it (acks=all). Kafka away, a restart or a kill -9: the agent goes on where it stopped. Faults are metrics and log lines, never a stop (docs/agent.md).
    """  # noqa: E501 - one paragraph per line: the help keeps the docstring's line breaks
    from gpubill.logs import setup_logging
    from streams.agent.run import AgentConfig, run_agent

    setup_logging(log_level.upper())
    config = AgentConfig(
        source=source, assignments=assignments, site=site, node=node or socket.gethostname(),
        spool=spool or _default_spool(), spool_max_bytes=spool_max_mb << 20, kafka=kafka,
        metrics_port=metrics_port, metrics_address=metrics_address, speed=speed, model_map=model_map,
    )
    raise typer.Exit(run_agent(config))
