"""What the benchmarks read of the processes they start."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (/proc/<pid>/stat; 0 where unreadable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0
