"""One truth (issue 23, item 1): every usage report total equals its invoice, in every format.

Hypothesis draws small fleets: cards of several models on hourly or monthly plans, with or
without a contract discount, renting for a few random spans of seconds on random days and
hours of March 2026, drawing random power. They are written as rated seconds to a real
embedded ClickHouse and then:

- the usage report (daily and hourly; CSV, JSON and Parquet read back) adds up to the
  invoice's rent, discount and electricity lines before credits — to the fen and to 1e-6
  GPU-hour and kWh — and no row is further than one unit from its exact value;
- the invoice's lines are computed here independently with `fractions.Fraction`:
  rent line = round½↑(Σ seconds × price / per_s) per (model, plan, price);
  discount line = −round½↑(Σ seconds × price / per_s × pct / 100);
  electricity line = round½↑(Σ mJ × PUE / 3.6e9 × tariff);
- each report's graded IT energy (an energy row is measured here when its mJ are odd) adds up
  in every format to Σ measured mJ ÷ 3.6e9 and Σ estimated mJ ÷ 3.6e9, each rounded half up
  to 1e-6 kWh here;
- the month to date the API shows at the period's last second (billing.current_usage) is
  the same figures.

The issue's own case is a fixed example: tenant-01 of the demo, whose report said
electricity ¥0.12 / 0.398433 kWh while the invoice said ¥0.13 / 0.398434 kWh.
"""

from __future__ import annotations

import csv
import io
import itertools
from collections import defaultdict
from datetime import datetime, timezone
from decimal import Decimal as D
from fractions import Fraction as F

import orjson
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing.current_usage import current_usage
from billing.invoicing import draft_invoice
from reports.render import render_usage
from reports.usage_report import usage_report
from schemas.tables import RATED_SECONDS
from tests.chdb_template import migrated_dsn
from tests.unit.test_current_usage import RULES
from warehouse import writes
from warehouse.connection import open_database
from warehouse.writes import stamp_hours

PERIOD = "2026-03"
MARCH_1 = 1_772_294_400  # 2026-03-01T00:00:00+08:00 = 2026-02-28T16:00:00Z
MARCH_END = 1_774_972_800  # 2026-04-01T00:00:00+08:00
MARCH_S = 31 * 86_400  # 2,678,400 s: a monthly price is per these seconds
PUE, TARIFF = D("1.12"), D("0.33")
_counter = itertools.count()

# (model, plan, price, per_s): the shipped list prices, hourly per 3600 s, monthly per March's seconds
TERMS = [("RTX4090", "hourly", D("1.25"), 3600), ("A800-80G", "hourly", D("10"), 3600),
         ("RTX4090", "monthly", D("599"), MARCH_S), ("A800-80G", "monthly", D("3180"), MARCH_S)]

card = st.fixed_dictionaries({
    "terms": st.sampled_from(TERMS),
    "pct": st.sampled_from([D(0), D(0), D(10), D("12.5")]),
    "spans": st.lists(st.tuples(st.integers(0, MARCH_S - 2000), st.integers(1, 1500)), min_size=1, max_size=4),
    "power_mw": st.lists(st.integers(0, 700_000), min_size=1, max_size=5),
})
fleet = st.lists(card, min_size=1, max_size=4)


def _row(stream, tenant, gpu, at, terms, pct, mj):
    model, plan, price, per_s = terms
    values = {
        "stream": stream, "gpu_uuid": gpu, "second": datetime.fromtimestamp(at, timezone.utc), "period": PERIOD,
        "tenant": tenant, "instance": f"{gpu}-vm", "gpu_model": model, "site": "gz-guian", "node": "n1",
        "plan": plan if stream == "rent" else "", "rent_price": price if stream == "rent" else D(0),
        "rent_per_s": per_s if stream == "rent" else 0, "discount_pct": pct if stream == "rent" else D(0),
        "util_pct": D("37.5"), "energy_mj": mj, "band": "flat" if stream == "energy" else "",
        "tariff_per_kwh": TARIFF if stream == "energy" else D(0), "pue": PUE if stream == "energy" else D(0),
        "version": 1, "src_partition": 0, "src_offset": at, "rated_at": datetime(2026, 4, 1, tzinfo=timezone.utc),
        "measured": int(stream == "energy" and mj % 2 == 1),  # measured by the card's counter: odd mJ, here
    }
    return [values[c] for c in RATED_SECONDS]


def _half_up(x: F, places: int) -> D:
    """Independent rounding: floor(|x| × 10^places + 1/2), signed."""
    q = abs(x) * 10**places
    n = (q.numerator * 2 + q.denominator) // (2 * q.denominator)
    return D(-n if x < 0 else n).scaleb(-places)


def _write(db, tenant, cards):
    """Rated rows of `cards`; returns the expected invoice figures, computed here with Fractions."""
    rows, hours = [], set()
    rent, discount, seconds_by_terms = defaultdict(F), defaultdict(F), defaultdict(int)
    energy_mj = measured_mj = 0
    for i, c in enumerate(cards):
        gpu = f"{tenant}-gpu{i}"
        seconds = sorted({MARCH_1 + start + k for start, length in c["spans"] for k in range(length)})
        for n, at in enumerate(seconds):
            mj = c["power_mw"][n % len(c["power_mw"])]  # one second at P mW is P mJ
            rows.append(_row("rent", tenant, gpu, at, c["terms"], c["pct"], 0))
            rows.append(_row("energy", tenant, gpu, at, c["terms"], c["pct"], mj))
            hours.add((PERIOD, at - at % 3600))
            energy_mj += mj
            measured_mj += mj if mj % 2 == 1 else 0
        model, plan, price, per_s = c["terms"]
        key = (model, plan, F(price) * 3600 / per_s)
        seconds_by_terms[key] += len(seconds)
        rent[key] += F(price) * len(seconds) / per_s
        if c["pct"]:
            discount[key, c["pct"]] += F(price) * len(seconds) / per_s * F(c["pct"]) / 100
    db.insert("rated_seconds", rows, RATED_SECONDS)
    stamp_hours(db, hours)
    rent_total = sum((_half_up(x, 2) for x in rent.values()), D(0)) - sum((_half_up(x, 2) for x in discount.values()), D(0))
    expected = {
        "gpu_hours": sum((_half_up(F(n, 3600), 6) for n in seconds_by_terms.values()), D(0)),
        "rent": rent_total,
        "kwh": _half_up(F(energy_mj) * F(PUE) / 3_600_000_000, 6) if energy_mj else D(0),
        "electricity": _half_up(F(energy_mj) * F(PUE) * F(TARIFF) / 3_600_000_000, 2) if energy_mj else D(0),
        "measured_it_kwh": _half_up(F(measured_mj, 3_600_000_000), 6),  # before PUE
        "estimated_it_kwh": _half_up(F(energy_mj - measured_mj, 3_600_000_000), 6),
    }
    return expected


# what the invoice's lines say, then the graded IT energy (no line: its own totals)
FIGURES = ("gpu_hours", "kwh", "rent", "electricity", "measured_it_kwh", "estimated_it_kwh")


def _sums_of_csv(data: bytes) -> dict[str, D]:
    rows = list(csv.DictReader(io.StringIO(data.decode())))
    return {k: sum((D(r[k]) for r in rows), D(0)) for k in FIGURES}


def _sums_of_parquet(data: bytes) -> dict[str, D]:
    table = pq.read_table(io.BytesIO(data))
    return {k: sum((D(v) for v in table.column(k).to_pylist()), D(0)) for k in FIGURES}


def _sums_of_json(data: bytes) -> dict[str, D]:
    doc = orjson.loads(data)
    rows = {k: sum((D(r[k]) for r in doc["rows"]), D(0)) for k in FIGURES}
    assert rows == {k: D(doc["totals"][k]) for k in rows}, "the JSON's totals are its rows' sums"
    return rows


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    writes_margin, writes.MARGIN_S = writes.MARGIN_S, 0
    with open_database(migrated_dsn(tmp_path_factory.mktemp("agree") / "db")) as database:
        yield database
    writes.MARGIN_S = writes_margin


def _check(db, tenant, expected):
    invoice = draft_invoice(db, RULES, tenant, PERIOD)
    lines = {kind: [l for l in invoice.lines if l.kind == kind] for kind in ("rent", "discount", "electricity")}
    from_invoice = {
        "gpu_hours": sum((l.quantity for l in lines["rent"]), D(0)),
        "rent": sum((l.amount for l in lines["rent"] + lines["discount"]), D(0)),
        "kwh": sum((l.quantity for l in lines["electricity"]), D(0)),
        "electricity": sum((l.amount for l in lines["electricity"]), D(0)),
    }
    assert from_invoice == {k: expected[k] for k in from_invoice}, "the invoice's lines are the independently computed figures"
    for granularity in ("day", "hour"):
        report = usage_report(db, RULES, tenant, PERIOD, granularity=granularity)
        totals = report.totals
        assert {k: getattr(totals, k) for k in FIGURES} == expected, granularity
        for read, fmt in ((_sums_of_csv, "csv"), (_sums_of_json, "json"), (_sums_of_parquet, "parquet")):
            assert read(render_usage(report, fmt)) == expected, (granularity, fmt)
    now = datetime.fromtimestamp(MARCH_END - 1, timezone.utc)  # the period's last second
    mtd = current_usage(db, RULES, tenant, now=now)
    assert (mtd.gpu_hours, mtd.rent, mtd.kwh, mtd.electricity) == (
        expected["gpu_hours"], expected["rent"], expected["kwh"], expected["electricity"])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cards=fleet)
def test_every_usage_report_total_equals_its_invoice(db, cards):
    tenant = f"t{next(_counter)}"
    _check(db, tenant, _write(db, tenant, cards))


def test_rows_are_each_within_one_unit_of_their_exact_value(db):
    # three cards of one tenant, 1 s each on three days at 600 W: each row's exact electricity is
    # 600,000 mJ × 1.12 / 3.6e9 × 0.33 = ¥0.0000616 → rows 0.00; the line: 3 × that = ¥0.0001848 → 0.00
    # and 1,000 s each: per row ¥0.0616 (rounds 0.06), line ¥0.1848 → 0.18: rows 0.06 + 0.06 + 0.06 = 0.18
    tenant = "rows-near"
    cards = [{"terms": TERMS[0], "pct": D(0), "spans": [(day * 86_400, 1000)], "power_mw": [600_000]}
             for day in (1, 2, 3)]
    expected = _write(db, tenant, cards)
    assert expected["electricity"] == D("0.18")
    _check(db, tenant, expected)
    report = usage_report(db, RULES, tenant, PERIOD)
    assert [r.electricity for r in report.rows] == [D("0.06")] * 3


def test_the_issues_case_rows_that_round_down_still_add_up_to_the_invoice(db):
    # Four rows each of exact electricity ¥0.0325 (rounded alone: 0.03, four of them 0.12) add up to a
    # line of exactly ¥0.13: 0.0325 = mJ × 1.12 × 0.33 / 3.6e9 → mJ = 0.0325 × 3.6e9 / 0.3696 = 316,558,441.5…
    # so 316,558,442 mJ per row: 1,000 s at 316,558.442 mW → round per row 0.0325000…, line 0.1300000… → 0.13
    tenant = "issue-case"
    cards = [{"terms": TERMS[0], "pct": D(0), "spans": [(day * 86_400, 1000)], "power_mw": [316_558]}
             for day in (4, 5, 6, 7)]
    expected = _write(db, tenant, cards)
    # 4 × 316,558,000 mJ × 1.12 / 3.6e9 = 0.393948… kWh; × 0.33 = ¥0.1300029… → 0.13; one row alone ¥0.0325 → 0.03
    assert expected["electricity"] == D("0.13")
    _check(db, tenant, expected)
    report = usage_report(db, RULES, tenant, PERIOD)
    assert sorted(r.electricity for r in report.rows) == [D("0.03"), D("0.03"), D("0.03"), D("0.04")]
