"""Cost-share report (SPEC §6) for finance: a rich table, CSV or JSON.

Rows are plain dicts, one per site and GPU model: ``site, gpu_model, cards,
rented_gpu_hours, rent_revenue, electricity_billed, electricity_unallocated,
electricity_share (a fraction: 0.0717 is 7.17 %), green_kwh, total_kwh, measured_it_kwh,
estimated_it_kwh`` (the cards' IT energy before PUE, graded: from their energy counters or
estimated from power readings; total_kwh is after PUE). What-if rows
carry the same keys plus ``what_if_site, what_if_electricity, saving``: the same usage
priced under another site's rules.

In CSV and JSON every Decimal is a string: money two decimals, GPU-hours and kWh six,
the share six (a fraction), anything else as given. The table is for people: grouped
thousands, the share as a percentage, and of the graded energy only the share measured
("Measured energy": measured ÷ (measured + estimated) IT kWh; the kWh are in CSV and JSON).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import orjson
from rich import box
from rich.console import Console
from rich.table import Table

from reports.render.format import (
    csv_cell,
    fraction_str,
    grouped,
    money_str,
    percent_str,
    plain,
    quantity_str,
    terminal_text,
)

__all__ = ["COST_SHARE_COLUMNS", "WHAT_IF_COLUMNS", "render_cost_share", "render_cost_share_table"]

COST_SHARE_COLUMNS = (
    "site",
    "gpu_model",
    "cards",
    "rented_gpu_hours",
    "rent_revenue",
    "electricity_billed",
    "electricity_unallocated",
    "electricity_share",
    "green_kwh",
    "total_kwh",
    "measured_it_kwh",
    "estimated_it_kwh",
)
WHAT_IF_COLUMNS = ("what_if_site", "what_if_rent", "what_if_electricity", "saving")

_MONEY = {"rent_revenue", "electricity_billed", "electricity_unallocated", "what_if_rent", "what_if_electricity", "saving"}
_QUANTITY = {"rented_gpu_hours", "green_kwh", "total_kwh", "measured_it_kwh", "estimated_it_kwh"}
_FRACTION = {"electricity_share"}


def _value_str(key: str, value: Any) -> Any:
    """One value as written in CSV/JSON; ints and strings pass through, Decimals become text."""
    value = plain(value)
    if value is None or isinstance(value, (bool, str)):
        return value
    if key in _MONEY:
        return money_str(value)
    if key in _QUANTITY:
        return quantity_str(value)
    if key in _FRACTION:
        return fraction_str(value)
    if isinstance(value, Decimal):
        return f"{value:f}"
    return value


def _row_strings(row: Mapping[str, Any]) -> dict[str, Any]:
    return {key: _value_str(key, value) for key, value in row.items()}


def _key(row: Mapping[str, Any]) -> tuple[Any, Any]:
    return (row.get("site"), row.get("gpu_model"))


def _joined(rows: Sequence[Mapping[str, Any]], what_if: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """Rows with the what-if columns of the matching (site, gpu_model) added.

    A what-if row without a matching row is kept as a row of its own, so no figure is lost.
    """
    if what_if is None:
        return [dict(r) for r in rows]
    by_key = {_key(w): w for w in what_if}
    out = []
    for r in rows:
        merged = dict(r)
        w = by_key.pop(_key(r), None)
        for col in WHAT_IF_COLUMNS:
            merged[col] = None if w is None else w.get(col)
        out.append(merged)
    out.extend(dict(w) for w in what_if if _key(w) in by_key)
    return out


def _sum(rows: Sequence[Mapping[str, Any]], key: str) -> Decimal:
    return sum((Decimal(r[key]) for r in rows if r.get(key) is not None), Decimal(0))


def _measured_str(measured: Any, estimated: Any) -> str:
    """The share of IT energy the cards' counters measured, as a percentage; "-" without energy."""
    if measured is None or estimated is None or not Decimal(measured) + Decimal(estimated):
        return "-"
    return percent_str(Decimal(measured) / (Decimal(measured) + Decimal(estimated)))


def render_cost_share_table(
    rows: list[dict[str, Any]], what_if: list[dict[str, Any]] | None = None
) -> Table:
    """A rich table, one line per site and GPU model, a total line, what-if columns if given.

    The total share is the rent-weighted mean of the row shares, which equals total
    electricity over total rent whatever electricity the rows' shares were computed on.
    """
    has_what_if = what_if is not None
    table = Table(
        title="Cost share by site and GPU model",
        box=box.SIMPLE_HEAVY,
        show_footer=bool(rows),
        caption="Amounts in CNY, excluding VAT. Share = electricity / rent." if rows else "No usage in this period.",
    )
    joined = _joined(rows, what_if)
    rent_total = _sum(joined, "rent_revenue")
    weighted = sum(
        (Decimal(r["electricity_share"]) * Decimal(r["rent_revenue"])
         for r in joined if r.get("electricity_share") is not None and r.get("rent_revenue") is not None),
        Decimal(0),
    )
    share_total = percent_str(weighted / rent_total) if rent_total else "-"

    columns: list[tuple[str, str, Any]] = [
        ("Site", "left", "Total"),
        ("GPU\nmodel", "left", ""),
        ("Cards", "right", f"{int(_sum(joined, 'cards')):,}"),
        ("Rented\nGPU-h", "right", grouped(_sum(joined, "rented_gpu_hours"), 2)),
        ("Rent\nrevenue", "right", grouped(rent_total, 2)),
        ("Electricity\nbilled", "right", grouped(_sum(joined, "electricity_billed"), 2)),
        ("Unallocated\nelectricity", "right", grouped(_sum(joined, "electricity_unallocated"), 2)),
        ("Electricity\n/ rent", "right", share_total),
        ("Green\nkWh", "right", grouped(_sum(joined, "green_kwh"), 1)),
        ("Total\nkWh", "right", grouped(_sum(joined, "total_kwh"), 1)),
        ("Measured\nenergy", "right", _measured_str(_sum(joined, "measured_it_kwh"), _sum(joined, "estimated_it_kwh"))),
    ]
    if has_what_if:
        columns += [
            ("What-if\nsite", "left", ""),
            ("What-if\nrent", "right", grouped(_sum(joined, "what_if_rent"), 2)),
            ("What-if\nelectricity", "right", grouped(_sum(joined, "what_if_electricity"), 2)),
            ("Saving", "right", grouped(_sum(joined, "saving"), 2)),
        ]
    for header, justify, footer in columns:
        table.add_column(header, justify=justify, footer=footer, no_wrap=True, vertical="bottom")

    def num(r: Mapping[str, Any], key: str, places: int) -> str:
        return "-" if r.get(key) is None else grouped(r[key], places)

    for r in joined:
        cells = [  # site and model names come from the data: shown, never read as markup
            terminal_text(r.get("site", "")),
            terminal_text(r.get("gpu_model", "")),
            "-" if r.get("cards") is None else f"{int(r['cards']):,}",
            num(r, "rented_gpu_hours", 2),
            num(r, "rent_revenue", 2),
            num(r, "electricity_billed", 2),
            num(r, "electricity_unallocated", 2),
            "-" if r.get("electricity_share") is None else percent_str(r["electricity_share"]),
            num(r, "green_kwh", 1),
            num(r, "total_kwh", 1),
            _measured_str(r.get("measured_it_kwh"), r.get("estimated_it_kwh")),
        ]
        if has_what_if:
            cells += [terminal_text(r.get("what_if_site") or "-"), num(r, "what_if_rent", 2),
                      num(r, "what_if_electricity", 2),
                      num(r, "saving", 2)]
        table.add_row(*cells)
    return table


def _cost_share_csv(rows: Sequence[Mapping[str, Any]], what_if: Sequence[Mapping[str, Any]] | None) -> str:
    joined = _joined(rows, what_if)
    columns = list(COST_SHARE_COLUMNS) + (list(WHAT_IF_COLUMNS) if what_if is not None else [])
    for r in joined:  # keep any extra keys the caller added, after the known ones
        columns += [k for k in r if k not in columns]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\r\n", restval="")
    writer.writeheader()
    for r in joined:
        writer.writerow({k: ("" if v is None else csv_cell(v)) for k, v in _row_strings(r).items()})
    return buf.getvalue()


def render_cost_share(
    rows: list[dict[str, Any]], fmt: str, what_if: list[dict[str, Any]] | None = None
) -> str:
    """The cost-share report as text: ``table`` (rich, 160 columns), ``csv`` or ``json``.

    JSON is ``{"rows": [...], "what_if": [...] | null}``; CSV joins the what-if columns
    onto the rows by (site, gpu_model), text cells safe from formula injection.
    """
    if fmt == "table":
        console = Console(record=True, width=160, file=io.StringIO(), color_system=None, emoji=False)
        console.print(render_cost_share_table(rows, what_if))
        return console.export_text()
    if fmt == "csv":
        return _cost_share_csv(rows, what_if)
    if fmt == "json":
        doc = {
            "rows": [_row_strings(r) for r in rows],
            "what_if": None if what_if is None else [_row_strings(w) for w in what_if],
        }
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode()
    raise ValueError(f"unknown format {fmt!r} for the cost-share report; use one of: table, csv, json")
