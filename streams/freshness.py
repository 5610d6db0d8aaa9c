"""Produce-to-ClickHouse latency, measured by the worker for `gpubill bench pipeline`."""

from __future__ import annotations

import time
from pathlib import Path

import orjson


class Freshness:
    """Produce-to-ClickHouse latency of every message, sampled once its batch is inserted.

    For `gpubill bench pipeline`: the worker writes the percentiles to `path` when it stops.
    """

    def __init__(self, path: Path, limit: int = 1_000_000) -> None:
        self.path, self.limit, self.latencies_s = path, limit, []

    def observe(self, timestamps: list[int]) -> None:
        """Record the latency of every record of a batch just inserted (Kafka timestamps, ms)."""
        now = time.time()
        if len(self.latencies_s) < self.limit:
            self.latencies_s += [now - stamp / 1000 for stamp in timestamps if stamp]

    def write(self) -> None:
        ordered = sorted(self.latencies_s)
        pick = (lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]) if ordered else (lambda q: None)
        self.path.write_bytes(orjson.dumps({"count": len(ordered), "p50_s": pick(0.50), "p99_s": pick(0.99)}))
