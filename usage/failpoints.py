"""Fault injection for the crash tests: named pauses that production never takes.

`pause_at(name)`: while the file `$GPUBILL_FAILPOINTS/<name>` exists, say so in
`<name>.reached` and wait the seconds written in it, or until the test removes the file —
time for a test to kill -9 the process exactly there, or to hold it there until another
process has reached a point of its own. With GPUBILL_FAILPOINTS unset (production) it
costs one getenv.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def pause_at(name: str) -> None:
    """Pause at the failpoint `name` when a test armed it (see the module docstring)."""
    directory = os.environ.get("GPUBILL_FAILPOINTS")
    if not directory:
        return
    try:
        delay_s = float(Path(directory, name).read_text() or 0)
    except (OSError, ValueError):
        return
    armed = Path(directory, name)
    Path(directory, f"{name}.reached").touch()
    deadline = time.monotonic() + delay_s
    while time.monotonic() < deadline and armed.exists():
        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
