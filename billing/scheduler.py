"""The monthly billing run on APScheduler, robust to a scheduler that was down.

The job does not trust its trigger to have fired at the right moment: every time it runs
(at start-up and then hourly) it invoices each closed period — ended more than the grace
period ago — that has no completed billing run yet. A scheduler that was down on the 1st
therefore catches up when it comes back, and a run that already happened is not redone
(and would change nothing if it were: see billing/invoicing.py).

An `invoice run` started by hand beside it is safe: runs take turns through the invoicing
lease (billing/invoice_lock.py). The job waits its turn; when another run holds the lease
too long it logs that and tries again at its next hour.

`add_jobs` puts the jobs — this one, the rollups and, given a producer of billing events,
the dunning pass (billing/dunning.py: hourly, the notices unpaid invoices call for) — on a
scheduler, the same way for `gpubill scheduler` and `gpubill up`:

- in a thread of their own (the executor JOBS_EXECUTOR, one thread: they take turns and
  never send two statements at once through one client), never in the pipeline's writer
  thread: an hour's rollup of a full fleet takes seconds, and batches are written meanwhile,
  between its statements (the embedded engine's client takes one statement at a time; the
  jobs' statements yield to the pipeline's: `Database.yielding`);
- each run reads the rules then in force from `rules()` — in `up` the set the worker prices
  with, in `gpubill scheduler` a `billing_rules.reloading.RuleFiles` of GPUBILL_RULES: an
  edited rule file counts from the next run, an invalid edit keeps the last good set;
- a billing run with a period due first calls `take_corrections()` (the shell's: the log of
  corrections taken to its end, as `invoice run` does, a worker running or not — issue 36);
  when it raises, the run is postponed to the next hour, logged in one line, nothing invoiced;
- a dunning pass with notices due opens the books (`open_books(rules)`) and the producer of
  billing events (`open_events()`); when either refuses, the pass is postponed to the next
  hour, logged in one line, nothing sent.
"""

from __future__ import annotations

import logging
from contextlib import ExitStack, nullcontext
from datetime import datetime, timezone
from typing import Any, Callable, ContextManager

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from billing.dunning import due as dunning_due
from billing.dunning import send_notices
from billing.invoice_lock import LeaseError
from billing.invoicing import RunReport, run_period
from usage.rollup import RollupReport, roll_up

log = logging.getLogger("gpubill.scheduler")
LOOKBACK_PERIODS = 12  # a scheduler down for up to a year still catches up
ROLLUP_EVERY_MIN = 5
JOBS_EXECUTOR = "billing-jobs"
DUNNING_MINUTE = 35  # past each hour (UTC): after the billing run's minute 5, never at the same time


def due_periods(rules: Any, now_s: int, completed: set[str], lookback: int = LOOKBACK_PERIODS) -> list[str]:
    """Closed periods (end + grace ≤ now) among the last `lookback`, not yet run, oldest first."""
    grace_s = int(rules.grace_period.total_seconds())
    period = rules.period_of(now_s)
    candidates = []
    for _ in range(lookback + 1):
        start, end = rules.period_bounds(period)
        if end + grace_s <= now_s and period not in completed:
            candidates.append(period)
        period = rules.period_of(start - 1)
    return sorted(candidates)


def run_due(db: Any, rules: Any, now: datetime | None = None,
            take_corrections: Callable[[], Any] | None = None,
            open_books: Callable[[], ContextManager[Any]] | None = None) -> list[RunReport]:
    """Invoice every due period; the job body of the scheduler. With a period due,
    `take_corrections()` first (see the module docstring), then the books opened for the run
    (`open_books()`: the numbered series' writer on the log, billing/books.py); when either
    raises, nothing is invoiced and the run waits for the next hour."""
    now = now or datetime.now(timezone.utc)
    completed = {row[0] for row in db.query("SELECT period FROM billing_runs FINAL")}
    with_data = {row[0] for row in db.query("SELECT DISTINCT period FROM rated_writes")}
    due = [period for period in due_periods(rules, int(now.timestamp()), completed) if period in with_data]
    if not due:
        return []
    try:
        if take_corrections is not None:
            take_corrections()
        books = open_books() if open_books is not None else nullcontext()
        books.__enter__()
    except Exception as exc:  # noqa: BLE001 - the shell's refusal (Kafka or the database), said in one line
        log.warning("billing run %s postponed to the next hour: %s", ", ".join(due), " ".join(str(exc).split()))
        return []
    try:
        return _run_periods(db, rules, due, now)
    finally:
        books.__exit__(None, None, None)


def _run_periods(db: Any, rules: Any, due: list[str], now: datetime) -> list[RunReport]:
    reports = []
    for period in due:
        try:
            report = run_period(db, rules, period, now=now, on_wait=log.info)
        except LeaseError as exc:
            log.warning("billing run %s postponed to the next hour: %s", period, exc)
            break
        if report.drafted or report.refreshed or report.unchanged:
            log.info("billing run %s (review = manual): %d drafts made, %d refreshed, %d unchanged, %d already issued",
                     period, len(report.drafted), len(report.refreshed), len(report.unchanged), len(report.existing))
        else:
            log.info("billing run %s: %d invoices created, %d already final", period, len(report.created),
                     len(report.existing))
        reports.append(report)
    return reports


def drafts_waiting(db: Any) -> int:
    """How many drafts wait for review (`gpubill invoice drafts`): the gauge gpubill_invoice_drafts_waiting."""
    return int(db.query("SELECT count() FROM invoices FINAL WHERE status = 'draft'")[0][0])


def _billing_job(db: Any, rules: Any, on_drafts: Callable[[int], None] | None,
                 now: datetime | None = None, take_corrections: Callable[[], Any] | None = None,
                 open_books: Callable[[Any], ContextManager[Any]] | None = None) -> list[RunReport]:
    reports = run_due(db, rules, now=now, take_corrections=take_corrections,
                      open_books=(lambda: open_books(rules)) if open_books is not None else None)
    if on_drafts is not None:
        on_drafts(drafts_waiting(db))
    return reports


def run_dunning_due(db: Any, rules: Any, now: datetime | None = None,
                    open_books: Callable[[Any], ContextManager[Any]] | None = None,
                    open_events: Callable[[], ContextManager[Any]] | None = None) -> list[Any]:
    """The dunning job's body: when notices are due (billing/dunning.py), the books and the events'
    producer opened, the notices read again (the books now at the log's end: a notice another
    process sent meanwhile is not sent twice), sent and recorded. Returns the notices sent; when
    opening refuses, [] and a line in the log (the next hour tries again)."""
    now = now or datetime.now(timezone.utc)
    _, notices = dunning_due(db, rules, now)
    if not notices:
        return []
    with ExitStack() as opened:
        try:
            if open_books is not None:
                opened.enter_context(open_books(rules))
            producer = opened.enter_context(open_events()) if open_events is not None else None
        except Exception as exc:  # noqa: BLE001 - the shell's refusal (Kafka or the database), said in one line
            log.warning("dunning: %d notices postponed to the next hour: %s", len(notices), " ".join(str(exc).split()))
            return []
        if producer is None:
            log.warning("dunning: %d notices due, but no producer of billing events: nothing sent", len(notices))
            return []
        _, notices = dunning_due(db, rules, now)
        try:
            send_notices(db, notices, producer.send, now)
        except Exception as exc:  # noqa: BLE001 - at least once: whatever was not recorded is sent again next hour
            log.warning("dunning: %d notices not all sent, the next hour sends the rest again: %s", len(notices),
                        " ".join(str(exc).split()))
            return []
    for notice in notices:
        log.info("dunning: %s %d for %s (%s, %d days past due, %s CNY outstanding)", notice.kind, notice.days,
                 notice.invoice, notice.tenant, notice.days_past_due, notice.outstanding)
    return notices


def add_jobs(scheduler: Any, db: Any, rules: Callable[[], Any],
             on_drafts: Callable[[int], None] | None = None,
             take_corrections: Callable[[], Any] | None = None,
             open_books: Callable[[Any], ContextManager[Any]] | None = None,
             open_events: Callable[[], ContextManager[Any]] | None = None) -> ThreadPoolExecutor:
    """The billing and rollup jobs on `scheduler` (APScheduler), in their own thread, each run
    with the rules `rules()` returns then (see the module docstring); after each billing run
    `on_drafts` gets the number of drafts waiting for review; `take_corrections()` before a
    billing run with a period due, and `open_books(rules)` around it (the books on the log, in
    the job's own thread: billing/books.py). With `open_events` (a producer of billing events
    with `.send(events)`, streams/kafka/billing_events.py), the hourly dunning job too, with the
    same books. Returns their executor: `shutdown(wait=True)` waits for a job in flight (before
    the database is closed)."""
    executor = ThreadPoolExecutor(1, pool_kwargs={"thread_name_prefix": "billing-jobs"})
    scheduler.add_executor(executor, alias=JOBS_EXECUTOR)
    add_billing_job(scheduler, lambda: _yielding(db, lambda: _billing_job(db, rules(), on_drafts,
                                                                          take_corrections=take_corrections,
                                                                          open_books=open_books)),
                    rules(), executor=JOBS_EXECUTOR)
    add_rollup_job(scheduler, lambda: _yielding(db, lambda: run_rollup(db, rules())), executor=JOBS_EXECUTOR)
    if open_events is not None:
        add_dunning_job(scheduler, lambda: _yielding(db, lambda: run_dunning_due(
            db, rules(), open_books=open_books, open_events=open_events)), executor=JOBS_EXECUTOR)
    return executor


def _yielding(db: Any, job: Callable[[], Any]) -> Any:
    """Run `job` with its statements yielding to the pipeline's (warehouse.connection.Turns):
    a batch waits for at most the one job statement in progress."""
    with (db.yielding() if hasattr(db, "yielding") else nullcontext()):
        return job()


def add_billing_job(scheduler: Any, job: Callable[[], Any], rules: Any, executor: str = "default") -> None:
    """Hourly (and once at start-up): invoice whatever is due. Missed runs coalesce into one."""
    # UTC like every other log line ("next run at … UTC"); hourly, so the zone changes nothing else
    _add_catching_up(scheduler, job, CronTrigger(minute=5, timezone=timezone.utc), executor,
                     "monthly-billing", "invoice closed periods")


def run_rollup(db: Any, rules: Any) -> RollupReport:
    """Roll up the hours written since their last rollup; the job body of the rollup job."""
    report = roll_up(db, rules)
    if report.hours:
        log.info("rolled up %d hours", len(report.hours))
    return report


def add_rollup_job(scheduler: Any, job: Callable[[], Any], executor: str = "default") -> None:
    """Every few minutes (and once at start-up): keep the hourly rollups current."""
    _add_catching_up(scheduler, job, IntervalTrigger(minutes=ROLLUP_EVERY_MIN), executor,
                     "hourly-rollups", "roll up written hours")


def add_dunning_job(scheduler: Any, job: Callable[[], Any], executor: str = "default") -> None:
    """Hourly (and once at start-up): send the dunning notices due. Days past due change at
    midnight in the billing time zone: a notice goes out within the hour after."""
    _add_catching_up(scheduler, job, CronTrigger(minute=DUNNING_MINUTE, timezone=timezone.utc), executor,
                     "dunning", "send dunning notices")


def _add_catching_up(scheduler: Any, job: Callable[[], Any], trigger: Any, executor: str, job_id: str,
                     name: str) -> None:
    """`job` on `trigger`, run once at start-up too; missed runs coalesce into one, one at a time."""
    scheduler.add_job(
        job,
        trigger,
        executor=executor,
        id=job_id,
        name=name,
        coalesce=True,
        max_instances=1,
        misfire_grace_time=None,
        replace_existing=True,
        next_run_time=datetime.now(timezone.utc),
    )
