"""`gpubill rollup`: bring the hourly rollups current by hand (usage/rollup.py does the work).

`gpubill up` and `gpubill scheduler` run the same step every few minutes; reports are exact
without it (hours not rolled up are read from the per-second rows), only slower.
"""

from __future__ import annotations

from typing import Optional

import typer

from gpubill.cli.common import check_period, connect, err, out, read_rules, terminal_text
from gpubill.config import load_settings


def rollup(period: Optional[str] = typer.Option(None, help="Only this billing period YYYY-MM (default: all).")) -> None:
    """Roll up every hour written since its last rollup and quiet for two minutes since."""
    from usage.rollup import roll_up

    settings = load_settings()
    rules = read_rules(settings)
    with connect(settings) as database:
        report = roll_up(database, rules, period=check_period(period) if period else None,
                         progress=lambda p, hour: err.print(f"[dim]rolled up {terminal_text(p)} {_iso(hour)}[/dim]"))
    out.print(f"{len(report.hours)} hours rolled up")
    if report.frozen:
        err.print(f"[red]{len(report.frozen)} hours were written after retention dropped their period's per-second "
                  "rows; they are not billed (gpubill audit lists them)[/red]")
        raise typer.Exit(1)


def _iso(second: int) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(second, timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
