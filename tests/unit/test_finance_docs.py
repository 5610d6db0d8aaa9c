"""docs/finance.md is true: every view is documented with every column, and its ten queries
run as the `finance` user through the gateway over a real (embedded) ClickHouse and answer
what finance would work out by hand.

The data is tests/unit/test_archive.py's March 2026 (rules: tests/e2e/rules), invoiced, then
one late minute of acme's March arrives and April is invoiced with it as an adjustment:

    acme  A800-80G hourly  ¥3600/h = ¥1/s   300 s in March → rent ¥300.00
          1000 W, tariff ¥330/kWh × PUE 1.12: 300 s × 1,000,000 mJ = 300,000,000 mJ
          → 300,000,000 × 1.12 × 330 / 3,600,000,000 = ¥30.80
    beta  RTX4090 monthly  ¥1/s, 10 % off    300 s → rent ¥300.00, discount −¥30.00
          400.5 W: 120,150,000 mJ × 1.12 × 330 / 3.6e9 = ¥12.3354 → ¥12.34
    GA2   not rented, 300 W: 90,000,000 mJ = 0.025 kWh idle, × 1.12 × 330 → ¥9.24
    late: acme, 60 s of 2026-03-10 → rent ¥60.00 + 60,000,000 mJ × 1.12 × 330 / 3.6e9 = ¥6.16
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from billing.invoicing import run_period
from tests.chdb_template import migrated_dsn
from tests.unit.test_archive import CARDS, MID, NOW, PERIOD, RULES, seed
from tests.unit.test_ch_gateway import free_port, start_gateway, stop_gateway
from warehouse import writes
from warehouse.connection import open_database
from warehouse.errors import DatabaseError

DOC = Path(__file__).parents[2] / "docs" / "finance.md"
TEXT = DOC.read_text(encoding="utf-8")
LATE_SECONDS = list(range(MID + 100, MID + 160))  # 60 s of 2026-03-10, not in the seed


@pytest.fixture(autouse=True)
def no_margin(monkeypatch):
    monkeypatch.setattr(writes, "MARGIN_S", 0)


def views(db) -> dict[str, list[str]]:
    names = [n for (n,) in db.query(
        "SELECT name FROM system.tables WHERE database = currentDatabase() AND engine = 'View' ORDER BY name")]
    return {name: [c for (c,) in db.query(
        "SELECT name FROM system.columns WHERE database = currentDatabase() AND table = {t:String} ORDER BY position",
        {"t": name})] for name in names}


def section_of(view: str) -> str:
    """The text of the doc's `### …` section whose heading names `view`."""
    match = re.search(rf"^### [^\n]*\b{view}\b[^\n]*\n(.*?)(?=^## |^### |\Z)", TEXT, re.MULTILINE | re.DOTALL)
    assert match, f"docs/finance.md has no section for {view}"
    return match.group(1)


def queries() -> list[str]:
    part = TEXT[TEXT.index("## Ten queries"):]
    return re.findall(r"```sql\n(.*?)```", part, re.DOTALL)


def test_every_view_is_documented_with_every_column(tmp_path):
    with open_database(migrated_dsn(tmp_path / 'ch')) as db:
        found = views(db)
    assert len(found) >= 9
    for view, columns in found.items():
        section = section_of(view)
        missing = [c for c in columns if f"`{c}`" not in section]
        assert not missing, f"docs/finance.md, section {view}: columns not documented: {missing}"
    documented = set(re.findall(r"^### (v_\w+)", TEXT, re.MULTILINE)) | set(re.findall(r"`(v_\w+)`:", TEXT))
    assert documented <= set(found), f"documented views that do not exist: {documented - set(found)}"


def test_the_ten_queries_read_views_only():
    found = queries()
    assert len(found) == 10
    for sql in found:
        sources = re.findall(r"\b(?:FROM|JOIN)\s+([A-Za-z_][\w.]*)", sql)
        assert sources and all(s.startswith("v_") for s in sources if s != "(SELECT"), sql


@pytest.fixture(scope="module")
def billed(tmp_path_factory):
    """March invoiced, then a late minute of acme's March, then April invoiced; then the
    database served by the gateway, and every query below runs as `finance` through it."""
    directory = tmp_path_factory.mktemp("finance")
    patch = pytest.MonkeyPatch()
    patch.setattr(writes, "MARGIN_S", 0)
    with open_database(f"chdb://{directory / 'clickhouse'}") as db:
        seed(db)
        run_period(db, RULES, PERIOD, now=NOW)
        late = dict(CARDS)
        late.pop("GR1"), late.pop("GA2")
        patch.setattr("tests.unit.test_archive.CARDS", late)
        seed(db, seconds=LATE_SECONDS, version=2)
        run_period(db, RULES, "2026-04", now=datetime(2026, 5, 10, tzinfo=UTC))
    patch.undo()
    gateway = start_gateway(directory, free_port())
    try:
        with open_database(gateway.finance_dsn, migrate=False) as finance:
            yield finance
    finally:
        stop_gateway(gateway)


def run(db, number: int) -> list[dict]:
    return db.query_dicts(queries()[number - 1])


def test_queries_answer_what_finance_works_out_by_hand(billed):
    db = billed
    by_month = {r["period"]: r for r in run(db, 1)}
    march = {r["tenant"]: r for r in run(db, 2)}
    assert set(march) == {"acme", "beta"}
    assert by_month[PERIOD]["total"] == sum(r["total"] for r in march.values())
    assert by_month[PERIOD]["invoices"] == 2
    assert march["acme"]["subtotal"] == Decimal("330.80")  # rent 300.00 + electricity 30.80
    assert march["beta"]["subtotal"] == Decimal("312.34")  # 300.00 + 12.34 (the discount comes after the subtotal)

    rent = {(r["gpu_model"], r["plan"]): r for r in run(db, 3)}
    assert rent[("A800-80G", "hourly")]["rent_net"] == Decimal("300.00")
    assert rent[("RTX4090", "monthly")]["discount"] == Decimal("-30.00")
    assert rent[("RTX4090", "monthly")]["rent_net"] == Decimal("270.00")

    live = {(r["site"], r["gpu_model"]): r for r in run(db, 4)}
    assert live[("gz-guian", "A800-80G")]["rented_seconds"] == 360  # 300 + the late 60
    assert live[("gz-guian", "A800-80G")]["rent_net"] == Decimal("360.00")
    assert live[("gz-guian", "A800-80G")]["electricity_billed"] == Decimal("36.96")  # 30.80 + 6.16
    assert live[("gz-guian", "RTX4090")]["electricity_billed"] == Decimal("12.34")

    (share,) = run(db, 5)
    assert share["rent_net"] == Decimal("630.00") and share["electricity_billed"] == Decimal("49.30")
    assert share["electricity_share"] == Decimal("0.078247")  # exact sums: (30.80 + 6.16 + 12.3354) / 630 = 0.0782467…


def test_idle_credit_and_late_queries(billed):
    db = billed
    (idle,) = run(db, 6)
    assert idle["site"] == "gz-guian" and idle["idle_kwh"] == Decimal("0.025") and idle["idle_cost"] == Decimal("9.24")

    invoices = {(r["tenant"], r["period"]): r["credit_used"] for r in db.query_dicts("SELECT * FROM v_invoices")}
    spent: dict[str, Decimal] = {}
    for row in run(db, 7):
        spent[row["tenant"]] = spent.get(row["tenant"], Decimal(0)) + row["credit_spent"]
    for tenant in ("acme", "beta"):
        assert spent.get(tenant, Decimal(0)) == sum(v for (t, _), v in invoices.items() if t == tenant)
    assert spent["acme"] >= Decimal("150.00")  # acme's onboarding credit, spendable on March only, is used

    late = [r for r in run(db, 8) if r["tenant"] == "acme"]
    assert {(r["charged_in"], r["belongs_to"]) for r in late} == {("2026-04", PERIOD)}
    assert sum(r["amount"] for r in late) == Decimal("66.16")  # 60.00 rent + 6.16 electricity

    days = {(r["tenant"], str(r["day"])): r for r in run(db, 9)}
    assert days[("acme", "2026-03-01")]["gpu_hours"] == Decimal("0.033333")  # 120 s
    assert days[("acme", "2026-03-10")]["gpu_hours"] == Decimal("0.033333")  # 60 s + the late 60 s
    assert days[("beta", "2026-03-31")]["avg_util_pct"] == Decimal("90.5")

    gaps = {r["tenant"]: r["difference"] for r in run(db, 10)}
    assert gaps == {"acme": Decimal("-60.00"), "beta": Decimal("0.00")}  # acme's late minute is April's adjustment


def test_finance_cannot_write_what_it_reads(billed):
    with pytest.raises(DatabaseError):
        billed.command("INSERT INTO invoices (number, tenant, period) VALUES ('GB-2026-999999', 'acme', '2026-03')")
    with pytest.raises(DatabaseError):
        billed.command("ALTER TABLE invoice_lines DELETE WHERE 1")
    assert billed.query("SELECT count() FROM v_invoices")[0][0] == 4  # acme and beta, March and April
    # the API's access records (issue 14): finance reads them, and cannot add or remove one
    assert billed.query("SELECT count() FROM v_api_access")[0][0] == 0  # no API served in this data
    with pytest.raises(DatabaseError):
        billed.command("INSERT INTO api_access_log (key_id, status) VALUES ('k_aaaaaaaaaaaaaaaa', 200)")
