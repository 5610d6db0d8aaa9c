"""Is the worker still consuming? A watchdog over its committed offsets (issue 40).

faust-streaming and aiokafka have open reports of a consumer that rejoins its group and never
fetches again, and of producers that hang after a broker outage (robinhood/faust#47,
faust-streaming#175, #523, #602, #611). Such a worker heartbeats, keeps its partitions and
consumes nothing: the group's lag grows and nobody else may take its partitions over. Nothing
crashes, so nothing restarts it. This module decides, from what the worker can see of itself,
when it is in that state; streams/worker.py asks it every CHECK_EVERY_S and acts on the answer.

A partition is *stalled* when it has lag (end offset > committed offset) and its committed
offset has not moved for `stall_s` seconds. The clock of a partition restarts

- when its committed offset moves (progress),
- while it has no lag (an idle partition is not stuck),
- when it is assigned (the first `stall_s` seconds after an assignment are its grace: the
  worker loads state and fetches before anything can be committed),
- after a rebalance, for every partition (the assignment was in flux; nothing is checked while
  partitions change hands).

A rebalance that itself lasts `stall_s` is a stall too (a member stuck joining consumes nothing),
with no partitions to name.

What the worker waits on, when it stalls, is told by `Observation` and written into the verdict:
`clickhouse` when the sink retried an insert since the last progress (ClickHouse down or
refusing), `batches` when batches are in flight (rating, writing, producing their spend), `kafka`
when nothing is in flight although there is lag — the reported bugs —, `rebalance`.

Restart or not: a ClickHouse outage is a stall from Kafka's point of view and is reported as one
(billing is behind: the operator wants to know, and why), but it does not restart the worker —
a restart would not bring ClickHouse back, would throw the rater's state away and rebalance the
group every `stall_s`; the sink keeps retrying for an hour and then exits through the crash path
(streams/crash.py, `clickhouse-unavailable`). Every other stall is one a fresh consumer, producer
and app can end: `Verdict.restart` is True.

Pure: no Kafka, no asyncio, no clock of its own — the caller passes `now_s` (monotonic seconds).
"""

from __future__ import annotations

from dataclasses import dataclass, field

TopicPartition = tuple[str, int]

CHECK_EVERY_S = 2.0  # how often the worker observes itself (each observation asks the broker for end offsets)

# A stalled worker that stopped cleanly to be restarted exits with this status (sysexits'
# EX_TEMPFAIL: "a temporary failure, try again"), distinct from the crash path's 3.
EXIT_STATUS = 75

# What a stalled worker waits on: short fixed words (a metric label), and what they mean in a log line.
WAITING_CLICKHOUSE = "clickhouse"
WAITING_BATCHES = "batches"
WAITING_KAFKA = "kafka"
WAITING_REBALANCE = "rebalance"
WAITING_SAYS = {
    WAITING_CLICKHOUSE: "ClickHouse: the sink is retrying an insert (no restart: the sink's own deadline ends it)",
    WAITING_BATCHES: "batches handed to the agents and not done (rating, writing or producing their spend)",
    WAITING_KAFKA: "Kafka: nothing in flight, no records handed on although there is lag",
    WAITING_REBALANCE: "a rebalance that does not end",
}


@dataclass(frozen=True)
class Observation:
    """What the worker sees of itself at one moment.

    `ends`: end offset of each partition assigned now; `committed`: the offsets this worker (or
    its group, at start) committed, for any partitions (those not assigned are ignored; one not
    there counts as 0); `rebalancing`: partitions are changing hands now; `sink_retries`: the
    sink's count of retried inserts so far (only its growth matters); `batches_in_flight`:
    batches handed to the agents and not yet done."""

    ends: dict[TopicPartition, int]
    committed: dict[TopicPartition, int]
    rebalancing: bool = False
    sink_retries: int = 0
    batches_in_flight: int = 0


@dataclass(frozen=True)
class Verdict:
    """The watchdog's answer. `stalled`: some partition is stalled (or a rebalance lasts too long);
    `partitions`: (topic, partition, lag) of the stalled ones, sorted; `stalled_s`: how long the
    longest of them has not moved; `waiting_on`: what the worker waits on (one of WAITING_*);
    `restart`: a restart can end it (every stall but ClickHouse's); `new`: this is the first
    verdict of this stall (log it and count it once)."""

    stalled: bool
    partitions: tuple[tuple[str, int, int], ...] = ()
    stalled_s: float = 0.0
    waiting_on: str = ""
    restart: bool = False
    new: bool = False

    @property
    def lag(self) -> int:
        """Messages behind over the stalled partitions."""
        return sum(lag for _, _, lag in self.partitions)


OK = Verdict(stalled=False)


@dataclass
class Watchdog:
    """Decides whether the worker is stalled from successive `Observation`s (see the module
    docstring). `stall_s` > 0; the caller does not build one when the check is off."""

    stall_s: float
    _since: dict[TopicPartition, float] = field(default_factory=dict)  # the clock: last progress (or reason to wait)
    _seen: dict[TopicPartition, int] = field(default_factory=dict)  # committed offset at the last observation
    _retries_at_progress: int = 0
    _rebalancing_since: float | None = None
    _stalled: bool = False  # the last verdict was a stall (so the next one is not `new`)

    def __post_init__(self) -> None:
        if self.stall_s <= 0:
            raise ValueError("stall_s must be positive (0 turns the check off: build no Watchdog)")

    def pause(self) -> None:
        """Judge nothing from what was seen so far: every clock restarts at the next observation.
        For a moment the worker cannot see itself (the broker does not answer its end-offset
        request): a broker outage is not this worker's stall, and the minutes it lasted must not
        count as a stall the moment the broker answers again."""
        self._since.clear()
        self._seen.clear()
        self._rebalancing_since = None

    def observe(self, seen: Observation, now_s: float) -> Verdict:
        """The verdict at `now_s` (monotonic seconds, never decreasing between calls)."""
        if seen.rebalancing:
            # The assignment is in flux: every clock restarts once it settles.
            self._since.clear()
            self._seen.clear()
            if self._rebalancing_since is None:
                self._rebalancing_since = now_s
            waited = now_s - self._rebalancing_since
            if waited >= self.stall_s:
                return self._verdict(Verdict(stalled=True, stalled_s=waited, waiting_on=WAITING_REBALANCE,
                                             restart=True))
            return self._verdict(OK)
        self._rebalancing_since = None

        for tp in list(self._since):  # partitions given up: forgotten
            if tp not in seen.ends:
                del self._since[tp]
                self._seen.pop(tp, None)
        stalled = []
        for tp, end in seen.ends.items():
            committed = seen.committed.get(tp, 0)
            lag = max(end - committed, 0)
            if tp not in self._since or committed != self._seen.get(tp):
                # newly assigned (its grace starts) or moved: its clock restarts, and the sink's
                # retries so far are history
                self._retries_at_progress = seen.sink_retries
            elif lag > 0:
                if now_s - self._since[tp] >= self.stall_s:
                    stalled.append((tp, lag, now_s - self._since[tp]))
                continue
            # idle (nothing to do is not stuck), moved or new: the clock restarts
            self._since[tp] = now_s
            self._seen[tp] = committed
        if not stalled:
            return self._verdict(OK)
        if seen.sink_retries > self._retries_at_progress:
            waiting_on = WAITING_CLICKHOUSE
        elif seen.batches_in_flight:
            waiting_on = WAITING_BATCHES
        else:
            waiting_on = WAITING_KAFKA
        return self._verdict(Verdict(
            stalled=True, partitions=tuple(sorted((topic, partition, lag) for (topic, partition), lag, _ in stalled)),
            stalled_s=max(waited for _, _, waited in stalled), waiting_on=waiting_on,
            restart=waiting_on != WAITING_CLICKHOUSE))

    def _verdict(self, verdict: Verdict) -> Verdict:
        new = verdict.stalled and not self._stalled
        self._stalled = verdict.stalled
        if not new:
            return verdict
        return Verdict(verdict.stalled, verdict.partitions, verdict.stalled_s, verdict.waiting_on, verdict.restart,
                       new=True)
