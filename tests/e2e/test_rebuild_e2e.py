"""The books on the log, end to end (issue 37): money facts of every kind made through the command
line on a real broker and chDB — tenants with buyer details (one updated, one suspended and
resumed), a top-up, a budget, drafts under manual review (late data refreshing one), issue, a
goodwill credit note, a void and its replacement, a correction re-rated by `rerate --apply`, two
API keys (one revoked) — then the database directory deleted and `gpubill rebuild --yes`: every
listing and every document in every format, PDF bytes included, is what it was.

The readings are tests/e2e/fixtures' (figures worked out in test_pipeline_e2e.py and
test_invoice_lifecycle_e2e.py): March of acme (GA1, A800) and beta (GR1, RTX4090), late March
data of acme and April of both in part 3. April stays uninvoiced, so the balances carry an
estimate made from rated data — the rated data the rebuild's pipeline makes again.

beta's March after the correction (GA1's last minute, 60 s at 1,000 W, is beta's):
    A800 rent 60 s × ¥1 = 60.00; RTX4090 rent 60.00; electricity (60 s × 1000 W + 60 s × 400.5 W)
    = 84,030 J = 0.023342 kWh × 1.12 × ¥330 = 8.6271 → 8.63; discount −6.00; trial credit −10.00;
    the goodwill note carried as a concession −5.00: net 107.63, VAT 6.4578 → 6.46, total 114.09
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from tests.e2e.conftest import FIXTURES
from tests.e2e.test_invoice_lifecycle_e2e import manual_review
from tests.e2e.test_tenants_e2e import one_line_error

pytestmark = pytest.mark.e2e

USCC = "91350100M000100Y43"  # a 统一社会信用代码 whose check character holds (tests/unit/test_tenant_buyer.py)


def make_the_books(gpubill) -> None:
    """Every kind of money fact, each command a process of its own as a user runs it."""
    manual_review(gpubill)
    gpubill.run("tenant", "add", "acme", "--name", "Acme", "--legal-name", "Acme Computing Ltd.", "--tax-id", USCC,
                "--address", "1 Harbour Road, Fuzhou", "--email", "billing@acme.example", "--note", "ticket 1")
    gpubill.run("tenant", "add", "beta", "--name", "Beta 有限公司", "--legal-name", "贝塔智算有限公司",
                "--tax-id", "DE-811907980", "--address", "上海市浦东新区世纪大道 100 号", "--email", "ap@beta.example")
    gpubill.run("tenant", "update", "acme", "--address", "9 Minjiang Avenue, Fuzhou", "--note", "moved (ticket 2)")
    gpubill.run("tenant", "suspend", "beta", "--note", "ticket 3")
    gpubill.run("tenant", "resume", "beta")
    gpubill.run("balance", "topup", "--tenant", "beta", "--amount", "100", "--ref", "pay-1", "--note", "wire 0042")
    gpubill.run("budget", "set", "--tenant", "acme", "--amount", "500", "--note", "plan for Q2")
    gpubill.run("key", "create", "--tenant", "acme", "--label", "acme dashboard", "--json")
    revoked = json.loads(gpubill.run("key", "create", "--role", "operator", "--label", "finance 财务", "--json").stdout)
    gpubill.run("key", "revoke", revoked["id"])

    # -- manual review: two drafts; late March data refreshes acme's; both issued
    gpubill.run("replay", str(FIXTURES / "readings_part1.ndjson"))
    gpubill.run("replay", str(FIXTURES / "readings_part2.ndjson"))
    gpubill.run("worker", "--drain")
    assert "2 drafts made" in gpubill.run("invoice", "run", "--period", "2026-03").stdout
    gpubill.run("replay", str(FIXTURES / "readings_part3.ndjson"))
    gpubill.run("worker", "--drain")
    assert "0 drafts made, 1 refreshed, 1 unchanged" in gpubill.run("invoice", "run", "--period", "2026-03").stdout
    issued = gpubill.run("invoice", "issue", "--period", "2026-03").stdout
    assert "GB-2026-000001" in issued and "GB-2026-000002" in issued

    # -- a goodwill credit note on beta's, its void (a credit note for the rest) and the replacement
    gpubill.run("credit-note", "create", "--invoice", "GB-2026-000002", "--reason", "goodwill", "--line", "1=5.00",
                "--note", "outage on 3 March")
    gpubill.run("invoice", "void", "GB-2026-000002", "--reason", "billed under the wrong contract")
    assert "1 draft made" in gpubill.run("invoice", "run", "--period", "2026-03").stdout
    assert "GB-2026-000003" in gpubill.run("invoice", "issue", "--period", "2026-03", "--tenant", "beta").stdout

    # -- a correction re-rated: GA1's last March minute was beta's. Both invoices change: voided (acme's
    #   total stays 0.00, so without a credit note) and replaced by drafts; beta's issued, acme's left a draft
    gpubill.run("correct", "reattribute", "--gpu", "GA1", "--from", "2026-03-31T15:58:00Z", "--to",
                "2026-03-31T15:59:00Z", "--tenant", "beta", "--instance", "i-beta-9", "--reason", "ticket 4711")
    applied = gpubill.json("rerate", "--period", "2026-03", "--apply", "--json")["applied"]
    assert sorted(v["invoice"] for v in applied["voided"]) == ["GB-2026-000001", "GB-2026-000003"]
    assert "GB-2026-000004" in gpubill.run("invoice", "issue", "--period", "2026-03", "--tenant", "beta").stdout


def capture(gpubill, folder: str) -> dict[str, object]:
    """What a user reads of the books: the listings, and every invoice (drafts too) and credit note in
    every format, PDFs as bytes (written under `folder`). Read in two processes (Gpubill.many)."""
    pdfs = gpubill.cwd / folder
    pdfs.mkdir()
    lists = {
        "invoice list": ("invoice", "list", "--json"),
        "credit-note list": ("credit-note", "list", "--json"),
        "balance show": ("balance", "show", "--json"),
        "key list": ("key", "list", "--json"),
        "tenant list": ("tenant", "list", "--format", "json"),
    }
    seen: dict[str, object] = {}
    for name, done in zip(lists, gpubill.many(*lists.values()), strict=True):
        assert done.returncode == 0, (name, done.stdout, done.stderr)
        seen[name] = json.loads(done.stdout)
    documents: dict[str, tuple[str, ...]] = {}
    for invoice in seen["invoice list"]:
        ref = invoice["number"] or invoice["id"]  # a draft by its id
        documents |= {f"invoice {ref} json": ("invoice", "show", "--number", ref, "--format", "json"),
                      f"invoice {ref} csv": ("invoice", "show", "--number", ref, "--format", "csv"),
                      f"invoice {ref} pdf": ("invoice", "show", "--number", ref, "--format", "pdf", "--lang", "zh-CN",
                                             "--out", str(pdfs / f"{ref}.pdf")),
                      f"invoice {ref} history": ("invoice", "history", ref, "--json")}
    for note in seen["credit-note list"]:
        ref = note["number"]
        documents |= {f"credit note {ref} json": ("credit-note", "show", ref, "--format", "json"),
                      f"credit note {ref} csv": ("credit-note", "show", ref, "--format", "csv"),
                      f"credit note {ref} pdf": ("credit-note", "show", ref, "--format", "pdf",
                                                 "--out", str(pdfs / f"{ref}.pdf"))}
    for (name, args), done in zip(documents.items(), gpubill.many(*documents.values()), strict=True):
        assert done.returncode == 0, (name, done.stdout, done.stderr)
        if args[-2] == "--out":
            seen[name] = Path(args[-1]).read_bytes()
        elif "json" in args:
            seen[name] = json.loads(done.stdout)
        else:
            seen[name] = done.stdout
    return seen


def assert_the_books_hold_what_was_done(seen: dict[str, object]) -> None:
    """The capture is of the scenario, not of an empty database: what each step left, independently known."""
    listed = [(i["number"] or "draft", i["tenant"], i["status"], i["replaces"], i["replaced_by"][:6], i["credit_notes"],
               i["total"]) for i in seen["invoice list"]]
    year = datetime.now(ZoneInfo("Asia/Shanghai")).year  # credit notes are numbered by their issue year
    cn1, cn2, cn3 = (f"CN-{year}-00000{n}" for n in (1, 2, 3))
    assert listed == [
        ("GB-2026-000001", "acme", "voided", "", "DRAFT-", [], "0.00"),
        ("GB-2026-000002", "beta", "voided", "", "GB-202", [cn1, cn2], "49.26"),
        ("GB-2026-000003", "beta", "voided", "GB-2026-000002", "GB-202", [cn3], "43.96"),
        ("GB-2026-000004", "beta", "issued", "GB-2026-000003", "", [], "114.09"),  # the module docstring's sum
        ("draft", "acme", "draft", "GB-2026-000001", "", [], "0.00"),
    ]
    assert [(n["number"], n["reason"], n["total"]) for n in seen["credit-note list"]] == [
        (cn1, "goodwill", "5.30"), (cn2, "void", "43.96"), (cn3, "rerate", "43.96")]
    balances = {b["tenant"]: b for b in seen["balance show"]}
    assert (balances["beta"]["top_ups"], balances["acme"]["budget"]) == ("100.00", "500.00")
    assert [e["period"] for e in balances["beta"]["estimates"] if e["closed"]] == ["2026-04"]  # from rated data
    assert sorted((k["label"], k["tenant"], k["state"]) for k in seen["key list"]) == [
        ("acme dashboard", "acme", "active"), ("finance 财务", "", "revoked")]
    tenants = {t["tenant"]: t for t in seen["tenant list"]}
    assert (tenants["acme"]["address"], tenants["acme"]["tax_id"]) == ("9 Minjiang Avenue, Fuzhou", USCC)
    assert (tenants["beta"]["status"], tenants["beta"]["legal_name"]) == ("active", "贝塔智算有限公司")
    pdfs = [value for value in seen.values() if isinstance(value, bytes)]
    assert len(pdfs) == 8 and all(pdf.startswith(b"%PDF-") for pdf in pdfs)


def capture_now(gpubill, folder: str) -> dict[str, object]:
    """`capture`, with `balance show`'s "at" taken out: the clock when the command ran (billing/balances.py
    computes the balance as of now), not a fact of the books — held here to the time it was read."""
    read_from = datetime.now(timezone.utc)
    seen = capture(gpubill, folder)
    read_to = datetime.now(timezone.utc)
    for row in seen["balance show"]:
        assert read_from - timedelta(milliseconds=1) <= datetime.fromisoformat(row.pop("at")) <= read_to
    return seen


def test_a_lost_database_is_rebuilt_from_the_log_to_the_byte(gpubill, tmp_path):
    make_the_books(gpubill)
    before = capture_now(gpubill, "before")
    assert_the_books_hold_what_was_done(before)

    # -- nothing runs (every command above has exited); the database is lost, the log is not
    shutil.rmtree(tmp_path / "clickhouse")
    rebuilt = gpubill.run("rebuild", "--yes")
    # the correction is taken after the readings it names (not dead-lettered), and March re-rated again
    assert "1 correction stored" in rebuilt.stdout and "2026-03: priced again under rules" in rebuilt.stdout, \
        rebuilt.stdout
    after = capture_now(gpubill, "after")

    assert list(after) == list(before)  # the same documents, in the same order
    assert [name for name in before if after[name] != before[name]] == []


def test_a_rebuild_refuses_a_database_that_holds_anything_and_stands_by_into_another(gpubill, tmp_path):
    gpubill.run("tenant", "add", "beta", "--name", "Beta", "--legal-name", "Beta Ltd.")
    gpubill.run("replay", str(FIXTURES / "readings_part1.ndjson"))
    gpubill.run("worker", "--drain")
    gpubill.run("invoice", "run", "--period", "2026-03")
    live = gpubill.run("invoice", "list", "--json").stdout
    assert [i["number"] for i in json.loads(live)] == ["GB-2026-000001", "GB-2026-000002"]

    refused = one_line_error(gpubill.run("rebuild", "--yes", check=False))
    assert "is not empty (1 row in tenants, 2 rows in invoices" in refused, refused

    # a standby of the books while the first database is intact (and still the configured one)
    standby = f"chdb://{tmp_path / 'standby'}"
    done = gpubill.run("rebuild", "--yes", "--books-only", "--into", standby)
    assert "books:" in done.stdout and "rebuilt" not in done.stdout, done.stdout  # the usage left out
    assert gpubill.run("invoice", "list", "--json").stdout == live  # the first, untouched
    gpubill.env["GPUBILL_CLICKHOUSE"] = standby
    assert gpubill.run("invoice", "list", "--json").stdout == live
    assert "is not empty" in one_line_error(gpubill.run("rebuild", "--yes", "--into", standby, check=False))


def test_a_period_invoiced_under_rules_since_changed_is_rebuilt_priced_as_it_was(gpubill, tmp_path):
    """The rule files are on the books: a rebuild under edited rules (the site's tariff doubled since)
    prices the invoiced March again under the revision its invoices name — the usage report, read
    from the rated data, is the live one byte for byte; under today's rules it would not be."""
    gpubill.run("tenant", "add", "beta", "--name", "Beta", "--legal-name", "Beta Ltd.")
    gpubill.run("replay", str(FIXTURES / "readings_part1.ndjson"))
    gpubill.run("worker", "--drain")
    gpubill.run("invoice", "run", "--period", "2026-03")
    revision = json.loads(gpubill.run("invoice", "list", "--json").stdout)[0]["rules_revision"]
    gpubill.run("report", "usage", "--tenant", "beta", "--period", "2026-03", "--format", "json",
                "--out", str(tmp_path / "live.json"))

    edited = tmp_path / "rules-now"
    shutil.copytree(gpubill.env["GPUBILL_RULES"], edited)
    sites = edited / "sites.toml"
    assert sites.read_text(encoding="utf-8").count("price_per_kwh = 330.00") == 1
    sites.write_text(sites.read_text(encoding="utf-8").replace("price_per_kwh = 330.00", "price_per_kwh = 660.00"),
                     encoding="utf-8")
    gpubill.env["GPUBILL_RULES"] = str(edited)
    moved = f"chdb://{tmp_path / 'moved'}"
    done = gpubill.run("rebuild", "--yes", "--into", moved)
    assert f"2026-03: priced again under rules {revision}" in done.stdout, done.stdout
    gpubill.env["GPUBILL_CLICKHOUSE"] = moved
    gpubill.run("report", "usage", "--tenant", "beta", "--period", "2026-03", "--format", "json",
                "--out", str(tmp_path / "rebuilt.json"))
    live, rebuilt = (json.loads((tmp_path / name).read_bytes()) for name in ("live.json", "rebuilt.json"))
    live.pop("generated_at"), rebuilt.pop("generated_at")  # when each report was made: not a figure
    assert rebuilt == live
    # beta's electricity: 0.007476 kWh × ¥330/kWh = ¥2.47 under the tariff that priced March (¥660: ¥4.93)
    assert [row["electricity"] for row in live["rows"]] == ["2.47"]
