"""Who rents which card: `--assignments FILE`, written by the cloud's control plane.

    {"cards": {"<gpu_uuid>": {"tenant": "<id>", "instance": "<id>"}}}

A card absent from the file is not rented (tenant and instance null). `tenant` is an id
(schemas/ids.py) or null, `instance` a string of 1–128 characters or null.

The file is looked at (stat) at most once a second and read again when its modification
time, size or inode changes: the control plane should write a temporary file and rename
it over this one, so the agent never reads half a file. A file that cannot be read or is
malformed while the agent runs leaves the last good one in force: one `assignments`
fault (a log line, the metric) per change of the file. At start-up there is no last
good one: AssignmentsUnreadable, so a node never sends its rented cards as not rented.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable

from schemas.ids import is_id
from streams.agent.errors import AssignmentsUnreadable
from streams.agent.metrics import Faults
from streams.agent.readings import NOT_RENTED, Assignment

MAX_FILE = 16 << 20


def parse_assignments(data: bytes) -> dict[str, Assignment]:
    """The cards of an assignments document; ValueError saying what is wrong."""
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"not JSON ({exc})") from None
    cards = document.get("cards") if isinstance(document, dict) else None
    if not isinstance(cards, dict):
        raise ValueError('not {"cards": {...}}')
    found: dict[str, Assignment] = {}
    for uuid, entry in cards.items():
        if not isinstance(entry, dict) or set(entry) - {"tenant", "instance"}:
            raise ValueError(f'card {uuid!r}: must be {{"tenant": ..., "instance": ...}}')
        tenant, instance = entry.get("tenant"), entry.get("instance")
        if tenant is not None and not is_id(tenant):
            raise ValueError(f"card {uuid!r}: tenant {tenant!r} is not an id")
        if instance is not None and not (isinstance(instance, str) and 1 <= len(instance) <= 128):
            raise ValueError(f"card {uuid!r}: instance must be a string of 1–128 characters or null")
        found[uuid] = Assignment(tenant, instance)
    return found


class AssignmentsFile:
    """The assignments in force, from `path`."""

    def __init__(self, path: Path, *, faults: Faults, clock: Callable[[], float] = time.monotonic,
                 check_every_s: float = 1.0) -> None:
        self.path = Path(path)
        self.faults = faults
        self.clock = clock
        self.check_every_s = check_every_s
        self.cards: dict[str, Assignment] = {}
        self._seen: tuple[int, int, int] | None = None  # (mtime_ns, size, inode) last read, good or not
        self._checked = float("-inf")

    def load(self) -> None:
        """Read the file at start-up; AssignmentsUnreadable when it cannot be read or is malformed."""
        try:
            self._seen, self.cards = self._read()
        except (OSError, ValueError) as exc:
            raise AssignmentsUnreadable(f"--assignments {self.path}: {exc}; the control plane writes "
                                        '{"cards": {"<gpu_uuid>": {"tenant": "<id>", "instance": "<id>"}}}') from None
        self._checked = self.clock()

    def _read(self) -> tuple[tuple[int, int, int], dict[str, Assignment]]:
        with open(self.path, "rb") as handle:
            stat = os.fstat(handle.fileno())
            data = handle.read(MAX_FILE + 1)
        if len(data) > MAX_FILE:
            raise ValueError(f"larger than {MAX_FILE >> 20} MiB")
        return (stat.st_mtime_ns, stat.st_size, stat.st_ino), parse_assignments(data)

    def of(self, gpu_uuid: str) -> Assignment:
        """Who rents `gpu_uuid` now (NOT_RENTED when nobody does)."""
        return self.cards.get(gpu_uuid, NOT_RENTED)

    def refresh(self) -> None:
        """Read the file again if it changed since it was last read (at most once per
        `check_every_s`); a bad new version is a fault and the last good one stays."""
        now = self.clock()
        if now - self._checked < self.check_every_s:
            return
        self._checked = now
        try:
            stat = os.stat(self.path)
            seen = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        except OSError as exc:
            seen = (-1, -1, -1)
            if self._seen != seen:
                self._seen = seen
                self.faults.report("assignments", f"--assignments {self.path}: cannot be read ({exc.strerror}); "
                                   "the last good assignments stay in force", key=str(seen))
            return
        if seen == self._seen:
            return
        try:
            self._seen, cards = self._read()
        except (OSError, ValueError) as exc:
            self._seen = seen
            self.faults.report("assignments", f"--assignments {self.path}: {exc}; the last good assignments "
                               "stay in force", key=str(seen))
            return
        self.cards = cards
