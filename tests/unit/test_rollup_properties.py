"""Hypothesis properties of the hourly rollups on the embedded ClickHouse.

Random fleets write rated seconds in random batches — duplicates, shuffled order, energy
re-written from unallocated to a tenant by a late usage reading (a higher version), price
terms that change mid-hour (a rule reload) — while rollups run in between, some of them
killed after writing their rows and before publishing. Whatever happened:

- what the invoice run reads (rent seconds and allocated energy per tenant and price
  terms) equals an independent computation from the rows' final versions, here in Python;
- the invoices built from it equal, line by line, those built from the per-second rows
  alone, and so do usage reports and cost share;
- finance's view v_usage_by_tenant agrees with the same independent figures;
- every hour's energy keeps its grade (an energy row is measured here when its mJ are odd):
  measured mJ per tenant through the rollups and in v_energy_graded equal the same count;
- the audit's check of every published hour against the per-second rows finds nothing.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import usage.rated as rated
import usage.rollup as rollup
from billing_rules import build_invoice, load_rules
from reports.audit import rollup_differences
from reports.cost_share import cost_share
from reports.usage_report import usage_report
from schemas.tables import RATED_SECONDS
from usage.by_tenant import usage_by_tenant
from warehouse import writes
from warehouse.connection import open_database
from warehouse.writes import stamp_hours

RULES = load_rules(Path(__file__).parents[1] / "e2e" / "rules")
PERIOD = "2026-03"
T0 = 1_773_100_800  # 2026-03-10T00:00:00Z, a whole hour
CARDS = ("GPU-a", "GPU-b", "GPU-c")
RENT_TERMS = [  # (model, plan, price, divisor, discount %)
    ("RTX4090", "monthly", Decimal("599"), 31 * 86_400, Decimal(0)),
    ("RTX4090", "monthly", Decimal("649"), 31 * 86_400, Decimal(10)),  # after a rule reload
    ("A800-80G", "hourly", Decimal("10"), 3600, Decimal(0)),
]
ENERGY_TERMS = [  # (site, band, tariff, PUE)
    ("gz-guian", "valley", Decimal("0.33"), Decimal("1.12")),
    ("gz-guian", "peak", Decimal("0.65"), Decimal("1.12")),
]
NO_ENERGY = ("gz-guian", "", Decimal(0), Decimal(0))  # a rent row's site, band, tariff, PUE
NO_RENT = ("", "", Decimal(0), 0, Decimal(0), Decimal(0))  # an energy row's model, plan, price, divisor, discount, util
TABLES = ("rated_seconds", "rated_hours", "rollup_runs", "rated_writes", "card_models", "readings_usage")


class KilledRollup(Exception):
    pass


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    with open_database(f"chdb://{tmp_path_factory.mktemp('rollups')}/db") as db:
        yield db


@pytest.fixture(autouse=True)
def no_margin(monkeypatch):
    """Hours are rolled up and read from rollups as soon as they are written (no one-minute wait)."""
    monkeypatch.setattr(writes, "MARGIN_S", 0)


@st.composite
def histories(draw):
    """Row versions of (stream, card, second), in the batches they are written in, and the
    actions between batches: 'roll' (roll up what is due), 'kill' (a rollup dies before publishing)."""
    versions = []
    for card in draw(st.lists(st.sampled_from(CARDS), min_size=1, max_size=3, unique=True)):
        tenant = draw(st.sampled_from(["acme", "beta"]))
        for second in draw(st.lists(st.integers(0, 3 * 3600 - 1), min_size=1, max_size=12, unique=True)):
            at = T0 + second
            if draw(st.booleans()):
                model, plan, price, per_s, pct = draw(st.sampled_from(RENT_TERMS))
                util = Decimal(draw(st.integers(0, 1000))) / 10
                versions.append(("rent", card, at, tenant, model, plan, price, per_s, pct, util, 0, *NO_ENERGY, 1))
            if draw(st.booleans()):
                site, band, tariff, pue = draw(st.sampled_from(ENERGY_TERMS))
                mj = draw(st.integers(0, 700_000))
                versions.append(("energy", card, at, "", *NO_RENT, mj, site, band, tariff, pue, 1))
                if draw(st.booleans()):  # a late usage reading: the same energy, now the tenant's
                    versions.append(("energy", card, at, tenant, *NO_RENT, mj, site, band, tariff, pue, 2))
    writes = versions + (draw(st.lists(st.sampled_from(versions), max_size=6)) if versions else [])  # duplicates
    order = draw(st.permutations(writes))
    cuts = sorted(draw(st.lists(st.integers(0, len(order)), max_size=4)))
    batches = [order[a:b] for a, b in zip([0, *cuts], [*cuts, len(order)])]
    actions = [draw(st.sampled_from(["roll", "kill", "none"])) for _ in batches]
    return versions, batches, actions, draw(st.booleans())


def _row(v: tuple) -> list:
    stream, card, at, tenant, model, plan, price, per_s, pct, util, mj, site, band, tariff, pue, version = v
    values = {
        "stream": stream, "gpu_uuid": card, "second": datetime.fromtimestamp(at, timezone.utc), "period": PERIOD,
        "tenant": tenant, "instance": "i-1" if tenant else "", "gpu_model": model, "site": site, "node": "n1",
        "plan": plan, "rent_price": Decimal(price), "rent_per_s": per_s, "discount_pct": Decimal(pct),
        "util_pct": Decimal(util), "energy_mj": mj, "band": band, "tariff_per_kwh": Decimal(tariff),
        "pue": Decimal(pue), "version": version, "src_partition": 0, "src_offset": at,
        "rated_at": datetime.now(timezone.utc), "measured": _measured(v),
    }
    return [values[c] for c in RATED_SECONDS]


def _measured(v: tuple) -> int:
    """1 when the row's energy is graded measured: here, an energy row whose mJ are odd."""
    return int(v[0] == "energy" and v[10] % 2 == 1)


def _graded(final: list[tuple]) -> dict[str, tuple[int, int]]:
    """(energy mJ, measured mJ) per tenant ('' unallocated), counted here in Python."""
    graded: dict[str, tuple[int, int]] = {}
    for v in final:
        if v[0] == "energy":
            energy, measured = graded.get(v[3], (0, 0))
            graded[v[3]] = (energy + v[10], measured + v[10] * _measured(v))
    return graded


def _write(database, versions: list[tuple]) -> None:
    """Insert rated rows as the sink does: their hours stamped (here just after, ahead_s=0)."""
    database.insert("rated_seconds", [_row(v) for v in versions], RATED_SECONDS)
    stamp_hours(database, {(PERIOD, v[2] - v[2] % 3600) for v in versions})


def _final(versions: list[tuple]) -> list[tuple]:
    latest: dict[tuple, tuple] = {}
    for v in versions:
        key = (v[0], v[1], v[2])
        if key not in latest or v[-1] > latest[key][-1]:
            latest[key] = v
    return list(latest.values())


def _expected(final: list[tuple]) -> tuple[dict, dict]:
    """Rent seconds and allocated energy per tenant and price terms, counted here in Python."""
    rent: dict[tuple, int] = defaultdict(int)
    energy: dict[tuple, int] = defaultdict(int)
    for stream, _, _, tenant, model, plan, price, per_s, pct, _, mj, site, band, tariff, pue, _ in final:
        if stream == "rent":
            rent[(tenant, model, plan, Decimal(price), per_s, Decimal(pct))] += 1
        elif tenant:
            energy[(tenant, site, band, Decimal(tariff), Decimal(pue))] += mj
    return dict(rent), dict(energy)


def _read(database) -> tuple[dict, dict]:
    rent, energy = usage_by_tenant(database, rated.rated_source(database, RULES, PERIOD))
    return (
        {(t, u.gpu_model, u.plan, u.price, u.per_s, u.discount_pct): u.seconds for t, us in rent.items() for u in us},
        {(t, u.site, u.band, u.tariff_per_kwh, u.pue): u.energy_mj for t, us in energy.items() for u in us},
    )


def _everything_live(database, rules, period):
    """The coverage that reads every hour from the per-second rows: the reference."""
    hours = tuple(int(h) for (h,) in database.query(
        "SELECT DISTINCT toUnixTimestamp(toStartOfHour(second)) FROM rated_seconds ORDER BY 1"))
    return rated.Coverage(period, 0, hours, ())


def _reports(database) -> tuple:
    rent, energy = usage_by_tenant(database, rated.rated_source(database, RULES, PERIOD))
    invoices = {t: build_invoice(t, PERIOD, rent[t], energy[t], (), Decimal(0), Decimal("0.06")).lines
                for t in sorted(set(rent) | set(energy))}
    usage = {t: usage_report(database, RULES, t, PERIOD, now=datetime(2026, 4, 1, tzinfo=timezone.utc)).rows
             for t in ("acme", "beta")}
    return invoices, usage, cost_share(database, RULES, PERIOD)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=histories())
def test_reads_through_rollups_equal_the_per_second_rows_whatever_happened(database, monkeypatch, history):
    versions, batches, actions, roll_at_end = history
    for table in TABLES:
        database.command(f"TRUNCATE TABLE {table}")
    for batch, action in zip(batches, actions):
        if batch:
            _write(database, batch)
        if action == "roll":
            rollup.roll_up(database, RULES)
        elif action == "kill":
            with monkeypatch.context() as patch, contextlib.suppress(KilledRollup):  # nothing due: nothing to kill
                patch.setattr(rollup, "_pause_before_publish", _die)
                rollup.roll_up(database, RULES)
    if roll_at_end:
        rollup.roll_up(database, RULES)

    assert _read(database) == _expected(_final(versions))
    cov = rated.coverage(database, RULES, PERIOD)
    if roll_at_end:  # and so the reads above came from rollups alone
        assert cov.live == () and cov.rolled == len({(v[2] // 3600) for v in versions})
    assert rollup_differences(database, RULES, cov) == []
    through_rollups = _reports(database)
    with monkeypatch.context() as patch:
        patch.setattr(rated, "coverage", _everything_live)
        assert _reports(database) == through_rollups

    rent, energy = _expected(_final(versions))
    view = {(t, int(s), int(mj)) for t, s, mj in database.query(
        "SELECT tenant, sum(rented_seconds), sum(energy_mj_total) FROM v_usage_by_tenant WHERE period = {p:String} "
        "AND tenant != '' GROUP BY tenant", {"p": PERIOD})}
    source, params = rated.rated_source(database, RULES, PERIOD)
    graded = {t: (int(e), int(m)) for t, e, m in database.query(
        f"SELECT tenant, sum(energy_mj), sum(measured_mj) FROM {source} WHERE stream = 'energy' GROUP BY tenant",
        params)}
    assert graded == _graded(_final(versions))
    assert {t: (int(e), int(m)) for t, e, m in database.query(
        "SELECT tenant, sum(energy_mj), sum(measured_mj) FROM v_energy_graded GROUP BY tenant")} == graded
    tenants = {k[0] for k in rent} | {k[0] for k in energy}
    assert view == {(t, sum(n for k, n in rent.items() if k[0] == t), sum(mj for k, mj in energy.items() if k[0] == t))
                    for t in tenants}


def _die() -> None:
    raise KilledRollup("killed between writing the hour's rows and publishing them")


def test_a_killed_rollup_leaves_rows_nobody_reads_and_the_next_one_deletes_them(database, monkeypatch):
    for table in TABLES:
        database.command(f"TRUNCATE TABLE {table}")
    rows = [("rent", "GPU-a", T0 + s, "acme", *RENT_TERMS[0], Decimal(50), 0, *NO_ENERGY, 1) for s in range(10)]
    _write(database, rows)
    with monkeypatch.context() as patch:
        patch.setattr(rollup, "_pause_before_publish", _die)
        with pytest.raises(KilledRollup):
            rollup.roll_up(database, RULES)
    assert database.query("SELECT count() FROM rated_hours")[0][0] == 1  # written, unpublished
    assert rated.coverage(database, RULES, PERIOD).live == (T0,)  # so the hour is read per second
    assert _read(database)[0] == {("acme", *RENT_TERMS[0]): 10}

    first = rollup.roll_up(database, RULES)
    assert first.hours == [(PERIOD, T0)]
    assert rated.coverage(database, RULES, PERIOD).live == ()
    late = ("rent", "GPU-a", T0 + 99, "acme", *RENT_TERMS[0], Decimal(50), 0, *NO_ENERGY, 1)
    _write(database, [late])
    assert rated.coverage(database, RULES, PERIOD).live == (T0,)  # written since: stale
    assert _read(database)[0] == {("acme", *RENT_TERMS[0]): 11}
    rollup.roll_up(database, RULES)
    generations = database.query("SELECT DISTINCT generation FROM rated_hours")
    assert len(generations) == 1  # the killed one's and the first one's rows are gone
    assert _read(database)[0] == {("acme", *RENT_TERMS[0]): 11}
    assert rollup.roll_up(database, RULES).hours == []  # nothing written since: nothing to do
