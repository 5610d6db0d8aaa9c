"""`gpubill demo`: the whole product once on embedded defaults (gpubill/demo.py runs it)."""

from __future__ import annotations

import typer

from gpubill.cli.common import err, out
from gpubill.config import load_settings


def demo(
    minutes: int = typer.Option(20, min=1, help="Minutes of simulated readings."),
    gpus: int = typer.Option(8, min=1, help="Cards per model (RTX4090, A800-80G, H800-80G), rounded up to nodes of 8."),
) -> None:
    """The main job on embedded defaults: broker, fleet, pipeline, invoices, reports in ./out/."""
    from gpubill.demo import run_demo

    run_demo(load_settings(), minutes=minutes, gpus=gpus, out=out, err=err)
