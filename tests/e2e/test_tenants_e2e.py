"""The tenant registry end to end: readings of unregistered tenants are rated and invoiced
(nothing lost), listed by `gpubill tenant unknown`, and only registered, active tenants get
the trial credit; the demo registers its tenants, so its invoices spend the trial as before.
The fixture and the figures are tests/e2e/test_pipeline_e2e.py's:

    acme  March 120 s × ¥1 = ¥120.00 + electricity ¥12.32 = ¥132.32 (its onboarding credit
          covers it); April ¥60.00 + ¥6.16 + late-March adjustments ¥10.00 + ¥1.03 = ¥77.19
    beta  March 60 s × ¥1 = ¥60.00 + ¥2.47 − discount ¥6.00 = ¥56.47 before credit
    trial credit ¥10; VAT 6 %
"""

from __future__ import annotations

import json
from decimal import Decimal
from fractions import Fraction

import pytest

from tests.e2e.conftest import FIXTURES
from tests.e2e.test_pipeline_e2e import electricity, fen, lines_by_kind

pytestmark = pytest.mark.e2e


def one_line_error(done) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: "), (done.stdout, done.stderr)
    return lines[0]


def test_unregistered_tenants_are_billed_listed_and_get_no_trial_credit(gpubill):
    for part in ("readings_part1.ndjson", "readings_part2.ndjson"):
        gpubill.run("replay", str(FIXTURES / part))
        gpubill.run("worker", "--drain")

    # -- both tenants are unknown: listed with their usage and charges before credit and VAT
    acme_march = Fraction(120) + Fraction(Decimal(fen(electricity(120, Fraction(1000)))))
    beta_march = Fraction(60) + Fraction(Decimal(fen(electricity(60, Fraction(4005, 10))))) - 6
    unknown = gpubill.json("tenant", "unknown", "--period", "2026-03", "--format", "json")
    assert [(u["tenant"], u["rented_gpu_seconds"], u["charges_cny"]) for u in unknown] == [
        ("acme", 120, fen(acme_march)), ("beta", 60, fen(beta_march))]
    assert (fen(acme_march), fen(beta_march)) == ("132.32", "56.47")

    # -- hostile ids and names through the real command line: one line, exit 1, nothing stored
    assert "RIGHT-TO-LEFT OVERRIDE" in one_line_error(gpubill.run("tenant", "add", "beta", "--name", "Beta\u202egpj.exe",
                                                                  check=False))
    assert "tenant id '..'" in one_line_error(gpubill.run("tenant", "add", "..", "--name", "x", check=False))
    assert "CYRILLIC" in one_line_error(gpubill.run("tenant", "add", "\u0430cme", "--name", "x", check=False))
    assert gpubill.json("tenant", "list", "--format", "json") == []

    # -- only beta is registered: it spends the trial, acme is invoiced in full without it
    assert "registered beta" in gpubill.run("tenant", "add", "beta", "--name", "شركة بيتا").stdout
    run = gpubill.run("invoice", "run", "--period", "2026-03")
    assert "2 invoices created" in run.stdout and "1 of them for tenants that are not registered" in run.stderr
    beta = gpubill.json("invoice", "show", "--period", "2026-03", "--tenant", "beta", "--format", "json")
    assert [(l["credit_id"], l["amount"]) for l in lines_by_kind(beta)["credit"]] == [("trial", "-10.00")]
    assert beta["total"] == "49.26"  # 56.47 − 10.00 = 46.47 net; VAT 2.7882 → 2.79
    acme = gpubill.json("invoice", "show", "--period", "2026-03", "--tenant", "acme", "--format", "json")
    assert [l["credit_id"] for l in lines_by_kind(acme)["credit"]] == ["acme-onboarding"]  # its contract's
    assert [u["tenant"] for u in gpubill.json("tenant", "unknown", "--period", "2026-03", "--format", "json")] == [
        "acme"]

    # -- April: acme, still unknown, owes everything; suspended beta keeps its data and owes in full
    gpubill.run("replay", str(FIXTURES / "readings_part3.ndjson"))
    gpubill.run("worker", "--drain")
    assert "beta is suspended" in gpubill.run("tenant", "suspend", "beta", "--note", "ticket 7").stdout
    gpubill.run("invoice", "run", "--period", "2026-04")
    acme4 = gpubill.json("invoice", "show", "--period", "2026-04", "--tenant", "acme", "--format", "json")
    assert "credit" not in lines_by_kind(acme4) and acme4["subtotal"] == acme4["net"] == "77.19"
    assert acme4["tax"] == fen(Fraction(7719, 100) * Fraction(6, 100)) == "4.63"
    beta4 = gpubill.json("invoice", "show", "--period", "2026-04", "--tenant", "beta", "--format", "json")
    assert "credit" not in lines_by_kind(beta4)  # it had spent its trial anyway; no other credit
    listed = gpubill.json("tenant", "list", "--format", "json")
    assert [(t["tenant"], t["display_name"], t["status"], t["note"]) for t in listed] == [
        ("beta", "شركة بيتا", "suspended", "ticket 7")]


def test_the_demo_registers_its_tenants_so_each_invoice_spends_the_trial_as_before(gpubill):
    gpubill.env.pop("GPUBILL_RULES")  # the shipped rules: ¥10 trial credit
    gpubill.run("demo", "--minutes", "2", "--gpus", "1", timeout=600)
    invoices = [json.loads(path.read_text()) for path in sorted((gpubill.cwd / "out" / "invoices").glob("*.json"))]
    assert invoices
    for invoice in invoices:  # 2 minutes of a card cost more than nothing: the trial is spent, up to ¥10
        spent = [Decimal(l["amount"]) for l in invoice["lines"] if l["kind"] == "credit" and l["credit_id"] == "trial"]
        assert len(spent) == 1 and Decimal("-10.00") <= spent[0] < 0, invoice["tenant"]
    listed = gpubill.json("tenant", "list", "--format", "json")
    assert {t["tenant"] for t in listed} >= {invoice["tenant"] for invoice in invoices}
    assert {t["status"] for t in listed} == {"active"}
