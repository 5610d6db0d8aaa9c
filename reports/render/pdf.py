"""Shared PDF pieces for the reports: an A4 page with a footer, a paginated table, a bar chart.

Everything is drawn with fpdf2 primitives and the Helvetica core font, so all text passes
through :func:`reports.render.format.latin1`. The creation date is taken from the report
(never from the clock), which keeps a re-rendered PDF byte-identical.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timezone
from decimal import Decimal

from fpdf import FPDF
from fpdf.enums import TableBordersLayout, XPos, YPos
from fpdf.fonts import FontFace

from reports.render.format import latin1

__all__ = ["ReportPDF", "draw_bar_chart", "draw_table", "fit_text", "nice_step", "parse_timestamp"]

INK = (33, 37, 41)
MUTED = (108, 117, 125)
ACCENT = (31, 94, 168)
RULE = (206, 212, 218)
ZEBRA = (244, 246, 248)
HEAD_FILL = (226, 234, 244)


def parse_timestamp(text: str | None) -> datetime:
    """RFC3339 text as an aware datetime; unreadable or missing text gives the Unix epoch."""
    if text:
        try:
            parsed = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
        except ValueError:
            parsed = None
        if parsed is not None:
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
    return datetime(1970, 1, 1, tzinfo=timezone.utc)


class ReportPDF(FPDF):
    """A4 portrait page, 15 mm margins, a one-line footer with the page number."""

    def __init__(self, *, title: str, footer_note: str, created_at: str | None) -> None:
        super().__init__(orientation="P", unit="mm", format="A4")
        self.footer_note = latin1(footer_note)
        self.set_margins(15, 15, 15)
        self.set_auto_page_break(auto=True, margin=18)
        self.set_title(latin1(title))
        self.set_author("gpubill GPU Cloud")
        self.set_creator("gpubill")
        self.set_creation_date(parse_timestamp(created_at))
        self.set_text_color(*INK)

    def footer(self) -> None:
        self.set_y(-12)
        self.set_font("Helvetica", "", 7.5)
        self.set_text_color(*MUTED)
        self.cell(0, 5, self.footer_note, align="L")
        self.set_x(self.l_margin)
        self.cell(0, 5, f"Page {self.page_no()} / {{nb}}", align="R")
        self.set_text_color(*INK)

    def heading(self, text: str, size: float = 11) -> None:
        """A section heading in the accent colour."""
        self.set_font("Helvetica", "B", size)
        self.set_text_color(*ACCENT)
        self.cell(0, 7, latin1(text), new_x=XPos.LMARGIN, new_y=YPos.NEXT)
        self.set_text_color(*INK)

    @property
    def usable_width(self) -> float:
        return self.w - self.l_margin - self.r_margin


def draw_table(
    pdf: ReportPDF,
    headings: Sequence[str],
    rows: Sequence[Sequence[str]],
    col_widths: Sequence[float],
    align: Sequence[str],
    font_size: float = 8,
    total: Sequence[str] | None = None,
    keep_tail: Sequence[int] | None = None,
    wrap: Sequence[bool] | None = None,
) -> None:
    """A zebra-striped table; fpdf2 breaks it across pages and repeats the heading row.

    Cell text wider than its column is cut with ``..`` so every row stays one line high;
    ``total`` is an optional last row in bold; ``keep_tail`` says, per column, how many
    trailing characters a cut must keep; columns marked in ``wrap`` are not cut but wrap
    onto more lines (and honour ``\n``).
    """
    tails = tuple(keep_tail) if keep_tail else (0,) * len(col_widths)
    wraps = tuple(wrap) if wrap else (False,) * len(col_widths)
    if not any(wraps):  # one line per row: drawn directly, ~30× faster than fpdf2's table
        _draw_one_line_table(pdf, headings, rows, col_widths, align, font_size, total, tails)
        return

    def cells_of(row: Sequence[str]) -> list[str]:
        return [
            latin1(c) if wrapped else fit_text(pdf, c, w - 2.4, keep_tail=tail)
            for c, w, tail, wrapped in zip(row, col_widths, tails, wraps)
        ]

    pdf.set_font("Helvetica", "", font_size)
    pdf.set_draw_color(*RULE)
    pdf.set_fill_color(255, 255, 255)  # unstriped rows; fpdf2 fills them with the current colour
    with pdf.table(
        col_widths=tuple(col_widths),
        width=sum(col_widths),
        text_align=tuple(align),
        line_height=font_size * 0.55,
        padding=(1.0, 1.2),
        borders_layout=TableBordersLayout.SINGLE_TOP_LINE,
        headings_style=FontFace(emphasis="BOLD", fill_color=HEAD_FILL, color=INK),
        cell_fill_color=ZEBRA,
        cell_fill_mode="ROWS",
        repeat_headings=1,
    ) as table:
        table.row([latin1(h) for h in headings])
        for cells in rows:
            table.row(cells_of(cells))
        if total is not None:
            pdf.set_font("Helvetica", "B", font_size)
            table.row(cells_of(total), style=FontFace(emphasis="BOLD", fill_color=HEAD_FILL))


def _draw_one_line_table(
    pdf: ReportPDF,
    headings: Sequence[str],
    rows: Sequence[Sequence[str]],
    col_widths: Sequence[float],
    align: Sequence[str],
    font_size: float,
    total: Sequence[str] | None,
    tails: Sequence[int],
) -> None:
    """`draw_table` for tables whose cells never wrap, with the same look: a bold heading row
    on HEAD_FILL repeated on every page, a rule under it, zebra rows, an optional bold total.

    A month of 64 cards is ~2,000 rows; fpdf2's table lays each cell out as a multi-line
    cell (≈ 7 s for such a report), here each is one positioned string."""
    pad_x, pad_y = 1.2, 1.0
    height = font_size * 0.55 + 2 * pad_y
    x0, width = pdf.l_margin, sum(col_widths)
    baseline = pad_y + font_size * 0.55 / 2 + font_size * 0.3528 * 0.35  # mm below the row's top
    widths: dict[tuple[bool, str], float] = {}  # a month repeats its days, models and amounts

    def measure(text: str, bold: bool) -> float:
        key = (bold, text)
        if key not in widths:
            widths[key] = pdf.get_string_width(text)
        return widths[key]

    def line(cells: Sequence[str], fill: tuple[int, int, int] | None, bold: bool, fit: bool) -> None:
        if pdf.get_y() + height > pdf.page_break_trigger:
            pdf.add_page()
            heading()
        y = pdf.get_y()
        if fill is not None:
            pdf.set_fill_color(*fill)
            pdf.rect(x0, y, width, height, style="F")
        pdf.set_font("Helvetica", "B" if bold else "", font_size)
        x = x0
        for text, w, how, tail in zip(cells, col_widths, align, tails):
            text = latin1(text)
            if fit and measure(text, bold) > w - 2 * pad_x:
                text = fit_text(pdf, text, w - 2 * pad_x, keep_tail=tail)
            if how == "RIGHT":
                at = x + w - pad_x - measure(text, bold)
            elif how == "CENTER":
                at = x + (w - measure(text, bold)) / 2
            else:
                at = x + pad_x
            if text:
                pdf.text(at, y + baseline, text)
            x += w
        pdf.set_y(y + height)

    def heading() -> None:
        line(headings, HEAD_FILL, True, False)
        pdf.set_draw_color(*RULE)
        pdf.line(x0, pdf.get_y(), x0 + width, pdf.get_y())

    pdf.set_text_color(*INK)
    heading()
    for index, cells in enumerate(rows):
        line(cells, ZEBRA if index % 2 else None, False, True)
    if total is not None:
        line(total, HEAD_FILL, True, True)
    pdf.set_x(pdf.l_margin)


def fit_text(pdf: FPDF, text: object, width_mm: float, *, keep_tail: int = 0) -> str:
    """``text`` in latin-1, cut with ``..`` so that it fits ``width_mm`` in the current font.

    ``keep_tail`` characters of the end survive the cut (useful for identifiers such as
    GPU UUIDs, whose both ends are what people compare).
    """
    s = latin1(text)
    if pdf.get_string_width(s) <= width_mm:
        return s
    tail = s[-keep_tail:] if keep_tail else ""
    head = s[: len(s) - len(tail)]
    while head and pdf.get_string_width(head + ".." + tail) > width_mm:
        head = head[:-1]
    return head + ".." + tail


def nice_step(span: float, ticks: int = 5) -> float:
    """A round tick step (1, 2, 2.5 or 5 times a power of ten) giving about ``ticks`` ticks."""
    if span <= 0:
        return 1.0
    raw = span / ticks
    power = 10 ** math.floor(math.log10(raw))
    for mult in (1, 2, 2.5, 5, 10):
        if raw <= mult * power:
            return mult * power
    return 10 * power


def _tick_label(value: float, step: float) -> str:
    """A tick value with as many decimals as the step needs (2.5 -> one, 0.25 -> two)."""
    exponent = Decimal(repr(step)).normalize().as_tuple().exponent
    decimals = min(3, max(0, -exponent)) if isinstance(exponent, int) else 0
    return f"{value:,.{decimals}f}"


def draw_bar_chart(
    pdf: ReportPDF,
    labels: Sequence[str],
    values: Sequence[Decimal],
    *,
    height: float = 62,
    y_title: str = "",
) -> None:
    """A vertical bar chart at the current position across the usable width.

    Values are converted to floats only to place rectangles on the page; the figures
    printed elsewhere stay Decimal.
    """
    x0 = pdf.l_margin
    y0 = pdf.get_y()
    width = pdf.usable_width
    axis_w = 16  # room for the tick labels on the left
    label_h = 9  # room for the day labels under the axis
    plot_x, plot_y = x0 + axis_w, y0 + 5
    plot_w, plot_h = width - axis_w - 2, height - label_h - 5

    pdf.set_font("Helvetica", "", 6.5)
    pdf.set_text_color(*MUTED)
    if y_title:
        pdf.text(x0, y0 + 2.5, latin1(y_title))

    top = max((float(v) for v in values), default=0.0)
    step = nice_step(top) if top > 0 else 1.0
    y_max = step * max(1, math.ceil(top / step)) if top > 0 else 5.0

    # gridlines and tick labels
    pdf.set_line_width(0.15)
    pdf.set_draw_color(*RULE)
    for i in range(round(y_max / step) + 1):
        tick = i * step  # multiply, not accumulate, so float error does not creep into labels
        y = plot_y + plot_h - plot_h * tick / y_max
        pdf.line(plot_x, y, plot_x + plot_w, y)
        text = _tick_label(tick, step)
        pdf.text(plot_x - 1.5 - pdf.get_string_width(text), y + 1.0, text)

    n = len(values)
    if top <= 0:
        pdf.set_font("Helvetica", "I", 8)
        msg = "No usage in this period"
        pdf.text(plot_x + (plot_w - pdf.get_string_width(msg)) / 2, plot_y + plot_h / 2, msg)
        pdf.set_font("Helvetica", "", 6.5)
    if n:
        slot = plot_w / n
        bar_w = min(slot * 0.7, 14.0)
        every = max(1, math.ceil(n / 31))  # keep labels from colliding
        pdf.set_fill_color(*ACCENT)
        for i, (label, value) in enumerate(zip(labels, values)):
            bar_h = plot_h * float(value) / y_max
            bx = plot_x + i * slot + (slot - bar_w) / 2
            if bar_h > 0:
                pdf.rect(bx, plot_y + plot_h - bar_h, bar_w, bar_h, style="F")
            if i % every == 0:
                text = latin1(label)
                pdf.text(bx + (bar_w - pdf.get_string_width(text)) / 2, plot_y + plot_h + 3.5, text)

    # axes last, so bars do not cover them
    pdf.set_draw_color(*MUTED)
    pdf.set_line_width(0.3)
    pdf.line(plot_x, plot_y, plot_x, plot_y + plot_h)
    pdf.line(plot_x, plot_y + plot_h, plot_x + plot_w, plot_y + plot_h)
    pdf.set_text_color(*INK)
    pdf.set_y(y0 + height + 2)
