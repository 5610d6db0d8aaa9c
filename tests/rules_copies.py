"""Copies of the test rule set (tests/e2e/rules) with one setting changed, for tests that need it."""

from __future__ import annotations

import shutil
from pathlib import Path

TEST_RULES = Path(__file__).parent / "e2e" / "rules"


def manual_review_rules(directory: Path) -> Path:
    """`directory`: the test rules with `review = "manual"` in billing.toml (drafts under review)."""
    shutil.copytree(TEST_RULES, directory)
    billing = directory / "billing.toml"
    billing.write_text(billing.read_text(encoding="utf-8").replace(
        "payment_terms_days = 15\n", "payment_terms_days = 15\nreview = \"manual\"\n", 1), encoding="utf-8")
    return directory


def dunning_rules(directory: Path, overdue_days: str = "[1, 7, 14]", suspend_days: int | None = 30) -> Path:
    """`directory`: the test rules with a [dunning] table in billing.toml (billing_rules/dunning.py)."""
    shutil.copytree(TEST_RULES, directory)
    billing = directory / "billing.toml"
    suspend = f"suspend_new_rentals_days = {suspend_days}\n" if suspend_days is not None else ""
    billing.write_text(billing.read_text(encoding="utf-8") + f"\n[dunning]\noverdue_days = {overdue_days}\n{suspend}",
                       encoding="utf-8")
    return directory
