"""The invoicing lease (billing/invoice_lock.py): its rule, and its protocol under interleavings.

The protocol runs for real — `InvoiceLease.acquire`, `fence`, `release` — against a fake
store with the server's semantics that matter: an INSERT stamps rows with the server clock
when it starts and they become visible when it returns, which may be later. Each lease runs
in a thread, but only one at a time: `sleep` and a slow INSERT hand the baton to the
simulation, which wakes whoever is due next on a simulated clock. Hypothesis draws the
schedules (start times, INSERT delays, work between invoices, stalls, crashes); every
schedule must keep the holders' times apart: from the moment a run's `acquire` returns to
its last header, no other run writes a header. The explicit schedules show the check can
fail: without the settle wait, or with a stall longer than the margin, it does.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing.invoice_lock import (
    Claim,
    InvoiceLease,
    LeaseBusy,
    LeaseLost,
    LockRow,
    SqlLeaseStore,
    claims_of,
    live_winner,
    process_gone,
    this_process,
)
from tests.chdb_template import migrated_dsn

US = 1_000_000
TTL_S, SETTLE_S, POLL_S, MARGIN_S = 300.0, 1.0, 1.0, 30.0

# ------------------------------------------------------------------------------ the rule


def claim(holder: str, at_s: float, ttl_s: float = TTL_S, released: bool = False, process: str = "") -> Claim:
    return Claim(holder, int(at_s * US), int((at_s + ttl_s) * US), released, process)


@pytest.mark.parametrize("claims, now_s, gone, expected", [
    ([claim("b", 2), claim("a", 1)], 5, set(), "a"),                       # the earliest claim
    ([claim("b", 1), claim("a", 1)], 5, set(), "a"),                       # a tie: the lesser holder
    ([claim("a", 1, released=True), claim("b", 2)], 5, set(), "b"),        # released: out
    ([claim("a", 1, ttl_s=3), claim("b", 2)], 4, set(), "b"),              # expired at 4: out
    ([claim("a", 1, ttl_s=3), claim("b", 2)], 3.999999, set(), "a"),       # … not a microsecond before
    ([claim("a", 1, process="p-a"), claim("b", 2)], 5, {"p-a"}, "b"),      # its process is gone: out
    ([claim("a", 1, released=True)], 5, set(), None),
    ([], 5, set(), None),
])
def test_the_earliest_live_claim_wins(claims, now_s, gone, expected):
    winner = live_winner(claims, int(now_s * US), lambda process: process in gone)
    assert (winner.holder if winner else None) == expected


def row(holder: str, state: str, at_s: float, ttl_s: float = TTL_S) -> LockRow:
    return LockRow(holder, state, int(at_s * US), int((at_s + ttl_s) * US))


def test_a_claim_is_extended_by_renewals_made_in_time_and_never_revived():
    claims = {c.holder: c for c in claims_of([
        row("a", "claimed", 10), row("a", "renewed", 200), row("a", "renewed", 450),  # 310 → 500 → 750
        row("b", "claimed", 20), row("b", "renewed", 321),  # expired at 320: the renewal comes too late
        row("c", "renewed", 40), row("c", "claimed", 30), row("c", "released", 50, 0),  # rows in any order
    ])}
    assert (claims["a"].claimed_at_us, claims["a"].expires_at_us, claims["a"].released) == (10 * US, 750 * US, False)
    assert (claims["b"].claimed_at_us, claims["b"].expires_at_us) == (20 * US, 320 * US)
    assert (claims["c"].claimed_at_us, claims["c"].expires_at_us, claims["c"].released) == (30 * US, 340 * US, True)
    # at 330 s: b lapsed for good, so a (holding since 10 s) is still the winner, not b
    assert live_winner(list(claims.values()), 330 * US, lambda _: False).holder == "a"
    assert live_winner(list(claims.values()), 750 * US, lambda _: False) is None


def test_a_process_is_gone_only_when_it_ran_here_and_is_not_running():
    me = this_process()
    if not me:
        pytest.skip("no /proc here: crashed holders are waited out")
    _, boot, namespace, pid, tick = me.split(":")
    assert not process_gone(me)  # this process
    assert process_gone(f"linux:{boot}:{namespace}:{pid}:{int(tick) + 1}")  # the pid, reused by another process
    assert process_gone(f"linux:{boot}:{namespace}:4194304:1")  # beyond pid_max: no such process
    assert not process_gone(f"linux:{boot}:other-namespace:4194304:1")  # another container: cannot tell
    assert not process_gone(f"linux:another-boot:{namespace}:4194304:1")  # another machine or boot
    assert not process_gone("")  # a holder that could not say
    assert not process_gone("linux:garbage")


# ---------------------------------------------------------------- a simulated server and clock


class Crash(BaseException):
    """kill -9: the actor stops where it is, releasing nothing."""


@dataclass
class Row:
    holder: str
    process: str
    command: str
    claimed_at_us: int
    expires_at_us: int
    state: str
    visible_at_us: int


class Simulation:
    """Threads that take turns on a simulated clock: one runs, the others wait for their wake time."""

    def __init__(self, ties: list[int]) -> None:
        self.now_us = 0
        self.ties = ties  # who goes first among actors due at the same time
        self.lock = threading.Condition()
        self.running: str | None = None
        self.wakes: dict[str, int] = {}
        self.done: set[str] = set()

    def sleep(self, seconds: float) -> None:
        me = threading.current_thread().name
        with self.lock:
            self.wakes[me] = self.now_us + int(seconds * US)
            self.running = None
            self.lock.notify_all()
            self.lock.wait_for(lambda: self.running == me)

    def run(self, bodies: dict[str, callable]) -> None:
        def body(name: str, fn) -> None:
            with self.lock:
                self.lock.wait_for(lambda: self.running == name)
            try:
                fn()
            finally:
                with self.lock:
                    self.done.add(name)
                    self.wakes.pop(name, None)
                    self.running = None
                    self.lock.notify_all()

        threads = [threading.Thread(target=body, args=(name, fn), name=name, daemon=True)
                   for name, fn in bodies.items()]
        with self.lock:
            self.wakes = {name: 0 for name in bodies}
        for thread in threads:
            thread.start()
        turn = 0
        while True:
            with self.lock:
                self.lock.wait_for(lambda: self.running is None, timeout=30)
                assert self.running is None, "an actor blocked outside the simulation"
                if not self.wakes:
                    break
                due = min(self.wakes.values())
                first = sorted(name for name, at in self.wakes.items() if at == due)
                name = first[self.ties[turn % len(self.ties)] % len(first)] if self.ties else first[0]
                turn += 1
                self.now_us = max(self.now_us, due)
                del self.wakes[name]
                self.running = name
                self.lock.notify_all()
            assert turn < 200_000, "the simulation does not end"
        for thread in threads:
            thread.join(timeout=5)


class FakeStore:
    """invoice_locks on one server: rows stamped when their INSERT starts, visible when it returns."""

    def __init__(self, sim: Simulation, delays_s: list[float]) -> None:
        self.sim, self.delays_s, self.rows, self.inserts = sim, delays_s, [], 0

    def _insert(self, holder: str, state: str, ttl_s: float, process: str = "", command: str = "") -> None:
        delay_s = self.delays_s[self.inserts % len(self.delays_s)] if self.delays_s else 0.0
        self.inserts += 1
        now = self.sim.now_us
        self.rows.append(Row(holder, process, command, now, now + int(ttl_s * US), state, now + int(delay_s * US)))
        if delay_s:
            self.sim.sleep(delay_s)  # the INSERT returns once its rows are visible

    def claim(self, holder, process, command, ttl_s):
        self._insert(holder, "claimed", ttl_s, process, command)

    def renew(self, holder, ttl_s):
        self._insert(holder, "renewed", ttl_s)

    def release(self, holder):
        self._insert(holder, "released", 0)

    def read(self):
        now = self.sim.now_us
        return now, [LockRow(r.holder, r.state, r.claimed_at_us, r.expires_at_us, r.process, r.command)
                     for r in self.rows if r.visible_at_us <= now]


@dataclass
class Actor:
    """One invoice run: starts at `start_s`, writes one header after each of `work_s`, each
    write taking `write_s` after its fence; `crash_after` headers it is killed (-9),
    `gone` telling whether its process can be seen to be gone from this machine."""

    name: str
    start_s: float
    work_s: list[float]
    write_s: float = 0.0
    crash_after: int | None = None
    gone: bool = True
    acquired_us: int | None = None
    writes_us: list[int] = field(default_factory=list)
    outcome: str = ""
    acquired_step: int = -1  # the order of events, which the clock alone does not tell at one instant
    last_write_step: int = -1


def simulate(actors: list[Actor], *, delays_s: list[float] = (), ties: list[int] = (), settle_s: float = SETTLE_S,
             margin_s: float = MARGIN_S, wait_s: float = 3600.0) -> list[Actor]:
    sim = Simulation(list(ties))
    store = FakeStore(sim, list(delays_s))
    crashed: set[str] = set()
    steps = itertools.count()

    def body(actor: Actor) -> callable:
        def run() -> None:
            sim.sleep(actor.start_s)
            lease = InvoiceLease(store, ttl_s=TTL_S, settle_s=settle_s, poll_s=POLL_S, margin_s=margin_s,
                                 wait_s=wait_s, holder=f"host:{actor.name}", process=f"p-{actor.name}",
                                 command=actor.name, gone=lambda process: process in crashed,
                                 sleep=sim.sleep, clock=lambda: sim.now_us / US)
            try:
                lease.acquire()
                actor.acquired_us, actor.acquired_step = sim.now_us, next(steps)
                for n, work_s in enumerate(actor.work_s):
                    if actor.crash_after == n:
                        raise Crash
                    sim.sleep(work_s)  # reading usage, building the invoice, writing its lines
                    lease.fence()
                    sim.sleep(actor.write_s)  # the header's INSERT, after the fence
                    actor.writes_us.append(sim.now_us)
                    actor.last_write_step = next(steps)
                lease.release()
                actor.outcome = "done"
            except Crash:
                actor.outcome = "crashed"
                if actor.gone:
                    crashed.add(f"p-{actor.name}")
            except (LeaseLost, LeaseBusy) as exc:
                actor.outcome = type(exc).__name__
        return run

    sim.run({actor.name: body(actor) for actor in actors})
    return actors


def overlaps(actors: list[Actor]) -> list[tuple[str, str]]:
    """Pairs of runs whose times as holders — acquire returned … last header — intersect."""
    spans = sorted((a.acquired_step, max(a.last_write_step, a.acquired_step), a.name)
                   for a in actors if a.acquired_us is not None)
    return [(x[2], y[2]) for x, y in itertools.pairwise(spans) if y[0] <= x[1]]


# ------------------------------------------------------------------------- explicit schedules


def test_a_second_run_waits_for_the_first_and_then_holds():
    a, b = simulate([Actor("a", 0, [5, 5]), Actor("b", 0.5, [1])])
    assert (a.outcome, b.outcome) == ("done", "done")
    assert a.acquired_us == 1 * US  # claim at 0, settle 1 s
    # a's headers at 6 s and 11 s, then a releases; b claimed at 0.5 s and checks at 1.5 s and
    # each second after: it holds at its first check after 11 s, 11.5 s
    assert a.writes_us == [6 * US, 11 * US] and b.acquired_us == int(11.5 * US)
    assert overlaps([a, b]) == []


def test_a_claim_that_commits_late_is_seen_thanks_to_the_settle_wait():
    # a's INSERT starts first (stamped 0.0 s) but returns 0.5 s later; b's (0.1 s) at once;
    # each header takes 0.6 s after its fence
    def runs() -> list[Actor]:
        return [Actor("a", 0, [0], write_s=0.6), Actor("b", 0.1, [0], write_s=0.6)]

    a, b = simulate(runs(), delays_s=[0.5, 0.0])
    assert overlaps([a, b]) == [] and (a.outcome, b.outcome) == ("done", "done")
    assert a.acquired_us == int(1.5 * US) and b.acquired_us > a.writes_us[-1]  # b saw a's claim after settling
    # without the settle wait b reads before a's row is visible: both hold
    unsafe = simulate(runs(), delays_s=[0.5, 0.0], settle_s=0)
    assert overlaps(unsafe) == [("b", "a")]


def test_a_holder_killed_here_is_seen_gone_at_once():
    a, b = simulate([Actor("a", 0, [1, 1], crash_after=1, gone=True), Actor("b", 0.5, [1])])
    assert (a.outcome, b.outcome) == ("crashed", "done")
    # a dies at 2 s (after one header); b checks at 1.5 s, 2.5 s …: at 2.5 s it sees a gone
    assert b.acquired_us == int(2.5 * US)


def test_a_holder_killed_elsewhere_is_waited_out_until_its_lease_expires():
    a, b = simulate([Actor("a", 0, [1, 1], crash_after=1, gone=False), Actor("b", 0.5, [1])])
    assert (a.outcome, b.outcome) == ("crashed", "done")
    # a claimed at 0 and never renewed: it expires at 300 s, b's check at 300.5 s holds
    assert b.acquired_us == int((TTL_S + 0.5) * US)
    assert overlaps([a, b]) == []


def test_a_run_that_outlives_its_lease_writes_no_further_header():
    # a claims at 0 (until 300 s); its first fence, at 2 s, has 298 s left: no renewal yet.
    # Its second invoice takes 290 s: the fence at 292 s finds 8 s left, under the margin, so
    # the second header is never written; b holds once a's claim expires
    a, b = simulate([Actor("a", 0, [1, 290]), Actor("b", 0.5, [1])])
    assert a.outcome == "LeaseLost" and len(a.writes_us) == 1
    assert b.outcome == "done" and overlaps([a, b]) == []


def test_a_long_run_keeps_its_lease_by_renewing_at_its_fences():
    a, b = simulate([Actor("a", 0, [100] * 6), Actor("b", 0.5, [1])])  # 600 s, twice the TTL
    assert (a.outcome, b.outcome) == ("done", "done")
    assert b.acquired_us > a.writes_us[-1]


def test_a_stall_longer_than_the_margin_breaks_the_lease_assumption():
    # (P) says a header follows its fence within MARGIN_S. A holder that stalls for longer after
    # its fence (here 400 s) writes after its lease expired, while b holds: the check sees it.
    a, b = simulate([Actor("a", 0, [1], write_s=400, gone=False), Actor("b", 0.5, [1])])
    assert overlaps([a, b]) == [("a", "b")]


def test_a_run_that_waits_too_long_gives_up_with_a_clear_error():
    a, b = simulate([Actor("a", 0, [100, 100]), Actor("b", 0.5, [1])], wait_s=60)
    assert (a.outcome, b.outcome) == ("done", "LeaseBusy")
    assert b.acquired_us is None


# ---------------------------------------------------------------------- drawn schedules


@st.composite
def actors(draw) -> list[Actor]:
    count = draw(st.integers(2, 4))
    return [Actor(
        name=f"r{i}",
        start_s=draw(st.sampled_from([0, 0.1, 0.5, 1.0, 1.5, 3.0, 100.0])),
        work_s=draw(st.lists(st.sampled_from([0, 0.5, 1, 5, 60, 200, 280]), min_size=1, max_size=3)),
        write_s=draw(st.sampled_from([0, 0.2, MARGIN_S - 1])),
        crash_after=draw(st.none() | st.integers(0, 2)),
        gone=draw(st.booleans()),
    ) for i in range(count)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actors(), st.lists(st.sampled_from([0, 0.1, 0.5, 0.99]), max_size=6), st.lists(st.integers(0, 3), max_size=6))
def test_no_two_runs_ever_hold_the_lease_at_once(runs, delays_s, ties):
    # every INSERT returns within the settle wait (S), every header within the margin (P)
    done = simulate(runs, delays_s=delays_s, ties=ties)
    assert overlaps(done) == []
    for run in done:
        assert run.outcome in ("done", "crashed", "LeaseLost"), run  # nobody waits an hour
        if run.outcome == "done":
            assert len(run.writes_us) == len(run.work_s)


# ------------------------------------------------------------------- the rows in ClickHouse


def test_the_rows_in_clickhouse_carry_the_servers_times(tmp_path):
    from warehouse.connection import open_database

    with open_database(migrated_dsn(tmp_path / 'ch')) as db:
        store = SqlLeaseStore(db)
        store.claim("h:1:a", "linux:x:y:1:2", "gpubill invoice run", 60)
        before_us, rows = store.read()
        [first] = claims_of(rows)
        store.claim("h:2:b", "", "scheduler", 60)
        store.renew("h:1:a", 120)
        now_us, rows = store.read()
        claims = claims_of(rows)
        by_holder = {c.holder: c for c in claims}
        a, b = by_holder["h:1:a"], by_holder["h:2:b"]
        assert a.claimed_at_us == first.claimed_at_us <= b.claimed_at_us  # a renewal keeps the claim's time
        assert a.expires_at_us >= before_us + 120 * US  # … and extends it from the server's now
        assert b.expires_at_us - b.claimed_at_us == 60 * US
        assert (a.process, a.command, a.released) == ("linux:x:y:1:2", "gpubill invoice run", False)
        assert live_winner(claims, now_us, lambda _: False).holder == "h:1:a"
        store.release("h:1:a")
        now_us, rows = store.read()
        claims = claims_of(rows)
        assert [c.holder for c in claims if c.released] == ["h:1:a"]
        assert live_winner(claims, now_us, lambda _: False).holder == "h:2:b"


def test_the_real_loop_over_clickhouse_settles_once_and_releases(tmp_path):
    from warehouse.connection import open_database

    with open_database(migrated_dsn(tmp_path / 'ch')) as db:
        slept: list[float] = []
        lease = InvoiceLease(SqlLeaseStore(db), sleep=slept.append)
        lease.acquire()
        assert lease.held and slept == [SETTLE_S]  # one settle wait per run, no polling
        lease.fence()
        lease.fence()
        other = InvoiceLease(SqlLeaseStore(db), sleep=slept.append, wait_s=0)
        with pytest.raises(LeaseBusy, match="held the invoicing lease"):
            other.acquire()
        lease.release()
        with pytest.raises(LeaseLost):
            lease.fence()
        third = InvoiceLease(SqlLeaseStore(db), sleep=slept.append, wait_s=0)
        third.acquire()
        assert third.held
