"""Errors of the streams package: one line each, saying what to do.

    StreamsError                 base; the CLI prints str(exc) and exits 1
    ├── KafkaUnreachable         no Kafka broker answers on the bootstrap servers
    ├── TopicsNotCreated         the broker refused a topic, or it did not appear in time
    ├── CorrectionsNotSynced     the log of corrections cannot be taken to its end before a plan
    ├── BooksFenced              a newer writer of the numbered series took over: this one refuses
    ├── BooksHalted              the books' projection stopped at a message it cannot read
    ├── ProjectionPending        a fact is on the log, its projection into ClickHouse is not done yet
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


class BooksFenced(StreamsError):
    """Raised when another process opened the numbered series' writer after this one (Kafka fenced
    this producer): this command's last fact was not recorded, and it stops."""


class BooksHalted(StreamsError):
    """Raised when the books' projection meets a message it cannot read (a newer schema version,
    a damaged value): it stops at that position, naming it; money is never skipped nor guessed."""


class ProjectionPending(StreamsError):
    """Raised when facts were recorded on the log but could not be projected (ClickHouse down):
    they are the books already, and the next command or worker projects them."""


class InputFileError(StreamsError):
    """Raised by `replay_file` when the file cannot be read."""


class MetricsPortUnavailable(StreamsError):
    """Raised by `Metrics.serve` when the metrics port is taken or not ours to bind."""
