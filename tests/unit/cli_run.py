"""Running `gpubill ...` in the test's process: its exit status, stdout and stderr."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """`gpubill *args` through the real entry point (environment as the test set it)."""
    from gpubill.cli import main

    from gpubill.cli.common import err, out

    monkeypatch.setattr(sys, "argv", ["gpubill", *args])
    # tables as wide as COLUMNS says (200 unless the test set it), whether or not the test
    # process has a terminal: rich reads COLUMNS once, when the console is made at import,
    # and pytest-xdist's workers have no terminal (rich would cut tables to 80)
    width = int(os.environ.get("COLUMNS", "200"))
    for console in (out, err):
        monkeypatch.setattr(console, "_width", width)
    code = 0
    try:
        main()
    except SystemExit as exited:
        code = int(exited.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# `gpubill` in a process of its own, as unit tests run it: [sys.executable, UNLOGGED_CLI, *args]
UNLOGGED_CLI = str(Path(__file__).with_name("unlogged_cli.py"))
