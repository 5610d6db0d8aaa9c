"""`gpubill demo`: the whole product once, on embedded defaults, in a few minutes.

1. a Kafka broker (the local one is started unless GPUBILL_KAFKA names another);
2. a simulated mixed fleet (RTX 4090, A800, H800) for the last hours of last month;
3. `gpubill worker --drain` in a child process: readings → Faust → chDB;
4. the simulated tenants are registered (as an operator registers customers, so each
   receives the trial credit) and the month is invoiced; invoices, usage reports and the
   cost share go to ./out/;
5. the cost-share table, with the East-coast what-if, is printed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from gpubill.config import Settings
from gpubill.errors import GpubillError
from reports.render.format import terminal_text
from warehouse.connection import open_database

DEMO_MODELS = ["RTX4090", "A800-80G", "H800-80G"]
# The simulator names its tenants tenant-01 … tenant-NN (gpubill/devenv/simulator.py).
DEMO_TENANTS = {f"tenant-{k:02d}": f"Demo tenant {k}" for k in range(1, 5)}
# The buyer block of their invoices (made-up companies; the tax ids pass the 统一社会信用代码 check).
DEMO_BUYERS = {
    "tenant-01": ("Guiyang Lattice AI Co., Ltd.", "91520115MA6DEM001B", "88 Changling Road, Guiyang, Guizhou"),
    "tenant-02": ("Zunyi Render Farm Ltd.", "91520115MA6DEM002E", "12 Huichuan Avenue, Zunyi, Guizhou"),
    "tenant-03": ("Anshun Vision Labs Co., Ltd.", "91520115MA6DEM003H", "5 Huangguoshu Street, Anshun, Guizhou"),
    "tenant-04": ("Kaili Speech Tech Ltd.", "91520115MA6DEM004L", "21 Ningbo Road, Kaili, Guizhou"),
}
PREPAID_TENANT, PREPAID_TOP_UP = "tenant-04", "200.00"  # one prepaid customer: its invoice is settled from it
WHAT_IF_SITE = "sh-east"


def run_demo(settings: Settings, *, minutes: int, gpus: int, out: Console, err: Console) -> None:
    from billing_rules import load_rules
    from gpubill.devenv.kafka_broker import LocalBroker
    from reports.cost_share import cost_share, store_cost_share, what_if
    from billing.invoicing import list_invoices, run_period
    from billing.balances import top_up
    from gpubill.cli.books import open_books
    from reports.invoice_files import write_invoice_files
    from reports.outputs import output_name, path_inside, write_output
    from reports.render import render_cost_share, render_usage
    from billing.tenants import TenantExists, add_tenant, update_tenant
    from reports.usage_report import usage_report
    from streams.kafka.admin import ensure_pipeline_topics
    from streams.kafka.producers import produce_readings
    from gpubill.devenv.simulator import simulate_fleet

    started = time.monotonic()
    rules = load_rules(Path(settings.rules))
    if "GPUBILL_KAFKA" not in os.environ:
        broker = LocalBroker(settings.home_path / "kafka", bootstrap=settings.kafka)
        if broker.up(progress=lambda msg: err.print(f"[dim]{msg}[/dim]")):
            err.print(f"started the local Kafka broker at {settings.kafka}")
    ensure_pipeline_topics(settings)

    now_s = int(datetime.now(timezone.utc).timestamp())
    period = rules.period_of(rules.period_bounds(rules.period_of(now_s))[0] - 1)  # last month
    start_s = rules.period_bounds(period)[1] - minutes * 60 - 3600
    per_model = -(-gpus // 8) * 8  # whole nodes of eight cards; the simulator gives each node one model
    cards = per_model * len(DEMO_MODELS)
    total = cards * minutes * 60 * 2
    err.print(f"[bold]1/4[/bold] simulating {cards} cards × {minutes} min in {period} → Kafka ({total:,} readings)")
    readings = simulate_fleet(gpus=cards, gpu_model=DEMO_MODELS[0], models=DEMO_MODELS, minutes=minutes,
                              start=start_s, tenants=len(DEMO_TENANTS), site="gz-guian", seed=2026)
    with Progress(console=err, transient=True) as progress:
        task = progress.add_task("producing", total=total)
        produce_readings(settings, readings, progress=lambda n: progress.advance(task, n))

    err.print("[bold]2/4[/bold] running the pipeline: gpubill worker --drain")
    drained = subprocess.run([sys.executable, "-m", "gpubill.cli", "worker", "--drain"], env=os.environ.copy())
    if drained.returncode:
        raise GpubillError(f"the worker failed (exit {drained.returncode}); see its messages above")

    out_dir = settings.out_path
    err.print(f"[bold]3/4[/bold] invoicing {period} and writing reports under {terminal_text(out_dir)}/")
    with open_database(settings.clickhouse) as database, open_books(database, settings, numbered=True, rules=rules):
        for tenant, name in DEMO_TENANTS.items():  # a re-run finds them registered: nothing changes
            legal_name, tax_id, address = DEMO_BUYERS[tenant]
            buyer = dict(legal_name=legal_name, tax_id=tax_id, address=address, email=f"finance@{tenant}.example")
            try:
                add_tenant(database, tenant, name, note="gpubill demo", **buyer)
            except TenantExists:  # registered by an older demo, before the buyer fields
                update_tenant(database, tenant, display_name=name, **buyer)
        top_up(database, PREPAID_TENANT, PREPAID_TOP_UP, f"demo-{period}", rules=rules)  # idempotent by its ref
        run = run_period(database, rules, period)
        mode = settings.file_mode
        write_invoice_files(database, rules, period, out_dir / "invoices", file_mode=mode)
        # the Chinese PDFs beside the English ones, NUMBER_TENANT_PERIOD.zh-CN.pdf (reports.outputs.output_name)
        write_invoice_files(database, rules, period, out_dir / "invoices", file_mode=mode, lang="zh-CN",
                            formats=("pdf",))
        invoices = list_invoices(database, period)
        for number, tenant, total_cny in invoices:
            report = usage_report(database, rules, tenant, period)
            for fmt in ("csv", "json", "parquet", "pdf"):
                write_output(path_inside(out_dir / "usage", output_name(None, tenant, period, fmt)),
                             render_usage(report, fmt), mode)
        rows = cost_share(database, rules, period)
        store_cost_share(database, period, rows)
        compared = what_if(database, rules, period, rows, other_site=WHAT_IF_SITE)
    for fmt in ("csv", "json"):
        write_output(path_inside(out_dir, output_name("cost-share", None, period, fmt)),
                     render_cost_share(rows, fmt, what_if=compared), mode)

    err.print(f"[bold]4/4[/bold] {len(run.created)} invoices created, {len(run.existing)} already final")
    for number, tenant, total_cny in invoices:
        out.print(f"  {terminal_text(number)}  {terminal_text(tenant):<12} {total_cny:>12} CNY", highlight=False)
    sys.stdout.write(render_cost_share(rows, "table", what_if=compared) + "\n")
    out.print(f"[dim]done in {time.monotonic() - started:.0f}s; files under {terminal_text(out_dir)}/[/dim]")
