"""Running `gpubill ...` in the test's process: its exit status, stdout and stderr."""

from __future__ import annotations

import sys


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """`gpubill *args` through the real entry point (environment as the test set it)."""
    from gpubill.cli import main

    monkeypatch.setattr(sys, "argv", ["gpubill", *args])
    code = 0
    try:
        main()
    except SystemExit as exited:
        code = int(exited.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err
