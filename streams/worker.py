"""The Faust app: two agents fed by the feeder, and the worker that runs them.

    gpu.usage.v1 ┐            ┌─ channel ─► rate_readings ───┬─► ClickHouse readings_*, rated_seconds,
    gpu.power.v1 ┼─► Feeder ──┤                              │   conflicts, deadletters
    gpu.dead…v1  ┘ (getmany)  └─ channel ─► store_deadletters ├─► <group>.spend.v2 (live spend, then commit)
                                                              └─► gpu.deadletter.v1 (bad input)

The feeder (streams/kafka/feeder.py) consumes the topics in the worker's consumer group and
hands each agent whole batches; it commits offsets only after the agent has written them.
Both reading topics have the same partition count and key (gpu_uuid), and the range
assignor gives partition p of both to the same worker: a card's usage and power meet in
one process. Two threads do the heavy work (streams/pipeline.py): the rating thread rates
batch n + 1 while the writer thread inserts batch n.

The worker also takes the log of corrections, gpu.corrections.v1, into ClickHouse at start and
every CORRECTIONS_POLL_S (streams/corrections_sync.py; a failure waits for the next turn).

With live spend on and the tracker inline (`gpubill up`), the same Faust worker also runs the
spend tracker's app (streams/spend/app.py: a table of spend rounds, fed by a feeder of its
own in its own consumer group). This module, that one and streams/faust_app.py are the ones
that know Faust: the rest of streams/ is plain Python and asyncio.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import threading
import time
from concurrent.futures import Executor
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

import faust
from aiokafka.errors import KafkaError

from billing_rules.periods import previous_period
from schemas.topics import TOPIC_DEADLETTER, TOPIC_POWER, TOPIC_USAGE, spend_topic
from streams.corrections_sync import take_corrections
from streams.crash import crash
from streams.deadletters import deadletter_row_from_record
from streams.errors import StreamsError
from streams.faust_app import fed_app, faust_self_check, open_flow
from streams.kafka import record_sets
from streams.kafka.corrections import read_corrections
from streams.kafka.feeder import Batch, Feeder
from streams.kafka.logs import latest_spend_records
from streams.kafka.spend_producer import SpendProducer
from streams import liveness
from streams.liveness import Observation, Watchdog
from streams.kafka.record_sets import expand
from streams.kafka.settings import KafkaSettings, client_options
from streams.metrics import unregistered_counts
from streams.pipeline import Pipeline
from streams.rating.protocol import BatchResult, EncodedOutcome, utcnow
from streams.rules_watcher import RULES_POLL_S, RulesWatcher
from streams.spend.app import build_tracker_app
from streams.spend.tracker import SpendTracker

log = logging.getLogger("gpubill.worker")

LAG_POLL_S = 5.0
UNREGISTERED_POLL_S = 60.0
CORRECTIONS_POLL_S = 5.0
STOP_WAIT_S = 10.0  # a stop waits this long for the batches in flight (then leaves them uncommitted)
STALL_COMMIT_S = 10.0  # a stalled worker's last commit of what it wrote waits at most this long
STALL_STOP_S = 60.0  # a stalled worker whose clean stop takes longer leaves through the crash path


def _tune_garbage_collector() -> None:
    """Collect cycles less often: a batch holds tens of thousands of fetched records, and with
    Python's default thresholds every few hundred of them start a collection that walks the
    whole young heap (and now and then every object of the process), ≈ a tenth of the
    worker's CPU. The records are freed by reference counting anyway; what is alive after
    start-up is frozen out of the collector's walks."""
    if os.environ.get("GPUBILL_GC", "tuned") == "default":
        return
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)


def build_app(settings: KafkaSettings, pipeline: Pipeline) -> faust.App:
    """Create the Faust app with its two agents, each reading batches from its own channel.

    Checks first that the installed Faust and aiokafka fit what this worker relies on:
    Faust must (the worker cannot run otherwise); aiokafka's record-set path is logged and
    exported as a metric either way (streams/kafka/record_sets.py)."""
    problems = faust_self_check()
    if problems:
        raise StreamsError(f"the installed faust-streaming does not fit streams/worker.py: {'; '.join(problems)}")
    fast = record_sets.install()
    if pipeline.metrics:
        pipeline.metrics.fast_record_sets.set(int(fast.active))
    log.info("rating with the %s rater; record-set fetch path %s", pipeline.rater.kind,
             "active" if fast.active else f"OFF ({fast.reason})")
    app = fed_app(f"{settings.group}.agents", settings)  # the id names Faust's producer (dead letters)
    deadletter_topic = app.topic(TOPIC_DEADLETTER, key_serializer="raw", value_serializer="raw")
    spend_producer = SpendProducer(settings.kafka, spend_topic(settings.group), settings.partitions,
                                   client_options(settings, client="aiokafka"))
    readings_channel, deadletters_channel = app.channel(), app.channel()
    writes: set[asyncio.Future] = set()  # batches rated and being written
    stopping = asyncio.Event()

    @app.agent(readings_channel, name="rate_readings")
    async def rate_readings(batches):
        """Validate → dedupe → attribute → rate → ClickHouse, one fed batch at a time: a
        batch is rated while the one before it is still being written."""
        spent = None  # the turn of the batch before: spend records leave in batch order
        async for batch in batches:
            rated = await pipeline.in_rating_thread(pipeline.rate, batch.take())
            turn = asyncio.get_running_loop().create_future()
            writing = asyncio.ensure_future(_write_and_finish(batch, *rated, spent, turn))
            spent = turn
            writes.add(writing)  # the loop keeps only weak references to tasks
            writing.add_done_callback(writes.discard)
            yield rated[0]

    async def _write_and_finish(batch: Batch, result: BatchResult, now: datetime,
                                before: asyncio.Future | None, turn: asyncio.Future) -> None:
        # 1. ClickHouse (the writer keeps batches in order) and the batch's spend accounted;
        # 2. the spend records produced, after the batch before's, and acknowledged;
        # 3. the dead letters; then the feeder may commit. A crash before 3 re-reads the batch:
        #    rows rewrite themselves, spend already produced is filtered by its marks.
        records = await pipeline.in_writer_thread(pipeline.write, result, now, batch.source)
        if before is not None:
            await before
        try:
            await spend_producer.send(records)
        except Exception:  # noqa: BLE001 - a batch whose spend is lost must never be committed
            if stopping.is_set():  # closed by a stop that waited long enough: left uncommitted, re-read
                log.warning("the worker stops: a batch whose spend was not produced is left uncommitted")
                return
            crash("spend-not-produced", "could not produce spend records; the batch is not committed")
        turn.set_result(None)
        if pipeline.metrics and records:
            pipeline.metrics.spend_records.inc(len(records))
        await _send_deadletters(deadletter_topic, result)
        batch.finish(result)  # only now may the feeder commit these offsets
        if pipeline.metrics:
            pipeline.metrics.batch(result, pipeline.rater)

    @app.agent(deadletters_channel, name="store_deadletters")
    async def store_deadletters(batches):
        """Keep every dead letter in ClickHouse (those refused by `replay` arrive only here)."""
        async for batch in batches:
            now, messages = utcnow(), expand(batch.take())
            if pipeline.sink:
                rows = [deadletter_row_from_record(m, now) for m in messages]
                await pipeline.in_writer_thread(pipeline.sink.write, EncodedOutcome(), rows, "", batch.source)
            batch.finish(len(messages))
            yield len(messages)

    @app.task
    async def feed() -> None:
        """Run the feeder once both agents listen; if it fails the process exits uncommitted."""
        for channel in (readings_channel, deadletters_channel):
            while not channel.subscriber_count:
                await asyncio.sleep(0.01)
        open_flow(app)
        try:
            await app.gpubill_feeder.run()
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a worker that no longer consumes must not linger
            crash("feeder-failed", "the Kafka feeder failed (what was not committed is delivered again)")

    async def feed_readings(batch: Batch) -> None:
        await readings_channel.send(value=batch)

    async def feed_deadletters(batch: Batch) -> None:
        await deadletters_channel.send(value=batch)

    async def close_spend_producer() -> None:
        """At a stop, once the batches in flight are written and their spend produced (at most
        STOP_WAIT_S: what is not done then stays uncommitted, to be read again): close the spend
        producer. Left open, its tasks would hold the closing loop a second (mode's gathering
        of every future) — a second of every drain."""
        stopping.set()
        if writes:
            await asyncio.wait(set(writes), timeout=STOP_WAIT_S)
        await spend_producer.stop()

    app.gpubill_on_stop = close_spend_producer
    app.gpubill_agents = (rate_readings, store_deadletters)
    app.gpubill_feeder = Feeder(
        settings.kafka, settings.group,
        routes={TOPIC_USAGE: feed_readings, TOPIC_POWER: feed_readings, TOPIC_DEADLETTER: feed_deadletters},
        on_committed=pipeline.record, on_revoked=lambda: _forget(pipeline),
        on_assigned=(lambda assigned: _take_over_spend(settings, pipeline, assigned)) if pipeline.spend else None,
        security=client_options(settings, client="aiokafka"),
    )
    return app


def _forget(pipeline: Pipeline) -> None:
    """Partitions were revoked (their batches written, spent and committed): drop their state."""
    pipeline.rater.forget()
    if pipeline.spend is not None:
        pipeline.spend.forget()


async def _take_over_spend(settings: KafkaSettings, pipeline: Pipeline, assigned: set[tuple[str, int]]) -> None:
    """Load the spend records of the newly assigned reading partitions, before any is rated."""
    partitions = {partition for topic, partition in assigned if topic in (TOPIC_USAGE, TOPIC_POWER)}
    try:
        records = await latest_spend_records(settings.kafka, spend_topic(settings.group),
                                             client_options(settings, client="aiokafka"), settings.partitions)
    except Exception:  # noqa: BLE001 - rating without the marks would count a predecessor's spend again
        crash("spend-takeover", "could not read the spend topic at an assignment (nothing of it was rated)")
    loaded = pipeline.spend.load(records, partitions)
    log.info("took over the spend of %d partitions (%d tenant entries)", len(partitions), loaded)


async def _send_deadletters(topic: Any, result: BatchResult) -> None:
    """Produce the batch's dead letters and wait for the broker's acknowledgement.

    They are already in ClickHouse (written with the batch). A record the broker refuses
    is logged and counted, never allowed to stop the worker: the batch must still be marked done.
    """
    pending = []
    for letter in result.deadletters:
        value, headers = letter.record()
        try:
            pending.append(await topic.send(key=letter.message.key, value=value, headers=headers))
        except Exception:  # noqa: BLE001 - a refused dead letter must not stall the pipeline
            log.exception("could not produce a dead letter to Kafka (it is in ClickHouse): %s", letter.reason)
    for future in pending:
        try:
            await future
        except Exception:  # noqa: BLE001 - same as above
            log.exception("the broker refused a dead letter (it is in ClickHouse)")


class _CorrectionsSync:
    """The worker's turn at the log of corrections: the topic read in a thread of its own (a slow
    broker must not hold up the writer), then its new messages written in the writer thread,
    queued behind the batches as the other periodic jobs are. One sync at a time; a failure (Kafka
    or ClickHouse) is logged once, retried at the next turn, and never stops the worker."""

    def __init__(self, settings: KafkaSettings, pipeline: Pipeline) -> None:
        self.settings, self.pipeline = settings, pipeline
        self.first_done = asyncio.Event()  # set after the first attempt, failed or not
        self._lock: asyncio.Lock | None = None
        self._failing = False
        self._read = -1  # messages on the topic at the last reload of the pipeline's corrections

    @property
    def failing(self) -> bool:
        """True while the last sync failed."""
        return self._failing

    async def at_drain_end(self) -> bool:
        """Whether the log of corrections is in the database at a drain's end: the first sync
        awaited, and tried once more if it failed (False: the drain exits 1)."""
        await self.first_done.wait()
        if self._failing:
            await self.sync()
        return not self._failing

    async def sync(self) -> None:
        self._lock = self._lock or asyncio.Lock()
        async with self._lock:
            try:
                await self._sync()
            finally:
                self.first_done.set()

    async def _sync(self) -> None:
        loop = asyncio.get_running_loop()
        now_s = int(utcnow().timestamp())
        try:
            logged = await loop.run_in_executor(None, read_corrections, self.settings, now_s)
            report = await loop.run_in_executor(self.pipeline.writer, take_corrections,
                                                self.pipeline.sink.database, logged, now_s)
        except Exception:  # noqa: BLE001 - the corrections wait for the next turn; rating goes on
            if not self._failing:
                log.warning("could not sync gpu.corrections.v1 (retried every %.0f s)", CORRECTIONS_POLL_S,
                            exc_info=True)
            self._failing = True
            return
        if self._failing:
            log.info("gpu.corrections.v1 synced again")
        self._failing = False
        # Reloaded when the log grew, whoever stored what is new: `rerate`, `invoice run` and the
        # scheduler take the log to its end themselves (issue 36), and this sync then finds it stored.
        if report.changed or report.read != self._read:
            await loop.run_in_executor(self.pipeline.writer, self.pipeline.reload_corrections)
            self._read = report.read
        if report.changed:
            log.info("corrections: %d stored, %d conflicts, %d dead-lettered (%d messages on the topic)",
                     len(report.stored), len(report.conflicts), len(report.dead), report.read)


class _Worker(faust.Worker):
    def _setup_logging(self) -> None:
        """The command's own log format when it set one up (gpubill/logs.py: one JSON object per
        line for every logger); mode's coloured lines only when it did not."""
        if any(getattr(h.formatter, "gpubill_json", False) for h in logging.root.handlers):
            return
        super()._setup_logging()

    async def _sentinel_task(self) -> None:
        """mode sleeps a whole second here before closing the loop of a stopped worker; by
        then our batches are written and committed, so a stop (every drain) need not wait."""
        await asyncio.sleep(0.05)


def run_worker(settings: KafkaSettings, pipeline: Pipeline, *,
               drain_targets: dict[tuple[str, int], tuple[int, int]] | None = None,
               loglevel: str = "WARN", extra_tasks: list | None = None,
               on_progress: Callable[[int, int], None] | None = None, rules_dir: Path | None = None,
               tracker: SpendTracker | None = None, refresh_contexts: Callable[[], dict] | None = None,
               publish_positions: Callable[[list], None] | None = None, context_every_s: float = 10.0,
               tracker_executor: Executor | None = None, stall_s: float = 0.0,
               fault_stall_after: int | None = None) -> int:
    """Run the Faust worker until interrupted, or with `drain_targets` until they are reached.

    `drain_targets` maps (topic, partition) to (committed, end) offsets; `on_progress` is
    told (messages done, messages to do) while draining; with `rules_dir` the rule files
    are watched and reloaded when they change; with `tracker` the process also runs its share
    of the spend tracker (streams/spend/app.py), which reads the warehouse with
    `refresh_contexts` and stores positions with `publish_positions`, both in
    `tracker_executor` (default: the writer thread). With a sink, the log of corrections is
    synced at start and every CORRECTIONS_POLL_S; a drain ends after its first sync. With `stall_s`
    > 0 the worker watches its committed offsets (streams/liveness.py): a stall is logged and
    counted, and one that a restart can end stops the worker cleanly with status
    liveness.EXIT_STATUS (75) for its supervisor — or `gpubill up` — to start it again.
    `fault_stall_after`: the test-only hook of the feeder (GPUBILL_FAULT_STALL_AFTER). Returns the
    process exit code (0 when a drain completed). May run again in the same process once it returned.
    """
    _fresh_event_loop()
    app = build_app(settings, pipeline)
    app.gpubill_feeder.fault_stall_after = fault_stall_after
    tracker_app = None if tracker is None else build_tracker_app(
        settings, tracker, refresh_contexts=refresh_contexts,
        executor=tracker_executor or pipeline.writer, context_every_s=context_every_s, publish=publish_positions)
    outcome = {"code": 0}
    feeder: Feeder = app.gpubill_feeder
    corrections = _CorrectionsSync(settings, pipeline) if pipeline.sink is not None else None
    if corrections is not None:  # before the first batch: a late reading in a corrected span is rated as corrected
        pipeline.reload_corrections()

    if drain_targets is not None:

        async def reach(targets: dict[tuple[str, int], tuple[int, int]],
                        progress: Callable[[int, int], None] | None = None) -> None:
            goal = sum(end - start for start, end in targets.values())
            while True:
                done = sum(min(max(pipeline.positions.get(tp, start), start), end) - start
                           for tp, (start, end) in targets.items())
                if progress:
                    progress(done, goal)
                if done >= goal:
                    return
                await asyncio.sleep(0.1)

        @app.task
        async def stop_when_drained() -> None:
            await reach(drain_targets, on_progress)
            # The drain's own dead letters went to gpu.deadletter.v1 after the targets were
            # taken; consume them too (they are stored already: the rows only replace
            # themselves), so that a drain leaves the group at the end of every partition.
            try:
                own_deadletters = await feeder.behind(TOPIC_DEADLETTER, pipeline.positions)
            except KafkaError as exc:  # they are in ClickHouse; the next drain re-reads them
                log.warning("could not look for this drain's own dead letters: %s", exc)
                own_deadletters = {}
            await reach(own_deadletters)
            # a drain takes the log of corrections as it stood at the start too; one that cannot exits 1
            if corrections is not None and not await corrections.at_drain_end():
                log.error("the drain could not take gpu.corrections.v1 into the database (see the warning "
                          "above); run `gpubill corrections sync` or drain again")
                outcome["code"] = 1
            # Positions move only when the feeder has committed: everything is written.
            log.info("drained to the end offsets; committed")
            if tracker_app is not None:  # and the spend it produced is in the table, events emitted
                await tracker_app.gpubill_caught_up()
            os.kill(os.getpid(), signal.SIGTERM)

    if rules_dir is not None:

        @app.timer(RULES_POLL_S)
        async def reload_rules() -> None:
            """Pick up edited rule files; an invalid set is refused whole and the last good one kept."""
            await pipeline.in_rating_thread(watcher.poll)

        watcher = RulesWatcher(rules_dir, pipeline)

    if pipeline.metrics is not None:

        @app.timer(LAG_POLL_S)
        async def report_lag() -> None:
            """Consumer lag per assigned partition, for the Prometheus gauge."""
            ends = await feeder.lag()
            if ends:
                pipeline.metrics.lag(ends, pipeline.positions)

    if pipeline.metrics is not None and pipeline.sink is not None:

        @app.timer(UNREGISTERED_POLL_S)
        async def count_unregistered() -> None:
            """Tenant ids with usage but no registration, for the gauges: one query a minute in the
            writer thread (queued behind the batches handed to it, as `up`'s jobs are), never
            work per reading. A failure is logged and the gauges keep their last values."""
            current = pipeline.rules.period_of(int(utcnow().timestamp()))
            previous = previous_period(current)
            try:
                counts = await asyncio.get_running_loop().run_in_executor(
                    pipeline.writer, unregistered_counts, pipeline.sink.database, current, previous)
            except Exception:  # noqa: BLE001 - a gauge must never stop the worker
                log.warning("could not count unregistered tenants for the metrics", exc_info=True)
                return
            pipeline.metrics.unregistered(counts, current, previous)

    if corrections is not None:

        @app.task
        async def sync_corrections_at_start() -> None:
            await corrections.sync()

        @app.timer(CORRECTIONS_POLL_S)
        async def sync_corrections() -> None:
            """New messages of gpu.corrections.v1 into the database (streams/corrections_sync.py)."""
            await corrections.sync()

    stop_deadline: list[threading.Timer] = []
    if stall_s > 0:
        watchdog = Watchdog(stall_s)

        @app.timer(liveness.CHECK_EVERY_S)
        async def watch_liveness() -> None:
            """Is the worker still consuming (streams/liveness.py)? A stall is logged and counted;
            one that a restart can end stops the worker, cleanly, with liveness.EXIT_STATUS."""
            if outcome["code"] == liveness.EXIT_STATUS:
                return  # stopping already
            try:
                ends = await asyncio.wait_for(feeder.lag(), timeout=liveness.CHECK_EVERY_S * 5)
                # partitions never committed count from the log's start (retention), not from 0
                never = [tp for tp in ends if tp not in pipeline.positions]
                starts = await asyncio.wait_for(feeder.starts(never), timeout=liveness.CHECK_EVERY_S * 5)
            except (KafkaError, asyncio.TimeoutError):  # the broker does not answer: not this worker's stall
                watchdog.pause()
                return
            verdict = watchdog.observe(Observation(
                ends=ends, committed={**starts, **pipeline.positions}, rebalancing=feeder.rebalancing,
                sink_retries=pipeline.sink.stats.retries if pipeline.sink is not None else 0,
                batches_in_flight=feeder.in_flight), time.monotonic())
            if pipeline.metrics is not None:
                pipeline.metrics.liveness(verdict)
            if verdict.new:
                _log_stall(verdict)
            if verdict.restart:
                outcome["code"] = liveness.EXIT_STATUS
                await _stop_stalled(feeder, stop_deadline)

    for task in extra_tasks or []:
        app.task(task)

    if pipeline.freshness is not None:

        @app.timer(1.0)
        async def write_freshness() -> None:
            pipeline.freshness.write()

    worker = _Worker(*([app] if tracker_app is None else [app, tracker_app]), loglevel=loglevel, quiet=True,
                     redirect_stdouts=False)
    worker.spinner = None  # our own progress and logs; the spinner mangles non-terminal output
    _tune_garbage_collector()
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        if exc.code not in (0, None):
            outcome["code"] = int(exc.code) if isinstance(exc.code, int) else 1
    finally:
        for timer in stop_deadline:  # the stop ended in time
            timer.cancel()
    if outcome["code"] == liveness.EXIT_STATUS:
        # What was rated and not written is read again by whoever runs next — this process too,
        # in `gpubill up`: its in-memory state goes, exactly as with a new process.
        _forget(pipeline)
        if pipeline.metrics is not None:  # the stalled worker is gone; the next one's watchdog reports afresh
            pipeline.metrics.liveness(liveness.OK)
    return outcome["code"]


def _fresh_event_loop() -> None:
    """A new event loop when the last worker of this process closed its own (mode closes the
    loop at a stop): `gpubill up` runs the worker again after a stall."""
    try:
        closed = asyncio.get_event_loop_policy().get_event_loop().is_closed()
    except RuntimeError:  # no loop at all: mode makes one
        return
    if closed:
        asyncio.set_event_loop(asyncio.new_event_loop())


def _log_stall(verdict: liveness.Verdict) -> None:
    """One structured line per stall: the partitions, their lag, how long, what the worker waits on."""
    parts = [f"{topic}:{partition}" for topic, partition, _ in verdict.partitions]
    log.error("the worker is stalled: committed offsets have not moved for %.0f s while there is lag "
              "(%d messages on %s); waiting on %s; %s", verdict.stalled_s, verdict.lag, ", ".join(parts) or "no partition",
              liveness.WAITING_SAYS[verdict.waiting_on],
              "stopping it cleanly to be restarted" if verdict.restart else "not restarting it",
              extra={"stalled_partitions": {f"{t}:{p}": lag for t, p, lag in verdict.partitions},
                     "lag": verdict.lag, "stalled_s": round(verdict.stalled_s, 1), "waiting_on": verdict.waiting_on,
                     "restart": verdict.restart})


async def _stop_stalled(feeder: Feeder, deadline: list[threading.Timer]) -> None:
    """Stop a stalled worker cleanly: commit what it wrote (at most STALL_COMMIT_S: the stall may be
    Kafka's), then stop as at SIGTERM. Should that stop itself hang, the process leaves through
    the crash path after STALL_STOP_S (a thread's timer: this loop may be what hangs)."""
    try:
        await asyncio.wait_for(feeder.commit(), timeout=STALL_COMMIT_S)
    except (KafkaError, asyncio.TimeoutError) as exc:  # what is not committed is read again: idempotent
        log.warning("a stalled worker could not commit what it wrote before stopping: %r", exc)
    timer = threading.Timer(STALL_STOP_S, crash, ("stalled-stop-hung",
                                                  f"a stalled worker did not stop within {STALL_STOP_S:.0f} s"),
                            {"with_exception": False})
    timer.daemon = True
    timer.start()
    deadline.append(timer)
    os.kill(os.getpid(), signal.SIGTERM)


def run_tracker(settings: KafkaSettings, tracker: SpendTracker, *, refresh_contexts: Callable[[], dict],
                publish_positions: Callable[[list], None] | None, tracker_executor: Executor,
                context_every_s: float = 10.0, drain: bool = False, loglevel: str = "WARN",
                extra_tasks: list | None = None) -> int:
    """Run the spend tracker alone (`gpubill spend-tracker`, streams/spend/app.py) until
    interrupted, or with `drain` until every spend round produced before it started is applied
    and the tenants it holds are re-evaluated (their due events emitted). Returns the exit code."""
    tracker_app = build_tracker_app(settings, tracker, refresh_contexts=refresh_contexts, executor=tracker_executor,
                                    context_every_s=context_every_s, publish=publish_positions)
    outcome = {"code": 0}
    if drain:

        @tracker_app.task
        async def stop_when_caught_up() -> None:
            await tracker_app.gpubill_caught_up()
            log.info("spend tracker caught up with the spend topic; events emitted")
            os.kill(os.getpid(), signal.SIGTERM)

    for task in extra_tasks or []:
        tracker_app.task(task)
    worker = _Worker(tracker_app, loglevel=loglevel, quiet=True, redirect_stdouts=False)
    worker.spinner = None
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        if exc.code not in (0, None):
            outcome["code"] = int(exc.code) if isinstance(exc.code, int) else 1
    return outcome["code"]

