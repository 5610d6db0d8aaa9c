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
