"""Running `gpubill ...` in the test's process: its exit status, stdout and stderr."""

from __future__ import annotations

import sys


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """`gpubill *args` through the real entry point (environment as the test set it)."""
    from gpubill.cli import main

    monkeypatch.setattr(sys, "argv", ["gpubill", *args])
    # tables as wide as a terminal of 200 columns, whether or not the test process has one
    # (pytest-xdist's workers have none: rich would cut them to 80)
    monkeypatch.setenv("COLUMNS", "200")
    code = 0
    try:
        main()
    except SystemExit as exited:
        code = int(exited.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err
