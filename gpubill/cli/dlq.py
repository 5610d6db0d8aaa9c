"""`gpubill dlq list`: the dead-lettered input stored in ClickHouse, newest first."""

from __future__ import annotations

import sys
from datetime import timezone

import typer

from gpubill.cli.common import check_format, connect, out, terminal_text
from gpubill.config import load_settings

app = typer.Typer(help="Dead-lettered input.", no_args_is_help=True)

NEWEST_FIRST_SQL = (
    "SELECT dead_at, source_topic, source_partition, source_offset, source_line, source_index, reason, "
    "toValidUTF8(original) AS original "
    "FROM deadletters FINAL ORDER BY dead_at DESC, source_topic, source_partition, source_offset DESC, "
    "source_line DESC, source_index DESC LIMIT {n:UInt32}"
)


@app.command("list")
def dlq_list(
    limit: int = typer.Option(20, min=1, help="How many, newest first."),
    fmt: str = typer.Option("table", "--format", help="table or json."),
) -> None:
    """The dead-lettered input, newest first, with reason and source position."""
    import orjson
    from rich.table import Table

    check_format(fmt, "table", "json")
    settings = load_settings()
    with connect(settings) as database:
        rows = database.query_dicts(NEWEST_FIRST_SQL, {"n": limit})
    for row in rows:
        row["dead_at"] = row["dead_at"].replace(tzinfo=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if fmt == "json":
        sys.stdout.write(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    if not rows:  # not an empty frame
        out.print("no dead-lettered input")
        return
    table = Table("dead at", "source", "reason", "original")
    for row in rows:
        where = f"{row['source_topic']}[{row['source_partition']}]@{row['source_offset']}"
        if row["source_line"]:
            where = f"{row['source_topic']} line {row['source_line']}"
        if row["source_index"]:
            where += f" element {row['source_index']}"
        # topic, reason and original bytes are the sender's: shown, never interpreted
        table.add_row(row["dead_at"], terminal_text(where), terminal_text(row["reason"]),
                      terminal_text(row["original"], limit=60))
    out.print(table)
