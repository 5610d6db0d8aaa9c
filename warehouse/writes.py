"""Which hours of `rated_seconds` were written, and until when: the stamps rollups trust.

The hourly rollups (usage/rollup.py) must know, for every (period, hour), whether rows
were written since it was last rolled up. Workers' clocks are not trusted: a stamp is the
database's clock. The sink stamps the hours a batch writes *before* it writes them, and
ahead of time: `written_at` = the database's now + MARGIN_S, meaning "rows of this hour may
be written until then". While the hour keeps being written the sink re-stamps it every
MARGIN_S / 2 seconds (so a stamp is an insert a minute per hour being written, not one per
batch, which a materialized view on every insert cost: docs/performance.md). A rollup that
began at `started_at` covers an hour only when the hour's latest stamp is older than
started_at − MARGIN_S, so every row stamped for had been committed before the rollup read:
an insert would have to take longer than 1.5 × MARGIN_S (90 s) to slip past, and a retried
insert stamps again before each attempt.

Any other writer of `rated_seconds` (a bench, a test, a hand-made correction) calls
`stamp_hours` after its write, with `ahead_s=0`.

A stamp may name the revision of the rules that priced the rows (`RuleSet.revision`): it is
kept per (period, hour, revision) in `rated_revisions` (migration 0025), which the rollup
copies into the generation it publishes. An hour is stamped again at once when the rules
that write it change.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

# Tests lower it (GPUBILL_ROLLUP_MARGIN_S=0) to see rollups at once; usage/rated.py and the
# SQL view v_live_hours (migration 0008) use the same margin.
MARGIN_S = int(os.environ.get("GPUBILL_ROLLUP_MARGIN_S", "60"))

_STAMP_SQL = (
    "INSERT INTO rated_writes SELECT w.1, toDateTime(w.2, 'UTC'), now64(3, 'UTC') + toIntervalSecond({ahead:UInt32}) "
    "FROM (SELECT arrayJoin(arrayZip({periods:Array(String)}, {hours:Array(Int64)})) AS w)"
)
_REVISION_SQL = (
    "INSERT INTO rated_revisions SELECT w.1, toDateTime(w.2, 'UTC'), {revision:String}, now64(3, 'UTC') "
    "FROM (SELECT arrayJoin(arrayZip({periods:Array(String)}, {hours:Array(Int64)})) AS w)"
)


def stamp_hours(db: Any, hours: Iterable[tuple[str, int]], ahead_s: int = 0, revision: str = "") -> None:
    """Stamp (period, UTC hour start) pairs as written until the database's now + `ahead_s`,
    and, with a `revision`, as priced by those rules."""
    pairs = sorted(set(hours))
    if pairs:
        params = {"periods": [p for p, _ in pairs], "hours": [int(h) for _, h in pairs]}
        db.command(_STAMP_SQL, {**params, "ahead": int(ahead_s)})
        if revision:
            db.command(_REVISION_SQL, {**params, "revision": revision})


class HourStamps:
    """The sink's stamps: each hour stamped MARGIN_S ahead, again once half of that passed."""

    def __init__(self) -> None:
        # (period, hour, revision) → monotonic time to re-stamp at
        self._valid_until: dict[tuple[str, int, str], float] = {}

    def before_write(self, db: Any, hours: Iterable[tuple[str, int]], revision: str = "") -> None:
        """Stamp `hours` (as priced by the rules of `revision`) unless a stamp of theirs still covers them."""
        now = time.monotonic()
        due = [hour for hour in hours if self._valid_until.get((*hour, revision), 0.0) <= now]
        if not due:
            return
        stamp_hours(db, due, ahead_s=MARGIN_S, revision=revision)
        for period, hour in due:
            self._valid_until[(period, hour, revision)] = now + MARGIN_S / 2
        if len(self._valid_until) > 4096:  # a replay of old data touches many hours once each
            self._valid_until = {h: t for h, t in self._valid_until.items() if t > now}
