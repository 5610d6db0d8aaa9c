"""Take the log of corrections (gpu.corrections.v1) into ClickHouse: checked, stored, or dead-lettered.

    sync_corrections(db, settings, now_s)   read the whole topic, then take_corrections: a SyncReport
    sync_to_end(db, settings, now_s, before=…)  the same before a plan, or CorrectionsNotSynced in one line
    take_corrections(db, logged, now_s)     the checked messages (read_corrections' list, in log order) → tables

Every message of the topic ends in exactly one place, keyed by its Kafka position:

    ok          → `corrections` (usage/corrections.py), if its card has readings stored
    conflict    → `correction_conflicts`, naming the position of the correction that counts
    invalid     → `deadletters` (source_topic gpu.corrections.v1, the reason, the original bytes)
    a card with no readings at all → `deadletters` too: `gpubill correct` refuses it before
                  producing, and anyone who can produce to the topic must be refused the same way
    duplicate   → nowhere (the same content again counts once)

Idempotent and at-least-once: a position taken by an earlier sync keeps its verdict and is not
written again, so syncing twice (or from two workers at once: the tables replace rows of one key)
stores each correction once. Each step is written on its own; a sync that stops half-way is
finished by the next one, which finds the positions still missing.

The verdict is that of the first sync that saw the position: a correction reaching more than
ten minutes past its sync's clock is dead-lettered then and stays so, as a reading would.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from kafka.errors import KafkaError

from schemas import tables
from schemas.topics import TOPIC_CORRECTIONS
from streams.errors import CorrectionsNotSynced, KafkaUnreachable, StreamsError
from streams.kafka.admin import nothing_listens
from streams.kafka.corrections import LoggedCorrection, read_corrections
from streams.kafka.settings import KafkaSettings
from usage.corrections import store_corrections

__all__ = ["SyncReport", "sync_corrections", "sync_to_end", "take_corrections"]

_KNOWN_SQL = """
SELECT toInt64(src_partition), toInt64(src_offset) FROM corrections
UNION ALL SELECT toInt64(src_partition), toInt64(src_offset) FROM correction_conflicts
UNION ALL SELECT toInt64(source_partition), toInt64(source_offset) FROM deadletters WHERE source_topic = {topic:String}
"""
_CARDS_SQL = """
SELECT DISTINCT gpu_uuid FROM (
    SELECT gpu_uuid FROM readings_usage WHERE gpu_uuid IN {gpus:Array(String)} LIMIT 1 BY gpu_uuid
    UNION ALL
    SELECT gpu_uuid FROM readings_power WHERE gpu_uuid IN {gpus:Array(String)} LIMIT 1 BY gpu_uuid
)
"""


@dataclass(frozen=True)
class SyncReport:
    """What one sync found on the topic and wrote this time (what earlier syncs wrote is `earlier`)."""

    read: int  # messages on the topic
    stored: tuple[LoggedCorrection, ...] = ()  # corrections stored now
    conflicts: tuple[LoggedCorrection, ...] = ()  # event ids reused with other content, recorded now
    dead: tuple[LoggedCorrection, ...] = ()  # dead-lettered now (status "invalid", `reason` as stored)
    duplicates: int = 0  # the same correction again: counted once, stored nowhere
    earlier: int = 0  # positions an earlier sync took

    @property
    def changed(self) -> bool:
        return bool(self.stored or self.conflicts or self.dead)


def sync_corrections(db: Any, settings: KafkaSettings, now_s: int) -> SyncReport:
    """Read gpu.corrections.v1 from the beginning (KafkaUnreachable when the broker cannot be read)
    and take what is new into `db`."""
    return take_corrections(db, read_corrections(settings, now_s), now_s)


def sync_to_end(db: Any, settings: KafkaSettings, now_s: int, *, before: str) -> SyncReport:
    """Take the log of corrections to its end before `before` (e.g. "rerate 2026-03") plans from the
    database: what `rerate`, `verify-log`, `audit` and every drain do first, whether or not a worker
    runs, so that none of them plans without a correction on the log (issue 36, item 3).

    Raises CorrectionsNotSynced, one line, when the topic cannot be read (how many corrections it
    holds is then unknown) or when what it holds cannot be stored (saying how many are not):
    never a plan that silently leaves them out."""
    try:
        if nothing_listens(settings.kafka):  # refused at once, not after the clients' 10–15 s of retries
            raise KafkaUnreachable(settings.kafka, "connection refused")
        logged = read_corrections(settings, now_s)
    except (StreamsError, KafkaError) as exc:
        raise CorrectionsNotSynced(
            f"{before} refused: the log of corrections ({TOPIC_CORRECTIONS}) cannot be read, so what it holds "
            f"cannot be taken into account: {exc}") from exc
    try:
        return take_corrections(db, logged, now_s)
    except Exception as exc:  # noqa: BLE001 - translated: the plan must not go on without them
        missing = _not_stored(db, logged)
        count = "some" if missing is None else f"{missing:,}"
        raise CorrectionsNotSynced(
            f"{before} refused: {count} of the {len(logged):,} messages on {TOPIC_CORRECTIONS} are not stored "
            f"and could not be ({' '.join(str(exc).split())[:300]}); run `gpubill corrections sync` once the "
            "database takes writes") from exc


def _not_stored(db: Any, logged: list[LoggedCorrection]) -> int | None:
    """How many messages of `logged` (duplicates aside) no sync has taken; None when the database cannot say."""
    try:
        known = {(int(p), int(o)) for p, o in db.query(_KNOWN_SQL, {"topic": TOPIC_CORRECTIONS})}
    except Exception:  # noqa: BLE001 - the refusal says "some" instead
        return None
    return sum(1 for e in logged if (e.partition, e.offset) not in known and e.status != "duplicate")


def take_corrections(db: Any, logged: list[LoggedCorrection], now_s: int) -> SyncReport:
    """Write the messages of `logged` (the whole log, in log order) that no sync took before;
    see the module docstring for where each goes."""
    moment = datetime.fromtimestamp(now_s, UTC)
    # The correction that counts for each event id: the first `ok` one in the log (read_corrections'
    # verdict), named by the conflicts even when it is refused below for its card.
    kept: dict[str, tuple[int, int]] = {}
    for entry in logged:
        if entry.status == "ok" and entry.correction is not None:
            kept.setdefault(entry.correction.event_id, (entry.partition, entry.offset))
    known = {(int(p), int(o)) for p, o in db.query(_KNOWN_SQL, {"topic": TOPIC_CORRECTIONS})}
    new = [e for e in logged if (e.partition, e.offset) not in known and e.status != "duplicate"]
    duplicates = sum(1 for e in logged if e.status == "duplicate")
    earlier = sum(1 for e in logged if (e.partition, e.offset) in known)

    cards = {e.correction.gpu_uuid for e in new if e.status == "ok" and e.correction is not None}
    with_readings = {str(g) for (g,) in db.query(_CARDS_SQL, {"gpus": sorted(cards)})} if cards else set()
    ok, conflicts, dead = [], [], []
    for entry in new:
        if entry.status == "invalid":
            dead.append(entry)
        elif entry.status == "conflict":
            conflicts.append(entry)
        elif entry.correction is not None and entry.correction.gpu_uuid not in with_readings:
            dead.append(replace(entry, status="invalid", correction=None, reason=(
                f"no readings of card {entry.correction.gpu_uuid!r} are stored: a correction names a card "
                "as its readings do")))
        elif entry.correction is not None:
            ok.append(entry)

    # 1. the corrections and conflicts (usage/corrections.py), 2. the dead letters. Each row is
    # keyed by its position: a sync that stopped between them is completed by the next.
    store_corrections(db, ok + conflicts, moment, kept=kept)
    if dead:
        db.insert("deadletters", [(TOPIC_CORRECTIONS, e.partition, e.offset, 0, 0, e.reason, e.raw, moment)
                                  for e in dead], tables.DEADLETTERS)
    return SyncReport(len(logged), tuple(ok), tuple(conflicts), tuple(dead), duplicates, earlier)
