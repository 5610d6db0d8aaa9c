"""`gpubill kafka up|down`: the local single-node broker for development and the demo.

The broker itself (install, configure, start, probe) is gpubill/devenv/kafka_broker.py.
"""

from __future__ import annotations

import typer

from gpubill.cli.common import err, out
from gpubill.config import Settings, load_settings

app = typer.Typer(help="The local single-node Kafka broker (KRaft), for development and the demo.", no_args_is_help=True)


def _local_broker(settings: Settings):
    from gpubill.devenv.kafka_broker import LocalBroker

    return LocalBroker(settings.home_path / "kafka", bootstrap=settings.kafka)


@app.command("up")
def kafka_up(wait_s: float = typer.Option(90.0, help="How long to wait for the broker to answer.")) -> None:
    """Start the local broker (idempotent) and wait until it answers."""
    settings = load_settings()
    broker = _local_broker(settings)
    started = broker.up(wait_s=wait_s, progress=lambda msg: err.print(f"[dim]{msg}[/dim]"))
    out.print(f"Kafka broker {'started' if started else 'already up'} at {settings.kafka}")


@app.command("down")
def kafka_down() -> None:
    """Stop the local broker started by `gpubill kafka up`."""
    settings = load_settings()
    stopped = _local_broker(settings).down()
    out.print("Kafka broker stopped" if stopped else "no local Kafka broker was running")
