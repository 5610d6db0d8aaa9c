"""Rendering: what each format writes, read back with an independent reader (csv, json, pyarrow)."""

from __future__ import annotations

import csv
import io
import json
import re
from decimal import Decimal as D
from types import SimpleNamespace

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.table import Table

from reports.render import (
    invoice_to_dict,
    render_cost_share,
    render_cost_share_table,
    render_invoice,
    render_usage,
)
from reports.render.format import money_str, quantity_str, rate_str, unit_price_str
from reports.usage_model import UsageReport, UsageRow

# --- helpers -----------------------------------------------------------------------------


def pdf_page_count(data: bytes) -> int:
    # page objects are written uncompressed by fpdf2: "/Type /Page" (not "/Pages")
    return len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", data))


def usage_row(day: int = 5, gpu: int = 0, hours: str = "24", util: str = "87.5") -> UsageRow:
    # 24 GPU-h × ¥12.50 = ¥300.00 rent; 24 h × 0.7 kW × PUE 1.12 = 18.816 kWh × ¥0.60 = ¥11.2896 → ¥11.29;
    # the IT energy, 24 h × 0.7 kW = 16.8 kWh: 18 h measured by the counter (12.6 kWh), 6 h estimated (4.2 kWh)
    return UsageRow(
        day=f"2026-03-{day:02d}",
        instance="inst-a" if gpu % 2 else "",
        gpu_uuid=f"GPU-{gpu:08x}-0000-0000-0000-000000000000",
        gpu_model="H100",
        gpu_hours=D(hours),
        avg_util_pct=D(util),
        kwh=D("18.816"),
        rent=D("300"),
        electricity=D("11.29"),
        measured_it_kwh=D("12.6"),
        estimated_it_kwh=D("4.2"),
    )


def usage_report(n_rows: int = 3, tenant: str = "acme") -> UsageReport:
    rows = tuple(usage_row(day=1 + i % 31, gpu=i % 7) for i in range(n_rows))
    return UsageReport(tenant=tenant, period="2026-03", generated_at="2026-04-02T03:00:00Z", rows=rows)


# --- number formatting: one place, half up -------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        (D("599"), "599.00"),
        (D("-10"), "-10.00"),
        (D("0.005"), "0.01"),  # half up, not half even
        (D("0.015"), "0.02"),
        (D("-0.001"), "0.00"),  # no "-0.00"
        (12, "12.00"),
    ],
)
def test_money_str(value, expected):
    assert money_str(value) == expected


@pytest.mark.parametrize(
    "value, expected",
    [
        (D("744"), "744.000000"),
        (D("1.5"), "1.500000"),
        (D("0.1234567"), "0.1234567"),  # at least six decimals: extra precision is kept
    ],
)
def test_quantity_str(value, expected):
    assert quantity_str(value) == expected


def test_unit_price_and_rates():
    assert unit_price_str(D("12.5")) == "12.500000"
    assert unit_price_str(D("0.0000005")) == "0.000001"
    assert rate_str(D("1.12")) == "1.12"
    assert rate_str(D("1.1200")) == "1.12"
    assert rate_str(D("0.06")) == "0.06"
    assert rate_str(D("1.125")) == "1.125"
    assert rate_str(D("1")) == "1.00"


def test_floats_are_refused_for_money():
    with pytest.raises(TypeError, match="float"):
        money_str(0.1)  # type: ignore[arg-type]


@given(st.decimals(min_value=-10**9, max_value=10**9, allow_nan=False, allow_infinity=False, places=6))
def test_money_str_is_within_half_a_fen(value):
    text = money_str(value)
    assert re.fullmatch(r"-?\d+\.\d{2}", text)
    assert abs(D(text) - value) <= D("0.005")


# --- usage report -------------------------------------------------------------------------


def test_usage_totals_are_exact_sums():
    report = usage_report(3)
    assert report.totals.gpu_hours == D("72")
    assert report.totals.rent == D("900")
    assert report.totals.electricity == D("33.87")
    assert report.totals.kwh == D("56.448")


def test_usage_csv_parses_back_without_a_total_row():
    report = usage_report(3)
    parsed = list(csv.DictReader(io.StringIO(render_usage(report, "csv").decode("utf-8"))))
    assert len(parsed) == 3
    assert list(parsed[0]) == [
        "day", "instance", "gpu_uuid", "gpu_model", "gpu_hours", "avg_util_pct", "kwh", "rent", "electricity",
        "measured_it_kwh", "estimated_it_kwh",
    ]
    assert parsed[1] == {
        "day": "2026-03-02",
        "instance": "inst-a",
        "gpu_uuid": "GPU-00000001-0000-0000-0000-000000000000",
        "gpu_model": "H100",
        "gpu_hours": "24.000000",
        "avg_util_pct": "87.5",
        "kwh": "18.816000",
        "rent": "300.00",
        "electricity": "11.29",
        "measured_it_kwh": "12.600000",
        "estimated_it_kwh": "4.200000",
    }
    assert not any("TOTAL" in v.upper() for row in parsed for v in row.values())


def test_usage_json_has_rows_and_totals_as_strings():
    doc = json.loads(render_usage(usage_report(2), "json"))
    assert list(doc) == ["tenant", "period", "generated_at", "rows", "totals", "invoice_lines"]
    assert (doc["tenant"], doc["period"], doc["generated_at"]) == ("acme", "2026-03", "2026-04-02T03:00:00Z")
    assert doc["rows"][0]["gpu_hours"] == "24.000000"
    assert doc["rows"][0]["rent"] == "300.00"
    assert doc["totals"] == {"gpu_hours": "48.000000", "kwh": "37.632000", "rent": "600.00", "electricity": "22.58",
                             "measured_it_kwh": "25.200000", "estimated_it_kwh": "8.400000"}  # 2 × 12.6, 2 × 4.2


def test_usage_parquet_reads_back_with_decimal_columns():
    report = usage_report(3)
    table = pq.read_table(io.BytesIO(render_usage(report, "parquet")))
    assert table.num_rows == 3
    schema = table.schema
    assert schema.field("gpu_hours").type == pa.decimal128(20, 6)
    assert schema.field("kwh").type == pa.decimal128(20, 6)
    assert schema.field("rent").type == pa.decimal128(18, 2)
    assert schema.field("electricity").type == pa.decimal128(18, 2)
    assert schema.field("avg_util_pct").type == pa.decimal128(5, 1)
    assert schema.field("measured_it_kwh").type == schema.field("estimated_it_kwh").type == pa.decimal128(20, 6)
    assert schema.names[-2:] == ["measured_it_kwh", "estimated_it_kwh"]  # after the columns there were
    assert table.column("measured_it_kwh").to_pylist() == [D("12.600000")] * 3
    assert table.column("estimated_it_kwh").to_pylist() == [D("4.200000")] * 3
    assert schema.metadata[b"tenant"] == b"acme"
    assert schema.metadata[b"period"] == b"2026-03"
    assert table.column("rent").to_pylist() == [D("300.00")] * 3
    assert table.column("gpu_hours").to_pylist() == [D("24.000000")] * 3
    assert [d.isoformat() for d in table.column("day").to_pylist()] == ["2026-03-01", "2026-03-02", "2026-03-03"]
    assert table.column("gpu_uuid").to_pylist()[2] == "GPU-00000002-0000-0000-0000-000000000000"


def test_usage_pdf_paginates_200_rows():
    data = render_usage(usage_report(200), "pdf")
    assert data.startswith(b"%PDF")
    assert pdf_page_count(data) > 1


def test_usage_pdf_small_report_is_one_page_and_deterministic():
    report = usage_report(3)
    first = render_usage(report, "pdf")
    assert first.startswith(b"%PDF")
    assert pdf_page_count(first) == 1
    assert render_usage(report, "pdf") == first  # creation date comes from generated_at, not the clock


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet", "pdf"])
def test_usage_renders_an_empty_report(fmt):
    assert render_usage(UsageReport("acme", "2026-03", "2026-04-02T03:00:00Z", ()), fmt)


def test_usage_pdf_survives_non_latin1_text():
    # core fonts are latin-1 only: the tenant's name must not crash the renderer
    report = usage_report(2, tenant="\u5317\u4eac AI \u2014 \u00a5 lab")
    assert render_usage(report, "pdf").startswith(b"%PDF")


def test_usage_unknown_format_raises():
    with pytest.raises(ValueError, match="unknown format"):
        render_usage(usage_report(1), "xlsx")


# --- invoices -----------------------------------------------------------------------------


def _line(kind, **fields):
    base = dict(kind=kind, gpu_model=None, plan=None, site=None, band=None, pue=None, ref_period=None,
                description=None, quantity=None, unit=None, unit_price=None, amount=D(0))
    base.update(fields)
    return SimpleNamespace(**base)


def hand_made_invoice():
    # rent:        744 GPU-h × ¥0.805108/h   = ¥599.000352 → ¥599.00
    # electricity: 100 kWh   × ¥0.6          = ¥60.00
    # credit:                                  -¥10.00
    # subtotal 659.00, net 649.00, VAT 6 % = 38.94, total 687.94
    lines = [
        _line("rent", gpu_model="H100", plan="on-demand", description="GPU rent H100 on-demand",
              quantity=D("744"), unit="GPU-h", unit_price=D("0.805108"), amount=D("599")),
        _line("electricity", site="guian", band="peak", pue=D("1.12"), description="Electricity guian peak",
              quantity=D("100"), unit="kWh", unit_price=D("0.6"), amount=D("60")),
        _line("credit", description="Trial credit", quantity=D("1"), unit="credit", amount=D("-10")),
    ]
    return SimpleNamespace(
        tenant="acme", period="2026-03", number="2026-000001", status="final",
        issued_at="2026-04-03T02:00:00+08:00", currency="CNY", lines=lines,
        subtotal=D("659"), net=D("649"), tax=D("38.94"), total=D("687.94"), vat_rate=D("0.06"),
    )


EXPECTED_INVOICE = {
    "tenant": "acme",
    "period": "2026-03",
    "number": "2026-000001",
    "status": "final",
    "issued_at": "2026-04-03T02:00:00+08:00",
    # a bare invoice: nothing around it (reports.invoice_document adds these)
    "issue_date": None, "service_period": None, "due_date": None, "seller": None, "buyer": None,
    "currency": "CNY",
    "lines": [
        {"kind": "rent", "gpu_model": "H100", "plan": "on-demand", "description": "GPU rent H100 on-demand",
         "quantity": "744.000000", "unit": "GPU-h", "unit_price": "0.805108", "amount": "599.00",
         "list_price": "0.805108", "list_price_unit": "GPU-hour"},
        {"kind": "electricity", "site": "guian", "band": "peak", "pue": "1.12",
         "description": "Electricity guian peak", "quantity": "100.000000", "unit": "kWh",
         "unit_price": "0.600000", "amount": "60.00", "list_price": "0.60", "list_price_unit": "kWh"},
        {"kind": "credit", "description": "Trial credit", "quantity": "1.000000", "unit": "credit",
         "unit_price": None, "amount": "-10.00"},
    ],
    "subtotal": "659.00",
    "discount": "0.00",
    "credit": "-10.00",
    "concession": "0.00",
    "net": "649.00",
    "tax": "38.94",
    "total": "687.94",
    "vat_rate": "0.06",
    "prepaid": None, "amount_due": None, "balance_after": None, "credit_left": [],
    # the lifecycle (issue 24): a bare invoice's id is its number; nothing replaced, no credit notes
    "id": "2026-000001", "replaces": "", "replaced_by": "", "credit_notes": [], "rules_revision": "",
    # a bare invoice has no account read around it (issue 38: derived when a document is made)
    "paid": None, "credited": None, "written_off": None, "outstanding": None, "payment_state": None, "overdue": None,
}


def test_invoice_to_dict_exact_strings_and_key_order():
    d = invoice_to_dict(hand_made_invoice())
    assert d == EXPECTED_INVOICE
    assert list(d) == list(EXPECTED_INVOICE)
    assert [list(line) for line in d["lines"]] == [list(line) for line in EXPECTED_INVOICE["lines"]]


def test_invoice_json_is_indented_orjson_of_the_dict():
    data = render_invoice(hand_made_invoice(), "json")
    assert data == orjson.dumps(EXPECTED_INVOICE, option=orjson.OPT_INDENT_2)


def test_invoice_csv_has_lines_then_summary_rows():
    parsed = list(csv.DictReader(io.StringIO(render_invoice(hand_made_invoice(), "csv").decode("utf-8"))))
    assert [r["kind"] for r in parsed] == ["rent", "electricity", "credit", "subtotal", "discounts", "credits", "net",
                                           "tax", "total"]
    assert parsed[0]["quantity"] == "744.000000"
    assert parsed[0]["amount"] == "599.00"
    assert parsed[1]["pue"] == "1.12"
    assert parsed[2]["amount"] == "-10.00"
    assert {r["kind"]: r["amount"] for r in parsed[3:]} == {
        "subtotal": "659.00", "discounts": "0.00", "credits": "-10.00", "net": "649.00", "tax": "38.94", "total": "687.94",
    }
    # the money lines add up to the net, as written: subtotal + discounts + credits
    assert sum(D(r["amount"]) for r in parsed[:3]) == D(parsed[6]["amount"])


def test_invoice_pdf():
    data = render_invoice(hand_made_invoice(), "pdf")
    assert data.startswith(b"%PDF")
    assert pdf_page_count(data) == 1
    assert b"Invoice 2026-000001" in data  # the document title, in the uncompressed info dictionary


def test_invoice_pdf_with_many_lines_paginates():
    inv = hand_made_invoice()
    inv.lines = inv.lines * 40
    assert pdf_page_count(render_invoice(inv, "pdf")) > 1


def test_invoice_unknown_format_raises():
    with pytest.raises(ValueError, match="unknown format"):
        render_invoice(hand_made_invoice(), "parquet")


# --- cost share ---------------------------------------------------------------------------


def cost_share_rows():
    return [
        dict(site="guian", gpu_model="H100", cards=64, rented_gpu_hours=D("40123.5"), rent_revenue=D("501543.75"),
             electricity_billed=D("35960.12"), electricity_unallocated=D("1203.4"), electricity_share=D("0.0717"),
             green_kwh=D("30000"), total_kwh=D("52000.123")),
        dict(site="shanghai", gpu_model="A100", cards=16, rented_gpu_hours=D("9000"), rent_revenue=D("61200"),
             electricity_billed=D("9100.5"), electricity_unallocated=D("0"), electricity_share=D("0.148701"),
             green_kwh=D("0"), total_kwh=D("9800")),
    ]


def what_if_rows():
    # guian H100 priced under shanghai's tariff: ¥71,920.24 instead of ¥35,960.12, saving ¥35,960.12
    base = cost_share_rows()[0]
    return [dict(base, what_if_site="shanghai", what_if_electricity=D("71920.24"), saving=D("35960.12"))]


def test_cost_share_table_shows_share_as_percent():
    table = render_cost_share_table(cost_share_rows())
    assert isinstance(table, Table)
    text = render_cost_share(cost_share_rows(), "table")
    assert "7.17 %" in text
    assert "14.87 %" in text
    assert "501,543.75" in text
    assert "What-if" not in text


def test_cost_share_table_with_what_if_columns():
    text = render_cost_share(cost_share_rows(), "table", what_if=what_if_rows())
    assert "What-if" in text
    assert "71,920.24" in text
    assert "35,960.12" in text
    assert max(len(line) for line in text.splitlines()) <= 160


def test_cost_share_csv_joins_what_if_by_site_and_model():
    parsed = list(csv.DictReader(io.StringIO(render_cost_share(cost_share_rows(), "csv", what_if=what_if_rows()))))
    assert len(parsed) == 2
    assert parsed[0]["electricity_share"] == "0.071700"
    assert parsed[0]["rent_revenue"] == "501543.75"
    assert parsed[0]["what_if_electricity"] == "71920.24"
    assert parsed[0]["saving"] == "35960.12"
    assert parsed[1]["what_if_site"] == ""


def test_cost_share_json():
    doc = json.loads(render_cost_share(cost_share_rows(), "json"))
    assert doc["what_if"] is None
    assert doc["rows"][0] == {
        "site": "guian", "gpu_model": "H100", "cards": 64, "rented_gpu_hours": "40123.500000",
        "rent_revenue": "501543.75", "electricity_billed": "35960.12", "electricity_unallocated": "1203.40",
        "electricity_share": "0.071700", "green_kwh": "30000.000000", "total_kwh": "52000.123000",
    }
    doc = json.loads(render_cost_share(cost_share_rows(), "json", what_if=what_if_rows()))
    assert doc["what_if"][0]["what_if_site"] == "shanghai"
    assert doc["what_if"][0]["saving"] == "35960.12"


def test_cost_share_empty_table_renders():
    assert "No usage" in render_cost_share([], "table")


def test_cost_share_unknown_format_raises():
    with pytest.raises(ValueError, match="unknown format"):
        render_cost_share(cost_share_rows(), "pdf")
