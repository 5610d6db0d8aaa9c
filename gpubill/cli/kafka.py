"""`gpubill kafka up|down`: the local single-node broker for development and the demo.

The broker itself (install, configure, start, probe) is gpubill/devenv/kafka_broker.py.
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

app = typer.Typer(help="The local single-node Kafka broker (KRaft), for development and the demo.", no_args_is_help=True)


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


@app.command("up")
def kafka_up(
    wait_s: float = typer.Option(90.0, help="How long to wait for the broker to answer."),
    sasl: bool = typer.Option(False, "--sasl", help="SASL/SCRAM and ACLs (StandardAuthorizer) instead of PLAINTEXT; "
                              "GPUBILL_KAFKA_USERNAME becomes a super user. Only for a fresh home (`kafka down`, "
                              "then remove GPUBILL_HOME/kafka)."),
) -> None:
    """Start the local broker (idempotent) and wait until it answers."""
    settings = load_settings()
    broker = _local_broker(settings, sasl=sasl)
    started = broker.up(wait_s=wait_s, progress=lambda msg: err.print(f"[dim]{terminal_text(msg)}[/dim]"))
    how = f" (SASL/SCRAM, super user {settings.kafka_username})" if sasl else ""
    out.print(f"Kafka broker {'started' if started else 'already up'} at {terminal_text(settings.kafka)}{terminal_text(how)}")


@app.command("down")
def kafka_down() -> None:
    """Stop the local broker started by `gpubill kafka up`."""
    settings = load_settings()
    broker = _local_broker(settings)
    pid = broker.running_pid()
    stopped = broker.down()
    # "stopped" only once it has: its process gone and nothing answering on its port any more
    if stopped and (broker.running_pid() is not None or _still_answers(broker)):
        raise ConfigError(f"the broker (pid {pid}) still answers at {settings.kafka} after `kafka down`; "
                          f"stop it by hand (its log: {broker.log_file})")
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
