"""The `gpubill` command line (SPEC §8). Thin: parse options, call the packages, print.

Every error a user can cause is a `GpubillError` (or a rule error) and is printed as one
line on stderr with exit status 1; typer handles usage errors (exit 2).
"""

from __future__ import annotations

import logging
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from billing_rules import load_rules
from schemas.topics import TOPIC_DEADLETTER, TOPIC_POWER, TOPIC_USAGE
from gpubill.config import Settings, load_settings
from gpubill.errors import USER_ERRORS, GpubillError
from streams.errors import InputFileError

app = typer.Typer(
    help="gpubill: meter and bill GPU usage — Kafka readings, Faust pricing, ClickHouse invoices and reports.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
kafka_app = typer.Typer(help="The local single-node Kafka broker (KRaft), for development and the demo.", no_args_is_help=True)
invoice_app = typer.Typer(help="Monthly invoices.", no_args_is_help=True)
report_app = typer.Typer(help="Finance and customer reports.", no_args_is_help=True)
dlq_app = typer.Typer(help="Dead-lettered input.", no_args_is_help=True)
rules_app = typer.Typer(help="Billing rule sets.", no_args_is_help=True)
app.add_typer(kafka_app, name="kafka")
app.add_typer(invoice_app, name="invoice")
app.add_typer(report_app, name="report")
app.add_typer(dlq_app, name="dlq")
app.add_typer(rules_app, name="rules")

out = Console()
err = Console(stderr=True)

# numpy comes in with chDB's client (through pyarrow), and its OpenBLAS starts a thread per
# core that spins beside the worker's (1 % of a drain's CPU). gpubill does no linear algebra.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class _JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, the call's `extra` fields (and exc
    when there is one)."""

    def format(self, record: logging.LogRecord) -> str:
        import orjson

        entry = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update((k, v) for k, v in vars(record).items() if k not in _RECORD_FIELDS and k not in entry)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def _setup_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter())
    logging.basicConfig(level=level, handlers=[handler], force=True)
    _quiet_libraries()


def _quiet_libraries() -> None:
    # kafka-python and clickhouse-connect log every refused connection; their errors reach
    # the user translated (KafkaUnreachable, DatabaseError), so their own lines are noise.
    for name in ("kafka", "clickhouse_connect"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _rules(settings: Settings, directory: Optional[Path] = None):
    return load_rules(Path(directory or settings.rules))


def _database(settings: Settings):
    from warehouse.connection import open_database

    return open_database(settings.clickhouse)


# ------------------------------------------------------------------------------- kafka


def _local_broker(settings: Settings):
    from gpubill.devenv.kafka_broker import LocalBroker

    return LocalBroker(settings.home_path / "kafka", bootstrap=settings.kafka)


@kafka_app.command("up")
def kafka_up(wait_s: float = typer.Option(90.0, help="How long to wait for the broker to answer.")) -> None:
    """Start the local broker (idempotent) and wait until it answers."""
    settings = load_settings()
    broker = _local_broker(settings)
    started = broker.up(wait_s=wait_s, progress=lambda msg: err.print(f"[dim]{msg}[/dim]"))
    out.print(f"Kafka broker {'started' if started else 'already up'} at {settings.kafka}")


@kafka_app.command("down")
def kafka_down() -> None:
    """Stop the local broker started by `gpubill kafka up`."""
    settings = load_settings()
    stopped = _local_broker(settings).down()
    out.print("Kafka broker stopped" if stopped else "no local Kafka broker was running")


# ------------------------------------------------------------------------------ producers


@app.command()
def simulate(
    gpus: int = typer.Option(8, min=1, help="Cards in the simulated fleet."),
    model: str = typer.Option("A800-80G", help="GPU model (catalog id)."),
    minutes: int = typer.Option(10, min=1, help="Minutes of readings, one per card per second per stream."),
    start: Optional[str] = typer.Option(None, help="First second, RFC 3339 (default: now − minutes)."),
    tenants: int = typer.Option(3, min=0, help="Tenants renting cards."),
    site: str = typer.Option("gz-guian", help="Site of the fleet."),
    seed: int = typer.Option(7, help="Random seed (same seed, same readings)."),
) -> None:
    """Produce realistic readings of a simulated fleet to Kafka."""
    from schemas.events import parse_ts
    from streams.kafka.admin import ensure_pipeline_topics
    from gpubill.devenv.simulator import simulate_fleet

    settings = load_settings()
    rules = _rules(settings)
    if not rules.has_model(model):
        raise GpubillError(f"unknown model {model!r}; known: {', '.join(rules.model_ids)}")
    if not rules.has_site(site):
        raise GpubillError(f"unknown site {site!r}; known: {', '.join(rules.site_ids)}")
    try:
        start_s = parse_ts(start) if start else int(datetime.now(timezone.utc).timestamp()) - minutes * 60
    except ValueError as exc:
        raise GpubillError(f"--start: {exc}") from None
    ensure_pipeline_topics(settings)
    total = gpus * minutes * 60 * 2
    readings = simulate_fleet(gpus=gpus, gpu_model=model, minutes=minutes, start=start_s, tenants=tenants, site=site, seed=seed)
    report = _produce_with_progress(settings, readings, total, f"simulating {gpus} × {model}")
    out.print(f"produced {report.total} readings ({', '.join(f'{t}: {n}' for t, n in report.produced.items())})")


def _produce_with_progress(settings: Settings, readings, total: int, label: str):
    from rich.progress import Progress

    from streams.kafka.producers import produce_readings

    with Progress(console=err, transient=True) as progress:
        task = progress.add_task(label, total=total)
        return produce_readings(settings, readings, progress=lambda n: progress.advance(task, n))


@app.command()
def replay(file: Path = typer.Argument(..., help="NDJSON file: one JSON reading per line.")) -> None:
    """Produce the readings of an NDJSON file to Kafka exactly as they are."""
    from rich.progress import Progress

    from streams.kafka.admin import ensure_pipeline_topics
    from streams.kafka.producers import replay_file

    if not file.is_file():
        raise InputFileError(f"cannot read {file}: no such file")
    settings = load_settings()
    ensure_pipeline_topics(settings)
    with Progress(console=err, transient=True) as progress:
        task = progress.add_task(f"replaying {file.name}", total=file.stat().st_size)
        report = replay_file(settings, file, progress=lambda n: progress.advance(task, n))
    out.print(
        f"replayed {report.total} readings from {file} "
        f"({', '.join(f'{t}: {n}' for t, n in sorted(report.produced.items())) or 'none'}); "
        f"{report.deadlettered} dead-lettered by replay"
    )


# --------------------------------------------------------------------------------- worker


def _pipeline(settings: Settings, rules, database, *, metrics: bool):
    from streams.pipeline import Pipeline
    from streams.metrics import Metrics
    from streams.rating.native import best_rater
    from streams.sink import ClickHouseSink

    sink = ClickHouseSink(database, max_wait_s=60.0 if not metrics else 3600.0)
    return Pipeline(rules=rules, sink=sink, rater=best_rater(rules), metrics=Metrics() if metrics else None)


def _start_from_committed(settings: Settings, pipeline) -> None:
    """Seed the pipeline's positions with the group's committed offsets (for the lag gauge)."""
    from streams.kafka.admin import group_offsets

    pipeline.record({tp: committed for tp, (committed, _) in
                     group_offsets(settings, [TOPIC_USAGE, TOPIC_POWER, TOPIC_DEADLETTER]).items()})


@app.command()
def worker(
    drain: bool = typer.Option(False, "--drain", help="Process everything up to the end offsets at start (and the dead letters this produces), flush, exit 0."),
) -> None:
    """Run the pipeline: validate, dedupe, attribute and price readings into ClickHouse."""
    from streams.worker import run_worker
    from streams.kafka.admin import drain_targets, ensure_pipeline_topics
    from streams.metrics import Metrics

    settings = load_settings()
    _setup_logging("WARNING" if drain else "INFO")
    rules = _rules(settings)
    ensure_pipeline_topics(settings)
    targets = drain_targets(settings, [TOPIC_USAGE, TOPIC_POWER, TOPIC_DEADLETTER]) if drain else None
    database = _database(settings)
    if drain and not targets:
        out.print("nothing to drain: the consumer group is at the end of every partition")
        database.close()
        return
    if not drain:
        Metrics.serve(settings.metrics_port)
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
                              on_progress=lambda done, _: progress.update(task, completed=done))
    else:
        code = run_worker(settings, pipeline, rules_dir=Path(settings.rules))
    database.close()
    if code:
        raise typer.Exit(code)
    if drain:
        out.print(f"drained: {pipeline.sink.stats.rows} rows written in {pipeline.sink.stats.batches} batches")


@app.command()
def up() -> None:
    """Run worker and scheduler in one process (the embedded database allows one process)."""
    import asyncio

    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    from reports.scheduler import add_billing_job, run_due
    from streams.worker import run_worker
    from streams.kafka.admin import ensure_pipeline_topics
    from streams.metrics import Metrics

    settings = load_settings()
    _setup_logging("INFO")
    rules = _rules(settings)
    ensure_pipeline_topics(settings)
    database = _database(settings)
    Metrics.serve(settings.metrics_port)
    pipeline = _pipeline(settings, rules, database, metrics=True)
    _start_from_committed(settings, pipeline)

    async def scheduler_task() -> None:
        scheduler = AsyncIOScheduler(timezone=rules.billing_tz)
        loop = asyncio.get_running_loop()

        async def job() -> None:  # share the sink's thread: one chDB caller at a time
            await loop.run_in_executor(pipeline.executor, lambda: run_due(database, pipeline.rules))

        add_billing_job(scheduler, job, rules)
        scheduler.start()
        await asyncio.Event().wait()

    err.print(f"gpubill up: worker + scheduler; metrics on :{settings.metrics_port}; Ctrl-C to stop")
    code = run_worker(settings, pipeline, loglevel="INFO", extra_tasks=[scheduler_task], rules_dir=Path(settings.rules))
    database.close()
    raise typer.Exit(code)


@app.command()
def scheduler() -> None:
    """Run only the monthly billing scheduler (server deployments; embedded mode: use `up`)."""
    from apscheduler.schedulers.blocking import BlockingScheduler

    from reports.scheduler import add_billing_job, run_due

    settings = load_settings()
    _setup_logging("INFO")
    rules = _rules(settings)
    database = _database(settings)
    blocking = BlockingScheduler(timezone=rules.billing_tz)
    add_billing_job(blocking, lambda: run_due(database, rules), rules)
    try:
        blocking.start()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        database.close()


# -------------------------------------------------------------------------------- invoices


def _check_period(period: str) -> str:
    import re

    if not re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", period):
        raise GpubillError(f"--period: {period!r} is not a month like 2026-03")
    return period


@invoice_app.command("run")
def invoice_run(
    period: str = typer.Option(..., help="Billing period YYYY-MM (billing time zone)."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Also write each invoice as JSON, CSV and PDF here."),
) -> None:
    """Invoice every tenant with charges in the period (re-running changes nothing)."""
    from reports.invoicing import list_invoices, run_period, write_invoice_files

    settings = load_settings()
    rules = _rules(settings)
    with _database(settings) as database:
        report = run_period(database, rules, _check_period(period), progress=lambda n: err.print(f"[dim]{n}[/dim]"))
        out.print(f"{period}: {len(report.created)} invoices created, {len(report.existing)} already final")
        for number, tenant, total in list_invoices(database, period):
            out.print(f"  {number}  {tenant:<24} {total:>14} CNY")
        if out_dir:
            write_invoice_files(database, period, out_dir)


@invoice_app.command("show")
def invoice_show(
    period: str = typer.Option(..., help="Billing period YYYY-MM."),
    tenant: str = typer.Option(..., help="Tenant id."),
    fmt: str = typer.Option("json", "--format", help="json, csv or pdf (pdf needs --out)."),
    out_file: Optional[Path] = typer.Option(None, "--out", help="Write to this file instead of stdout."),
) -> None:
    """Print one invoice."""
    from reports.invoicing import load_invoice
    from reports.render import render_invoice

    if fmt not in ("json", "csv", "pdf"):
        raise GpubillError(f"--format: {fmt!r} is not one of json, csv, pdf")
    settings = load_settings()
    with _database(settings) as database:
        data = render_invoice(load_invoice(database, tenant, _check_period(period)), fmt)
    _emit(data, out_file, binary=fmt == "pdf")


def _emit(data: bytes | str, out_file: Optional[Path], *, binary: bool = False) -> None:
    raw = data.encode() if isinstance(data, str) else data
    if out_file:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_bytes(raw)
        err.print(f"wrote {out_file}")
    elif binary:
        raise GpubillError("this format is binary: give --out FILE")
    else:
        sys.stdout.write(raw.decode())
        if not raw.endswith(b"\n"):
            sys.stdout.write("\n")


# ------------------------------------------------------------------------------------- dlq


@dlq_app.command("list")
def dlq_list(
    limit: int = typer.Option(20, min=1, help="How many, newest first."),
    fmt: str = typer.Option("table", "--format", help="table or json."),
) -> None:
    """The dead-lettered input, newest first, with reason and source position."""
    import orjson
    from rich.table import Table

    settings = load_settings()
    with _database(settings) as database:
        rows = database.query_dicts(
            "SELECT dead_at, source_topic, source_partition, source_offset, source_line, source_index, reason, "
            "toValidUTF8(original) AS original "
            "FROM deadletters FINAL ORDER BY dead_at DESC, source_topic, source_partition, source_offset DESC, "
            "source_line DESC, source_index DESC LIMIT {n:UInt32}",
            {"n": limit},
        )
    for row in rows:
        row["dead_at"] = row["dead_at"].replace(tzinfo=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if fmt == "json":
        sys.stdout.write(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    if fmt != "table":
        raise GpubillError(f"--format: {fmt!r} is not one of table, json")
    table = Table("dead at", "source", "reason", "original")
    for row in rows:
        where = f"{row['source_topic']}[{row['source_partition']}]@{row['source_offset']}"
        if row["source_line"]:
            where = f"{row['source_topic']} line {row['source_line']}"
        if row["source_index"]:
            where += f" element {row['source_index']}"
        table.add_row(row["dead_at"], where, row["reason"], row["original"][:60])
    out.print(table)


# ----------------------------------------------------------------------------------- reports


@report_app.command("cost-share")
def report_cost_share(
    period: str = typer.Option(..., help="Billing period YYYY-MM."),
    what_if_site: Optional[str] = typer.Option(None, help="Also price the same energy at this site."),
    what_if_rules: Optional[Path] = typer.Option(None, help="Also price the same usage under this rule set."),
    fmt: str = typer.Option("table", "--format", help="table, csv or json."),
    out_file: Optional[Path] = typer.Option(None, "--out", help="Write to this file instead of stdout."),
) -> None:
    """Per site and GPU model: cards, GPU-hours, rent, electricity billed and idle, share, green kWh."""
    from reports.cost_share import cost_share, store_cost_share, what_if
    from reports.render import render_cost_share

    if fmt not in ("table", "csv", "json"):
        raise GpubillError(f"--format: {fmt!r} is not one of table, csv, json")
    settings = load_settings()
    rules = _rules(settings)
    with _database(settings) as database:
        rows = cost_share(database, rules, _check_period(period))
        store_cost_share(database, period, rows)
        compared = None
        if what_if_site or what_if_rules:
            other = load_rules(what_if_rules) if what_if_rules else None
            compared = what_if(database, rules, period, rows, other_site=what_if_site, other_rules=other)
    _emit(render_cost_share(rows, fmt, what_if=compared), out_file)


@report_app.command("usage")
def report_usage(
    tenant: str = typer.Option(..., help="Tenant id."),
    period: str = typer.Option(..., help="Billing period YYYY-MM."),
    fmt: str = typer.Option("csv", "--format", help="csv, json, parquet or pdf."),
    out_file: Path = typer.Option(..., "--out", help="File to write."),
) -> None:
    """A customer's usage report: per day, instance and GPU."""
    from reports.render import render_usage
    from reports.usage_report import usage_report

    if fmt not in ("csv", "json", "parquet", "pdf"):
        raise GpubillError(f"--format: {fmt!r} is not one of csv, json, parquet, pdf")
    settings = load_settings()
    rules = _rules(settings)
    with _database(settings) as database:
        report = usage_report(database, rules, tenant, _check_period(period))
    _emit(render_usage(report, fmt), out_file)


@app.command()
def audit(period: str = typer.Option(..., help="Billing period YYYY-MM.")) -> None:
    """Recompute the period from raw readings and compare with the rated data; exit 1 on differences."""
    from rich.table import Table

    from reports.audit import audit as run_audit

    settings = load_settings()
    rules = _rules(settings)
    with _database(settings) as database:
        figures, differences = run_audit(database, rules, _check_period(period))
    table = Table("tenant", "rented GPU-s", "energy mJ", "rent", "electricity", title=f"Audit {period} (from raw readings)")
    for tenant, f in sorted(figures.items()):
        table.add_row(tenant or "(unallocated)", f"{f.rent_seconds:,}", f"{f.energy_mj:,}", str(f.rent), str(f.electricity))
    out.print(table)
    if differences:
        for d in differences:
            out.print(f"DIFFERENCE {d.tenant or '(unallocated)'} {d.what}: raw {d.raw} vs rated {d.rated}", highlight=False)
        raise GpubillError(f"audit of {period}: {len(differences)} differences between raw readings and rated data")
    out.print(f"audit of {period}: clean — rated data equals the batch join of the raw readings")


# ------------------------------------------------------------------------------------- bench

bench_app = typer.Typer(help="Benchmarks (measured figures, not tests).", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


@bench_app.command("pricing")
def bench_pricing_command(
    cards: int = typer.Option(1280, min=1, help="Cards in the fleet (the operator's site has 1,280)."),
    repeat: int = typer.Option(3, min=1, help="Runs; the best is reported."),
    as_json: bool = typer.Option(False, "--json", help='Print {"gpu_seconds", "seconds", "gpu_seconds_per_s"}.'),
) -> None:
    """Price a month of per-card-per-hour aggregates (time-of-use site, mid-month rule change)."""
    import orjson

    from gpubill.bench.pricing import bench_pricing

    result = bench_pricing(cards=cards, repeat=repeat)
    if as_json:
        sys.stdout.write(orjson.dumps(result).decode() + "\n")
        return
    out.print(
        f"priced {result['gpu_seconds']:,} GPU-seconds ({cards:,} cards × a month) in {result['seconds']:.3f} s: "
        f"{result['gpu_seconds_per_s']:,.0f} GPU-seconds/s"
    )


def _print_figures(result: dict, as_json: bool) -> None:
    """A benchmark's figures: one JSON object, or a name and value a line."""
    if as_json:
        import orjson

        sys.stdout.write(orjson.dumps(result).decode() + "\n")
        return
    for name, value in result.items():
        out.print(f"{name:>20}  {value}")


@bench_app.command("pipeline")
def bench_pipeline_command(
    gpus: int = typer.Option(1280, min=1, help="GPUs whose readings are pre-produced."),
    seconds: int = typer.Option(60, min=1, help="Seconds of readings per GPU (usage and power each)."),
    freshness_rate: int = typer.Option(20_000, min=100, help="Readings/s of the steady producer for freshness."),
    freshness_s: int = typer.Option(10, min=1, help="How long the steady producer runs."),
    port: int = typer.Option(39192, min=1024, max=65534, help="Port of the private broker (and port + 1)."),
    gateway: bool = typer.Option(False, "--gateway", help=(
        "Serve the private chDB from its own process (`gpubill clickhouse serve`) and point the worker "
        "at it, as at a ClickHouse server: the worker's memory is then the worker's alone.")),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as one JSON object."),
) -> None:
    """Pipeline vs plain consumer on a private broker and chDB: throughput, freshness, worker memory."""
    from gpubill.bench.pipeline import bench_pipeline

    result = bench_pipeline(gpus, seconds, freshness_rate=freshness_rate, freshness_s=freshness_s, port=port,
                            gateway=gateway, say=lambda msg: err.print(f"[dim]{msg}[/dim]"))
    _print_figures(result, as_json)


@bench_app.command("rating")
def bench_rating_command(
    gpus: int = typer.Option(1280, min=1, help="GPUs in the simulated fleet."),
    seconds: int = typer.Option(1200, min=1, help="Seconds of readings per GPU; beyond 900 the horizon is full."),
    batch_s: int = typer.Option(12, min=1, help="Seconds of the fleet per batch (a fetch round of the worker)."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as one JSON object."),
) -> None:
    """The native core alone, no broker or database: readings/s of core time, state memory at a full horizon."""
    from gpubill.bench.rating import bench_rating

    result = bench_rating(gpus, seconds, batch_s=batch_s, say=lambda msg: err.print(f"[dim]{msg}[/dim]"))
    _print_figures(result, as_json)


# -------------------------------------------------------------------------------- clickhouse

clickhouse_app = typer.Typer(help="Share the embedded ClickHouse (chDB) between gpubill processes.",
                             no_args_is_help=True)
app.add_typer(clickhouse_app, name="clickhouse")


@clickhouse_app.command("serve")
def clickhouse_serve(
    listen: str = typer.Option("127.0.0.1:8123", help="host:port to serve on; keep it on loopback."),
) -> None:
    """Serve the embedded database over ClickHouse's HTTP interface to other gpubill processes.

    Holds the chDB database (the one process allowed) so that workers, scheduler and
    reports can share it: start them with GPUBILL_CLICKHOUSE=http://127.0.0.1:8123/.
    A development and small-site tool: no authentication, no TLS, one statement at a
    time. Stops on SIGTERM or Ctrl-C after the statement in flight.
    """
    from gpubill.devenv.ch_gateway import serve

    settings = load_settings()
    _setup_logging("INFO")
    serve(settings.clickhouse, listen)


# ------------------------------------------------------------------------------------- rules


@rules_app.command("check")
def rules_check(directory: Optional[Path] = typer.Argument(None, help="Rules directory (default: GPUBILL_RULES).")) -> None:
    """Validate a rule set as a whole; exit 1 naming file, place and reason when invalid."""
    settings = load_settings()
    rules = _rules(settings, directory)
    out.print(
        f"rules OK: {len(rules.site_ids)} sites ({', '.join(rules.site_ids)}), "
        f"{len(rules.model_ids)} models ({', '.join(rules.model_ids)}), billing time zone {rules.billing_tz}"
    )


# -------------------------------------------------------------------------------------- demo


@app.command()
def demo(
    minutes: int = typer.Option(20, min=1, help="Minutes of simulated readings."),
    gpus: int = typer.Option(8, min=1, help="Cards per model (RTX4090, A800-80G, H800-80G), rounded up to nodes of 8."),
) -> None:
    """The main job on embedded defaults: broker, fleet, pipeline, invoices, reports in ./out/."""
    from gpubill.demo import run_demo

    run_demo(load_settings(), minutes=minutes, gpus=gpus, out=out, err=err)


def main() -> None:
    _quiet_libraries()
    try:
        app()
    except USER_ERRORS as exc:
        # One line: details (a broker's log tail, say) are in the files the message names.
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        err.print(f"[red]error:[/red] {escape(first)}", highlight=False, soft_wrap=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
