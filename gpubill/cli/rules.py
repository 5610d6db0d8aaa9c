"""`gpubill rules check`: validate a billing rule set as a whole (billing_rules/loader.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from gpubill.cli.common import out, read_rules, terminal_text
from gpubill.config import load_settings

app = typer.Typer(help="Billing rule sets.", no_args_is_help=True)


@app.command("check")
def rules_check(directory: Optional[Path] = typer.Argument(None, help="Rules directory (default: GPUBILL_RULES).")) -> None:
    """Validate a rule set as a whole; exit 1 naming file, place and reason when invalid."""
    settings = load_settings()
    rules = read_rules(settings, directory)
    out.print(
        f"rules OK: {len(rules.site_ids)} sites ({terminal_text(', '.join(rules.site_ids))}), "
        f"{len(rules.model_ids)} models ({terminal_text(', '.join(rules.model_ids))}), "
        f"billing time zone {terminal_text(rules.billing_tz)}, review {rules.review}, revision {rules.revision}",
        highlight=False,
    )
