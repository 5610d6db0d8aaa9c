"""Shared PDF pieces for the reports: an A4 page with a footer, a paginated table, a bar chart.

Everything is drawn with fpdf2 primitives. A document whose text is all latin-1 in English
uses the Helvetica core font, and its text passes through
:func:`reports.render.format.latin1`; a document in Chinese, or holding text latin-1 cannot
write (a Chinese tenant name), embeds the CJK font (`reports.render.fonts`) and writes its
text as it is (a character that font lacks becomes ``?``). The CJK font has one weight, so
bold text in such a document is drawn regular (headings keep their size and colour).

A PDF is a function of its document (issue 37: a database rebuilt from the log renders every
invoice and credit note byte-identical), whenever and in whichever process it is rendered:

- the creation date is the document's own (an invoice's or credit note's issue time, a usage
  report's ``generated_at``), never the clock; the producer is a fixed name (fpdf2 2.8 writes
  none; set, no library's version can slip in);
- the file identifier (/ID) is fpdf2's own: an MD5 of the file's bytes before the trailer and of
  the creation date, so a function of the content, which two different documents do not share;
- the embedded CJK font's subset tag is fpdf2's fixed ``MPDFAA+``, and its subset is the same
  from either face of ``reports.render.fonts`` (a process that warmed up or not).

``tests/unit/test_pdf_deterministic.py`` renders each kind of document at two clocks, in other
processes (time zone, hash seed, fonts warmed up or not) and compares the bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from fpdf import FPDF
from fpdf.enums import TableBordersLayout, WrapMode, XPos, YPos
from fpdf.fonts import FontFace

from reports.render.fonts import attach_cjk
from reports.render.format import fits_latin1, latin1, plain
from reports.render.i18n import check_lang
from reports.render.i18n import label as translate

__all__ = ["ReportPDF", "draw_bar_chart", "draw_table", "fit_text", "nice_step", "parse_timestamp", "string_width"]

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
    """A4 portrait page, 15 mm margins, a one-line footer with the page number.

    `lang` is the language of the labels (reports.render.i18n); `texts` is every outside text
    the document will draw (tenant, instances, descriptions ...): with the labels, they decide
    whether the document needs the CJK font (``self.cjk``). Draw text through ``self.txt``
    and select fonts with ``set_font("Helvetica", ...)``: in a CJK document both are mapped.
    """

    def __init__(self, *, title: str, footer_note: str, created_at: str | None, lang: str = "en",
                 texts: Iterable[object] = (), author: str = "gpubill") -> None:
        super().__init__(orientation="P", unit="mm", format="A4")
        self.doc_lang = check_lang(lang)  # not `lang`: fpdf2 writes that as the catalog's /Lang
        if lang != "en":
            self.set_lang(lang)  # screen readers and text extraction: a Chinese document says so
        every = [title, footer_note, *(str(plain(t)) for t in texts if t is not None)]
        self.cjk = lang != "en" or not all(fits_latin1(t) for t in every)
        self.txt: Callable[[object], str] = latin1
        if self.cjk:
            attach_cjk(self, every + [translate(lang, "page", page=0, pages=0)], family="cjk")
            cmap = self.fonts["cjk"].cmap
            self.txt = lambda text: "".join(c if ord(c) in cmap or c == "\n" else "?"
                                            for c in ("" if text is None else str(plain(text))))
        self.footer_note = self.txt(footer_note)
        self.set_margins(15, 15, 15)
        self.set_auto_page_break(auto=True, margin=18)
        self.set_title(self.txt(title))
        self.set_author(self.txt(author))  # the seller's brand (billing.toml [seller])
        self.set_creator("gpubill")
        self.set_producer("gpubill")  # a fixed name, never a version: an upgrade must not change it
        self.set_creation_date(parse_timestamp(created_at))  # the document's date, never the clock
        self.set_text_color(*INK)

    def set_font(self, family: str | None = None, style: Any = "", size: float = 0) -> None:
        """fpdf2's set_font; in a CJK document every family is the CJK font, in its one style."""
        if self.cjk:
            family, style = ("cjk" if family else None), ""
        super().set_font(family, style, size)

    def label(self, key: str, **values: object) -> str:
        """The label `key` in the document's language (reports.render.i18n)."""
        return translate(self.doc_lang, key, **values)

    def wrapping(self) -> WrapMode:
        """How multi-line text breaks: Chinese has no spaces, so anywhere in a CJK document."""
        return WrapMode.CHAR if self.cjk else WrapMode.WORD

    def footer(self) -> None:
        self.set_y(-12)
        self.set_font("Helvetica", "", 7.5)
        self.set_text_color(*MUTED)
        self.cell(0, 5, self.footer_note, align="L")
        self.set_x(self.l_margin)
        self.cell(0, 5, self.label("page", page=self.page_no(), pages="{nb}"), align="R")
        self.set_text_color(*INK)

    def heading(self, text: str, size: float = 11) -> None:
        """A section heading in the accent colour."""
        self.set_font("Helvetica", "B", size)
        self.set_text_color(*ACCENT)
        self.cell(0, 7, self.txt(text), new_x=XPos.LMARGIN, new_y=YPos.NEXT)
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
            pdf.txt(c) if wrapped else fit_text(pdf, c, w - 2.4, keep_tail=tail)
            for c, w, tail, wrapped in zip(row, col_widths, tails, wraps)
        ]

    bold = None if getattr(pdf, "cjk", False) else "BOLD"  # the CJK font has one weight
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
        headings_style=FontFace(emphasis=bold, fill_color=HEAD_FILL, color=INK),
        cell_fill_color=ZEBRA,
        cell_fill_mode="ROWS",
        repeat_headings=1,
        wrapmode=pdf.wrapping(),
    ) as table:
        table.row([pdf.txt(h) for h in headings])
        for cells in rows:
            table.row(cells_of(cells))
        if total is not None:
            pdf.set_font("Helvetica", "B", font_size)
            table.row(cells_of(total), style=FontFace(emphasis=bold, fill_color=HEAD_FILL))


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
            widths[key] = string_width(pdf, text)
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
            text = pdf.txt(text)
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


def _char_units(pdf: FPDF) -> Callable[[str], int] | None:
    """The current font's width of one character, in thousandths of the font size (an int),
    when a run's width is the plain sum of them; None when fpdf2 must measure (stretching,
    character spacing, shaping, a symbol font)."""
    font = pdf.current_font
    if pdf.font_stretching != 100 or pdf.char_spacing or pdf.text_shaping or getattr(font, "is_symbol", False):
        return None
    if font.type == "core":
        return font.cw.__getitem__
    size = pdf.font_size_pt
    if size > font.biggest_size_pt:  # what fpdf2's measuring records for the embedded font
        font.biggest_size_pt = size
    cw = font.cw
    return lambda c: cw[ord(c)]


def string_width(pdf: FPDF, text: str) -> float:
    """`pdf.get_string_width(text)` for text the document writes (``pdf.txt``), ~10× faster.

    fpdf2 measures through its bidirectional-text and fragment machinery (copies of the
    text's style per call: 2 of the 3 s a 2,000-row table took); for a plain left-to-right
    run in one font, with no stretching, character spacing or shaping, that is the sum of
    the font's integer character widths, scaled by the same expression in the same order —
    the very same float, so the same bytes. Anything else goes to fpdf2.
    """
    units = _char_units(pdf)
    if units is None:
        return pdf.get_string_width(text)
    return sum(map(units, text)) * pdf.font_size_pt * 0.001 / pdf.k


def fit_text(pdf: FPDF, text: object, width_mm: float, *, keep_tail: int = 0) -> str:
    """``text`` as the document writes it (latin-1 in a core-font one), cut with ``..`` so that
    it fits ``width_mm`` in the current font.

    ``keep_tail`` characters of the end survive the cut (useful for identifiers such as
    GPU UUIDs, whose both ends are what people compare).
    """
    s = pdf.txt(text) if isinstance(pdf, ReportPDF) else latin1(text)
    units = _char_units(pdf)
    if units is None:
        return _fit_text_measured(pdf, s, width_mm, keep_tail)
    scale = pdf.font_size_pt * 0.001  # width = units * scale / k, as string_width computes it
    k = pdf.k
    widths = list(map(units, s))
    if sum(widths) * scale / k <= width_mm:
        return s
    tail = s[-keep_tail:] if keep_tail else ""
    fixed = sum(map(units, ".." + tail))
    head = len(s) - len(tail)
    total = sum(widths[:head]) + fixed  # integers: the same sum, however it is added up
    while head and total * scale / k > width_mm:
        head -= 1
        total -= widths[head]
    return s[:head] + ".." + tail


def _fit_text_measured(pdf: FPDF, s: str, width_mm: float, keep_tail: int) -> str:
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
    empty_note: str = "No usage in this period",
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
        pdf.text(x0, y0 + 2.5, pdf.txt(y_title))

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
        msg = pdf.txt(empty_note)
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
                text = pdf.txt(label)
                pdf.text(bx + (bar_w - pdf.get_string_width(text)) / 2, plot_y + plot_h + 3.5, text)

    # axes last, so bars do not cover them
    pdf.set_draw_color(*MUTED)
    pdf.set_line_width(0.3)
    pdf.line(plot_x, plot_y, plot_x, plot_y + plot_h)
    pdf.line(plot_x, plot_y + plot_h, plot_x + plot_w, plot_y + plot_h)
    pdf.set_text_color(*INK)
    pdf.set_y(y0 + height + 2)
