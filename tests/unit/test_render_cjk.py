"""Documents in Chinese and Chinese text in documents (reports/render/i18n.py, fonts.py, pdf.py).

The PDFs are read back with a small reader of their own (below): the text-showing operators
of the page content, decoded through the embedded font's ToUnicode map, so a test sees the
text a PDF viewer would extract, not the bytes fpdf2 was given.

The timings in reports/render/fonts.py were measured with (median of 5 after one render):

    .venv/bin/python -c 'import sys, time, statistics; sys.path.insert(0, "tests/unit")
    from test_render_cjk import invoice; from reports.render import render_invoice, fonts
    fonts.warm_up(); render_invoice(invoice(), "pdf", lang="zh-CN"); ts = []
    for _ in range(5): t = time.perf_counter(); render_invoice(invoice(), "pdf", lang="zh-CN"); ts.append(time.perf_counter() - t)
    print(statistics.median(ts))'

(without ``fonts.warm_up()``: the full face; ``GPUBILL_CJK_FONT=…NotoSansCJK-Regular.ttc#2``: Noto.)
"""

from __future__ import annotations

import csv
import io
import json
import logging
import re
import zlib
from datetime import datetime
from decimal import Decimal as D
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

import reports.render.fonts as fonts
from reports.render import render_invoice, render_usage
from reports.render.i18n import LANGS, check_lang, label
from reports.usage_model import UsageReport, UsageRow

# --- a PDF text reader ---------------------------------------------------------------------

# Not `\r?\nendstream`: a compressed stream may end in the byte \r, which that would take away.
_STREAM = re.compile(rb"stream\r?\n(.*?)\nendstream", re.S)
_ESCAPES = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"b": b"\b", b"f": b"\f", b"(": b"(", b")": b")", b"\\": b"\\"}


def _streams(data: bytes) -> list[bytes]:
    out = []
    for m in _STREAM.finditer(data):
        try:  # a decompressor leaves the end-of-line before `endstream` unused
            out.append(zlib.decompressobj().decompress(m.group(1)))
        except zlib.error:
            out.append(m.group(1).removesuffix(b"\r"))
    return out


def _literal(raw: bytes) -> bytes:
    """A PDF literal string's bytes, its escapes undone."""
    out, i = bytearray(), 0
    while i < len(raw):
        c = raw[i:i + 1]
        if c == b"\\":
            nxt = raw[i + 1:i + 2]
            if nxt in _ESCAPES:
                out += _ESCAPES[nxt]
                i += 2
                continue
            octal = re.match(rb"[0-7]{1,3}", raw[i + 1:i + 4])
            if octal:
                out.append(int(octal.group(0), 8) & 0xFF)
                i += 1 + len(octal.group(0))
                continue
            i += 1
            continue
        out += c
        i += 1
    return bytes(out)


def _to_unicode(data: bytes) -> dict[int, str]:
    mapping: dict[int, str] = {}
    for stream in _streams(data):
        if b"begincmap" not in stream:
            continue
        for block in re.findall(rb"beginbfchar(.*?)endbfchar", stream, re.S):
            for code, text in re.findall(rb"<([0-9A-Fa-f]+)>\s*<([0-9A-Fa-f]+)>", block):
                mapping[int(code, 16)] = bytes.fromhex(text.decode()).decode("utf-16-be")
        for block in re.findall(rb"beginbfrange(.*?)endbfrange", stream, re.S):
            for lo, hi, start in re.findall(rb"<([0-9A-Fa-f]+)>\s*<([0-9A-Fa-f]+)>\s*<([0-9A-Fa-f]+)>", block):
                first = int(start, 16)
                for n, code in enumerate(range(int(lo, 16), int(hi, 16) + 1)):
                    mapping[code] = chr(first + n)
    return mapping


def pdf_text(data: bytes) -> str:
    """Every string a page shows, one per line; CID fonts decoded through ToUnicode, core fonts as latin-1."""
    cmap = _to_unicode(data)
    lines = []
    for stream in _streams(data):
        for raw in re.findall(rb"\(((?:\\.|[^\\)])*)\)\s*Tj", stream, re.S):
            text = _literal(raw)
            if cmap:
                lines.append("".join(cmap.get(int.from_bytes(text[i:i + 2], "big"), "\ufffd")
                                     for i in range(0, len(text) - 1, 2)))
            else:
                lines.append(text.decode("latin-1"))
    return "\n".join(lines)


def embeds_a_font(data: bytes) -> bool:
    return b"/FontFile" in data


# --- fixtures ------------------------------------------------------------------------------


def usage(tenant: str = "北京智算实验室", n: int = 3, granularity: str = "day", instance: str = "训练-1") -> UsageReport:
    # each row: 24 GPU-h, ¥300.00 rent, 18.816 kWh, ¥11.29 electricity (see test_render.py)
    rows = tuple(
        UsageRow(day=f"2026-03-{1 + i:02d}", instance=instance if i % 2 else "", gpu_uuid=f"GPU-{i:08x}-0000",
                 gpu_model="A800-80G", gpu_hours=D("24"), avg_util_pct=D("87.5"), kwh=D("18.816"), rent=D("300"),
                 electricity=D("11.29"),
                 hour=f"2026-03-{1 + i:02d}T14:00:00+08:00" if granularity == "hour" else "")
        for i in range(n)
    )
    return UsageReport(tenant=tenant, period="2026-03", generated_at="2026-04-02T03:00:00Z", rows=rows,
                       granularity=granularity, time_zone="Asia/Shanghai")


def _line(kind, **fields):
    base = dict(kind=kind, gpu_model=None, plan=None, site=None, band=None, pue=None, ref_period=None,
                description=None, quantity=None, unit=None, unit_price=None, amount=D(0))
    base.update(fields)
    return SimpleNamespace(**base)


def invoice(tenant: str = "acme"):
    # rent 744 GPU-h → ¥599.00; electricity 100 kWh × ¥0.6 = ¥60.00; credit −¥10.00
    # subtotal 659.00, net 649.00, VAT 6 % = 38.94, total 687.94
    return SimpleNamespace(
        tenant=tenant, period="2026-03", number="GB-2026-000001", status="finalized",
        issued_at="2026-04-03T02:00:00Z", currency="CNY", vat_rate=D("0.06"),
        lines=[
            _line("rent", gpu_model="A800-80G", plan="hourly", description="GPU rent A800-80G hourly",
                  quantity=D("744"), unit="GPU-hour", unit_price=D("0.805108"), amount=D("599")),
            _line("electricity", site="gz-guian", band="flat", pue=D("1.12"), description="Electricity gz-guian flat",
                  quantity=D("100"), unit="kWh", unit_price=D("0.6"), amount=D("60")),
            _line("credit", description="新用户试用额度", quantity=D("1"), unit="", amount=D("-10")),
        ],
        subtotal=D("659"), net=D("649"), tax=D("38.94"), total=D("687.94"),
    )


# --- languages -----------------------------------------------------------------------------


def test_languages_and_labels():
    assert LANGS == ("en", "zh-CN")
    assert check_lang("zh-CN") == "zh-CN"
    assert label("en", "inv.vat", rate="6") == "VAT 6%"
    assert label("zh-CN", "inv.total_words", words="人民币陆佰捌拾柒元玖角肆分") == "大写：人民币陆佰捌拾柒元玖角肆分"


@pytest.mark.parametrize("lang", ["zh", "zh-cn", "fr", "", "en\n"])
def test_unknown_language_is_refused_for_every_format(lang):
    for fmt in ("csv", "json", "parquet", "pdf"):
        with pytest.raises(ValueError, match="unknown language"):
            render_usage(usage(), fmt, lang=lang)
    for fmt in ("csv", "json", "pdf"):
        with pytest.raises(ValueError, match="unknown language"):
            render_invoice(invoice(), fmt, lang=lang)


def test_every_language_has_every_label():
    from reports.render.i18n import _LABELS

    assert set(_LABELS["zh-CN"]) == set(_LABELS["en"])
    for key, text in _LABELS["en"].items():  # the same fields to fill in
        assert set(re.findall(r"{(\w+)}", text)) == set(re.findall(r"{(\w+)}", _LABELS["zh-CN"][key])), key


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_machine_formats_are_the_same_in_every_language(fmt):
    report = usage()
    assert render_usage(report, fmt, lang="zh-CN") == render_usage(report, fmt, lang="en") == render_usage(report, fmt)
    if fmt != "parquet":
        inv = invoice()
        assert render_invoice(inv, fmt, lang="zh-CN") == render_invoice(inv, fmt)


# --- Chinese PDFs --------------------------------------------------------------------------


def test_chinese_usage_pdf_embeds_the_font_and_its_text_reads_back():
    data = render_usage(usage(), "pdf", lang="zh-CN")
    assert embeds_a_font(data) and b"/ToUnicode" in data and b"/Lang (zh-CN)" in data
    text = pdf_text(data)
    for expected in ("GPU 用量报告 - 北京智算实验室 - 2026-03", "租金 (CNY)", "电费 (CNY)", "不含税合计 (CNY)",
                     "按日、实例和 GPU 的明细", "训练-1"):
        assert expected in text, expected
    assert "第 1 / \n1\n 页" in text  # the page count is written once the pages are known: its own string
    # totals of 3 rows: 72 GPU-h, ¥900.00 rent, ¥33.87 electricity, ¥933.87 before VAT; two decimals
    for figure in ("72.000000", "900.00", "33.87", "933.87"):
        assert figure in text


def test_chinese_invoice_pdf_keeps_the_currency_and_two_decimals():
    data = render_invoice(invoice("北京智算"), "pdf", lang="zh-CN")
    text = pdf_text(data)
    for expected in ("账单", "北京智算", "账单编号", "GB-2026-000001", "价税合计 (CNY)", "¥687.94",
                     "小计", "659.00", "增值税 6%", "38.94", "GPU 租金", "新用户试用额度", "已开具", "大写：人民币陆佰捌拾柒元玖角肆分"):
        assert expected in text, expected
    assert "-¥10.00" in text and "发票" not in text  # not an official VAT fapiao: it does not say it is one


def test_english_pdf_with_a_chinese_name_embeds_the_font_and_the_name():
    data = render_usage(usage("北京 AI — ¥ lab"), "pdf", lang="en")
    assert embeds_a_font(data)
    text = pdf_text(data)
    assert "GPU usage report - 北京 AI — ¥ lab - 2026-03" in text
    assert "Rent (CNY)" in text and "Page 1 / \n1" in text


def test_english_pdf_of_latin1_text_stays_on_the_core_font():
    data = render_usage(usage("acme", instance="train-1"), "pdf")
    assert not embeds_a_font(data) and b"/BaseFont /Helvetica" in data and b"/Lang" not in data
    latin = invoice()
    latin.lines[2].description = "New-user trial credit"
    assert render_invoice(latin, "pdf") == render_invoice(latin, "pdf", lang="en")
    assert not embeds_a_font(render_invoice(latin, "pdf"))
    assert embeds_a_font(render_invoice(invoice(), "pdf"))  # the Chinese credit reason needs the CJK font


@pytest.mark.parametrize("lang", LANGS)
def test_chinese_pdfs_are_deterministic(lang):
    report, inv = usage(n=40), invoice("北京智算")
    assert render_usage(report, "pdf", lang=lang) == render_usage(report, "pdf", lang=lang)
    assert render_invoice(inv, "pdf", lang=lang) == render_invoice(inv, "pdf", lang=lang)


def test_a_character_the_font_lacks_is_a_question_mark_not_a_crash():
    # U+1F600 (an emoji) is in no CJK font; a control character is not drawn either
    text = pdf_text(render_usage(usage("实验室 \U0001F600 \x1b"), "pdf", lang="zh-CN"))
    assert "实验室 ? ?" in text


def test_hourly_pdf_names_the_zone_and_the_hours():
    text = pdf_text(render_usage(usage(granularity="hour"), "pdf", lang="zh-CN"))
    assert "按小时 (Asia/Shanghai)、实例和 GPU 的明细" in text and "03-01 14:00" in text
    text = pdf_text(render_usage(usage("acme", granularity="hour"), "pdf"))
    assert "Detail by hour (Asia/Shanghai), instance and GPU" in text and "03-02 14:00" in text


# --- hourly rows in the machine formats ------------------------------------------------------


def test_hourly_csv_json_parquet_carry_the_hour():
    report = usage("acme", n=2, granularity="hour")
    rows = list(csv.DictReader(io.StringIO(render_usage(report, "csv").decode())))
    assert list(rows[0])[:3] == ["day", "hour", "instance"]
    assert rows[1]["hour"] == "2026-03-02T14:00:00+08:00"
    doc = json.loads(render_usage(report, "json"))
    assert list(doc)[:5] == ["tenant", "period", "generated_at", "granularity", "time_zone"]
    assert (doc["granularity"], doc["time_zone"], doc["rows"][0]["hour"]) == (
        "hour", "Asia/Shanghai", "2026-03-01T14:00:00+08:00")
    table = pq.read_table(io.BytesIO(render_usage(report, "parquet")))
    assert table.schema.names[:3] == ["day", "hour", "instance"]
    hour_type = table.schema.field("hour").type  # Parquet has no seconds unit: written as ms
    assert (hour_type.unit in ("s", "ms"), hour_type.tz) == (True, "Asia/Shanghai")
    # 14:00 in Shanghai is 06:00 UTC
    assert table.column("hour").to_pylist()[0].astimezone().isoformat() == datetime.fromisoformat(
        "2026-03-01T14:00:00+08:00").astimezone().isoformat()
    assert table.schema.metadata[b"granularity"] == b"hour"


def test_daily_json_has_no_hour_keys():
    doc = json.loads(render_usage(usage("acme"), "json"))
    assert list(doc) == ["tenant", "period", "generated_at", "rows", "totals", "invoice_lines"]
    assert "hour" not in doc["rows"][0]


def test_a_report_with_an_unknown_granularity_cannot_be_made():
    with pytest.raises(ValueError, match="unknown granularity"):
        UsageReport("acme", "2026-03", "2026-04-02T03:00:00Z", (), granularity="week")


# --- the font adapter ----------------------------------------------------------------------


@pytest.fixture()
def fresh_fonts(monkeypatch):
    """The adapter's process-wide state, empty, and put back afterwards."""
    monkeypatch.setattr(fonts, "_faces", {})
    monkeypatch.setattr(fonts, "_common_bytes", b"")
    monkeypatch.setattr(fonts, "_chosen", None)
    monkeypatch.setattr(fonts, "FAST_PATH", None)
    monkeypatch.setattr(fonts, "_warmed", None)
    monkeypatch.delenv("GPUBILL_CJK_FONT", raising=False)
    return fonts


def test_a_bad_font_setting_is_a_clear_error(fresh_fonts, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUBILL_CJK_FONT", f"{tmp_path}/missing.ttc#2")
    with pytest.raises(fonts.FontMissing, match="GPUBILL_CJK_FONT"):
        render_invoice(invoice("北京"), "pdf")


def test_no_cjk_font_is_a_clear_error_naming_the_package(fresh_fonts, monkeypatch, tmp_path):
    monkeypatch.setattr(fonts, "CJK_FONTS", (fonts.CjkFont(str(tmp_path / "none.ttc"), 0, "fonts-noto-cjk"),))
    with pytest.raises(fonts.FontMissing, match="install fonts-noto-cjk"):
        render_usage(usage(), "pdf", lang="zh-CN")
    assert render_usage(usage("acme", instance="i-1"), "pdf").startswith(b"%PDF")  # latin-1 needs no CJK font


def test_the_adapter_fits_this_fpdf2_thoroughly(fresh_fonts):
    # for every face: a copied font writes the same bytes as fpdf2's own parse of it
    message = fonts.warm_up()
    assert fonts.FAST_PATH is True, message
    assert set(fonts._faces) == {"full", "common"}
    assert fonts.face_for(["北京智算实验室 ¥687.94", label("zh-CN", "inv.notes", currency="CNY", vat="增值税 6%")]) == "common"
    assert fonts.face_for(["𠀀"]) == "full"  # U+20000, outside GB 2312: the full font, whatever it draws
    from reports.render.i18n import _LABELS

    assert fonts.face_for([t for labels in _LABELS.values() for t in labels.values()]) == "common"
    # the same document through either face is the same file (issue 37: warmed up or not, a process
    # renders a document alike; tests/unit/test_pdf_deterministic.py compares processes)
    common = render_usage(usage(), "pdf", lang="zh-CN")
    fonts._faces.pop("common")
    full = render_usage(usage(), "pdf", lang="zh-CN")
    assert common == full and "北京智算实验室" in pdf_text(full)


def test_a_common_face_that_would_embed_other_bytes_is_not_made(fresh_fonts, monkeypatch, caplog):
    # a face cut down by code point (as before issue 37) lacks what the full font maps to the glyphs it
    # keeps (U+F97E, a compatibility ideograph drawn as 量; U+0000) and recomputes the bounding box:
    # fpdf2's subset of it has another cmap and /FontBBox than its subset of the full font
    from fontTools import subset as ftsubset
    from fontTools import ttLib

    def by_code_point(font):
        face = ttLib.TTFont(font.path, fontNumber=font.number, recalcTimestamp=False)
        subsetter = ftsubset.Subsetter(ftsubset.Options(notdef_outline=True, recommended_glyphs=True,
                                                        glyph_names=True))
        subsetter.populate(unicodes=fonts.common_chars())
        subsetter.subset(face)
        out = io.BytesIO()
        face.save(out)
        return out.getvalue()

    monkeypatch.setattr(fonts, "_make_common", by_code_point)
    expected = render_invoice(invoice("北京智算"), "pdf", lang="zh-CN")  # not warmed up: the full face
    with caplog.at_level(logging.ERROR, logger="gpubill.render"):
        message = fonts.warm_up()
    assert "embeds other bytes from it than from the full font" in caplog.text
    assert set(fonts._faces) == {"full"} and fonts.FAST_PATH is True and "faces: full;" in message
    assert render_invoice(invoice("北京智算"), "pdf", lang="zh-CN") == expected


def test_the_thorough_check_runs_once_per_process(fresh_fonts, monkeypatch):
    # every API app warms up at its start: a second app in the process must not pay it again
    first = fonts.warm_up()
    assert fonts.FAST_PATH is True
    monkeypatch.setattr(fonts, "self_check", lambda **_: (_ for _ in ()).throw(AssertionError("checked again")))
    assert fonts.warm_up() == first


def test_a_misfit_adapter_falls_back_to_parsing_each_document(fresh_fonts, monkeypatch):
    expected = render_invoice(invoice("北京智算"), "pdf", lang="zh-CN")  # fast path, quick check
    assert fonts.FAST_PATH is True
    monkeypatch.setattr(fonts, "FAST_PATH", None)
    monkeypatch.setattr(fonts, "_PER_DOCUMENT", ())  # as if fpdf2 had a slot the copy does not know to renew
    monkeypatch.setattr(fonts, "_copy_for", lambda *a: (_ for _ in ()).throw(AttributeError("no such slot")))
    assert "does not fit" in fonts.self_check()
    assert fonts.FAST_PATH is False
    assert render_invoice(invoice("北京智算"), "pdf", lang="zh-CN") == expected  # same bytes, the slow way


def test_documents_rendered_at_once_from_many_threads_are_the_ones_rendered_alone():
    from concurrent.futures import ThreadPoolExecutor

    fonts.warm_up()
    jobs = [(usage(f"租户{i}", n=5 + i), invoice(f"客户{i}")) for i in range(6)]
    alone = [(render_usage(u, "pdf", lang="zh-CN"), render_invoice(v, "pdf", lang="zh-CN")) for u, v in jobs]
    with ThreadPoolExecutor(max_workers=6) as pool:
        together = list(pool.map(lambda job: (render_usage(job[0], "pdf", lang="zh-CN"),
                                              render_invoice(job[1], "pdf", lang="zh-CN")), jobs))
    assert together == alone


@pytest.mark.parametrize("cjk", [False, True])
def test_fast_widths_are_fpdf2s_own_to_the_bit(cjk):
    # string_width and fit_text replace fpdf2's measuring in the tables: the same floats, so the same bytes
    from reports.render.pdf import ReportPDF, _fit_text_measured, fit_text, string_width

    pdf = ReportPDF(title="t", footer_note="n", created_at=None, lang="zh-CN" if cjk else "en")
    pdf.add_page()
    texts = ["", "GPU-00000001-0000-0000-0000-000000000000", "Café ÆØÅ -- 'x' 1,234.56", "  lead and trail  ",
             "W" * 80, "599.00", *(["北京智算实验室 ¥687.94", "训练-1"] if cjk else [])]
    for style, size in (("", 7.5), ("B", 8), ("", 16)):
        pdf.set_font("Helvetica", style, size)
        for text in texts:
            text = pdf.txt(text)
            assert string_width(pdf, text) == pdf.get_string_width(text), text
            for width in (5.0, 12.3, 30.0, 200.0):
                for tail in (0, 8):
                    assert fit_text(pdf, text, width, keep_tail=tail) == _fit_text_measured(pdf, text, width, tail)
