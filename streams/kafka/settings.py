"""What the streams package reads of the settings — the shell's `gpubill.config.Settings`
satisfies `KafkaSettings`, and tests may pass any object with these attributes — the time
bound of its own Kafka client calls, and how every Kafka client gpubill builds
authenticates.

Security (GPUBILL_KAFKA_SECURITY_PROTOCOL and friends) is read in one place,
`kafka_security`, and turned into each client library's keyword arguments by
`client_options` (kafka-python: producers, admin; aiokafka: the feeder, the bench) and,
from the same `KafkaSecurity`, `streams.faust_app.broker_credentials` (the apps' Faust
producer). Every consumer gpubill builds takes its options from `consumer_options` (or
`committed_only` over a client's options): it reads committed records only (see
`READ_COMMITTED`); tests/unit/test_records.py holds every consumer to it. Objects without the security
attributes mean PLAINTEXT, as before. The password travels only into those keyword
arguments: `KafkaSecurity`'s repr and every message here leave it out.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

# Every Kafka client call of gpubill's own is bounded by this: an unreachable broker is a
# clear error (streams.errors.KafkaUnreachable), never a hang.
TIMEOUT_MS = 10_000

# Every consumer reads committed records only. Others produce to gpubill's topics —
# MirrorMaker 2, Kafka Connect, Flink's exactly-once sinks — with transactions that they abort
# and retry as a matter of course; read uncommitted, an aborted reading is billed and an
# aborted correction stored. Read committed, a consumer gets no record past the partition's
# last stable offset (the first offset of a transaction still open), and its end offsets
# are that offset too, so a read "to the end" ends there.
READ_COMMITTED = {"isolation_level": "read_committed"}

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
DEFAULT_SASL_MECHANISM = "SCRAM-SHA-512"


class KafkaSettings(Protocol):
    kafka: str  # bootstrap servers, "host:port[,host:port]"
    group: str  # consumer group of the workers
    partitions: int  # partitions of the topics gpubill creates
    # Optional (read with defaults by `kafka_security`): kafka_security_protocol,
    # kafka_sasl_mechanism, kafka_username, kafka_password (str or pydantic SecretStr),
    # kafka_cafile.


@dataclass(frozen=True)
class KafkaSecurity:
    """How a client authenticates to the brokers: the protocol, SASL user, CA file."""

    protocol: str = "PLAINTEXT"
    mechanism: str = DEFAULT_SASL_MECHANISM
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    cafile: str | None = None

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def describe(self) -> str:
        """For logs and messages: protocol, mechanism and user, never the password."""
        if not self.sasl:
            return self.protocol
        return f"{self.protocol} {self.mechanism} as {self.username}"


def security_problem(protocol: str, mechanism: str, username: str | None, password: str | None,
                     cafile: str | None) -> str | None:
    """What is wrong with this combination, as one line naming the variables; None when fine."""
    if protocol not in SECURITY_PROTOCOLS:
        return f"GPUBILL_KAFKA_SECURITY_PROTOCOL must be one of {', '.join(SECURITY_PROTOCOLS)}, got {protocol!r}"
    if mechanism not in SASL_MECHANISMS:
        return f"GPUBILL_KAFKA_SASL_MECHANISM must be one of {', '.join(SASL_MECHANISMS)}, got {mechanism!r}"
    sasl = protocol.startswith("SASL_")
    if sasl and not (username and password):
        return (f"GPUBILL_KAFKA_SECURITY_PROTOCOL={protocol} needs GPUBILL_KAFKA_USERNAME and "
                "GPUBILL_KAFKA_PASSWORD")
    if not sasl and (username or password):
        return (f"GPUBILL_KAFKA_USERNAME/GPUBILL_KAFKA_PASSWORD are set but GPUBILL_KAFKA_SECURITY_PROTOCOL is "
                f"{protocol}: set it to SASL_PLAINTEXT or SASL_SSL, or unset them")
    if sasl and mechanism == "PLAIN" and protocol != "SASL_SSL":
        return "GPUBILL_KAFKA_SASL_MECHANISM=PLAIN sends the password in clear: use it only with SASL_SSL, or use SCRAM"
    if cafile and protocol not in ("SSL", "SASL_SSL"):
        return f"GPUBILL_KAFKA_CAFILE is set but GPUBILL_KAFKA_SECURITY_PROTOCOL is {protocol} (no TLS)"
    if cafile and not os.path.isfile(cafile):
        return f"GPUBILL_KAFKA_CAFILE: {cafile} is not a readable file"
    if username is not None and any(c in username for c in ",=\n\r\0"):
        return "GPUBILL_KAFKA_USERNAME may not contain ',', '=' or control characters"
    return None


def _secret(value: Any) -> str | None:
    """A str, or the value of a pydantic SecretStr, or None."""
    if value is None:
        return None
    reveal = getattr(value, "get_secret_value", None)
    return str(reveal() if reveal else value)


def kafka_security(settings: Any) -> KafkaSecurity:
    """The security of `settings` (PLAINTEXT when it has none); ValueError when inconsistent."""
    security = KafkaSecurity(
        protocol=str(getattr(settings, "kafka_security_protocol", None) or "PLAINTEXT").upper(),
        mechanism=str(getattr(settings, "kafka_sasl_mechanism", None) or DEFAULT_SASL_MECHANISM).upper(),
        username=getattr(settings, "kafka_username", None) or None,
        password=_secret(getattr(settings, "kafka_password", None)) or None,
        cafile=getattr(settings, "kafka_cafile", None) or None,
    )
    problem = security_problem(security.protocol, security.mechanism, security.username, security.password,
                               security.cafile)
    if problem:
        raise ValueError(problem)
    return security


def client_options(settings: Any, *, client: Literal["kafka-python", "aiokafka"]) -> dict[str, Any]:
    """Keyword arguments that make a kafka-python or aiokafka client authenticate as configured.

    PLAINTEXT: `{"security_protocol": "PLAINTEXT"}`, what both libraries default to. TLS
    trusts the system's CAs, or only GPUBILL_KAFKA_CAFILE's when set; hostnames are checked.
    """
    security = kafka_security(settings)
    options: dict[str, Any] = {"security_protocol": security.protocol}
    if security.sasl:
        options.update(sasl_mechanism=security.mechanism, sasl_plain_username=security.username,
                       sasl_plain_password=security.password)
    if security.tls:
        if client == "aiokafka":
            options["ssl_context"] = ssl_context(security.cafile)
        elif security.cafile:
            options["ssl_cafile"] = security.cafile
    return options


def committed_only(options: dict[str, Any]) -> dict[str, Any]:
    """A client's keyword arguments (`client_options`) for a consumer: committed records only."""
    return {**options, **READ_COMMITTED}


def consumer_options(settings: Any, *, client: Literal["kafka-python", "aiokafka"]) -> dict[str, Any]:
    """A consumer's keyword arguments: `client_options` and committed records only (`READ_COMMITTED`)."""
    return committed_only(client_options(settings, client=client))


def ssl_context(cafile: str | None) -> Any:
    """A TLS context that checks hostnames and trusts `cafile` (or the system's CAs)."""
    import ssl

    return ssl.create_default_context(cafile=cafile)
