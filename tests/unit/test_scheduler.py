"""Which periods the monthly job invoices: closed ones (end + grace), not yet run."""

from __future__ import annotations

from datetime import datetime, timezone

from billing.scheduler import due_periods
from billing_rules import DEFAULT_RULES_DIR, load_rules

RULES = load_rules(DEFAULT_RULES_DIR)  # Asia/Shanghai, grace P3D


def at(text: str) -> int:
    return int(datetime.fromisoformat(text).astimezone(timezone.utc).timestamp())


def test_a_period_is_due_only_after_its_grace():
    # March ends 2026-04-01T00:00+08:00; + 3 days grace = 2026-04-04T00:00+08:00
    assert "2026-03" not in due_periods(RULES, at("2026-04-03T23:59:59+08:00"), set())
    assert "2026-03" in due_periods(RULES, at("2026-04-04T00:00:00+08:00"), set())


def test_the_current_period_is_never_due_and_completed_runs_are_skipped():
    now = at("2026-04-10T12:00:00+08:00")
    due = due_periods(RULES, now, {"2026-02"})
    assert "2026-04" not in due and "2026-02" not in due
    assert due == sorted(due) and due[-1] == "2026-03"


def test_a_scheduler_that_was_down_for_months_catches_up_oldest_first():
    due = due_periods(RULES, at("2026-11-30T12:00:00+08:00"), set(), lookback=3)
    # November is open; October, September and August are closed and due
    assert due == ["2026-08", "2026-09", "2026-10"]
