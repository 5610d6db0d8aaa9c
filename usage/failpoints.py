"""Fault injection for the crash tests: named pauses that production never takes.

`pause_at(name)`: while the file `$GPUBILL_FAILPOINTS/<name>` exists, say so in
`<name>.reached` and wait the seconds written in it, or until the test removes the file —
time for a test to kill -9 the process exactly there, or to hold it there until another
process has reached a point of its own. With GPUBILL_FAILPOINTS unset (production) it
costs one getenv.

The file may name which time the process passes the point it pauses at: "600 3" waits
600 s the third time this process gets there and lets the first two pass (a command that
records several facts — an invoice run's rule set, then one invoice per tenant — is killed
at the one a test chooses). Without it, the first time and every time after.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

_passed: Counter[str] = Counter()  # how often this process got to each armed point


def pause_at(name: str) -> None:
    """Pause at the failpoint `name` when a test armed it (see the module docstring)."""
    directory = os.environ.get("GPUBILL_FAILPOINTS")
    if not directory:
        return
    armed = Path(directory, name)
    try:
        delay, _, nth = armed.read_text().partition(" ")
        delay_s, nth_time = float(delay or 0), int(nth or 1)
    except (OSError, ValueError):
        return
    _passed[name] += 1
    if _passed[name] < nth_time:
        return
    Path(directory, f"{name}.reached").touch()
    deadline = time.monotonic() + delay_s
    while time.monotonic() < deadline and armed.exists():
        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
