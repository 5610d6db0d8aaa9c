"""The invoicing lease: one invoice run at a time per database, without transactions.

ClickHouse has no transactions and no compare-and-set on MergeTree, so two invoice runs
(`gpubill invoice run` beside the scheduler, both through the gateway or a server) take
turns through a lease of rows in `invoice_locks` (migration 0012):

1. claim   INSERT … SELECT now64(): the claim time is the server's clock, not ours.
2. settle  wait SETTLE_S (one second): every claim made before ours is visible by then.
3. check   read every holder's rows; among the live claims (not released, not expired, and
           not held by a process of this machine that is gone), the earliest
           (claimed_at, holder) wins. The winner holds the lease; the others keep their claim
           (a queue, first come first served), re-check every POLL_S and renew while they
           wait, so that a crashed holder costs at most TTL_S (at once when it ran here).
4. fence   before each invoice's header (its commit point) the holder re-reads: still the
           winner, with at least MARGIN_S left; it renews when half the TTL is gone.
5. release a released row ends the claim (also when the run fails).

What it guarantees, under two assumptions — (S) one server: a row whose INSERT returned is
visible to every later SELECT, and a claim's INSERT returns within SETTLE_S of its own
now64(); (P) a holder writes a header within MARGIN_S of its fence (no longer stall):
no two runs hold the lease at once. Proof: let A's (claimed_at, holder) precede B's. B
checks at least SETTLE_S after its claimed_at, so after A's claimed_at + SETTLE_S, and by
(S) it sees A's claim. B wins only if A's claim is then released, expired or its process
gone — and A writes no header after any of these (a released or gone A stopped; an expired
A failed its fence, by (P)). Wall clocks do not matter: every timestamp compared is the
server's. Process liveness is trusted only for a process of the same kernel boot and pid
namespace whose start tick differs or is missing, so a reused pid or another container
never breaks a live lease.

On the embedded database (chdb://) no other process can open the database at all
(warehouse/connection.py's lock), so a lock of this process is the whole lease: no rows,
no settle wait. Costs through a server or the gateway: one second of settle per run, and
one small read per invoice (the fence).

    LeaseError      base (a BillingError: the CLI prints it and exits 1)
    ├── LeaseBusy   another run held the lease for longer than we were to wait
    └── LeaseLost   the fence found the lease expired or taken: nothing more is written
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

from billing import books
from billing.errors import BillingError
from usage.failpoints import pause_at

LEASE = "invoicing"
TTL_S = 300.0  # a holder that crashed elsewhere blocks others this long at most
SETTLE_S = 1.0
POLL_S = 1.0
MARGIN_S = 30.0  # a header is written only with this much lease left (assumption P)
WAIT_S = 1800.0  # an invoice run waits this long for another one before giving up
_US = 1_000_000


class LeaseError(BillingError):
    """Base of the invoicing lease's errors."""


class LeaseBusy(LeaseError):
    """Another invoice run held the lease for longer than this one was to wait."""


class LeaseLost(LeaseError):
    """The holder's fence found its lease expired or taken; it wrote nothing after that."""


@dataclass(frozen=True)
class LockRow:
    """A row of invoice_locks: `at_us` is the server's now64() of its statement (the column
    claimed_at), times in microseconds."""

    holder: str
    state: str  # claimed | renewed | released
    at_us: int
    expires_at_us: int
    process: str = ""
    command: str = ""


@dataclass(frozen=True)
class Claim:
    """One holder's rows, read together: times in microseconds of the server's clock."""

    holder: str
    claimed_at_us: int
    expires_at_us: int
    released: bool
    process: str = ""
    command: str = ""


def claims_of(rows: list[LockRow]) -> list[Claim]:
    """Each holder's claim: claimed when its first row was written, expiring when its claim
    or a renewal made before that expiry says, released by any released row. A renewal
    written after the expiry is ignored: a claim that lapsed stays lapsed (its holder was
    stalled, and another run may hold the lease by now)."""
    by_holder: dict[str, list[LockRow]] = {}
    for row in sorted(rows, key=lambda r: (r.at_us, r.state != "claimed")):
        by_holder.setdefault(row.holder, []).append(row)
    claims = []
    for holder, held in by_holder.items():
        first = held[0]
        expires_us = first.expires_at_us
        for row in held[1:]:
            if row.state == "renewed" and row.at_us < expires_us:
                expires_us = max(expires_us, row.expires_at_us)
        claims.append(Claim(holder, first.at_us, expires_us, any(r.state == "released" for r in held),
                            first.process, first.command))
    return claims


def live_winner(claims: list[Claim], now_us: int, gone: Callable[[str], bool]) -> Claim | None:
    """The claim that holds the lease at server time `now_us`: the earliest (claimed_at,
    holder) of those not released, not expired and whose process is not known to be gone."""
    live = [c for c in claims if not c.released and c.expires_at_us > now_us and not gone(c.process)]
    return min(live, key=lambda c: (c.claimed_at_us, c.holder), default=None)


class LeaseStore(Protocol):
    """The statements the lease needs; `SqlLeaseStore` is the real one."""

    def claim(self, holder: str, process: str, command: str, ttl_s: float) -> None: ...
    def renew(self, holder: str, ttl_s: float) -> None: ...
    def release(self, holder: str) -> None: ...
    def read(self) -> tuple[int, list[LockRow]]: ...


_INSERT = (
    "INSERT INTO invoice_locks (name, holder, process, command, claimed_at, expires_at, state) "
    "SELECT {name:String}, {holder:String}, {process:String}, {command:String}, now64(6), "
    "now64(6) + toIntervalMicrosecond({ttl_us:UInt64}), {state:String}"
)
_READ = (
    "SELECT toUnixTimestamp64Micro(now64(6)), holder, state, toUnixTimestamp64Micro(claimed_at), "
    "toUnixTimestamp64Micro(expires_at), process, command FROM invoice_locks WHERE name = {name:String} "
    "AND holder IN (SELECT holder FROM invoice_locks WHERE name = {name:String} GROUP BY holder "
    "HAVING max(expires_at) > now64(6) - INTERVAL 1 DAY)"
)


@dataclass
class SqlLeaseStore:
    """The lease's rows in ClickHouse; every timestamp is the server's now64()."""

    db: Any
    name: str = LEASE

    def _insert(self, holder: str, state: str, ttl_s: float, process: str = "", command: str = "") -> None:
        self.db.command(_INSERT, {"name": self.name, "holder": holder, "process": process, "command": command,
                                  "ttl_us": int(ttl_s * _US), "state": state})

    def claim(self, holder: str, process: str, command: str, ttl_s: float) -> None:
        self._insert(holder, "claimed", ttl_s, process, command)

    def renew(self, holder: str, ttl_s: float) -> None:
        # its claimed_at (now) is later than the claim's: the claim's time stays the first
        self._insert(holder, "renewed", ttl_s)

    def release(self, holder: str) -> None:
        self._insert(holder, "released", 0)

    def read(self) -> tuple[int, list[LockRow]]:
        rows = self.db.query(_READ, {"name": self.name})
        if not rows:
            return int(self.db.query("SELECT toUnixTimestamp64Micro(now64(6))")[0][0]), []
        return int(rows[0][0]), [LockRow(holder, state, int(at), int(expires), process, command)
                                 for _, holder, state, at, expires, process, command in rows]


class InvoiceLease:
    """One claim on the lease: `acquire`, then `fence` before each commit, then `release`.

    The steps are separate methods so that tests can interleave several leases step by step
    over a fake store and clock; `acquire` is the loop a run uses."""

    def __init__(self, store: LeaseStore, *, ttl_s: float = TTL_S, settle_s: float = SETTLE_S, poll_s: float = POLL_S,
                 margin_s: float = MARGIN_S, wait_s: float = WAIT_S, holder: str | None = None,
                 process: str | None = None, command: str | None = None,
                 gone: Callable[[str], bool] | None = None, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic, on_wait: Callable[[str], None] | None = None) -> None:
        self.store, self.ttl_s, self.settle_s, self.poll_s = store, ttl_s, settle_s, poll_s
        self.margin_s, self.wait_s = margin_s, wait_s
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self.process = this_process() if process is None else process
        self.command = command if command is not None else " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:200]
        self.gone = gone or process_gone
        self.sleep, self.clock, self.on_wait = sleep, clock, on_wait
        self.held = self.stale = False
        self._claimed = False

    # -- the steps

    def claim(self) -> None:
        self.store.claim(self.holder, self.process, self.command, self.ttl_s)
        self._claimed = True

    def check(self) -> Claim | None:
        """Read the claims and return the winner; we hold the lease when it is ours. Renews
        our claim when half its time is gone, and releases, for everyone, the claims of
        processes of this machine that are gone."""
        now_us, rows = self.store.read()
        claims = claims_of(rows)
        for claim in claims:
            if not claim.released and claim.holder != self.holder and self.gone(claim.process):
                self.store.release(claim.holder)
        winner = live_winner(claims, now_us, self.gone)
        mine = next((c for c in claims if c.holder == self.holder), None)
        left_us = -1 if mine is None or mine.released else mine.expires_at_us - now_us
        # under MARGIN_S left, a renewal might become visible only after the claim expired
        self.stale = left_us < self.margin_s * _US
        self.held = winner is not None and winner.holder == self.holder and not self.stale
        if not self.stale and left_us < self.ttl_s * _US / 2:
            self.store.renew(self.holder, self.ttl_s)
        return winner

    def fence(self) -> None:
        """Before a commit: raise LeaseLost unless we still hold the lease with MARGIN_S left."""
        if not self.held:
            raise LeaseLost(f"{self.holder} does not hold the invoicing lease; run the period again")
        winner = self.check()
        if not self.held:
            by = f" (now held by {winner.command or winner.holder})" if winner else ""
            raise LeaseLost(f"the invoicing lease of {self.holder} expired or was taken{by}; nothing more "
                            "is written: run the period again")

    def release(self) -> None:
        if self._claimed:
            self._claimed = self.held = False
            self.store.release(self.holder)
            self.holder = f"{self.holder.rsplit(':', 1)[0]}:{uuid.uuid4().hex[:12]}"  # a new claim, a new holder

    # -- the loop

    def acquire(self) -> None:
        """Claim, settle, and wait our turn (at most `wait_s`); LeaseBusy when it does not come."""
        started = self.clock()
        try:
            told = None
            while True:
                if not self._claimed or self.stale:  # first, or ours ran out while we were stalled
                    self.release()
                    self.claim()
                    self.sleep(self.settle_s)
                winner = self.check()
                if self.held:
                    return
                if self.clock() - started >= self.wait_s:
                    raise LeaseBusy(f"another invoice run ({_who(winner)}) held the invoicing lease for "
                                    f"{self.wait_s:.0f} s; try again when it has finished")
                if self.on_wait and winner is not None and winner.holder != told:
                    told = winner.holder
                    self.on_wait(f"waiting for another invoice run to finish ({_who(winner)})")
                    pause_at("invoice-lease-wait")  # usage/failpoints.py: a test sees that we wait
                if not self.stale:
                    self.sleep(self.poll_s)
        except BaseException:
            self.release()
            raise


def _who(claim: Claim | None) -> str:
    if claim is None:
        return "none visible"
    host, pid = (claim.holder.split(":") + ["", ""])[:2]
    return f"{claim.command or 'unknown command'}, pid {pid} on {host}"


# ------------------------------------------------------------------ this machine's processes


def this_process() -> str:
    """What identifies this process on this machine: linux:boot:pid-namespace:pid:start-tick,
    or "" where that cannot be told (then a crashed holder is waited out until it expires)."""
    identity = _process_identity(os.getpid())
    return ":".join(["linux", *identity]) if identity else ""


def _process_identity(pid: int) -> tuple[str, str, str, str] | None:
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid").split("[")[-1].rstrip("]")
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    start_tick = stat[stat.rindex(")") + 2:].split()[19]  # field 22: starttime, after "(comm)"
    return boot, namespace, str(pid), start_tick


def process_gone(process: str) -> bool:
    """True only when `process` (this_process() of a holder) ran on this machine — same
    kernel boot and pid namespace — and no process with its pid and start tick exists now."""
    parts = process.split(":")
    if len(parts) != 5 or parts[0] != "linux":
        return False
    _, boot, namespace, pid, start_tick = parts
    mine = _process_identity(os.getpid())
    if mine is None or (boot, namespace) != mine[:2] or not pid.isdigit():
        return False
    now = _process_identity(int(pid))
    return now is None or now[3] != start_tick


# ------------------------------------------------------------------------------ the seam

_in_process = threading.Lock()


@contextmanager
def invoicing_lease(db: Any, on_wait: Callable[[str], None] | None = None,
                    wait_s: float = WAIT_S) -> Iterator[Callable[[], None]]:
    """Hold the invoicing lease of `db` for the block; yields the fence to call before each commit.

    Embedded database: a lock of this process (no other process can open the database).
    Server or gateway: the lease of rows above. Released however the block ends."""
    if getattr(db, "embedded", False):
        if not _in_process.acquire(timeout=wait_s):
            raise LeaseBusy(f"another invoice run in this process held the invoicing lease for {wait_s:.0f} s")
        try:
            books.begin_numbering(db)
            yield lambda: None
        finally:
            _in_process.release()
        return
    lease = InvoiceLease(SqlLeaseStore(db), on_wait=on_wait, wait_s=wait_s)
    lease.acquire()
    try:
        # The log decides (issue 37): holding the lease, this process takes over the numbered series
        # on the books, fencing any writer of another database; the lease keeps this one's in turn.
        books.begin_numbering(db)
        yield lease.fence
    finally:
        lease.release()
