"""The scheduler's jobs (issue 22, items 4.1 and 4.3): in `gpubill up` a long billing run or
rollup runs beside the pipeline's writer, never in it, so batches are written between its
statements; `gpubill scheduler` reads edited rule files from its next run on and keeps the
last good set when an edit is invalid (billing_rules/reloading.py, shared with the worker)."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import threading
import time
from datetime import UTC, datetime
from decimal import Decimal

import pytest

import billing.scheduler as scheduler_module
import gpubill.cli.processes as processes
from billing_rules import DEFAULT_RULES_DIR, load_rules
from billing.scheduler import JOBS_EXECUTOR
from gpubill.config import Settings
from streams.deadletters import deadletter_row_from_record
from streams.kafka.message import Message
from streams.pipeline import Pipeline
from streams.rating.protocol import EncodedOutcome
from streams.rating.reference_batch import PythonRater
from streams.sink import ClickHouseSink
from warehouse.connection import Turns, open_database

RULES = load_rules(DEFAULT_RULES_DIR)
MARCH_1 = 1772323200  # 2026-03-01T00:00:00Z
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
JOB_STATEMENTS, STATEMENT_S = 30, 0.1  # the slow job: 3 s of statements of 0.1 s each
WRITE_BOUND_S = 1.0  # a batch of 100 rows takes milliseconds; one job statement may be ahead of it


def letters(count: int) -> list[tuple]:
    return [deadletter_row_from_record(Message("gpu.usage.v1", 0, offset, b"G1", b"not json"), NOW)
            for offset in range(count)]


def test_a_long_job_in_up_does_not_hold_up_a_writer_batch(tmp_path, monkeypatch):
    """A rollup of 3 s (30 statements) starts; a batch handed to the writer meanwhile is written
    within WRITE_BOUND_S, while the rollup is still running. (Before: the job ran in the writer
    thread, and the batch waited for the whole rollup.)"""
    started, finished = threading.Event(), threading.Event()

    def slow_rollup(db, rules) -> None:
        started.set()
        for _ in range(JOB_STATEMENTS):
            db.query(f"SELECT sleep({STATEMENT_S})")
        finished.set()

    monkeypatch.setattr(scheduler_module, "run_rollup", slow_rollup)
    monkeypatch.setattr(scheduler_module, "run_due", lambda db, rules, now=None, take_corrections=None, open_books=None: [])
    with open_database(f"chdb://{tmp_path / 'ch'}") as database:
        pipeline = Pipeline(rules=RULES, sink=ClickHouseSink(database, max_wait_s=5.0), rater=PythonRater(RULES))
        pipeline.sink.write(EncodedOutcome(), letters(100))  # a running worker's: the first insert reads the table's shape
        jobs, scheduler_task = processes._scheduler(Settings(kafka="127.0.0.1:9", metrics_port=0), database, pipeline)

        async def scenario() -> tuple[float, bool]:
            task = asyncio.ensure_future(scheduler_task())
            assert await asyncio.to_thread(started.wait, 30), "the rollup job never started"
            began = time.monotonic()
            await pipeline.in_writer_thread(pipeline.sink.write, EncodedOutcome(), letters(100))
            took = time.monotonic() - began
            still_rolling = not finished.is_set()
            task.cancel()
            return took, still_rolling

        try:
            took, still_rolling = asyncio.run(scenario())
        finally:
            jobs.stop()  # waits for the job in flight
            pipeline.executor.shutdown(wait=True)
            pipeline.writer.shutdown(wait=True)
        assert finished.is_set()
        assert database.query("SELECT count() FROM deadletters FINAL")[0][0] == 100  # the same rows twice
    print(f"a writer batch took {took:.3f} s during a {JOB_STATEMENTS * STATEMENT_S:.0f} s job")
    assert took < WRITE_BOUND_S
    assert still_rolling, "the job ended before the batch: the test proved nothing"


def test_both_jobs_run_in_one_thread_of_their_own():
    class Recorder:
        def __init__(self) -> None:
            self.executors, self.jobs = {}, []

        def add_executor(self, executor, alias) -> None:
            self.executors[alias] = executor

        def add_job(self, func, trigger, *, executor, **options) -> None:
            self.jobs.append((options["id"], executor))

    recorder = Recorder()
    scheduler_module.add_jobs(recorder, object(), lambda: RULES)
    assert recorder.jobs == [("monthly-billing", JOBS_EXECUTOR), ("hourly-rollups", JOBS_EXECUTOR)]
    assert recorder.executors[JOBS_EXECUTOR]._pool._max_workers == 1  # the two take turns, never two statements at once


def _edit(path, old: str, new: str, bump_s: int) -> None:
    path.write_text(path.read_text().replace(old, new))
    stamp = time.time() + bump_s  # a later mtime, whatever the file system's granularity
    os.utime(path, (stamp, stamp))


def test_gpubill_scheduler_reads_edited_rules_at_its_next_run_and_keeps_the_last_good_set(tmp_path, monkeypatch,
                                                                                          caplog):
    rules_dir = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules_dir)
    sites = rules_dir / "sites.toml"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUBILL_RULES", str(rules_dir))
    monkeypatch.setattr(processes, "setup_logging", lambda level: None)  # keep pytest's log capture

    class Database:
        embedded, closed = True, False

        def close(self) -> None:
            self.closed = True

    database = Database()
    monkeypatch.setattr(processes, "connect", lambda settings: database)
    runs: list[tuple[str, object]] = []
    monkeypatch.setattr(scheduler_module, "run_due", lambda db, rules, now=None, take_corrections=None, open_books=None: runs.append(("billing", rules)))
    monkeypatch.setattr(scheduler_module, "run_rollup", lambda db, rules: runs.append(("rollup", rules)))
    monkeypatch.setattr(scheduler_module, "run_dunning_due", lambda db, rules, now=None, open_books=None,
                        open_events=None: runs.append(("dunning", rules)))
    edits = [
        lambda: None,  # the first hour: the rules as started
        lambda: _edit(sites, "price_per_kwh = 0.33 }", "price_per_kwh = 0.34 }", 10),  # a valid edit
        lambda: _edit(sites, "pue = 1.12", "pue = 0.5", 20),  # PUE < 1: invalid, refused whole
    ]

    class Hours:
        """Stands in for APScheduler's BlockingScheduler: each "hour" edits the files, then runs every job."""

        def __init__(self, timezone) -> None:
            self.jobs, self.running = [], False

        def add_executor(self, executor, alias) -> None:
            pass

        def add_job(self, func, trigger, **options) -> None:
            self.jobs.append(func)

        def start(self) -> None:
            for edit in edits:
                edit()
                for job in self.jobs:
                    job()

    monkeypatch.setattr("apscheduler.schedulers.blocking.BlockingScheduler", Hours)
    with caplog.at_level(logging.INFO):
        processes.scheduler()

    assert [kind for kind, _ in runs] == ["billing", "rollup", "dunning"] * 3  # dunning too (issue 38)
    tariffs = [rules.energy_rate("gz-guian", MARCH_1).tariff_per_kwh for _, rules in runs]
    assert tariffs == [Decimal("0.33")] * 3 + [Decimal("0.34")] * 6  # the edit from the next run; the invalid one kept it
    assert runs[6][1] is runs[3][1]  # the last good set itself
    refused = [r for r in caplog.records if r.levelno == logging.ERROR and "invalid" in r.getMessage()]
    assert len(refused) == 1 and "sites.toml" in refused[0].getMessage()
    assert database.closed


def test_a_job_asking_again_at_once_goes_behind_a_waiting_writer():
    """warehouse.connection.Turns: a job (yielding) that ends a statement and asks for the next
    at once goes behind a writer that was already waiting (chDB's own lock lets it take it back)."""
    turns, order = Turns(), []
    in_first, writer_waiting = threading.Event(), threading.Event()

    def job() -> None:
        with turns.yielding():
            with turns:
                in_first.set()
                assert writer_waiting.wait(5)
                while turns._waiting < 1:  # the writer is waiting for the statement lock
                    time.sleep(0.001)
                order.append("job 1")
            with turns:  # at once, no pause
                order.append("job 2")

    def writer() -> None:
        assert in_first.wait(5)
        writer_waiting.set()
        with turns:
            order.append("writer")

    threads = [threading.Thread(target=job), threading.Thread(target=writer)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert order == ["job 1", "writer", "job 2"]


def test_a_yielding_job_is_delayed_never_starved(monkeypatch):
    # other threads' statements always waiting: the job's next statement still runs, after YIELD_MAX_S
    monkeypatch.setattr(Turns, "YIELD_MAX_S", 0.3)
    turns = Turns()
    turns._waiting = 1  # as if a writer waited for ever
    began = time.monotonic()
    with turns.yielding(), turns:
        waited = time.monotonic() - began
    assert 0.25 <= waited < 5
    turns._waiting = 0
    began = time.monotonic()
    with turns.yielding(), turns:  # nobody waiting: at once
        assert time.monotonic() - began < 0.1


def test_up_runs_the_dunning_job_beside_billing_and_rollups(monkeypatch):
    # `up`'s jobs (processes._Jobs) are add_jobs' with a producer of billing events: the dunning job is among them
    class Database:
        embedded = True

    class Pipeline:
        metrics, rules = None, RULES

    jobs = processes._Jobs(Settings(kafka="127.0.0.1:9", metrics_port=0), Database(), Pipeline())
    try:
        assert sorted(job.id for job in jobs.scheduler.get_jobs()) == ["dunning", "hourly-rollups", "monthly-billing"]
    finally:
        jobs.executor.shutdown(wait=True)
