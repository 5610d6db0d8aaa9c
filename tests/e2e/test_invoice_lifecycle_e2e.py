"""The invoice lifecycle end to end on a real broker and chDB, through the command line (issue 24):
manual review → drafts refreshed by late data → issue → a partial credit note → void → the
replacement, with gap-free numbers in both series, the trial credit moving to the replacement
and the prepaid balance after each step.

The fixture and its figures are tests/e2e/test_pipeline_e2e.py's (worked out there by hand):

    acme  March 120 s × ¥1 = 120.00 + electricity 12.32; its onboarding credit (¥150, March only) covers it
          late March data (+10 s): 130.00 + 13.35 = 143.35, still covered: total 0.00
    beta  March lines: 1 rent 60.00, 2 electricity 2.47, 3 discount −6.00, 4 trial credit −10.00
          net 46.47, VAT 2.7882 → 2.79, total 49.26
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from zoneinfo import ZoneInfo

import pytest

from tests.e2e.conftest import FIXTURES
from tests.rules_copies import manual_review_rules
from tests.e2e.test_pipeline_e2e import fen, lines_by_kind
from tests.e2e.test_tenants_e2e import one_line_error
from tests.pdf_reading import pdf_text

pytestmark = pytest.mark.e2e

VAT = Fraction(6, 100)


def manual_review(gpubill) -> None:
    gpubill.env["GPUBILL_RULES"] = str(manual_review_rules(gpubill.cwd / "rules"))


def invoiced(gpubill, tenant: str) -> str:
    return gpubill.json("balance", "show", "--tenant", tenant, "--json")[0]["invoiced"]


def test_drafts_issue_credit_void_and_replace_through_the_command_line(gpubill):
    manual_review(gpubill)
    gpubill.run("replay", str(FIXTURES / "readings_part1.ndjson"))
    gpubill.run("worker", "--drain")
    gpubill.run("replay", str(FIXTURES / "readings_part2.ndjson"))
    gpubill.run("worker", "--drain")
    gpubill.run("tenant", "add", "acme", "--name", "Acme")
    gpubill.run("tenant", "add", "beta", "--name", "Beta 有限公司")
    gpubill.run("balance", "topup", "--tenant", "beta", "--amount", "100", "--ref", "pay-1")
    cn_year = datetime.now(ZoneInfo("Asia/Shanghai")).year  # credit notes are numbered by their issue year

    # -- 1. manual review: the run makes drafts, without numbers; nothing is charged yet
    run = gpubill.run("invoice", "run", "--period", "2026-03")
    assert "2026-03: 2 drafts made, 0 refreshed, 0 unchanged, 0 already issued" in run.stdout
    drafts = gpubill.json("invoice", "drafts", "--period", "2026-03", "--json")
    assert [(d["tenant"], d["status"], d["number"], d["revision"], d["total"]) for d in drafts] == [
        ("acme", "draft", "", 1, "0.00"), ("beta", "draft", "", 1, "49.26")]
    assert all(d["id"].startswith("DRAFT-") for d in drafts)
    beta_draft = gpubill.json("invoice", "show", "--period", "2026-03", "--tenant", "beta", "--format", "json")
    assert (beta_draft["status"], beta_draft["number"], beta_draft["total"]) == ("draft", "", "49.26")
    assert invoiced(gpubill, "beta") == "0.00"
    gpubill.run("invoice", "show", "--period", "2026-03", "--tenant", "beta", "--format", "pdf", "--lang", "zh-CN",
                "--out", "draft.pdf")
    assert "账单（草稿）" in pdf_text((gpubill.cwd / "draft.pdf").read_bytes())  # the reviewer's copy says so

    # -- 2. late March data for acme: its draft is refreshed (revision 2), beta's is not
    gpubill.run("replay", str(FIXTURES / "readings_part3.ndjson"))
    gpubill.run("worker", "--drain")
    run = gpubill.run("invoice", "run", "--period", "2026-03")
    assert "0 drafts made, 1 refreshed, 1 unchanged, 0 already issued" in run.stdout
    acme = gpubill.json("invoice", "show", "--period", "2026-03", "--tenant", "acme", "--format", "json")
    assert [l["amount"] for l in lines_by_kind(acme)["rent"]] == ["130.00"]  # 130 s × ¥1
    assert acme["subtotal"] == "143.35" and acme["total"] == "0.00"  # 130.00 + 13.35, the onboarding credit covers it

    # -- 3. issue after review: numbered gap-free; with none left, issue says so and exits 1
    issued = gpubill.run("invoice", "issue", "--period", "2026-03")
    assert "2026-03: 2 invoices issued" in issued.stdout
    assert "GB-2026-000001" in issued.stdout and "GB-2026-000002" in issued.stdout
    assert "no drafts to issue for 2026-03" in one_line_error(gpubill.run("invoice", "issue", "--period", "2026-03",
                                                                          check=False))
    beta = gpubill.json("invoice", "show", "--period", "2026-03", "--tenant", "beta", "--format", "json")
    assert (beta["number"], beta["status"], beta["total"]) == ("GB-2026-000002", "issued", "49.26")
    assert [(l["kind"], l["amount"]) for l in beta["lines"]] == [
        ("rent", "60.00"), ("electricity", "2.47"), ("discount", "-6.00"), ("credit", "-10.00")]
    assert invoiced(gpubill, "beta") == "49.26"

    # -- 4. a partial credit note: 5.00 of the rent, VAT 0.30, 5.30 back to beta
    made = gpubill.json("credit-note", "create", "--invoice", "GB-2026-000002", "--reason", "goodwill",
                        "--line", "1=5.00", "--note", "outage on 3 March", "--json")[0]
    assert (made["number"], made["subtotal"], made["tax"], made["total"]) == (
        f"CN-{cn_year}-000001", "5.00", "0.30", "5.30")  # 5.00 × 6 % = 0.30
    assert invoiced(gpubill, "beta") == "43.96"  # 49.26 − 5.30

    # -- refused in one line, exit 1, nothing written: over the net left (46.47 − 5.00 = 41.47),
    #   a discount line, a line it lacks, bad amounts, an unknown reason, both --all and --line
    refused = [
        (("--line", "1=41.48"), "at most 41.47 more before tax"),
        (("--line", "3=1"), "line 3 of GB-2026-000002 is a discount line"),
        (("--line", "9=1"), "has no line 9"),
        (("--line", "1=5.001"), "not an amount of yuan"),
        (("--line", "1=NaN"), "not an amount of yuan"),
        (("--line", "1=1e9"), "not an amount of yuan"),
        (("--line", "1=-1"), "not an amount of yuan"),
        (("--line", "1=0"), "must be above zero"),
        (("--line", "one=1"), "write it as K=AMOUNT"),
        (("--all", "--line", "1=1"), "not both"),
    ]
    for extra, message in refused:
        assert message in one_line_error(gpubill.run("credit-note", "create", "--invoice", "GB-2026-000002",
                                                     "--reason", "goodwill", *extra, check=False)), extra
    assert "--reason: 'oops' is not one of" in one_line_error(gpubill.run("credit-note", "create", "--invoice", "GB-2026-000002",
                                                         "--reason", "oops", "--all", check=False))
    assert "no invoice 'GB-2026-000099'" in one_line_error(gpubill.run(
        "credit-note", "create", "--invoice", "GB-2026-000099", "--reason", "goodwill", "--all", check=False))
    assert [n["number"] for n in gpubill.json("credit-note", "list", "--json")] == [f"CN-{cn_year}-000001"]

    # -- 5. void: a credit note for the rest — rent 55.00, electricity 2.47, the discount −6.00 and
    #   the trial −10.00 given back: 41.47; VAT round(46.47 × 6 %) − 0.30 = 2.79 − 0.30 = 2.49
    voided = gpubill.run("invoice", "void", "GB-2026-000002", "--reason", "billed under the wrong contract")
    assert f"GB-2026-000002 voided (credit note CN-{cn_year}-000002: 43.96 CNY" in voided.stdout
    note = gpubill.json("credit-note", "show", f"CN-{cn_year}-000002", "--format", "json")
    assert [(l["invoice_line_no"], l["amount"]) for l in note["lines"]] == [
        (1, "55.00"), (2, "2.47"), (3, "-6.00"), (4, "-10.00")]
    assert (note["reason"], note["subtotal"], note["tax"], note["total"]) == ("void", "41.47", "2.49", "43.96")
    assert str(fen(Fraction(4647, 100) * VAT)) == "2.79"
    assert Decimal("5.30") + Decimal("43.96") == Decimal(beta["total"])  # every fen of it, no more
    gpubill.run("credit-note", "show", f"CN-{cn_year}-000002", "--format", "pdf", "--lang", "zh-CN", "--out", "cn.pdf")
    text = pdf_text((gpubill.cwd / "cn.pdf").read_bytes())
    assert f"CN-{cn_year}-000002" in text and "GB-2026-000002" in text and "43.96" in text
    assert "already voided" in one_line_error(gpubill.run("invoice", "void", "GB-2026-000002", "--reason", "again",
                                                          check=False))
    assert "already voided" in one_line_error(gpubill.run("credit-note", "create", "--invoice", "GB-2026-000002",
                                                          "--reason", "goodwill", "--line", "1=1", check=False))
    assert invoiced(gpubill, "beta") == "0.00"  # voided and fully credited: nothing charged until the replacement

    # -- 6. the next run drafts the replacement; issued, it is GB-2026-000003, names what it
    #   replaces, spends the trial credit the voided invoice gave back and carries the goodwill
    #   (issue 36): 60.00 + 2.47 − 6.00 − 5.00 − 10.00 = 41.47 net; VAT round(2.4882) = 2.49; 43.96,
    #   what beta owed before the void (49.26 − 5.30)
    run = gpubill.run("invoice", "run", "--period", "2026-03")
    assert "1 draft made, 0 refreshed, 0 unchanged, 1 already issued" in run.stdout
    assert "GB-2026-000003" in gpubill.run("invoice", "issue", "--period", "2026-03", "--tenant", "beta").stdout
    replacement = gpubill.json("invoice", "show", "--period", "2026-03", "--tenant", "beta", "--format", "json")
    assert (replacement["number"], replacement["status"], replacement["total"]) == ("GB-2026-000003", "issued", "43.96")
    assert [(l["credit_id"], l["amount"]) for l in lines_by_kind(replacement)["credit"]] == [("trial", "-10.00")]
    assert [(l["credit_id"], l["amount"]) for l in lines_by_kind(replacement)["concession"]] == [
        (f"CN-{cn_year}-000001", "-5.00")]
    old = gpubill.json("invoice", "show", "--number", "GB-2026-000002", "--format", "json")
    assert old["status"] == "voided" and old["total"] == "49.26"  # the voided invoice itself never changed
    assert invoiced(gpubill, "beta") == "43.96"

    listed = gpubill.json("invoice", "list", "--tenant", "beta", "--json")
    assert [(i["number"], i["status"], i["replaces"], i["replaced_by"], i["credit_notes"]) for i in listed] == [
        ("GB-2026-000002", "voided", "", "GB-2026-000003", [f"CN-{cn_year}-000001", f"CN-{cn_year}-000002"]),
        ("GB-2026-000003", "issued", "GB-2026-000002", "", [])]
    numbers = [i["number"] for i in gpubill.json("invoice", "list", "--json")]
    assert numbers == ["GB-2026-000001", "GB-2026-000002", "GB-2026-000003"]  # gap-free, both series

    # -- 7. the journal: every change of state, by whom and why
    history = gpubill.json("invoice", "history", "GB-2026-000002", "--json")
    assert [e["action"] for e in history] == ["draft_made", "issued", "credit_note", "credit_note", "voided",
                                              "draft_made", "replaced"]
    assert all(e["actor"].startswith("os:") and len(e["actor"]) > 3 for e in history)  # the OS user
    assert [e["reason"] for e in history if e["action"] == "voided"] == ["billed under the wrong contract"]
