"""Reload the rule files when they change; an invalid edit is refused whole and the last good
set stays in use (metric gpubill_rules_invalid). The mechanism is billing_rules/reloading.py's,
shared with the scheduler and the tenant API; this adds the pipeline's side: the rater prices
with the new set from the next batch on."""

from __future__ import annotations

from pathlib import Path

from billing_rules.reloading import RuleFiles
from streams.pipeline import Pipeline

RULES_POLL_S = 10.0


class RulesWatcher:
    """Reloads the pipeline's rule set when its files change; keeps the last good set when they are invalid."""

    def __init__(self, directory: Path, pipeline: Pipeline) -> None:
        self.files = RuleFiles(directory, pipeline.rules)
        self.pipeline = pipeline

    def poll(self) -> bool:
        """Reload if the files changed; True when a new rule set is in use."""
        changed = self.files.reload()
        if changed:
            self.pipeline.use_rules(self.files.rules)
        if self.pipeline.metrics:
            self.pipeline.metrics.rules_invalid.set(int(self.files.invalid))
        return changed
