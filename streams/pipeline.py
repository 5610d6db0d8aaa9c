"""What the worker's agents share: rules, the rater, the sink, two threads, drain progress.

`Pipeline.rate` runs in the rating thread (the only user of the rater) and `persist` in the
writer thread, so batch n + 1 is rated (mostly in the Rust core, without the GIL) while
batch n is written. Neither knows Faust or which rater it holds (streams/worker.py drives
them; streams/rating/protocol.py is the rater's contract).
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from streams.crash import crash
from streams.freshness import Freshness
from streams.kafka.positions import Positions
from streams.lookup import StoredLookup
from streams.metrics import Metrics
from schemas.spend import SpendRound
from streams.rating.protocol import BatchRater, BatchResult, utcnow
from streams.sink import ClickHouseSink
from streams.spend.ledger import SpendLedger
from usage.corrections import stored_corrections
from usage.regenerate import correct_card_hours
from warehouse.errors import DatabaseError, DiskFull, StatementRefused


@dataclass
class Pipeline:
    """What the agents share: rules, state, the sink, progress towards a drain target."""

    rules: Any
    sink: ClickHouseSink | None
    rater: BatchRater
    metrics: Metrics | None = None
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    freshness: "Freshness | None" = None
    spend: SpendLedger | None = None  # live spend (streams/spend/ledger.py); None: not tracked
    # The stored corrections (usage/corrections.py), reloaded after each sync of gpu.corrections.v1:
    # a batch writing into an hour one of them touches is rated again as corrected (`persist`).
    corrections: list = field(default_factory=list)
    # Two threads: one rates batch n + 1 while the other writes batch n to ClickHouse.
    executor: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="rating"))
    writer: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="writer"))

    def record(self, positions: dict[tuple[str, int], int]) -> None:
        for position, next_offset in positions.items():
            if next_offset > self.positions.get(position, 0):
                self.positions[position] = next_offset

    def use_rules(self, rules: Any) -> None:
        """Price from now on with `rules` (already validated as a whole by load_rules); when the
        rater refuses them, nothing changes (the rater first, then the set the pipeline names)."""
        self.rater.use_rules(rules)
        self.rules = rules

    def rate(self, items: list) -> tuple[BatchResult, datetime]:
        """Validate, deduplicate, attribute and price a batch — `Message`s and `RecordSet`s —
        in the rating thread (the only user of the rater). Returns the result and its time."""
        now = utcnow()
        revision = getattr(self.rules, "revision", "")  # the rules the rater prices with (use_rules swaps both)
        lookup = StoredLookup(self.sink.database, before_read=self.writes_done) if self.sink else None
        if self.spend is None:
            result = self.rater.rate_batch(items, now=now, lookup=lookup, timestamps=self.freshness is not None)
        else:
            result = self.rater.rate_batch(items, now=now, lookup=lookup, timestamps=True,
                                           spend_marks=self.spend.filter_marks)
        result.rules_revision = revision
        return result, now

    def persist(self, result: BatchResult, now: datetime, source: Positions | None = None) -> BatchResult:
        """Write a rated batch to ClickHouse, in the writer thread; returns once acknowledged.
        `source`: the offsets it spans, which name its inserts (streams/sink.py)."""
        if self.sink:
            started = time.monotonic()
            rows = [letter.row(now) for letter in result.deadletters]
            self.sink.write(result.outcome, rows, result.rules_revision, source)
            if self.corrections:
                correct_card_hours(self.sink.database, self.rules, result.outcome.hours, self.corrections)
            if self.metrics:
                self.metrics.flushed(time.monotonic() - started, result.outcome, len(rows))
            if self.freshness is not None:
                self.freshness.observe(result.timestamps)
        return result

    def reload_corrections(self) -> int:
        """Read the stored corrections again (in the writer thread, after a sync); returns how many."""
        if self.sink:
            self.corrections = stored_corrections(self.sink.database, 0, 2**32 - 1)
        return len(self.corrections)

    def write(self, result: BatchResult, now: datetime, source: Positions | None = None) -> list[SpendRound]:
        """`persist`, then account the batch's spend: the spend rounds to produce now, in batch
        order (both in the writer thread). The batch is in ClickHouse before its spend leaves
        the worker: see streams/spend/ledger.py for why that order."""
        self.persist(result, now, source)
        if self.spend is None:
            return []
        oldest_ms = min(result.timestamps, default=0)
        return self.spend.apply(result.spend, result.positions, oldest_ms=oldest_ms,
                                now_ms=int(utcnow().timestamp() * 1000))

    def handle(self, items: list) -> BatchResult:
        """Rate a batch and write it, in the calling thread (tests, tools)."""
        return self.persist(*self.rate(items))

    def writes_done(self) -> None:
        """Wait until every write handed to the writer thread so far is acknowledged: a
        ClickHouse look-up while rating must see the batches before it."""
        self.writer.submit(lambda: None).result()

    async def in_rating_thread(self, func, *args):
        """Run `func` in the rating thread (see `in_thread`)."""
        return await self.in_thread(self.executor, func, *args)

    async def in_writer_thread(self, func, *args):
        """Run `func` in the writer thread (see `in_thread`)."""
        return await self.in_thread(self.writer, func, *args)

    async def in_thread(self, executor: ThreadPoolExecutor, func, *args):
        """Run `func` in `executor`'s thread. If it fails — ClickHouse's disk is full, ClickHouse refused
        a statement for good or stayed unavailable past the sink's retries, or a bug — the process exits at once
        through streams/crash.py, the batch never marked done and so never
        committed: a crashed agent would otherwise leave a worker that consumes nothing (and a
        drain that never ends)."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(executor, func, *args)
        except DiskFull as exc:  # no retry frees a disk: stop now, say where, and what to do
            crash("disk-full", f"no space left on {exc.path} ({exc.detail}): free space on {exc.path}, then restart "
                  "the worker; nothing after the last committed batch was committed", with_exception=False)
        except StatementRefused as exc:  # retrying cannot help: stop, uncommitted, and say why in one line
            crash("clickhouse-refused", f"{exc} (ClickHouse error code {exc.code}: retrying cannot help); the "
                  "batch's offsets are not committed", with_exception=False)
        except DatabaseError:
            crash("clickhouse-unavailable", "ClickHouse did not accept a batch; its offsets are not committed")
        except Exception:  # noqa: BLE001 - see the docstring
            crash("batch-failed", "a batch could not be processed; its offsets are not committed")
