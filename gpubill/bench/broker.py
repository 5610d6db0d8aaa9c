"""A benchmark's private Kafka broker, and the settings of commands run against it (issue 37).

    private_broker(home, port, say=)                      a context: a broker up under `home`
    bench_settings(bootstrap, clickhouse, home, rules=, group=)   the Settings of a command run on it
    temporary_broker(port, clickhouse, rules=, group=, say=)      a context: both, the broker's home
                                                                  a temporary directory

Every money fact is an event on gpu.books.v1 (billing/books.py): a write with no books open
raises BooksNotOpen, and a command opens the log's books around its work
(gpubill/cli/books.py `open_books`). A benchmark that invoices, re-rates, registers tenants or
makes keys opens them the same way, on a broker of its own, so that what it times includes
the log — a benchmark of a path no command runs proves nothing. The broker lives in a
directory of the benchmark's (a temporary one: its books start empty, as its database does)
and is stopped when the block ends, whatever happened.

The benchmarks' default ports (28392 month, 28492 rerate, 28592 api, 28692 books; each + 1 for
the controller) lie below the ports the test suite reserves (tests/ports.py: 29092 up) and
Linux's ephemeral range (32768–60999), where any passing client connection on the machine can
hold a port for a minute and the broker then refuses to start.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from gpubill.config import Settings
from gpubill.devenv.kafka_broker import LocalBroker

__all__ = ["bench_settings", "private_broker", "temporary_broker"]


@contextmanager
def private_broker(home: Path, port: int, say: Callable[[str], None] = lambda _: None) -> Iterator[LocalBroker]:
    """A single-node broker under `home` on `port` (its controller on port + 1), up for the block."""
    broker = LocalBroker(home, bootstrap=f"localhost:{port}", port=port, controller_port=port + 1)
    broker.up(progress=say)
    try:
        yield broker
    finally:
        broker.down()


def bench_settings(bootstrap: str, clickhouse: str, home: Path, *, rules: Path | None = None,
                   group: str = "bench") -> Settings:
    """The settings of a command run against a private broker and database: PLAINTEXT, no metrics
    port, whatever GPUBILL_* says; `rules` the directory whose rule set `open_books(rules=…)` records."""
    extra = {"rules": str(rules)} if rules is not None else {}
    return Settings(kafka=bootstrap, clickhouse=clickhouse, home=str(home), group=group, metrics_port=0,
                    kafka_security_protocol="PLAINTEXT", kafka_username=None, kafka_password=None, kafka_cafile=None,
                    **extra)


@contextmanager
def temporary_broker(port: int, clickhouse: str, *, rules: Path | None = None, group: str = "bench",
                     say: Callable[[str], None] = lambda _: None) -> Iterator[Settings]:
    """A private broker in a temporary directory (its books empty), up for the block; yields the
    Settings of commands run on it and `clickhouse`."""
    with tempfile.TemporaryDirectory(prefix="gpubill-bench-kafka-") as home, \
            private_broker(Path(home), port, say) as broker:
        yield bench_settings(broker.bootstrap, clickhouse, Path(home), rules=rules, group=group)
