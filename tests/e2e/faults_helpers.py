"""Readings with a known layout for the fault suite, and the figures they must bill to.

Everything here is computed independently of the product: power is quantized to whole
milliwatts half up with integer arithmetic, money with Fractions, rounding half up to
the fen by hand. The test rules (tests/e2e/rules) price May 2026 (31 days) as:

    acme  A800-80G hourly   ¥3600/h                    = ¥1 per second
    beta  RTX4090 monthly   ¥2,678,400 / 2,678,400 s   = ¥1 per second, contract discount 10 %
    gz-guian  PUE 1.12, ¥330/kWh flat; 1 kWh = 3,600,000,000 mJ; VAT 6 %
    credits: the ¥10 trial for every registered tenant (test_faults.py registers both);
             acme's onboarding credit expired with 2026-03

so rent in yuan is the number of rented seconds and electricity is
mJ × 1.12 × 330 / 3.6e9.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

PERIOD = "2026-05"
START = datetime(2026, 5, 12, 1, 0, 0, tzinfo=timezone.utc)  # 09:00 in Shanghai: well inside May
PUE, TARIFF, MJ_PER_KWH, VAT = Fraction(112, 100), Fraction(330), 3_600_000_000, Fraction(6, 100)
TRIAL = Fraction(10)


def fen(x: Fraction) -> str:
    """Half up to two decimals, written independently of billing_rules.round_fen."""
    if x < 0:
        return "-" + fen(-x)
    cents = x * 100
    whole = cents.numerator // cents.denominator
    if cents - whole >= Fraction(1, 2):
        whole += 1
    return f"{whole // 100}.{whole % 100:02d}"


def fen_value(x: Fraction) -> Fraction:
    return Fraction(Decimal(fen(x)))


def milliwatts(watts: str) -> int:
    """'300.1235' W → 300124 mW (half up), with integers only."""
    exact = Fraction(Decimal(watts)) * 1000
    floor = exact.numerator // exact.denominator
    return floor + (1 if exact - floor >= Fraction(1, 2) else 0)


@dataclass(frozen=True)
class Card:
    gpu: str
    model: str
    # tenant per second offset: a function of the second index (None = not rented)
    tenants: tuple[tuple[int, int, str | None], ...]  # (from, to, tenant) half-open ranges of second indexes
    base_w: int
    usage: bool = True  # False: a card that sends power only (energy always unallocated)

    def tenant_at(self, i: int) -> str | None:
        for lo, hi, tenant in self.tenants:
            if lo <= i < hi:
                return tenant
        return None


def fleet(seconds: int) -> list[Card]:
    """Eight cards: three of acme (one rented only for the first half), two of beta, two idle
    (usage without a tenant), one that sends power only."""
    half = seconds // 2
    return [
        Card("A1", "A800-80G", ((0, seconds, "acme"),), 300),
        Card("A2", "A800-80G", ((0, seconds, "acme"),), 310),
        Card("A3", "A800-80G", ((0, half, "acme"),), 320),
        Card("B1", "RTX4090", ((0, seconds, "beta"),), 400),
        Card("B2", "RTX4090", ((0, seconds, "beta"),), 410),
        Card("I1", "RTX4090", (), 60),
        Card("I2", "A800-80G", (), 70),
        Card("P1", "A800-80G", (), 80, usage=False),
    ]


def watts_of(card: Card, i: int) -> str:
    """A draw that exercises the half-up quantization: x.yyy5 W on every odd second."""
    tail = "5" if i % 2 else "0"
    return f"{card.base_w + i % 13}.{(i * 37) % 1000:03d}{tail}"


def ts_of(i: int) -> str:
    return (START + timedelta(seconds=i)).strftime("%Y-%m-%dT%H:%M:%SZ")


def counter_of(card: Card, i: int, seconds: int) -> tuple[int, str] | None:
    """The card's energy counter at second index i (mJ, epoch), or None where it reports none:
    what each card does to the counter-energy rule (SPEC §4), a function of (card, i) alone so
    that readings made in parts agree.

    A1 counts throughout (its lost readings, below, leave 2-second gaps the counter measures);
    A2's driver reloads at the middle (counter from 0, epoch boot-2); B1's counter falls at
    the third quarter without a new epoch (a reset); B2 reports no counter every 10th second;
    A3 never reports one; the idle cards and P1 count throughout (P1 loses 12 s in a row: a
    gap longer than 10 s)."""
    if card.gpu == "A3" or (card.gpu == "B2" and i % 10 == 9):
        return None
    epoch, start = "boot-1", 0
    if card.gpu == "A2" and i >= seconds // 2:
        epoch, start = "boot-2", seconds // 2
    total = 10**9 if start == 0 else 0
    if card.gpu == "B1" and i >= 3 * seconds // 4:
        total, start = 7, 3 * seconds // 4
    # the counter rises by what the card drew, give or take a little: ~ its watts in mW
    for j in range(start + 1, i + 1):
        total += milliwatts(watts_of(card, j)) + (j * 37) % 500 - 250
    return total, epoch


def power_lost(card: Card, i: int, seconds: int) -> bool:
    """Power readings that never arrive when counters are on: A1 every 17th second from the 5th,
    P1 twelve seconds in a row from the middle."""
    return (card.gpu == "A1" and i % 17 == 5) or (card.gpu == "P1" and seconds // 2 <= i < seconds // 2 + 12)


def make_readings(seconds: int, cards: list[Card] | None = None, first: int = 0, *, counters: bool = False) -> list[dict]:
    """Usage and power readings of `cards` for second indexes [first, seconds), in time order;
    with `counters`, power readings carry the card's counter (`counter_of`) and some are lost."""
    cards = cards or fleet(seconds)
    out = []
    for i in range(first, seconds):
        for card in cards:
            common = {"ts": ts_of(i), "site": "gz-guian", "node": f"gz-n{card.gpu[0]}", "gpu_uuid": card.gpu}
            if card.usage:
                tenant = card.tenant_at(i)
                out.append({"kind": "usage", "event_id": f"{card.gpu}-u-{i}", **common, "gpu_model": card.model,
                            "tenant": tenant, "instance": f"i-{card.gpu}" if tenant else None,
                            "util_pct": i % 101, "mem_used_mib": 1024})
            if counters and power_lost(card, i, seconds):
                continue
            power = {"kind": "power", "event_id": f"{card.gpu}-p-{i}", **common, "power_w": Decimal(watts_of(card, i))}
            counter = counter_of(card, i, seconds) if counters else None
            if counter is not None:
                power |= {"energy_mj": counter[0], "energy_epoch": counter[1]}
            out.append(power)
    return out


def dumps(reading: dict) -> str:
    """JSON with power_w written as the exact decimal it is (never through a float)."""
    if "power_w" in reading:
        marker = "__POWER__"
        text = json.dumps({**reading, "power_w": marker})
        return text.replace(f'"{marker}"', str(reading["power_w"]))
    return json.dumps(reading)


def write_ndjson(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


@dataclass
class Truth:
    """What the readings must bill to, per tenant ('' = unallocated energy)."""

    rent_seconds: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    energy_mj: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    measured_mj: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # of energy_mj, from counters

    def electricity(self, tenant: str) -> Fraction:
        return self.energy_mj[tenant] * PUE * TARIFF / MJ_PER_KWH


def truth_of(readings: list[dict]) -> Truth:
    """The batch join of SPEC §4 over distinct readings, in plain Python (readings are
    assumed free of conflicts: one usage and at most one power per card and second)."""
    usage = {}
    power: dict[str, dict[datetime, dict]] = defaultdict(dict)
    for r in readings:
        if r["kind"] == "usage":
            usage[(r["gpu_uuid"], _second(r["ts"]))] = r["tenant"]
        else:
            power[r["gpu_uuid"]][_second(r["ts"])] = r
    truth = Truth()
    for tenant in usage.values():
        if tenant:
            truth.rent_seconds[tenant] += 1
    # A second's energy: the counter's rise since the card's previous reading (same epoch, at
    # most 10 s earlier, 0 ≤ rise ≤ 5,000 W × gap), split evenly over the seconds it covers,
    # remainder to the last; otherwise the reading's own power_w (SPEC §4).
    for gpu, by_second in power.items():
        prev = None
        for second in sorted(by_second):
            r = by_second[second]
            gap = int((second - prev[0]).total_seconds()) if prev else None
            rise = r.get("energy_mj", 0) - prev[1].get("energy_mj", 0) if prev else None
            if (prev and "energy_mj" in r and "energy_mj" in prev[1] and r["energy_epoch"] == prev[1]["energy_epoch"]
                    and gap <= 10 and 0 <= rise <= 5_000_000 * gap):
                for k in range(1, gap + 1):
                    at = second - timedelta(seconds=gap - k)
                    share = rise // gap + (rise % gap if k == gap else 0)
                    tenant = usage.get((gpu, at)) or ""
                    truth.energy_mj[tenant] += share
                    truth.measured_mj[tenant] += share
            else:
                truth.energy_mj[usage.get((gpu, second)) or ""] += milliwatts(str(r["power_w"]))
            prev = (second, r)
    return truth


def _second(ts: str) -> datetime:
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)


def expected_invoice(truth: Truth, tenant: str) -> dict:
    """Rent, electricity, discount, credit, subtotal, net, tax, total as strings."""
    rent = Fraction(truth.rent_seconds[tenant])  # ¥1 per second for both tenants in May
    electricity = truth.electricity(tenant)
    subtotal = fen_value(rent) + fen_value(electricity)
    discount = fen_value(rent / 10) if tenant == "beta" else Fraction(0)
    after_discount = subtotal - discount
    credit = min(TRIAL, after_discount)
    net = after_discount - credit
    tax = fen_value(net * VAT)
    return {
        "rent": fen(rent), "electricity": fen(electricity), "discount": fen(-discount) if discount else None,
        "credit": fen(-credit), "subtotal": fen(subtotal), "net": fen(net), "tax": fen(tax), "total": fen(net + tax),
    }


def invoice_figures(invoice: dict) -> dict:
    """The same figures read from `gpubill invoice show --format json`."""
    lines: dict[str, list[dict]] = defaultdict(list)
    for line in invoice["lines"]:
        lines[line["kind"]].append(line)
    [rent] = lines["rent"]
    [electricity] = lines["electricity"]
    [credit] = lines["credit"]
    discounts = lines.get("discount", [])
    assert not lines.get("adjustment"), lines["adjustment"]
    return {
        "rent": rent["amount"], "electricity": electricity["amount"],
        "discount": discounts[0]["amount"] if discounts else None, "credit": credit["amount"],
        "subtotal": invoice["subtotal"], "net": invoice["net"], "tax": invoice["tax"], "total": invoice["total"],
    }


def stored_measured(dsn: str, period: str = PERIOD) -> dict[str, int]:
    """Measured mJ per tenant ('' = unallocated) of the rated energy seconds, as ClickHouse keeps them."""
    from warehouse.connection import open_database

    with open_database(dsn) as database:
        rows = database.query("SELECT tenant, sum(energy_mj) FROM rated_seconds FINAL WHERE period = {p:String} "
                              "AND stream = 'energy' AND measured = 1 GROUP BY tenant", {"p": period})
    return {tenant: int(mj) for tenant, mj in rows if int(mj)}


def stored_figures(dsn: str, period: str = PERIOD) -> dict[str, tuple[int, int]]:
    """(rented seconds, energy mJ) per tenant from the v_usage_by_tenant view (no CLI may hold chDB)."""
    from warehouse.connection import open_database

    with open_database(dsn) as database:
        rows = database.query(
            "SELECT tenant, sum(rented_seconds), sum(energy_mj_total) FROM v_usage_by_tenant "
            "WHERE period = {p:String} GROUP BY tenant",
            {"p": period},
        )
    return {tenant: (int(seconds), int(mj)) for tenant, seconds, mj in rows if int(seconds) or int(mj)}


def truth_figures(truth: Truth) -> dict[str, tuple[int, int]]:
    tenants = set(truth.rent_seconds) | set(truth.energy_mj)
    figures = {t: (truth.rent_seconds.get(t, 0), truth.energy_mj.get(t, 0)) for t in tenants}
    return {t: f for t, f in figures.items() if f != (0, 0)}


def start_worker(gpubill, *args: str, log: Path | None = None) -> subprocess.Popen:
    """`gpubill worker --drain` as a child process we can kill; output to `log`."""
    handle = open(log, "ab") if log else subprocess.DEVNULL
    return subprocess.Popen([sys.executable, "-m", "gpubill.cli", "worker", *args], env=gpubill.env, cwd=gpubill.cwd,
                            stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)


def kill9(process: subprocess.Popen) -> None:
    """SIGKILL the worker (and anything it started) and reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=30)


def kill_draining_worker(gpubill, bootstrap: str, group: str, log: Path, rng, rounds: int = 3) -> list[int]:
    """Start `gpubill worker --drain` and SIGKILL it 0–0.5 s after it was seen to commit
    progress, `rounds` times; returns the group's committed total at each kill."""
    at_kill = []
    for round_ in range(rounds):
        before = committed_total(bootstrap, group)
        worker = start_worker(gpubill, "--drain", log=log)
        progressed = wait_until(lambda: worker.poll() is not None or committed_total(bootstrap, group) > before, 120, 0.3)
        assert progressed and worker.poll() is None, \
            f"kill {round_ + 1}: the drain ended before it could be killed\n{log.read_text()[-3000:]}"
        time.sleep(rng.uniform(0, 0.5))
        assert worker.poll() is None, f"kill {round_ + 1}: the drain ended before it could be killed"
        kill9(worker)
        at_kill.append(committed_total(bootstrap, group))
    return at_kill


_admins: dict[str, object] = {}  # bootstrap → one admin client for the session's polls


def _admin(bootstrap: str):
    """One KafkaAdminClient per broker, kept: the pollers ask several times a second, and a
    new client each time is a connection and a metadata round trip each."""
    from kafka import KafkaAdminClient

    if bootstrap not in _admins:
        _admins[bootstrap] = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="e2e-offsets")
        atexit.register(_admins[bootstrap].close)
    return _admins[bootstrap]


def committed_total(bootstrap: str, group: str, topics: tuple[str, ...] = ("gpu.usage.v1", "gpu.power.v1")) -> int:
    """Sum of the group's committed offsets over the reading topics (0 where none)."""
    from kafka.errors import KafkaError

    for attempt in range(50):
        try:
            offsets = _admin(bootstrap).list_group_offsets({group: None}).get(group, {})
            break
        except KafkaError as exc:  # the coordinator still loading, or moving: asked again, as a consumer would
            if not getattr(exc, "retriable", False) or attempt == 49:
                raise
            time.sleep(0.2)
    return sum(meta.offset for partition, meta in offsets.items() if partition.topic in topics and meta.offset > 0)


def wait_until(predicate, timeout_s: float, step_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step_s)
    return False


def produce_raw(bootstrap: str, messages: list[tuple[str, bytes | None, bytes | None]]) -> None:
    """Produce (topic, key, value) messages as they are, bypassing `replay`'s checks."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for topic, key, value in messages:
            producer.send(topic, key=key, value=value)
        producer.flush(timeout=30)
    finally:
        producer.close()


def count_rows(dsn: str, sql: str) -> int:
    from warehouse.connection import open_database

    with open_database(dsn) as database:
        return int(database.query(sql)[0][0])
