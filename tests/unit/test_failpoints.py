"""usage/failpoints.py: a pause a test arms by a file, at the time it names."""

from __future__ import annotations

import time

from usage import failpoints
from usage.failpoints import pause_at


def test_unarmed_points_cost_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("GPUBILL_FAILPOINTS", raising=False)
    pause_at("anywhere")
    monkeypatch.setenv("GPUBILL_FAILPOINTS", str(tmp_path))
    pause_at("anywhere")
    assert list(tmp_path.iterdir()) == []


def test_a_point_armed_for_its_third_time_lets_two_pass_then_pauses_each_time(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBILL_FAILPOINTS", str(tmp_path))
    monkeypatch.setattr(failpoints, "_passed", failpoints.Counter())
    (tmp_path / "books-appended").write_text("0.2 3")
    waited = []
    for _ in range(4):
        started = time.monotonic()
        pause_at("books-appended")
        waited.append(time.monotonic() - started)
        if len(waited) == 2:
            assert not (tmp_path / "books-appended.reached").exists()
    assert [w >= 0.2 for w in waited] == [False, False, True, True], waited
    assert (tmp_path / "books-appended.reached").exists()


def test_a_point_armed_without_a_time_pauses_the_first_time(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBILL_FAILPOINTS", str(tmp_path))
    monkeypatch.setattr(failpoints, "_passed", failpoints.Counter())
    (tmp_path / "invoice-header").write_text("0.1")
    started = time.monotonic()
    pause_at("invoice-header")
    assert time.monotonic() - started >= 0.1 and (tmp_path / "invoice-header.reached").exists()
