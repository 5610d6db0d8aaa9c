"""Every PDF is a function of its document (issue 37: a database rebuilt from the log renders each
invoice and credit note byte-identical): the same bytes at another wall-clock time and in another
process (another time zone, another hash seed, the CJK font warmed up or not), and a file
identifier that two different documents do not share (reports/render/pdf.py, fonts.py).

The documents are tests/unit/test_credit_note_documents.py's, read from the database: beta's
March invoice GB-2026-000002, issued at APRIL_2 (2026-04-02T00:00:00Z), its goodwill credit
note CN-2026-000001 at APRIL_3 (2026-04-03T00:00:00Z), beta's statement of April (both of
them; issue 38) and beta's usage report generated at APRIL_2; and two usage reports built by
hand (test_render_cjk.usage, generated_at 2026-04-02T03:00:00Z): one whose tenant is all GB 2312 hanzi, so a warmed-up process embeds from
the "common" face, one with traditional hanzi (臺, 醫) that it lacks, so even a warmed-up process
embeds from the full font.

The clocks the renderers could read are stopped (`stopped_clock`) at two moments a year and a
half apart; if a PDF took its creation date, its /ID or a printed time from the clock, the bytes
would differ.
"""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import date, datetime, timezone
from decimal import Decimal as D
from pathlib import Path
from typing import Any

import pytest

from reports.render import render_credit_note, render_invoice, render_statement, render_usage
from tests.unit.test_balances import APRIL_2, db  # noqa: F401  (the fixture)
from tests.unit.test_credit_note_documents import BETA, goodwill, issued  # noqa: F401  (the fixtures)
from tests.unit.test_current_usage import PERIOD, RULES
from tests.unit.test_render_cjk import usage

ROOT = Path(__file__).parents[2]
CLOCKS = (datetime(2027, 1, 15, 9, 30, 5, tzinfo=timezone.utc), datetime(2028, 7, 1, 23, 59, 59, tzinfo=timezone.utc))
RENDERERS = {"invoice": render_invoice, "credit_note": render_credit_note, "usage": render_usage,
             "statement": render_statement}
_ID = re.compile(rb"/ID \[<([0-9A-F]{32})><([0-9A-F]{32})>\]")


# --- clocks and rendering, shared with the child process (run as a module, see the end) ---------


@contextmanager
def stopped_clock(at: datetime) -> Iterator[None]:
    """Every clock a rendering could read shows `at`: ``datetime.now``/``utcnow``/``today`` and
    ``date.today`` as the modules of fpdf2, fontTools and reports see them, and ``time.time``."""

    class StoppedDatetime(datetime):
        @classmethod
        def now(cls, tz=None):  # type: ignore[override]
            return at.astimezone(tz) if tz is not None else at.astimezone().replace(tzinfo=None)

        @classmethod
        def utcnow(cls):  # type: ignore[override]
            return at.astimezone(timezone.utc).replace(tzinfo=None)

        @classmethod
        def today(cls):  # type: ignore[override]
            return cls.now()

    class StoppedDate(date):
        @classmethod
        def today(cls):  # type: ignore[override]
            return at.astimezone().date()

    swaps = {datetime: StoppedDatetime, date: StoppedDate}
    patched: list[tuple[Any, str, Any]] = []
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(("fpdf", "fontTools", "reports")):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, type) and value in swaps:
                patched.append((module, attr, value))
                setattr(module, attr, swaps[value])
    real_time, real_time_ns = time.time, time.time_ns
    time.time, time.time_ns = at.timestamp, lambda: int(at.timestamp()) * 1_000_000_000
    try:
        yield
    finally:
        time.time, time.time_ns = real_time, real_time_ns
        for module, attr, value in patched:
            setattr(module, attr, value)


def render_all(documents: dict[str, tuple[str, Any, str]]) -> dict[str, bytes]:
    """{name: the PDF} of each (kind, document, language)."""
    return {name: RENDERERS[kind](doc, "pdf", lang=lang) for name, (kind, doc, lang) in documents.items()}


def file_id(data: bytes) -> bytes:
    """The PDF's /ID; fpdf2 writes both halves alike when it first writes a file."""
    match = _ID.search(data)
    assert match is not None and match.group(1) == match.group(2), data[-300:]
    return match.group(1)


# --- the documents --------------------------------------------------------------------------


@pytest.fixture()
def documents(goodwill):  # noqa: F811
    from reports.credit_note_document import credit_note_document
    from reports.invoice_document import invoice_document
    from reports.statement import statement_document
    from reports.usage_report import usage_report

    db, note = goodwill
    invoice = invoice_document(db, RULES, "beta", number=BETA)
    credit_note = credit_note_document(db, RULES, note.number)
    report = usage_report(db, RULES, "beta", PERIOD, now=APRIL_2)
    assert report.rows and invoice.invoice.number == BETA and credit_note.credit_note.number == "CN-2026-000001"
    statement = statement_document(db, RULES, "beta", date(2026, 4, 1), date(2026, 4, 30))
    assert [e.document for e in statement.statement.entries] == [BETA, "CN-2026-000001"]
    common, rare = usage("北京智算实验室"), usage("國立臺灣大學醫學院")
    return {
        "invoice.en": ("invoice", invoice, "en"),
        "invoice.zh-CN": ("invoice", invoice, "zh-CN"),
        "credit_note.en": ("credit_note", credit_note, "en"),
        "credit_note.zh-CN": ("credit_note", credit_note, "zh-CN"),
        "statement.en": ("statement", statement, "en"),
        "statement.zh-CN": ("statement", statement, "zh-CN"),
        "usage.en": ("usage", report, "en"),
        "usage.zh-CN": ("usage", report, "zh-CN"),
        "usage-common-face.zh-CN": ("usage", common, "zh-CN"),
        "usage-full-face.zh-CN": ("usage", rare, "zh-CN"),
    }


# --- the tests ------------------------------------------------------------------------------


def test_a_pdf_is_the_same_at_another_clock_and_dated_by_its_document(documents):
    with stopped_clock(CLOCKS[0]):
        first = render_all(documents)
        assert sys.modules["fpdf.fpdf"].datetime.now(timezone.utc) == CLOCKS[0]  # where FPDF() reads its default
    with stopped_clock(CLOCKS[1]):
        second = render_all(documents)
    for name in documents:
        assert first[name] == second[name], name
    # the creation date is the document's issue time (or the report's generation input), in UTC as given;
    # the producer a fixed name
    dates = {"invoice": b"D:20260402000000Z", "credit_note": b"D:20260403000000Z", "usage": b"D:20260402000000Z",
             "statement": b"D:20260430000000Z"}  # a statement: its last day
    for name, (kind, _, _) in documents.items():
        expected = b"D:20260402030000Z" if name.startswith("usage-") else dates[kind]
        assert b"/CreationDate (" + expected + b")" in first[name], name
        assert b"/Producer (gpubill)" in first[name], name


def test_a_pdf_is_the_same_in_another_process(documents, tmp_path):
    here = render_all(documents)
    with open(tmp_path / "documents.pickle", "wb") as f:
        pickle.dump(documents, f)
    # another time zone, hash seed and clock each; one child warms the CJK font up (the download
    # service's and the invoice run's path, "common" face), the other does not (a one-off command)
    children = (("cold", "America/Los_Angeles", "1", CLOCKS[0]), ("warm", "Asia/Shanghai", "2", CLOCKS[1]))
    for warm, zone, seed, clock in children:
        out = tmp_path / warm
        env = {**os.environ, "TZ": zone, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-m", "tests.unit.test_pdf_deterministic", str(tmp_path / "documents.pickle"),
                        str(out), clock.isoformat(), warm], cwd=ROOT, env=env, check=True, timeout=300)
        assert (out / "faces").read_text() == ("full,common" if warm == "warm" else "full")
        for name in documents:
            assert (out / f"{name}.pdf").read_bytes() == here[name], f"{name} rendered {warm} in {zone}"


def test_different_documents_have_different_file_ids(documents):
    pdfs = render_all(documents)
    ids = {name: file_id(data) for name, data in pdfs.items()}
    assert len(set(ids.values())) == len(ids), ids
    # one figure apart: a row's electricity ¥11.29 → ¥11.30 (the same tenant, period and date)
    report = usage("北京智算实验室")
    other = replace(report, rows=(replace(report.rows[0], electricity=D("11.30")), *report.rows[1:]))
    assert report.rows[0].electricity == D("11.29")
    assert file_id(render_usage(other, "pdf", lang="zh-CN")) != ids["usage-common-face.zh-CN"]
    assert file_id(render_usage(report, "pdf", lang="zh-CN")) == ids["usage-common-face.zh-CN"]


def _child(pickled: str, out: str, clock: str, warm: str) -> None:
    """Render the pickled documents at `clock` into `out`/NAME.pdf; "warm": warm the CJK font up
    first. Writes `out`/faces: the faces the process has made."""
    import reports.render.fonts as fonts

    if warm == "warm":
        fonts.warm_up()
    with open(pickled, "rb") as f:
        documents = pickle.load(f)
    with stopped_clock(datetime.fromisoformat(clock)):
        pdfs = render_all(documents)
    Path(out).mkdir()
    for name, data in pdfs.items():
        (Path(out) / f"{name}.pdf").write_bytes(data)
    (Path(out) / "faces").write_text(",".join(fonts._faces))


if __name__ == "__main__":
    _child(*sys.argv[1:])
