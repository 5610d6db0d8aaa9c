"""Re-rating a period end to end on the real broker and ClickHouse (issue 25): a month invoiced,
then a price correction effective in the middle of it and a card's two hours reattributed to
another tenant; the dry run shows the exact differences, the apply voids with credit notes and
issues the replacements, exact to the fen; a second apply changes nothing; `gpubill verify-log`
(a fresh replay of the corrected log into an empty database) agrees with what is billed.

The readings (written here, replayed through `gpubill replay` and the worker), 16 March 2026 UTC:
- GA1, an A800 of acme (hourly, ¥3600/h = ¥1/s; acme has a ¥150 onboarding credit for March),
  10:00–13:00, 1,000 W;
- GB1, an A800 of beta (no A800 contract: hourly too), 10:00–11:00, 500 W.
Electricity: ¥330/kWh flat, PUE 1.12 (tests/e2e/rules); VAT 6 %.

The corrections: A800 at ¥1800/h (¥0.5/s) from 18:30 Shanghai time = 10:30 UTC, inside the first
hour (split from its per-second rows); GA1's 11:00–13:00 belongs to beta (a reattribution).
"""

from __future__ import annotations

import json
import shutil
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from tests.e2e.conftest import TEST_RULES
from tests.unit.test_invoice_lifecycle import fen

pytestmark = pytest.mark.e2e

VAT = Fraction(6, 100)
KWH = Fraction(1, 3_600_000)  # kWh per joule
ELECTRICITY = Fraction(112, 100) * 330  # ¥ per kWh of IT energy


LATE = range(7200, 7210)  # GA1's seconds 12:00:00–12:00:09 arrive after the correction


def readings(path: Path, late: bool = False) -> None:
    lines = []
    for gpu, tenant, instance, hours, watts in (("GA1", "acme", "i-acme-1", 3, 1000), ("GB1", "beta", "i-beta-1", 1, 500)):
        for s in range(hours * 3600):
            if late != (gpu == "GA1" and s in LATE):
                continue
            ts = f"2026-03-16T{10 + s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}Z"
            lines.append(json.dumps({"kind": "usage", "event_id": f"{gpu}-u-{s}", "ts": ts, "site": "gz-guian",
                                     "node": "gz-n1", "gpu_uuid": gpu, "gpu_model": "A800-80G", "tenant": tenant,
                                     "instance": instance, "util_pct": 80, "mem_used_mib": 1024}))
            lines.append(json.dumps({"kind": "power", "event_id": f"{gpu}-p-{s}", "ts": ts, "site": "gz-guian",
                                     "node": "gz-n1", "gpu_uuid": gpu, "power_w": watts}))
    path.write_text("\n".join(lines) + "\n")


def energy(seconds: int, watts: int) -> Fraction:
    return seconds * watts * KWH * ELECTRICITY


def corrected_rules(directory: Path) -> Path:
    shutil.copytree(TEST_RULES, directory)
    catalog = directory / "catalog.toml"
    catalog.write_text(catalog.read_text() + """
[[model.A800-80G.price]]
effective_from = 2026-03-16T18:30:00
monthly = 3180.00
hourly = 1800.00                  # the corrected rate: ¥0.5 per second
""")
    return directory


def total(charges: Fraction, credit: Fraction = Fraction(0)) -> Decimal:
    net = fen(charges) - fen(credit)
    return net + fen(Fraction(net) * VAT)


def test_a_price_correction_and_a_reattribution_are_previewed_applied_and_proved_by_the_log(gpubill, tmp_path):
    readings(tmp_path / "march.ndjson")
    gpubill.run("replay", str(tmp_path / "march.ndjson"))
    gpubill.run("worker", "--drain")
    gpubill.run("invoice", "run", "--period", "2026-03")
    before = {i["tenant"]: i for i in gpubill.json("invoice", "list", "--period", "2026-03", "--json")}
    # acme: 10,790 s × ¥1 = 10,790.00 (10 s of GA1 arrive late); 10,790 s × 1 kW → × 1.12 × 330; less the credit
    acme_old = total(Fraction(10_790) + energy(10_790, 1000), Fraction(150))
    # beta: 3,600 s × ¥1 = 3,600.00; 0.5 kWh → 184.80
    beta_old = total(Fraction(3600) + energy(3600, 500))
    assert {t: Decimal(i["total"]) for t, i in before.items()} == {"acme": acme_old, "beta": beta_old}

    gpubill.env["GPUBILL_RULES"] = str(corrected_rules(tmp_path / "rules"))
    gpubill.run("correct", "reattribute", "--gpu", "GA1", "--from", "2026-03-16T11:00:00Z", "--to",
                "2026-03-16T13:00:00Z", "--tenant", "beta", "--instance", "i-beta-2", "--reason",
                "GA1 was moved to beta's pool at 11:00 (ticket 4711)")
    gpubill.run("corrections", "sync")

    # -- the dry run: old and new, line by line; nothing changes
    # acme: GA1 10:00–10:30 at ¥1 = 1,800.00, 10:30–11:00 at ¥0.5 = 900.00; 1 kWh = 369.60; credit 150.00
    acme_new = total(Fraction(1800) + Fraction(900) + energy(3600, 1000), Fraction(150))
    # beta: GB1 1,800.00 + 900.00; GA1 11:00–13:00 (less the 10 late seconds) at ¥0.5 = 3,595.00;
    # GB1's 0.5 kWh (184.80) and GA1's 7,190 s at 1 kW
    beta_new = total(Fraction(1800) + Fraction(900) + Fraction(7190, 2) + energy(3600, 500) + energy(7190, 1000))
    preview = gpubill.json("rerate", "--period", "2026-03", "--dry-run", "--json")
    got = {t["tenant"]: t for t in preview["tenants"]}
    assert {t: (Decimal(x["old_total"]), Decimal(x["new_total"]), Decimal(x["difference"])) for t, x in got.items()} == {
        "acme": (acme_old, acme_new, acme_new - acme_old), "beta": (beta_old, beta_new, beta_new - beta_old)}
    rent = {t: sorted(((ln["old_amount"], ln["new_amount"]) for ln in x["lines"] if ln["kind"] == "rent"), key=str)
            for t, x in got.items()}
    assert rent == {"acme": sorted([("10790.00", "1800.00"), (None, "900.00")], key=str),
                    "beta": sorted([("3600.00", "1800.00"), (None, "4495.00")], key=str)}  # ¥0.5/s: 900 s + 7,190 s
    assert gpubill.json("invoice", "list", "--period", "2026-03", "--json") == list(before.values())  # unchanged

    # -- the apply: void with a credit note (reason rerate) and a replacement, to the fen
    applied = gpubill.json("rerate", "--period", "2026-03", "--apply", "--json")
    assert [v["invoice"] for v in applied["applied"]["voided"]] == [before["acme"]["number"], before["beta"]["number"]]
    notes = gpubill.json("credit-note", "list", "--period", "2026-03", "--json")
    assert {(n["invoice"], n["reason"], Decimal(n["total"])) for n in notes} == {
        (before["acme"]["number"], "rerate", acme_old), (before["beta"]["number"], "rerate", beta_old)}
    after = {i["tenant"]: i for i in gpubill.json("invoice", "list", "--period", "2026-03", "--json")
             if i["status"] == "issued"}
    assert {t: (Decimal(i["total"]), i["replaces"]) for t, i in after.items()} == {
        "acme": (acme_new, before["acme"]["number"]), "beta": (beta_new, before["beta"]["number"])}

    # -- a second apply changes nothing; the audit (raw readings, corrected) agrees with the rated data
    again = gpubill.json("rerate", "--period", "2026-03", "--apply", "--json")
    assert (again["applied"]["generation"], again["applied"]["voided"], again["applied"]["issued"]) == (0, [], [])
    assert all(t["difference"] == "0.00" for t in again["tenants"])
    assert "audit of 2026-03: clean" in gpubill.run("audit", "--period", "2026-03").stdout

    # -- the log proves the projections: a fresh replay of readings and corrections into an empty database
    proved = gpubill.run("verify-log", "--period", "2026-03", check=False)
    assert proved.returncode == 0, proved.stdout + proved.stderr

    # -- a reading that arrives after a correction covering its second is rated as corrected: GA1's
    # late seconds are beta's (10 s at ¥0.5 = 5.00, 10 kJ): the audit of raw (corrected) and rated agrees
    readings(tmp_path / "late.ndjson", late=True)
    gpubill.run("replay", str(tmp_path / "late.ndjson"))
    gpubill.run("worker", "--drain")
    assert "audit of 2026-03: clean" in gpubill.run("audit", "--period", "2026-03").stdout
    late = {t["tenant"]: t for t in gpubill.json("rerate", "--period", "2026-03", "--dry-run", "--json")["tenants"]}
    assert Decimal(late["acme"]["difference"]) == 0
    assert Decimal(late["beta"]["new_total"]) == total(
        Fraction(1800) + Fraction(900) + Fraction(3600) + energy(3600, 500) + energy(7200, 1000))
