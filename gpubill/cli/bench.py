"""`gpubill bench pipeline|spend|rating|month|api|rerate|books|receivables|agent`: measured figures of the paths users run.

The benchmarks themselves are gpubill/bench/; docs/performance.md records their results.
"""

from __future__ import annotations

import typer

from gpubill.cli.common import err, print_figures, terminal_text

app = typer.Typer(help="Benchmarks (measured figures, not tests).", no_args_is_help=True)


@app.command("pipeline")
def bench_pipeline_command(
    gpus: int = typer.Option(1280, min=1, help="GPUs whose readings are pre-produced."),
    seconds: int = typer.Option(60, min=1, help="Seconds of readings per GPU (usage and power each)."),
    freshness_rate: int = typer.Option(20_000, min=100, help="Readings/s of the steady producer for freshness."),
    freshness_s: int = typer.Option(10, min=1, help="How long the steady producer runs."),
    port: int = typer.Option(39192, min=1024, max=65534, help="Port of the private broker (and port + 1; "
                             "with --brokers N, port … port + 2N - 1)."),
    gateway: bool = typer.Option(False, "--gateway", help=(
        "Serve the private chDB from its own process (`gpubill clickhouse serve`) and point the worker "
        "at it, as at a ClickHouse server: the worker's memory is then the worker's alone.")),
    counters: bool = typer.Option(False, "--counters", help=(
        "Power readings carry the cards' energy counters (energy_mj, energy_epoch): the rater computes "
        "counter energy. scripts/bench-counters compares runs with and without, alternating.")),
    brokers: int = typer.Option(1, "--brokers", min=1, max=9, help=(
        "Nodes of the private Kafka: 3 is a cluster with three replicas and min.insync.replicas 2 (ports port "
        "… port + 5). scripts/bench-pairs --vary brokers compares 1 and 3, alternating.")),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as one JSON object."),
) -> None:
    """Pipeline vs plain consumer on a private broker (or cluster) and chDB: throughput, freshness, worker memory."""
    from gpubill.bench.pipeline import bench_pipeline

    result = bench_pipeline(gpus, seconds, freshness_rate=freshness_rate, freshness_s=freshness_s, port=port,
                            gateway=gateway, counters=counters, brokers=brokers,
                            say=lambda msg: err.print(f"[dim]{terminal_text(msg)}[/dim]"))
    print_figures(result, as_json)


@app.command("spend")
def bench_spend_command(
    rate: int = typer.Option(20_000, min=100, help="Readings/s of the steady producer."),
    duration_s: int = typer.Option(30, min=5, help="How long it produces (s)."),
    tenants: int = typer.Option(16, min=1, max=5000, help="Tenants of the simulated fleet, each with a budget and a top-up."),
    port: int = typer.Option(39292, min=1024, max=65534, help="Port of the private broker (and port + 1, + 2)."),
    compare: bool = typer.Option(False, "--compare", help=(
        "Run it twice, with GPUBILL_SPEND=0 first (the rating alone) then on, and print both: the cost of live "
        "spend on the pipeline's own freshness, side by side.")),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as one JSON object."),
) -> None:
    """Live spend at a steady rate on a private broker and a served chDB: freshness of month to date, spend
    rounds per second, the tracker's CPU, exhaustion to event, events emitted."""
    from gpubill.bench.spend import bench_spend

    def run(spend: bool) -> dict:
        return bench_spend(rate=rate, duration_s=duration_s, tenants=tenants, port=port, spend=spend,
                           say=lambda msg: err.print(f"[dim]{terminal_text(msg)}[/dim]"))

    if compare:
        off = run(False)
        on = run(True)
        result = {**on, "off_readings_per_s": off["readings_per_s"], "off_rated_p50_s": off["rated_p50_s"],
                  "off_rated_p99_s": off["rated_p99_s"]}
    else:
        result = run(True)
    print_figures(result, as_json)


@app.command("rating")
def bench_rating_command(
    gpus: int = typer.Option(1280, min=1, help="GPUs in the simulated fleet."),
    seconds: int = typer.Option(1200, min=1, help="Seconds of readings per GPU; beyond 900 the horizon is full."),
    batch_s: int = typer.Option(12, min=1, help="Seconds of the fleet per batch (a fetch round of the worker)."),
    spend: bool = typer.Option(False, "--spend", help=(
        "Also rate every round with spend marks on a second core, in turn: readings/s with spend tracking off "
        "and on, side by side.")),
    counters: bool = typer.Option(False, "--counters", help="Power readings carry the cards' energy counters."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as one JSON object."),
) -> None:
    """The native core alone, no broker or database: readings/s of core time, state memory at a full horizon."""
    from gpubill.bench.rating import bench_rating

    result = bench_rating(gpus, seconds, batch_s=batch_s, spend=spend, counters=counters,
                          say=lambda msg: err.print(f"[dim]{terminal_text(msg)}[/dim]"))
    print_figures(result, as_json)


@app.command("month")
def bench_month_command(
    gpus: int = typer.Option(1280, min=1, help="Cards in the fleet (the operator's site has 1,280)."),
    days: int = typer.Option(30, min=1, max=31, help="Days of the month from the 1st (April 2026 has 30)."),
    per_second_days: int = typer.Option(1, min=1, help=(
        "Days with per-second rows (readings and rated seconds), rolled up by the real rollup step; the other "
        "days are written as exactly the rollups those rows would give.")),
    per_second_hours: int | None = typer.Option(None, min=1, help="Per-second rows for this many hours instead."),
    tenant_cards: int = typer.Option(64, min=1, help="Cards per tenant (tenant-0, tenant-1, ...)."),
    period: str = typer.Option("2026-04", help="The month (billing time zone) of the example time-of-use rules."),
    keep: str | None = typer.Option(None, "--keep", help="Build the database in this directory and keep it."),
    port: int = typer.Option(28392, min=1024, max=65534, help="Port of the private broker of the books "
                             "(and port + 1)."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as one JSON object."),
) -> None:
    """A month of a fleet in a private chDB: the real rollup, invoice run (on the books, a private broker), cost
    share, usage reports, finance view, audit, and bytes per GPU-second."""
    from pathlib import Path

    from gpubill.bench.month import bench_month
    from gpubill.cli.common import check_period

    result = bench_month(gpus, days, per_second_hours=per_second_hours or 24 * per_second_days,
                         period=check_period(period), tenant_cards=tenant_cards, keep=Path(keep) if keep else None,
                         port=port, say=lambda msg: err.print(f"[dim]{terminal_text(msg)}[/dim]"))
    print_figures(result, as_json)


@app.command("api")
def bench_api_command(
    gpus: int = typer.Option(1280, min=64, help="Cards in the fleet (the operator's site has 1,280); tenant-0 has 64."),
    days: int = typer.Option(30, min=1, max=30, help="Days of April 2026 from the 1st."),
    clients: int = typer.Option(50, min=1, max=500, help="Concurrent clients, each with its own key of tenant-0."),
    requests: int = typer.Option(4, min=1, help="Requests per client at `clients` concurrent clients."),
    sequential: int = typer.Option(10, min=1, help="Requests of the one client, one after another."),
    cache_s: float = typer.Option(10.0, min=0.1, help="The answer cache of the second server (the API's default)."),
    keep: str | None = typer.Option(None, "--keep", help="Build the month in this directory and keep it (reused "
                                    "by a later run with the same directory)."),
    port: int = typer.Option(28592, min=1024, max=65534, help="Port of the private broker of the books while the "
                             "month is built (and port + 1)."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as one JSON object."),
) -> None:
    """The tenant API over real HTTP on a month of the fleet: p50/p95 of a month's usage download (each format)
    and of /v1/usage/current, at 1 and `clients` clients, with the answer cache off and on."""
    from pathlib import Path

    from gpubill.bench.api import bench_api

    result = bench_api(gpus, days=days, clients=clients, requests=requests, sequential=sequential, cache_s=cache_s,
                       keep=Path(keep) if keep else None, port=port,
                       say=lambda msg: err.print(f"[dim]{terminal_text(msg)}[/dim]"))
    print_figures(result, as_json)


@app.command("rerate")
def bench_rerate_command(
    gpus: int = typer.Option(1280, min=2, help="Cards in the fleet (the operator's site has 1,280)."),
    days: int = typer.Option(30, min=1, max=31, help="Days of the month from the 1st (April 2026 has 30)."),
    per_second_hours: int = typer.Option(24, min=1, help=(
        "Hours with per-second rows from the 1st, rolled up by the real rollup step; the card-day reattributed "
        "is these hours of the first day.")),
    tenant_cards: int = typer.Option(64, min=1, help="Cards per tenant (tenant-0, tenant-1, ...); two at least."),
    period: str = typer.Option("2026-04", help="The month (billing time zone) of the example time-of-use rules."),
    keep: str | None = typer.Option(None, "--keep", help="Build the month in this directory and keep it (reused "
                                    "by a later run with the same directory and sizes; each run re-rates a copy)."),
    port: int = typer.Option(28492, min=1024, max=65534, help="Port of the private broker of the books "
                             "(and port + 1)."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as one JSON object."),
) -> None:
    """Re-rating `bench month`'s month after a price correction from the 10th and one card-day reattributed:
    the dry run, the apply, and the invoice run and usage report before and after, side by side."""
    from pathlib import Path

    from gpubill.bench.rerate import bench_rerate
    from gpubill.cli.common import check_period

    result = bench_rerate(gpus, days, per_second_hours=per_second_hours, period=check_period(period),
                          tenant_cards=tenant_cards, keep=Path(keep) if keep else None, port=port,
                          say=lambda msg: err.print(f"[dim]{terminal_text(msg)}[/dim]"))
    print_figures(result, as_json)


@app.command("books")
def bench_books_command(
    tenants: int = typer.Option(1000, min=1, max=100_000, help="Tenants, each invoiced every month."),
    months: int = typer.Option(12, min=1, max=12, help="Months of the year (2026) written on the books."),
    port: int = typer.Option(28692, min=1024, max=65534, help="Port of the private broker (and port + 1)."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as one JSON object."),
) -> None:
    """The books' share of a rebuild: a year of monthly documents (invoices with their lines, credit notes, voids,
    top-ups, budgets, keys, tenants) written on a private broker's books, then `gpubill rebuild --yes --books-only`
    of an empty chDB timed, and checked table by table against the database they were written into."""
    from gpubill.bench.books import bench_books

    result = bench_books(tenants, months, port=port, say=lambda msg: err.print(f"[dim]{terminal_text(msg)}[/dim]"))
    print_figures(result, as_json)


@app.command("receivables")
def bench_receivables_command(
    tenants: int = typer.Option(1000, min=1, max=100_000, help="Tenants, each invoiced every month."),
    months: int = typer.Option(12, min=1, max=12, help="Months of the year (2025) of documents and payments."),
    runs: int = typer.Option(5, min=1, max=100, help="Times the aging is read; the median is the figure."),
    command_runs: int = typer.Option(3, min=1, max=20, help="Times the command is run; the median is its figure."),
    as_of: str | None = typer.Option(None, "--as-of", help="YYYY-MM-DD of the aging (default: 2026-01-10, ten days "
                                     "after December's invoices were issued)."),
    keep: str | None = typer.Option(None, "--keep", help="Build the year in this directory and keep it (a later run "
                                    "with the same directory times it again without building it)."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as one JSON object."),
) -> None:
    """`gpubill receivables --as-of` over a year of documents and payments of 1,000 tenants in a private chDB
    (projected without a broker): the aging's median time against the issue's 2 s, the command's, checked."""
    from pathlib import Path

    from gpubill.bench.receivables import bench_receivables
    from gpubill.cli.receivables import check_date

    result = bench_receivables(tenants, months, runs=runs, command_runs=command_runs, as_of=check_date(as_of, "--as-of") if as_of else None,
                               keep=Path(keep) if keep else None,
                               say=lambda msg: err.print(f"[dim]{terminal_text(msg)}[/dim]"))
    print_figures(result, as_json)


@app.command("agent")
def bench_agent_command(
    cards: int = typer.Option(8, min=1, max=64, help="Cards of the node (a fake NVML: the machine needs none)."),
    duration_s: int = typer.Option(60, min=5, help="How long the agent samples at 1 Hz for CPU and memory (s)."),
    hours: float = typer.Option(1.0, min=0.01, help="Hours of readings spooled with Kafka away, then drained."),
    port: int = typer.Option(28792, min=1024, max=65534, help="Port of the private broker (and port + 1)."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as one JSON object."),
) -> None:
    """`gpubill agent` on a private broker: CPU % of one core and peak RSS at 1 Hz, and the time to drain an hour's spool."""
    from gpubill.bench.agent import bench_agent

    result = bench_agent(cards=cards, duration_s=duration_s, hours=hours, port=port,
                         say=lambda msg: err.print(f"[dim]{terminal_text(msg)}[/dim]"))
    print_figures(result, as_json)
