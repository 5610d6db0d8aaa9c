"""Customer usage report (SPEC §6): per day (or hour), instance and GPU, as CSV, JSON, Parquet or PDF.

The report is plain data (`reports.usage_model`) built by `reports.usage_report`, which
reads ClickHouse and has already limited it to one tenant; rendering is pure and
deterministic: the same report gives the same bytes, the PDF included (its creation date
is the report's ``generated_at``).

Written precision: money (CNY) two decimals, GPU-hours and kWh six decimals, average
utilisation one decimal, all rounded half up by :mod:`reports.render.format`.

Language (``lang``, reports/render/i18n.py) changes the PDF's labels only: CSV column names,
JSON keys and Parquet columns are machine names, the same in every language, so a CSV or
JSON download is byte-identical whatever the language.

Hourly reports (``granularity == "hour"``) add an ``hour`` column after ``day``: the hour's
start in the billing time zone, ``2026-03-05T14:00:00+08:00`` (RFC 3339 with the offset);
their PDF table shows ``03-05 14:00`` under a heading naming the zone, and the chart still
shows GPU-hours per day.

Energy is graded (SPEC §4): after the existing columns, ``measured_it_kwh`` and
``estimated_it_kwh`` split each row's IT energy (before PUE, six decimals; ``kwh`` is billed
energy, after PUE) into what the cards' energy counters measured and what was estimated from
power readings. JSON totals carry both; the PDF states both totals under its summary and, per row, the share
measured (a "Measured" column: measured ÷ (measured + estimated), one decimal).
"""

from __future__ import annotations

import calendar
import csv
import io
from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from reports.render.format import csv_cell, grouped, money_str, renderer_for, round_half_up
from reports.render.i18n import check_lang
from reports.render.invoice import line_to_dict
from reports.render.i18n import label as translate
from reports.render.pdf import MUTED, RULE, ReportPDF, draw_bar_chart, draw_table
from reports.usage_model import UsageReport, UsageRow, UsageTotals

__all__ = ["HOURLY_COLUMNS", "USAGE_COLUMNS", "columns_of", "render_usage"]

USAGE_COLUMNS = (
    "day",
    "instance",
    "gpu_uuid",
    "gpu_model",
    "gpu_hours",
    "avg_util_pct",
    "kwh",
    "rent",
    "electricity",
    "measured_it_kwh",
    "estimated_it_kwh",
)
# an hourly report: the hour's start after the day (``2026-03-05T14:00:00+08:00``)
HOURLY_COLUMNS = (USAGE_COLUMNS[0], "hour", *USAGE_COLUMNS[1:])


def columns_of(report: UsageReport) -> tuple[str, ...]:
    """The CSV columns and JSON row keys of `report`: USAGE_COLUMNS, or HOURLY_COLUMNS for an hourly one."""
    return HOURLY_COLUMNS if report.granularity == "hour" else USAGE_COLUMNS


def _q6(value: Decimal) -> str:
    return f"{round_half_up(value, 6):f}"


def _util(value: Decimal) -> str:
    return f"{round_half_up(value, 1):f}"


def _row_strings(row: UsageRow, hourly: bool = False) -> dict[str, str]:
    return {
        "day": row.day,
        **({"hour": row.hour} if hourly else {}),
        "instance": row.instance,
        "gpu_uuid": row.gpu_uuid,
        "gpu_model": row.gpu_model,
        "gpu_hours": _q6(row.gpu_hours),
        "avg_util_pct": _util(row.avg_util_pct),
        "kwh": _q6(row.kwh),
        "rent": money_str(row.rent),
        "electricity": money_str(row.electricity),
        "measured_it_kwh": _q6(row.measured_it_kwh),
        "estimated_it_kwh": _q6(row.estimated_it_kwh),
    }


def _totals_strings(totals: UsageTotals) -> dict[str, str]:
    return {
        "gpu_hours": _q6(totals.gpu_hours),
        "kwh": _q6(totals.kwh),
        "rent": money_str(totals.rent),
        "electricity": money_str(totals.electricity),
        "measured_it_kwh": _q6(totals.measured_it_kwh),
        "estimated_it_kwh": _q6(totals.estimated_it_kwh),
    }


def usage_csv(report: UsageReport) -> bytes:
    """Header plus one line per row; no total line, so the file stays machine-friendly.

    Instance and GPU names come from the readings: a cell a spreadsheet would run as a
    formula is written with a leading ``'`` (:func:`reports.render.format.csv_cell`).
    """
    buf = io.StringIO()
    hourly = report.granularity == "hour"
    writer = csv.DictWriter(buf, fieldnames=columns_of(report), lineterminator="\r\n")
    writer.writeheader()
    for row in report.rows:
        writer.writerow({k: csv_cell(v) for k, v in _row_strings(row, hourly).items()})
    return buf.getvalue().encode("utf-8")


def usage_json(report: UsageReport) -> bytes:
    """``{"tenant","period","generated_at","rows","totals","invoice_lines"}``; every number is a
    string; ``invoice_lines`` are the invoice's rent, discount and electricity lines the totals
    equal (before credits and VAT). An
    hourly report adds ``"granularity": "hour"`` and ``"time_zone"`` after ``generated_at``
    and an ``"hour"`` to each row (a daily one is written as it always was)."""
    hourly = report.granularity == "hour"
    doc = {
        "tenant": report.tenant,
        "period": report.period,
        "generated_at": report.generated_at,
        **({"granularity": "hour", "time_zone": report.time_zone} if hourly else {}),
        "rows": [_row_strings(r, hourly) for r in report.rows],
        "totals": _totals_strings(report.totals),
        "invoice_lines": [line_to_dict(line) for line in report.lines],
    }
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2)


PARQUET_SCHEMA = pa.schema(
    [
        pa.field("day", pa.date32(), nullable=False),
        pa.field("instance", pa.string(), nullable=False),
        pa.field("gpu_uuid", pa.string(), nullable=False),
        pa.field("gpu_model", pa.string(), nullable=False),
        pa.field("gpu_hours", pa.decimal128(20, 6), nullable=False),
        pa.field("avg_util_pct", pa.decimal128(5, 1), nullable=False),
        pa.field("kwh", pa.decimal128(20, 6), nullable=False),
        pa.field("rent", pa.decimal128(18, 2), nullable=False),
        pa.field("electricity", pa.decimal128(18, 2), nullable=False),
        pa.field("measured_it_kwh", pa.decimal128(20, 6), nullable=False),
        pa.field("estimated_it_kwh", pa.decimal128(20, 6), nullable=False),
    ]
)


def usage_parquet(report: UsageReport) -> bytes:
    """One Parquet row per usage row; decimal columns; tenant and period in the file metadata.
    An hourly report adds an ``hour`` column (the hour's start, a UTC timestamp carrying the
    billing time zone) and ``granularity``/``time_zone`` metadata."""
    rows = report.rows
    hourly = report.granularity == "hour"
    columns = {
        "day": [date.fromisoformat(r.day) for r in rows],
        **({"hour": [datetime.fromisoformat(r.hour) for r in rows]} if hourly else {}),
        "instance": [r.instance for r in rows],
        "gpu_uuid": [r.gpu_uuid for r in rows],
        "gpu_model": [r.gpu_model for r in rows],
        "gpu_hours": [round_half_up(r.gpu_hours, 6) for r in rows],
        "avg_util_pct": [round_half_up(r.avg_util_pct, 1) for r in rows],
        "kwh": [round_half_up(r.kwh, 6) for r in rows],
        "rent": [round_half_up(r.rent, 2) for r in rows],
        "electricity": [round_half_up(r.electricity, 2) for r in rows],
        "measured_it_kwh": [round_half_up(r.measured_it_kwh, 6) for r in rows],
        "estimated_it_kwh": [round_half_up(r.estimated_it_kwh, 6) for r in rows],
    }
    metadata = {
        "tenant": report.tenant,
        "period": report.period,
        "generated_at": report.generated_at,
        "currency": "CNY",
        "report": "gpubill usage",
    }
    schema = PARQUET_SCHEMA
    if hourly:
        metadata |= {"granularity": "hour", "time_zone": report.time_zone}
        hour_type = pa.timestamp("s", tz=report.time_zone or "UTC")
        schema = schema.insert(1, pa.field("hour", hour_type, nullable=False))
    table = pa.Table.from_pydict(columns, schema=schema.with_metadata(metadata))
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def _daily_hours(report: UsageReport) -> tuple[list[str], list[Decimal]]:
    """GPU-hours per day; for a ``YYYY-MM`` period every day of the month gets a bar."""
    per_day: dict[str, Decimal] = {}
    try:
        year, month = (int(p) for p in report.period.split("-"))
        days_in_month = calendar.monthrange(year, month)[1]
        for d in range(1, days_in_month + 1):
            per_day[f"{year:04d}-{month:02d}-{d:02d}"] = Decimal(0)
    except ValueError:
        pass  # not a calendar month: only the days that have usage
    for row in report.rows:
        per_day[row.day] = per_day.get(row.day, Decimal(0)) + row.gpu_hours
    days = sorted(per_day)
    one_month = len({d[:7] for d in days}) <= 1
    labels = [d[8:] if one_month else d[5:] for d in days]
    return labels, [per_day[d] for d in days]


def _summary_box(pdf: ReportPDF, report: UsageReport) -> None:
    totals = report.totals
    cells = [
        (pdf.label("usage.gpu_hours"), grouped(totals.gpu_hours, 6)),
        (pdf.label("usage.kwh"), grouped(totals.kwh, 6)),
        (pdf.label("usage.rent"), grouped(totals.rent, 2)),
        (pdf.label("usage.electricity"), grouped(totals.electricity, 2)),
        (pdf.label("usage.amount"), grouped(totals.amount, 2)),
    ]
    x0, y0, w, h = pdf.l_margin, pdf.get_y(), pdf.usable_width, 17
    pdf.set_draw_color(*RULE)
    pdf.set_fill_color(248, 250, 252)
    pdf.set_line_width(0.3)
    pdf.rect(x0, y0, w, h, style="DF")
    cw = w / len(cells)
    for i, (label, value) in enumerate(cells):
        x = x0 + i * cw
        if i:
            pdf.line(x, y0 + 2, x, y0 + h - 2)
        pdf.set_xy(x, y0 + 2.5)
        pdf.set_font("Helvetica", "", 7)
        pdf.set_text_color(*MUTED)
        pdf.cell(cw, 4, pdf.txt(label), align="C")
        pdf.set_xy(x, y0 + 8)
        pdf.set_font("Helvetica", "B", 10.5 if len(value) < 15 else 9)
        pdf.set_text_color(33, 37, 41)
        pdf.cell(cw, 6, value, align="C")
    gpus = len({r.gpu_uuid for r in report.rows})
    pdf.set_xy(x0, y0 + h + 1)
    pdf.set_font("Helvetica", "", 7)
    pdf.set_text_color(*MUTED)
    pdf.cell(0, 4, pdf.txt(pdf.label("usage.counts", gpus=gpus, rows=len(report.rows))))
    pdf.set_xy(x0, y0 + h + 5)
    pdf.cell(0, 4, pdf.txt(pdf.label("usage.graded", measured=grouped(totals.measured_it_kwh, 6),
                                     estimated=grouped(totals.estimated_it_kwh, 6))))
    pdf.set_text_color(33, 37, 41)
    pdf.set_y(y0 + h + 12)


def _outside_texts(report: UsageReport) -> list[str]:
    """Every text of the report that comes from outside (they decide whether the PDF needs the CJK font)."""
    seen = {report.tenant, report.period, report.generated_at, report.time_zone}
    for r in report.rows:
        seen.update((r.instance, r.gpu_uuid, r.gpu_model))
    return sorted(seen)


def _measured_share(measured: Decimal, estimated: Decimal) -> str:
    """The share of a row's IT energy the cards' counters measured, ``"89.4 %"``, of its kWh as
    written (six decimals, so a row of a few mJ may differ from the exact share); ``"-"`` without energy."""
    if not measured + estimated:
        return "-"
    return f"{round_half_up(measured * 100 / (measured + estimated), 1):f} %"


def _hour_cell(row: UsageRow) -> str:
    """``2026-03-05T14:00:00+08:00`` -> ``03-05 14:00`` (the zone is in the table's heading)."""
    return f"{row.hour[5:10]} {row.hour[11:16]}"


def usage_pdf(report: UsageReport, *, lang: str = "en") -> bytes:
    """A4: title, totals box, GPU-hours per day bar chart, then the paginated detail table
    (one row per day, or per hour, × instance × GPU), labelled in `lang`."""
    title = translate(lang, "usage.title", tenant=report.tenant, period=report.period)
    brand = report.seller.text("brand", lang) if report.seller else "gpubill"
    pdf = ReportPDF(
        title=title,
        footer_note=translate(lang, "usage.footer", brand=brand, tenant=report.tenant, period=report.period,
                              generated=report.generated_at),
        created_at=report.generated_at,
        lang=lang,
        texts=[brand, *_outside_texts(report)],
        author=brand,
    )
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 16)
    pdf.multi_cell(0, 8, pdf.txt(title), new_x="LMARGIN", new_y="NEXT", wrapmode=pdf.wrapping())
    pdf.set_font("Helvetica", "", 8)
    pdf.set_text_color(*MUTED)
    pdf.cell(0, 5, pdf.txt(pdf.label("usage.subtitle", generated=report.generated_at)),
             new_x="LMARGIN", new_y="NEXT")
    pdf.multi_cell(0, 4, pdf.txt(pdf.label("usage.agrees")), new_x="LMARGIN", new_y="NEXT", wrapmode=pdf.wrapping())
    pdf.set_text_color(33, 37, 41)
    pdf.ln(3)
    _summary_box(pdf, report)

    hourly = report.granularity == "hour"
    pdf.heading(pdf.label("usage.chart_hour" if hourly else "usage.chart_day"))
    labels, hours = _daily_hours(report)
    draw_bar_chart(pdf, labels, hours, y_title=pdf.label("usage.chart_axis"), empty_note=pdf.label("usage.no_usage"))
    pdf.ln(2)

    if hourly:
        pdf.heading(pdf.label("usage.detail_hour", tz=report.time_zone or "UTC"))
    else:
        pdf.heading(pdf.label("usage.detail_day"))
    totals = report.totals
    first, first_w = ("col.hour", 20) if hourly else ("col.day", 16)
    draw_table(
        pdf,
        headings=tuple(pdf.label(k) for k in (first, "col.instance", "col.gpu", "col.model", "col.gpu_hours",
                                              "col.util", "col.kwh", "col.rent", "col.electricity", "col.measured")),
        rows=[
            (_hour_cell(r) if hourly else r.day, r.instance or "-", r.gpu_uuid, r.gpu_model, _q6(r.gpu_hours),
             _util(r.avg_util_pct), _q6(r.kwh), money_str(r.rent), money_str(r.electricity),
             _measured_share(r.measured_it_kwh, r.estimated_it_kwh))
            for r in report.rows
        ],
        col_widths=(first_w, 16, 29 - (first_w - 16), 20, 19, 11, 20, 17, 18, 14),
        align=("LEFT", "LEFT", "LEFT", "LEFT", "RIGHT", "RIGHT", "RIGHT", "RIGHT", "RIGHT", "RIGHT"),
        font_size=7.5,
        keep_tail=(0, 0, 8, 0, 0, 0, 0, 0, 0, 0),
        total=(pdf.label("col.total"), "", "", "", _q6(totals.gpu_hours), "", _q6(totals.kwh),
               money_str(totals.rent), money_str(totals.electricity),
               _measured_share(totals.measured_it_kwh, totals.estimated_it_kwh)),
    )
    return bytes(pdf.output())


_RENDERERS: dict[str, Callable[[UsageReport], bytes]] = {
    "csv": usage_csv,
    "json": usage_json,
    "parquet": usage_parquet,
    "pdf": usage_pdf,
}


def render_usage(report: UsageReport, fmt: str, *, lang: str = "en") -> bytes:
    """The usage report as bytes in ``fmt`` (csv, json, parquet or pdf), labelled in `lang`
    (:data:`reports.render.i18n.LANGS`; only the PDF has labels to translate)."""
    check_lang(lang)
    render = renderer_for(_RENDERERS, fmt, "a usage report")
    return usage_pdf(report, lang=lang) if fmt == "pdf" else render(report)
