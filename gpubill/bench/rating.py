"""`gpubill bench rating`: the native core alone, past a full horizon.

G × S usage and power readings of a simulated fleet (as `gpubill bench pipeline` produces
them) are encoded as the broker would fetch them — one v2 record batch per partition, 8
partitions by card — in rounds of `batch_s` seconds of the fleet, and go through
`process_batch_native` and eviction as the worker's rating thread does, against an empty
ClickHouse (nothing stored, so nothing is read back). Only those calls are timed; making
the readings is not. With S beyond the 15-minute horizon the state reaches its steady
size, which `gpubill bench pipeline` (ten minutes of data) does not show:

- `core_per_s`: readings per second of the time spent rating (`process_batch_native` and
  eviction: the native core and the Python around it);
- `state_entries`, `state_mb`: readings held at the end and the memory they take (the
  process's own peak is not reported: the fleet simulator's arrays would dominate it).

With `spend`, a second core rates the same rounds with spend marks (the worker's spend
tracking; streams/rating/protocol.py), the two taking turns round by round and first
place alternately, so both figures come from one run on one machine state:

- `core_per_s_spend`: readings per second of its rating time; its marks are (0, 0) for
  every (tenant, partition) seen so far, so each rated row is looked up and counted;
- `spend_rent_s`: the rented seconds it counted (every usage reading with a tenant).
"""

from __future__ import annotations

import time
import zlib
from datetime import UTC, datetime
from itertools import islice
from typing import Callable, Iterator

import orjson

from billing_rules import DEFAULT_RULES_DIR, load_rules
from schemas.topics import READING_TOPICS
from streams.rating.native import NativeRater, process_batch_native
from streams.kafka.record_sets import RecordSet, record_batch
from gpubill.devenv.simulator import simulate_fleet

PARTITIONS = 8


class _EmptyStore:
    """A ClickHouse that holds nothing yet (the look-ups of `process_batch_native`)."""

    def __call__(self, need_usage: set, need_power: set) -> tuple[list, list]:
        return [], []

    def stored_since(self, cards: dict) -> dict:
        return {stream: set() for stream in cards}

    def kept_event_ids(self, stream: str, keys: set) -> dict:
        return {}


def _rounds(readings: Iterator[dict], size: int) -> Iterator[list[RecordSet]]:
    """The readings as fetch rounds of `size` readings: one record set per partition."""
    offsets: dict[tuple[str, int], int] = {}
    while chunk := list(islice(readings, size)):
        parts: dict[tuple[str, int], list[tuple]] = {}
        for reading in chunk:
            key = reading["gpu_uuid"].encode()
            parts.setdefault((READING_TOPICS[reading["kind"]], zlib.crc32(key) % PARTITIONS), []).append(
                (key, orjson.dumps(reading)))
        sets = []
        for (topic, partition), records in sorted(parts.items()):
            base = offsets.get((topic, partition), 0)
            data = record_batch(base, [(base + i, key, value, 0, ()) for i, (key, value) in enumerate(records)])
            offsets[(topic, partition)] = base + len(records)
            sets.append(RecordSet(topic, partition, data, base, base + len(records), plain=True))
        yield sets


def bench_rating(gpus: int, seconds: int, *, batch_s: int = 12, spend: bool = False, counters: bool = False,
                 say: Callable[[str], None] = lambda _: None) -> dict:
    """Run the benchmark; returns the fields `gpubill bench rating --json` prints. With
    `counters` the power readings carry the cards' energy counters (the simulator's)."""
    if not NativeRater.available():
        raise RuntimeError("gpubill_native is not built: run scripts/bootstrap")
    rules, store = load_rules(DEFAULT_RULES_DIR), _EmptyStore()
    raters = {"off": NativeRater(rules)} | ({"on": NativeRater(rules)} if spend else {})
    marks: dict[tuple[str, int], tuple[int, int]] = {}  # of the spend core: (0, 0) per (tenant, partition) seen
    total = gpus * seconds * 2
    start = int(time.time()) - seconds - 120
    readings = islice(simulate_fleet(gpus=gpus, gpu_model="A800-80G", minutes=-(-seconds // 60), start=start,
                                     tenants=max(1, gpus // 16), counters=counters), total)
    say(f"rating {total:,} readings ({gpus} GPUs × {seconds} s × 2 streams) in rounds of {batch_s} s"
        + (", with and without spend marks in turn" if spend else ""))
    busy, done = dict.fromkeys(raters, 0.0), dict.fromkeys(raters, 0)
    refused, rent_s, now = 0, 0, datetime.now(UTC)
    for number, sets in enumerate(_rounds(readings, gpus * 2 * batch_s)):
        for name in sorted(raters, reverse=number % 2 == 1):  # who goes first alternates
            rater = raters[name]
            began = time.perf_counter()
            result = process_batch_native(sets, rater, now=now, lookup=store,
                                          spend_marks=marks if name == "on" else None)
            rater.evict()
            busy[name] += time.perf_counter() - began
            done[name] += sum(result.readings_in.values())
            refused += len(result.deadletters)
            if result.spend is not None:
                rent_s += sum(result.spend.rent.values())
                marks.update(((key[0], key[1]), (0, 0)) for key in result.spend.rent)
    if any(count != total for count in done.values()) or refused:
        raise RuntimeError(f"rated {done['off']:,} of {total:,} readings ({refused} dead letters)")
    figures = {
        "readings": done["off"],
        "core_per_s": round(done["off"] / busy["off"]),
        "state_entries": raters["off"].state_size,
        "state_mb": round(raters["off"].state_bytes / 2**20, 1),
    }
    if spend:
        figures |= {"core_per_s_spend": round(done["on"] / busy["on"]), "spend_rent_s": rent_s}
    return figures
