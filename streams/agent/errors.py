"""Errors of the node agent: each one line that says what to do.

    StreamsError (streams/errors.py)
    └── AgentError                 base; `gpubill agent` prints str(exc) and exits 1
        ├── SourceUnavailable      the card source cannot start (no NVML, a binding that does not fit, no trace)
        ├── AssignmentsUnreadable  the assignments file is missing or malformed at start-up
        ├── SpoolLocked            another agent holds the spool directory
        └── SpoolDamaged           a spool segment is damaged before its last record (not a torn tail)

Faults met while running (a card lost, an NVML error, a bad trace line, Kafka away, a
full disk) are not raised: each is a metric and a rate-limited log line (metrics.py).
"""

from __future__ import annotations

from streams.errors import StreamsError


class AgentError(StreamsError):
    """Base of the agent's errors: raised at start-up, before any card is sampled."""


class SourceUnavailable(AgentError):
    """Raised when `--source` cannot start: NVML missing or failing, the binding lacking a
    function the adapter uses, or the trace file unreadable."""


class AssignmentsUnreadable(AgentError):
    """Raised at start-up when the assignments file is missing or malformed: without a last
    good one, every rented card would be sent as not rented."""


class SpoolLocked(AgentError):
    """Raised when another process holds the spool directory's lock."""

    def __init__(self, directory: str) -> None:
        super().__init__(f"spool {directory} is held by another gpubill agent: stop it, or give this one "
                         "its own --spool DIR")


class SpoolDamaged(AgentError):
    """Raised when a segment that is not the last one holds a damaged record: not a torn tail
    of a crash but damage on disk; the agent refuses rather than skip readings."""
