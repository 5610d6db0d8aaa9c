"""`gpubill simulate` and `gpubill replay`: put readings on the Kafka topics.

Both create the pipeline's topics first (idempotent) and show progress on stderr.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import typer

from gpubill.cli.common import err, out, read_rules, terminal_text
from gpubill.config import Settings, load_settings
from gpubill.errors import GpubillError
from streams.errors import InputFileError


def simulate(
    gpus: int = typer.Option(8, min=1, help="Cards in the simulated fleet."),
    model: str = typer.Option("A800-80G", help="GPU model (catalog id)."),
    minutes: int = typer.Option(10, min=1, help="Minutes of readings, one per card per second per stream."),
    start: Optional[str] = typer.Option(None, help="First second, RFC 3339 (default: now − minutes)."),
    tenants: int = typer.Option(3, min=0, help="Tenants renting cards."),
    site: str = typer.Option("gz-guian", help="Site of the fleet."),
    seed: int = typer.Option(7, help="Random seed (same seed, same readings)."),
    counters: bool = typer.Option(False, "--counters", help=(
        "Power readings carry the card's cumulative energy counter (energy_mj) and its counting run "
        "(energy_epoch), as from NVML.")),
) -> None:
    """Produce realistic readings of a simulated fleet to Kafka."""
    from gpubill.devenv.simulator import simulate_fleet
    from schemas.events import parse_ts
    from streams.kafka.admin import ensure_pipeline_topics

    settings = load_settings()
    rules = read_rules(settings)
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
    readings = simulate_fleet(gpus=gpus, gpu_model=model, minutes=minutes, start=start_s, tenants=tenants, site=site, seed=seed,
                              counters=counters)
    report = _produce_with_progress(settings, readings, total, f"simulating {gpus} × {model}")
    out.print(f"produced {report.total} readings ({', '.join(f'{t}: {n}' for t, n in report.produced.items())})")


def _produce_with_progress(settings: Settings, readings, total: int, label: str):
    from rich.progress import Progress

    from streams.kafka.producers import produce_readings

    with Progress(console=err, transient=True) as progress:
        task = progress.add_task(label, total=total)
        return produce_readings(settings, readings, progress=lambda n: progress.advance(task, n))


_SHOWN = 10  # dead-lettered lines named on stderr; the rest are counted


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
        task = progress.add_task(f"replaying {terminal_text(file.name)}", total=file.stat().st_size)
        report = replay_file(settings, file, progress=lambda n: progress.advance(task, n))
    for number, reason in report.refused[:_SHOWN]:
        err.print(f"line {number} dead-lettered: {terminal_text(reason)}", highlight=False)
    if len(report.refused) > _SHOWN:
        err.print(f"… and {len(report.refused) - _SHOWN} more lines dead-lettered (see `gpubill dlq list`)")
    # Exit 0 even then (SPEC §8): a dead-lettered line is kept with its reason, not lost.
    out.print(
        f"replayed {report.total} readings from {terminal_text(file)} "
        f"({', '.join(f'{t}: {n}' for t, n in sorted(report.produced.items())) or 'none'}); "
        f"{report.deadlettered} dead-lettered by replay",
        highlight=False,
    )
