"""The worker picks up edited rules, and keeps the last good set when an edit is invalid."""

from __future__ import annotations

import shutil
from decimal import Decimal

from billing_rules import DEFAULT_RULES_DIR, load_rules
from streams.pipeline import Pipeline
from streams.rules_watcher import RulesWatcher
from streams.rating.reference_batch import PythonRater

MARCH_1 = 1772323200  # 2026-03-01T00:00:00Z


def test_valid_edit_is_used_and_invalid_edit_is_refused_whole(tmp_path):
    rules_dir = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules_dir)
    first = load_rules(rules_dir)
    pipeline = Pipeline(rules=first, sink=None, rater=PythonRater(first))
    watcher = RulesWatcher(rules_dir, pipeline)
    assert watcher.poll() is False  # nothing changed

    sites = rules_dir / "sites.toml"
    sites.write_text(sites.read_text().replace("price_per_kwh = 0.33 }", "price_per_kwh = 0.34 }"))
    assert watcher.poll() is True
    assert pipeline.rules is not first and pipeline.rater.rules is pipeline.rules
    assert pipeline.rules.energy_rate("gz-guian", MARCH_1).tariff_per_kwh == Decimal("0.34")

    good = pipeline.rules
    sites.write_text(sites.read_text().replace("pue = 1.12", "pue = 0.5"))  # PUE < 1: invalid
    assert watcher.poll() is False
    assert pipeline.rules is good  # still the last good set
    assert pipeline.rules.energy_rate("gz-guian", MARCH_1).pue == Decimal("1.12")
