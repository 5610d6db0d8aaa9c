"""`gpubill demo` end to end (small fleet), on the test's broker and a tmp chDB."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.e2e


def test_demo_prints_cost_share_and_writes_invoices_and_reports(gpubill):
    gpubill.env.pop("GPUBILL_RULES")  # the shipped rules
    done = gpubill.run("demo", "--minutes", "2", "--gpus", "1", timeout=600)
    assert "Cost share by site and GPU model" in done.stdout
    for model in ("RTX4090", "A800-80G", "H800-80G"):
        assert model in done.stdout
    out = gpubill.cwd / "out"
    invoices = sorted((out / "invoices").glob("*.json"))
    assert invoices, done.stdout
    first = json.loads(invoices[0].read_text())
    assert first["number"].startswith("GB-") and first["status"] == "issued"
    assert (out / "invoices" / invoices[0].name.replace(".json", ".pdf")).read_bytes().startswith(b"%PDF")
    tenant = first["tenant"]
    for ext in ("csv", "json", "parquet", "pdf"):
        assert list((out / "usage").glob(f"{tenant}_*.{ext}")), ext
    shares = json.loads(next(out.glob("cost-share_*.json")).read_text())
    assert {row["gpu_model"] for row in shares["rows"]} == {"RTX4090", "A800-80G", "H800-80G"}


def test_the_demos_documents_agree_and_show_every_block(gpubill):
    """Issue 23's Done-when on the demo's own output: every tenant's usage report (CSV, JSON,
    Parquet) adds up to its invoice's lines before credits, to the fen and to 1e-6 GPU-hour and
    kWh; every English and Chinese invoice PDF shows the seller, the buyer, the dates and the
    settlement, and the Chinese ones no English word outside ids, names and units."""
    import csv
    import io
    from decimal import Decimal as D
    from pathlib import Path

    import pyarrow.parquet as pq

    from billing_rules import DEFAULT_RULES_DIR, load_rules
    from tests.pdf_reading import english_words, pdf_text, save_pages

    gpubill.env.pop("GPUBILL_RULES")
    gpubill.run("demo", "--minutes", "2", "--gpus", "4", timeout=600)
    out, seller = gpubill.cwd / "out", load_rules(DEFAULT_RULES_DIR).seller
    artifacts = Path(__file__).parents[1] / "artifacts" / "documents" / "demo"
    invoices = sorted((out / "invoices").glob("*.json"))
    assert len(invoices) >= 2
    for path in invoices:
        inv = json.loads(path.read_text())
        tenant = inv["tenant"]
        lines = {kind: [line for line in inv["lines"] if line["kind"] == kind] for kind in ("rent", "discount", "electricity")}
        expected = {
            "gpu_hours": sum((D(line["quantity"]) for line in lines["rent"]), D(0)),
            "rent": sum((D(line["amount"]) for line in lines["rent"] + lines["discount"]), D(0)),
            "kwh": sum((D(line["quantity"]) for line in lines["electricity"]), D(0)),
            "electricity": sum((D(line["amount"]) for line in lines["electricity"]), D(0)),
        }
        usage_json = json.loads(next((out / "usage").glob(f"{tenant}_*.json")).read_text())
        totals = {k: D(v) for k, v in usage_json["totals"].items()}
        assert {k: totals[k] for k in expected} == expected, tenant
        # the IT energy graded (before PUE, which is ≥ 1): the demo's cards report no counter
        assert totals["measured_it_kwh"] == 0 and 0 < totals["estimated_it_kwh"] <= totals["kwh"], tenant
        rows = list(csv.DictReader(io.StringIO(next((out / "usage").glob(f"{tenant}_*.csv")).read_text())))
        assert {k: sum((D(r[k]) for r in rows), D(0)) for k in expected} == expected, tenant
        table = pq.read_table(next((out / "usage").glob(f"{tenant}_*.parquet")))
        assert {k: sum((D(v) for v in table.column(k).to_pylist()), D(0)) for k in expected} == expected, tenant
        assert inv["seller"]["tax_id"] == seller.tax_id and inv["buyer"]["tax_id"].startswith("91520115MA6DEM")
        for lang, pdf in (("en", path.with_suffix(".pdf")), ("zh-CN", path.with_suffix(".zh-CN.pdf"))):
            data = pdf.read_bytes()
            save_pages(data, artifacts / f"{tenant}-{lang}")
            text = pdf_text(data)
            for block in (seller.tax_id, inv["buyer"]["legal_name"], inv["buyer"]["tax_id"], inv["issue_date"],
                          f"{inv['service_period']['start']} - {inv['service_period']['end']}", inv["number"]):
                assert block in text, (tenant, lang, block)
            if inv["prepaid"]:
                assert ("Settled from prepaid balance" if lang == "en" else "已从预付余额扣款") in text
            elif inv["amount_due"] != "0.00":  # due_date is every issued invoice's (issue 38), owing or not
                assert inv["due_date"] in text and inv["amount_due"] in text
            else:  # the trial credit covered it
                assert ("Nothing is due" if lang == "en" else "本账单无需付款") in text
            if lang == "zh-CN":
                assert seller.legal_name_zh in text and "大写：人民币" in text
                outside = [tenant, inv["number"], seller.contact, seller.tax_id, seller.bank_account,
                           *inv["buyer"].values(), *(line.get("gpu_model", "") for line in inv["lines"])]
                assert english_words(text, outside) == set(), (tenant, english_words(text, outside))
