"""The long-running processes: `gpubill worker`, `gpubill up` and `gpubill scheduler`.

The worker is streams/worker.py (Faust) around a streams/pipeline.py `Pipeline`; the
scheduler is billing/scheduler.py's billing, rollup and dunning jobs on APScheduler. `up` runs both in one
process, for the embedded database, which one process at a time may open, and serves the
tenant API and web page (tenant_api/) from a thread of that process on the same database —
and the database itself, through the gateway (gpubill/devenv/ch_gateway.py `start`), to every
other command, which finds it by the record beside it (warehouse/served.py). What `up` says
when it starts and whether it already runs: running.py.
"""

from __future__ import annotations

import logging
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import timezone
from pathlib import Path
from typing import Optional

import typer

from gpubill.cli.common import connect, err, out, read_rules, take_corrections_to_end
from gpubill.errors import GpubillError
from gpubill.config import Settings, load_settings
from gpubill.logs import setup_logging
from schemas.topics import PIPELINE_TOPICS
from streams.liveness import EXIT_STATUS as STALLED_EXIT


def _pipeline(settings: Settings, rules, database, *, metrics: bool):
    from streams.metrics import Metrics
    from streams.pipeline import Pipeline
    from streams.rating.native import best_rater
    from streams.sink import ClickHouseSink

    sink = ClickHouseSink(database, max_wait_s=60.0 if not metrics else 3600.0)
    return Pipeline(rules=rules, sink=sink, rater=best_rater(rules), metrics=Metrics() if metrics else None)


def alert_policy(settings: Settings):
    """The billing events' thresholds from GPUBILL_BUDGET_ALERTS, _LOW_BALANCE and _LOW_RUNWAY_H."""
    from billing_rules.spend import AlertPolicy

    from billing.balances import BalanceRefused, parse_amount

    try:
        percents = tuple(int(part) for part in settings.budget_alerts.split(",") if part.strip())
        low = None if settings.low_balance in (None, "") else parse_amount(settings.low_balance, "GPUBILL_LOW_BALANCE")
        return AlertPolicy(budget_pct=percents, low_balance=low, low_runway_hours=settings.low_runway_h)
    except BalanceRefused as exc:
        raise GpubillError(str(exc)) from None
    except ValueError as exc:
        raise GpubillError(f"GPUBILL_BUDGET_ALERTS={settings.budget_alerts!r}: {exc}") from None


def _track_spend(settings: Settings, pipeline, database, *, inline: bool) -> dict:
    """Turn live spend on for `pipeline` (GPUBILL_SPEND): its ledger produces spend rounds; with
    `inline` the tracker runs in this process too (run_worker's tracker arguments)."""
    if not settings.spend:
        return {}
    from streams.kafka.admin import ensure_spend_topics
    from streams.spend.ledger import SpendLedger

    ensure_spend_topics(settings)
    pipeline.spend = SpendLedger(partitions=settings.partitions)
    if not inline:
        logging.getLogger("gpubill.spend").info(
            "live spend: this worker produces spend rounds; `gpubill spend-tracker` folds them and emits the "
            "billing events (GPUBILL_SPEND_TRACKER=inline runs it in this process)")
        return {}
    return _tracker_arguments(settings, lambda: pipeline.rules, database, pipeline.metrics)


def _tracker_arguments(settings: Settings, rules_now, database, metrics, reload_rules=lambda: None) -> dict:
    """The tracker and what it needs (run_worker's and run_tracker's arguments); `rules_now()`
    is the rule set in use (the pipeline's, or the tracker process's own, which
    `reload_rules()` reloads before each read of the warehouse when its files changed)."""
    from billing.live_spend import SpendContexts, store_positions
    from schemas.topics import TOPIC_BILLING_EVENTS
    from streams.kafka.logs import EmittedEvents
    from streams.kafka.settings import client_options
    from streams.spend.tracker import SpendTracker
    from warehouse.connection import open_database

    policy = alert_policy(settings)
    # The tracker reads the warehouse in a thread of its own, never the writer's (a refresh
    # must not hold batches up), through a client of its own for a server DSN (an HTTP
    # client's session takes one query at a time: the rating thread's look-ups share the
    # pipeline's); chDB's embedded client serializes its callers and is shared.
    reads = database if database.embedded else open_database(settings.clickhouse, migrate=False, cluster=settings.clickhouse_cluster)
    events = EmittedEvents(settings.kafka, TOPIC_BILLING_EVENTS, client_options(settings, client="aiokafka"),
                           settings.partitions)
    tracker = SpendTracker(partitions=settings.partitions, policy=policy, events=events, produce=None,
                           period_of=lambda second: rules_now().period_of(second), metrics=metrics)
    contexts = SpendContexts()

    def refresh_contexts() -> dict:
        reload_rules()
        return contexts.read(reads, rules_now())

    return {"tracker": tracker, "context_every_s": settings.spend_context_s,
            "tracker_executor": ThreadPoolExecutor(1, thread_name_prefix="spend"),
            "refresh_contexts": refresh_contexts,
            "publish_positions": lambda positions: store_positions(reads, positions)}


def _spend_reporter(tracker, path: Path):
    """A task writing the tracker's figures to `path` every second, for `gpubill bench spend`."""
    import asyncio

    import orjson

    async def report_spend() -> None:
        while True:
            path.write_bytes(orjson.dumps(tracker.report()))
            await asyncio.sleep(1.0)

    return report_spend


def _books_at_start(database, settings: Settings, rules) -> None:
    """A worker starts by taking the books (gpu.books.v1, issue 37) into its database — what a
    command appended and could not project (kill -9, ClickHouse down) appears here — and records
    the rule set it prices with when the books do not have it. Rating does not wait on the books:
    a projection that stops (a message this gpubill cannot read) is logged and shown by `gpubill
    audit`, and the money commands refuse until it is read."""
    from billing.errors import BillingError
    from gpubill.cli.books import open_books
    from streams.errors import BooksHalted

    try:
        with open_books(database, settings, rules=rules):
            pass
    except (BooksHalted, BillingError) as exc:
        logging.getLogger("gpubill.worker").warning("the books were not projected: %s", exc)


def _start_from_committed(settings: Settings, pipeline) -> None:
    """Seed the pipeline's positions with the group's committed offsets (for the lag gauge)."""
    from streams.kafka.admin import group_offsets

    pipeline.record({tp: committed for tp, (committed, _) in group_offsets(settings, PIPELINE_TOPICS).items()})


# TEST ONLY (tests/e2e/test_liveness_e2e.py): the feeder hangs after handing on this many fetch rounds
# (streams/kafka/feeder.py `fault_stall_after`), as the reported aiokafka/Faust bugs do. Unset in
# every real deployment; ignored by `--drain`; in `gpubill up` only its first worker run hangs.
FAULT_STALL_AFTER = "GPUBILL_FAULT_STALL_AFTER"


def _fault_stall_after() -> int | None:
    value = os.environ.get(FAULT_STALL_AFTER, "")
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise GpubillError(f"{FAULT_STALL_AFTER}={value!r}: a whole number of fetch rounds (a test hook; "
                           "unset it outside tests)") from None


def worker(
    drain: bool = typer.Option(False, "--drain", help="Process everything up to the end offsets at start (and the dead letters this produces), flush, exit 0."),
) -> None:
    """Run the pipeline: validate, dedupe, attribute and price readings into ClickHouse."""
    from streams.kafka.admin import drain_targets, ensure_pipeline_topics
    from streams.metrics import Metrics
    from streams.worker import run_worker

    settings = load_settings()
    setup_logging("WARNING" if drain else "INFO")
    rules = read_rules(settings)
    inline = settings.spend_tracker == "inline"
    ensure_pipeline_topics(settings)
    targets = drain_targets(settings, PIPELINE_TOPICS) if drain else None
    database = connect(settings)
    _books_at_start(database, settings, rules)
    if drain and not targets:
        # a drain always takes the log of corrections to its end, readings to drain or not (issue 36)
        try:
            report = take_corrections_to_end(database, settings, "worker --drain")
        finally:
            database.close()
        out.print("nothing to drain: the consumer group is at the end of every partition")
        out.print(f"corrections: {len(report.stored):,} stored now ({report.read:,} messages on the log)",
                  highlight=False)
        return
    if not drain:
        Metrics.serve(settings.metrics_port, settings.metrics_host)
    pipeline = _pipeline(settings, rules, database, metrics=not drain)
    if not drain:
        _start_from_committed(settings, pipeline)
    if os.environ.get("GPUBILL_BENCH_FRESHNESS"):  # set by `gpubill bench pipeline`
        from streams.freshness import Freshness

        pipeline.freshness = Freshness(Path(os.environ["GPUBILL_BENCH_FRESHNESS"]))
    if drain:
        from rich.progress import Progress

        total = sum(end - start for start, end in targets.values())
        with Progress(console=err, transient=True) as progress:
            task = progress.add_task(f"draining {len(targets)} partitions", total=total)
            code = run_worker(settings, pipeline, drain_targets=targets,
                              on_progress=lambda done, _: progress.update(task, completed=done),
                              **_track_spend(settings, pipeline, database, inline=inline))
    else:
        spend = _track_spend(settings, pipeline, database, inline=inline)
        report = os.environ.get("GPUBILL_BENCH_SPEND")  # set by `gpubill bench spend`
        tasks = [_spend_reporter(spend["tracker"], Path(report))] if report and spend else []
        code = run_worker(settings, pipeline, rules_dir=Path(settings.rules), extra_tasks=tasks,
                          stall_s=settings.stall_s, fault_stall_after=_fault_stall_after(), **spend)
    database.close()
    if code == STALLED_EXIT:
        logging.getLogger("gpubill.worker").warning(
            "the worker stopped after a stall (what it wrote is committed); exiting %d for its supervisor to "
            "restart it", code)
    if code:
        raise typer.Exit(code)
    if drain:
        out.print(f"drained: {pipeline.sink.stats.rows} rows written in {pipeline.sink.stats.batches} batches")


def spend_tracker(
    drain: bool = typer.Option(False, "--drain", help="Apply every spend round produced until now, emit the billing events due, exit 0."),
) -> None:
    """Run the live spend tracker: fold the workers' spend rounds, price every tenant's month to date, emit billing events."""
    from billing_rules.reloading import RuleFiles
    from streams.worker import run_tracker

    settings = load_settings()
    if not settings.spend:
        raise GpubillError("live spend is off (GPUBILL_SPEND=0): the workers produce no spend rounds to track")
    setup_logging("WARNING" if drain else "INFO")
    rules = RuleFiles(Path(settings.rules), read_rules(settings))  # reloaded when the files change
    database = connect(settings)
    try:
        from streams.kafka.admin import ensure_spend_topics

        ensure_spend_topics(settings)
        arguments = _tracker_arguments(settings, lambda: rules.rules, database, None, reload_rules=rules.reload)
        report = os.environ.get("GPUBILL_BENCH_SPEND")  # set by `gpubill bench spend`
        tasks = [_spend_reporter(arguments["tracker"], Path(report))] if report else []
        code = run_tracker(settings, arguments.pop("tracker"), drain=drain, loglevel="WARN" if drain else "INFO",
                           extra_tasks=tasks, **arguments)
    finally:
        database.close()
    if code:
        raise typer.Exit(code)
    if drain:
        out.print("spend tracker: caught up with the spend topic")


def up(
    listen: Optional[str] = typer.Option(None, "--listen", help="host:port of the tenant API and web page (default 127.0.0.1:GPUBILL_HTTP_PORT; GPUBILL_HTTP_PORT=0: no API)."),
    log_format: Optional[str] = typer.Option(None, "--log-format", help="auto (default, GPUBILL_LOG_FORMAT): on a terminal a short banner and warnings, every log line as JSON in GPUBILL_HOME/logs/up.log; piped, JSON lines on stderr. human or json force one."),
) -> None:
    """Run worker, scheduler and the tenant API in one process, and serve its embedded database to
    every other gpubill command and to finance tools (127.0.0.1:GPUBILL_GATEWAY_PORT)."""
    import asyncio

    from gpubill.cli.running import UP_COMMAND, refuse_second_up
    from streams.kafka.admin import ensure_pipeline_topics
    from streams.metrics import Metrics

    settings = load_settings()
    human = _human_logs(log_format or settings.log_format)
    refuse_second_up(settings)  # one line, before a port is bound or the broker asked
    log_file = settings.home_path / "logs" / "up.log" if human else None
    setup_logging("INFO", json_file=log_file, file_mode=settings.file_mode)
    rules = read_rules(settings)
    ensure_pipeline_topics(settings)
    target = _webhook_target()  # checked before anything opens
    api = _bind_api(settings, listen)  # before the database: a taken port costs nothing
    gateway_server = None
    try:
        gateway_server = _bind_gateway(settings)
        database = connect(settings)
    except BaseException:
        if api is not None:
            api.socket.close()
        if gateway_server is not None:
            gateway_server.server_close()
        raise
    gateway = _serve_database(settings, gateway_server, database, UP_COMMAND)
    try:
        _books_at_start(database, settings, rules)
        Metrics.serve(settings.metrics_port, settings.metrics_host)
        pipeline = _pipeline(settings, rules, database, metrics=True)
        _start_from_committed(settings, pipeline)

        api_started = []

        async def api_task() -> None:
            # Started as a task of the worker, once its signal handlers are in place: from the first
            # answer on, SIGTERM stops the whole process cleanly (before them, it would kill it).
            # Once: the API's thread serves on when the worker is restarted after a stall.
            if not api_started:
                await asyncio.get_running_loop().run_in_executor(None, _start_api, settings, api, database, pipeline)
                api_started.append(True)
            await asyncio.Event().wait()

        parts = ["worker", "scheduler"] + (["tenant API"] if api else []) + (["webhooks"] if target else []) \
            + (["database gateway"] if gateway else [])
        # a log line like every other line of `up` (one format: gpubill/logs.py)
        logging.getLogger("gpubill.up").info(
            "gpubill up: %s; metrics on :%s; Ctrl-C to stop", " + ".join(parts), settings.metrics_port,
            extra={"database_url": gateway.url if gateway else None})
        if human:
            from gpubill.cli.running import banner
            from gpubill.devenv.gateway.auth import READER

            sys.stdout.write(banner(pid=os.getpid(), parts=parts, api_url=api.url if api else None,
                                    gateway_url=gateway.url if gateway else None,
                                    finance_dsn=gateway.dsn(READER) if gateway else None,
                                    metrics_port=settings.metrics_port, metrics_host=settings.metrics_host,
                                    settings=settings, log_file=log_file))
            sys.stdout.flush()
        try:
            code = _up_workers(settings, pipeline, database, target, api_task if api is not None else None)
        finally:
            if api is not None:
                api.stop()  # requests in flight finish and the access records are written, then the database closes
    finally:
        _stop_serving(settings, gateway, database)
    database.close()
    if human:
        sys.stdout.write(f"gpubill up stopped (exit {code})\n")
    raise typer.Exit(code)


def _up_workers(settings: Settings, pipeline, database, target, api_task) -> int:
    """Run `up`'s worker — and what lives on its event loop: the scheduler's triggers, the webhook
    deliverer, the API's start — until it stops; start it again, in this process, when it stopped
    after a stall (streams/liveness.py, exit status 75). The database, its gateway and the API's
    thread serve on meanwhile: only the Faust app, its Kafka clients, its event loop and the
    rater's in-memory state are new, as in a new worker process. (A re-exec of the whole process
    would do the same and drop the gateway's and the API's connections each time.) Returns the
    exit code of the last run."""
    import signal

    from streams.worker import run_worker

    log = logging.getLogger("gpubill.up")
    asked_to_stop: list[int] = []
    restarts = 0
    while True:
        jobs, scheduler_task = _scheduler(settings, database, pipeline)
        webhooks, webhook_records = _webhook_task(settings, target, database)

        async def stop_if_asked() -> None:
            # a SIGTERM between two runs (no handler of the worker's then) stops this run at once
            if asked_to_stop:
                os.kill(os.getpid(), signal.SIGTERM)

        try:
            code = run_worker(settings, pipeline, loglevel="INFO", rules_dir=Path(settings.rules),
                              extra_tasks=[scheduler_task, stop_if_asked] + ([api_task] if api_task else [])
                              + ([webhooks] if webhooks else []),
                              stall_s=settings.stall_s, fault_stall_after=_fault_stall_after() if not restarts else None,
                              **_track_spend(settings, pipeline, database, inline=True))
        finally:
            # mode closed the worker's loop and gave SIGTERM and SIGINT back to their defaults: until
            # the next run has its own, a signal is remembered, not fatal (the database stays whole)
            for number in (signal.SIGTERM, signal.SIGINT):
                signal.signal(number, lambda signum, _frame: asked_to_stop.append(signum))
            jobs.stop()  # a billing run or rollup in flight finishes first
            if webhook_records is not None:
                webhook_records.shutdown(wait=True)  # and a delivery attempt being recorded
        if code != STALLED_EXIT or asked_to_stop:
            return 0 if code == STALLED_EXIT else code
        restarts += 1
        if pipeline.metrics is not None:
            pipeline.metrics.worker_restarts.inc()
        log.warning("restarting the worker after a stall", extra={"restarts": restarts})


def _human_logs(log_format: str) -> bool:
    from gpubill.logs import human_logs

    try:
        return human_logs(log_format)
    except ValueError as exc:
        raise GpubillError(f"--log-format: {exc}") from None


def _bind_gateway(settings: Settings):
    """`up`'s database gateway socket on 127.0.0.1:GPUBILL_GATEWAY_PORT, bound before the database
    is opened (a taken port costs nothing); None for a server DSN or GPUBILL_GATEWAY_PORT=0."""
    if not settings.embedded or not settings.gateway_port:
        return None
    from gpubill.devenv.ch_gateway import bind_for

    return bind_for(settings, f"127.0.0.1:{settings.gateway_port}")


def _serve_database(settings: Settings, server, database, command: str):
    """Serve `database` on the bound `server` (None: not served) and publish the record by which
    every other command finds it (warehouse/served.py); the running gateway or None. A database
    `up` reached through another process's server is not served again."""
    from gpubill.devenv.ch_gateway import publish, start

    if not database.embedded:
        if server is not None:
            server.server_close()
        return None
    gateway = None
    try:
        if server is not None:
            gateway = start(settings, server, database)
        publish(gateway, settings.clickhouse, command)
    except BaseException:
        if gateway is not None:
            gateway.stop()
        database.close()
        raise
    return gateway


def _stop_serving(settings: Settings, gateway, database) -> None:
    """Withdraw `up`'s record, then stop its gateway (the statements in flight finish)."""
    if database.embedded:
        from gpubill.cli.running import database_path
        from warehouse import served

        served.withdraw(database_path(settings), os.getpid())
    if gateway is not None:
        gateway.stop()


class _Jobs:
    """`up`'s billing, rollup and dunning jobs: an AsyncIOScheduler whose jobs run in their own thread
    (billing/scheduler.py `add_jobs`), with the rules the worker prices with."""

    def __init__(self, settings: Settings, database, pipeline) -> None:
        from apscheduler.schedulers.asyncio import AsyncIOScheduler

        from billing.scheduler import add_jobs

        self.scheduler = AsyncIOScheduler(timezone=timezone.utc)  # its log lines in UTC, like all others
        self.database = _side_client(settings, database)
        gauge = pipeline.metrics.invoice_drafts.set if pipeline.metrics is not None else None
        self.executor = add_jobs(self.scheduler, self.database, lambda: pipeline.rules, on_drafts=gauge,
                                 take_corrections=_before_billing(settings, self.database),
                                 open_books=_books_for_billing(settings, self.database),
                                 open_events=_billing_events(settings))
        self._shared = self.database is database

    def stop(self) -> None:
        """Once the worker's event loop (the triggers' timers) is gone: wait for a job in flight,
        then close the jobs' own client (if any)."""
        self.executor.shutdown(wait=True)
        if not self._shared:
            self.database.close()


def _scheduler(settings: Settings, database, pipeline):
    """(`up`'s jobs, the worker task that starts them). The jobs run in a thread of their own,
    not in the pipeline's writer thread as they once did: an hour's rollup of 1,280 cards takes
    seconds, during which batches (and the rating thread's look-ups, which wait for the writer)
    stalled. Writes now go on between the job's statements: the embedded engine's client takes
    one statement at a time from any thread, the job's yielding to the pipeline's
    (warehouse/connection.py `Turns`), and a server DSN gets a client of its own (an HTTP client's session takes one
    query at a time). A failed run is logged by
    APScheduler and tried again at its next time; it does not end the worker."""
    import asyncio

    jobs = _Jobs(settings, database, pipeline)

    async def scheduler_task() -> None:
        jobs.scheduler.start()  # in the worker's event loop: the triggers are timers on it
        await asyncio.Event().wait()

    return jobs, scheduler_task


def _before_billing(settings: Settings, database):
    """The billing job's first step (billing/scheduler.py `run_due`): the log of corrections taken
    to its end, as `invoice run` does (issue 36). In `up` too, beside the worker's own sync: that
    runs every few seconds, and the job's first run, at start-up, would not wait for it."""
    say = logging.getLogger("gpubill.scheduler").info
    return lambda: take_corrections_to_end(database, settings, "the billing run", say=say)


def _books_for_billing(settings: Settings, database):
    """The billing job's books (issue 37): the numbered series' writer on the log, opened in the
    job's thread for each run that has a period due, with the rules it invoices under."""
    from gpubill.cli.books import open_books

    return lambda rules: open_books(database, settings, numbered=True, rules=rules)


def _billing_events(settings: Settings):
    """The dunning job's producer of billing events (issue 38), opened for each pass with notices due."""
    from streams.kafka.billing_events import EventsProducer

    return lambda: EventsProducer(settings)


def _side_client(settings: Settings, database):
    """A client for a thread beside the writer: the pipeline's own for the embedded engine (one
    engine per process; its client serializes statements), a new one for a server DSN."""
    if database.embedded:
        return database
    from warehouse.connection import open_database

    return open_database(settings.clickhouse, migrate=False, cluster=settings.clickhouse_cluster)


def _webhook_target():
    """GPUBILL_WEBHOOK_URL and GPUBILL_WEBHOOK_SECRET as a checked target, or None when no URL
    is set: `up` then delivers the billing events itself (the embedded database allows one
    process; `gpubill events deliver` is the same loop on its own)."""
    url = os.environ.get("GPUBILL_WEBHOOK_URL", "")
    if not url:
        return None
    from gpubill.cli.events import SECRET_VARIABLE
    from streams.webhooks import WebhookTarget

    return WebhookTarget(url, os.environ.get(SECRET_VARIABLE, ""))


def _webhook_task(settings: Settings, target, database):
    """(the task delivering billing events to `target`, the executor its attempts are recorded
    in — shut it down before the database closes); (None, None) without a target."""
    if target is None:
        return None, None
    from billing.webhook_deliveries import record_attempts
    from streams.webhooks import run_deliverer

    records = ThreadPoolExecutor(1, thread_name_prefix="webhook-records")

    async def deliver_webhooks() -> None:
        # One row per attempt, inserted in a thread of its own, never on this event loop: it
        # heartbeats the worker's Kafka consumers, and an insert waits its turn behind the
        # writer's (one statement at a time: warehouse/connection.py Turns) — seconds behind a busy writer, enough to
        # cost a rebalance. An insert begun is finished before the task ends.
        await run_deliverer(settings, target, lambda attempt: record_attempts(database, [attempt]),
                            record_executor=records)

    return deliver_webhooks, records


def _bind_api(settings: Settings, listen: Optional[str]):
    from tenant_api.server import ApiServer
    from gpubill.cli.serve import default_listen

    if listen is None and settings.http_port == 0:
        return None
    return ApiServer(listen or default_listen(settings))


def _start_api(settings: Settings, api, database, pipeline) -> None:
    """The API in a thread of its own, reading the pipeline's database (chDB's client
    serializes the calls) and the rules the pipeline prices with (reloaded by its watcher)."""
    from tenant_api.app import create_app
    from gpubill.cli.serve import announce, open_reads

    api.attach(create_app(settings, open_reads(settings, database), lambda: pipeline.rules))
    api.start_thread()
    announce(api.url, api.host)


def scheduler() -> None:
    """Run only the monthly billing scheduler (server deployments; embedded mode: use `up`).

    Its jobs run in one thread of their own (billing/scheduler.py `add_jobs`) and read the
    rule files again when they change, as `up` does: an edit counts from the next run, an
    invalid one is logged and the last good set kept (billing_rules/reloading.py)."""
    from apscheduler.schedulers.blocking import BlockingScheduler

    from billing.scheduler import add_jobs
    from billing_rules.reloading import RuleFiles

    settings = load_settings()
    setup_logging("INFO")
    rules = read_rules(settings)
    database = connect(settings)
    blocking = BlockingScheduler(timezone=timezone.utc)  # its log lines in UTC, like all others
    add_jobs(blocking, database, RuleFiles(Path(settings.rules), rules),
             take_corrections=_before_billing(settings, database), open_books=_books_for_billing(settings, database),
             open_events=_billing_events(settings))
    try:
        blocking.start()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        if blocking.running:
            blocking.shutdown(wait=True)
        database.close()
