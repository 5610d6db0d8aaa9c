"""Nothing plans without the corrections on the log (issue 36, item 3), on the real broker: with no
worker running and no `gpubill corrections sync`, `invoice run`, `rerate --dry-run`, `audit`,
`verify-log` and a `worker --drain` with nothing to drain each take gpu.corrections.v1 to its end
first, and a period's first invoices apply the corrections stored.

Before: the invoice run invoiced March without a reattribution just produced (and, stored,
the rated data would still not have applied it), the dry run previewed March without it (every
difference 0.00), the audit found the month clean, and a drain with nothing to drain printed
"nothing to drain" and left the corrections on the topic.

The readings are tests/e2e/fixtures/readings_part1.ndjson: GA1 is an A800 of acme, on no A800
contract, so hourly at ¥3600/h = ¥1 per second (tests/e2e/rules/catalog.toml).
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from tests.e2e.conftest import FIXTURES
from tests.e2e.test_corrections_sync_e2e import rent_difference

pytestmark = pytest.mark.e2e

MOVE = ("--gpu", "GA1", "--from", "2026-03-31T15:58:00Z", "--to", "2026-03-31T15:59:00Z")  # 23:58 in Shanghai
SECOND = ("--gpu", "GA1", "--from", "2026-03-31T15:59:00Z", "--to", "2026-03-31T16:00:00Z")  # 23:59, March's last


def stored(gpubill) -> list[str]:
    from warehouse.connection import open_database

    with open_database(gpubill.env["GPUBILL_CLICKHOUSE"]) as db:
        return sorted(kind for (kind,) in db.query("SELECT kind FROM corrections"))


def invoice(gpubill, tenant: str) -> dict:
    return json.loads(gpubill.run("invoice", "show", "--period", "2026-03", "--tenant", tenant).stdout)


def a800_rent(document: dict) -> tuple[str, str] | None:
    """(hours, amount) of the invoice's A800 rent line; None without one."""
    lines = [(ln["quantity"], ln["amount"]) for ln in document["lines"]
             if ln["kind"] == "rent" and ln.get("gpu_model") == "A800-80G"]
    return lines[0] if lines else None


def rent_change(tenant: dict) -> Decimal:
    """new − old of a tenant's rent lines in a dry run's JSON."""
    return sum((Decimal(ln["new_amount"] or 0) - Decimal(ln["old_amount"] or 0) for ln in tenant["lines"]
                if ln["kind"] == "rent"), Decimal(0))


def test_invoice_run_rerate_audit_verify_log_and_an_idle_drain_take_the_log_of_corrections_first(gpubill):
    gpubill.run("replay", str(FIXTURES / "readings_part1.ndjson"))
    gpubill.run("worker", "--drain")  # its sync finds an empty log; no worker runs from here on
    gpubill.run("correct", "reattribute", *MOVE, "--tenant", "beta", "--reason", "e2e: GA1 was beta's at 23:58")

    # the invoice run takes the log first, and the period's first invoices apply what it stored
    invoiced = gpubill.run("invoice", "run", "--period", "2026-03")
    assert "corrections taken from the log first: 1 stored" in invoiced.stderr
    assert stored(gpubill) == ["reattribute"]
    acme, beta = (invoice(gpubill, tenant) for tenant in ("acme", "beta"))
    # Before: acme was invoiced GA1's two March minutes (15:58 and 15:59 UTC), 120 s × ¥1 = ¥120.00,
    # and beta no A800 at all. Now the first minute is beta's: 60 s × ¥1 = ¥60.00 each.
    assert a800_rent(acme) == a800_rent(beta) == ("0.016667", "60.00")
    # beta: A800 60.00 + RTX 4090 60.00 − its 10 % discount 6.00 + electricity 8.63 (its own 2.47,
    # as invoiced without the move, + GA1's minute: 60 s × 1 kW × PUE 1.12 = 0.018667 kWh × ¥330 =
    # ¥6.16) = 122.63 net; VAT 6 % 7.3578 → 7.36; total 129.99 (before: 59.86)
    assert beta["total"] == "129.99", beta

    # the second minute (23:59 in Shanghai), after the invoices: the dry run stores it first
    gpubill.run("correct", "reattribute", *SECOND, "--tenant", "beta", "--reason", "e2e: and at 23:59")
    preview = gpubill.run("rerate", "--period", "2026-03", "--dry-run", "--json")
    tenants = {t["tenant"]: t for t in json.loads(preview.stdout)["tenants"]}
    # GA1's minute moves: 60 s × ¥1 = ¥60.00 of rent from acme to beta
    assert (rent_change(tenants["acme"]), rent_change(tenants["beta"])) == (Decimal("-60.00"), Decimal("60.00"))
    assert "corrections taken from the log first: 1 stored" in preview.stderr
    assert stored(gpubill) == ["reattribute", "reattribute"]

    # a drain with nothing to drain still takes the log to its end
    gpubill.run("correct", "void", "--gpu", "GR1", "--from", "2026-03-31T15:59:00Z", "--to", "2026-03-31T15:59:30Z",
                "--stream", "power", "--reason", "e2e: a meter fault")
    drained = gpubill.run("worker", "--drain")
    assert "nothing to drain" in drained.stdout
    assert "corrections: 1 stored now (3 messages on the log)" in drained.stdout
    assert stored(gpubill) == ["reattribute", "reattribute", "void_readings"]

    # the audit applies what is on the log: the rated data (not re-rated yet) differs by GA1's minute
    gpubill.run("correct", "void", "--gpu", "GA1", "--from", "2026-03-31T15:50:00Z", "--to", "2026-03-31T15:50:10Z",
                "--stream", "usage", "--reason", "e2e: a double count")
    audited = gpubill.run("audit", "--period", "2026-03", check=False)
    assert audited.returncode == 1
    assert rent_difference(audited.stdout, "beta") == -60  # rated 60 s less than the corrected raw side
    assert "corrections taken from the log first: 1 stored" in audited.stderr
    assert stored(gpubill) == ["reattribute", "reattribute", "void_readings", "void_readings"]

    # verify-log's live side holds every correction on the log before it is compared
    gpubill.run("correct", "reattribute", "--gpu", "GA1", "--from", "2026-03-31T15:51:00Z", "--to",
                "2026-03-31T15:51:10Z", "--tenant", "beta", "--reason", "e2e: one more")
    proved = gpubill.run("verify-log", "--period", "2026-03", check=False)
    assert "corrections taken from the log first: 1 stored" in proved.stderr, proved.stderr
    assert stored(gpubill) == ["reattribute", "reattribute", "reattribute", "void_readings", "void_readings"]
