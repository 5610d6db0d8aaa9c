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
    assert first["number"].startswith("GB-") and first["status"] == "finalized"
    assert (out / "invoices" / invoices[0].name.replace(".json", ".pdf")).read_bytes().startswith(b"%PDF")
    tenant = first["tenant"]
    for ext in ("csv", "json", "parquet", "pdf"):
        assert list((out / "usage").glob(f"{tenant}_*.{ext}")), ext
    shares = json.loads(next(out.glob("cost-share_*.json")).read_text())
    assert {row["gpu_model"] for row in shares["rows"]} == {"RTX4090", "A800-80G", "H800-80G"}
