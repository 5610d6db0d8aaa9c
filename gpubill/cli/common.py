"""What every command module shares: the two consoles and the small helpers around them.

`out` is stdout (results: tables, figures, files' contents); `err` is stderr (progress,
"wrote FILE", errors), so a command's output can be piped.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from rich.console import Console

from billing_rules import RuleSet, load_rules
from gpubill.config import Settings
from gpubill.errors import GpubillError

if TYPE_CHECKING:  # the client is imported by the commands that open the database, not by --help
    from warehouse.connection import Database

out = Console()
err = Console(stderr=True)

PERIOD = re.compile(r"\d{4}-(0[1-9]|1[0-2])")


def read_rules(settings: Settings, directory: Optional[Path] = None) -> RuleSet:
    """The rule set in `directory`, or in GPUBILL_RULES; validated as a whole."""
    return load_rules(Path(directory or settings.rules))


def connect(settings: Settings) -> Database:
    """Open GPUBILL_CLICKHOUSE and apply any pending schema migrations first."""
    from warehouse.connection import open_database

    return open_database(settings.clickhouse)


def check_period(period: str) -> str:
    """`period` if it is a month like 2026-03; a one-line error naming --period if not."""
    if not PERIOD.fullmatch(period):
        raise GpubillError(f"--period: {period!r} is not a month like 2026-03")
    return period


def check_format(fmt: str, *allowed: str) -> str:
    """`fmt` if it is one of `allowed`; a one-line error naming --format and the choices if not.
    Checked before anything is opened or read."""
    if fmt not in allowed:
        raise GpubillError(f"--format: {fmt!r} is not one of {', '.join(allowed)}")
    return fmt


def emit(data: bytes | str, out_file: Optional[Path], *, binary: bool = False) -> None:
    """Write a rendered report to `out_file`, or to stdout when it is text."""
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


def print_figures(result: dict, as_json: bool) -> None:
    """A benchmark's figures: one JSON object, or a name and value a line."""
    if as_json:
        import orjson

        sys.stdout.write(orjson.dumps(result).decode() + "\n")
        return
    for name, value in result.items():
        out.print(f"{name:>20}  {value}")
