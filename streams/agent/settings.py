"""The Kafka settings of the agent, read without the shell's settings stack.

The agent runs on every GPU node beside the customers' jobs, so it does not load
gpubill.config (pydantic, the rule files: some 15 MB and 0.2 s it has no use for). It reads
the same names with the same precedence — environment variable > settings file
(GPUBILL_SETTINGS, default ./gpubill.toml) > default — for the keys it needs: `kafka` and
the security keys, which streams/kafka/settings.py checks and turns into the client's
options exactly as for every other gpubill client.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from streams.agent.errors import AgentError
from streams.kafka.settings import client_options

KEYS = ("kafka", "kafka_security_protocol", "kafka_sasl_mechanism", "kafka_username", "kafka_password",
        "kafka_cafile")
DEFAULT_KAFKA = "localhost:9092"


def kafka_settings(environ: dict[str, str] | None = None) -> SimpleNamespace:
    """The agent's Kafka settings: each key from GPUBILL_<KEY>, else the settings file, else
    the default (kafka: localhost:9092; security: PLAINTEXT)."""
    environ = dict(os.environ if environ is None else environ)
    path = Path(environ.get("GPUBILL_SETTINGS", "gpubill.toml"))
    from_file: dict[str, Any] = {}
    if path.is_file():
        try:
            from_file = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise AgentError(f"settings file {path}: {exc}") from exc
    values = {key: environ.get(f"GPUBILL_{key.upper()}", from_file.get(key)) for key in KEYS}
    values["kafka"] = values["kafka"] or DEFAULT_KAFKA
    return SimpleNamespace(**values)


def producer_options(settings: SimpleNamespace) -> dict[str, Any]:
    """kafka-python keyword arguments for the security in `settings`; AgentError when they do not fit."""
    try:
        return client_options(settings, client="kafka-python")
    except ValueError as exc:
        raise AgentError(str(exc)) from None
