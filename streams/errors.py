"""Errors of the streams package: one line each, saying what to do.

    StreamsError                 base; the CLI prints str(exc) and exits 1
    ├── KafkaUnreachable         no Kafka broker answers on the bootstrap servers
    ├── TopicsNotCreated         the broker refused a topic, or it did not appear in time
    ├── CorrectionsNotSynced     the log of corrections cannot be taken to its end before a plan
    ├── InputFileError           a file to replay is missing or unreadable
    └── MetricsPortUnavailable   the Prometheus port cannot be served

Kafka clients' own errors are translated where they are met (streams/kafka/), `from` the
original; ClickHouse errors are the warehouse's (`warehouse.errors`).
"""


class StreamsError(Exception):
    """Base of every error of the streams package."""


class KafkaUnreachable(StreamsError):
    """Raised when no Kafka broker answers on the bootstrap servers."""

    def __init__(self, bootstrap: str, detail: str | None = None) -> None:
        why = f" ({detail})" if detail else ""
        super().__init__(
            f"no Kafka broker answers at {bootstrap}{why}: start one with `gpubill kafka up` "
            f"or point GPUBILL_KAFKA at a running broker"
        )


class TopicsNotCreated(StreamsError):
    """Raised by `ensure_topics` when the broker refuses a topic or it does not appear in time."""


class CorrectionsNotSynced(StreamsError):
    """Raised by `sync_to_end` (streams/corrections_sync.py) when gpu.corrections.v1 cannot be read,
    or what is on it cannot be stored: a command that plans money refuses rather than plan without them."""


class InputFileError(StreamsError):
    """Raised by `replay_file` when the file cannot be read."""


class MetricsPortUnavailable(StreamsError):
    """Raised by `Metrics.serve` when the metrics port is taken or not ours to bind."""
