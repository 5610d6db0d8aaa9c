"""Reload the rule files when they change; an invalid edit is refused whole and the last good
set stays in use (metric gpubill_rules_invalid). The mechanism is billing_rules/reloading.py's,
shared with the scheduler and the tenant API; this adds the pipeline's side: the rater prices
with the new set from the next batch on."""

from __future__ import annotations

import logging
from pathlib import Path

from billing_rules.reloading import RuleFiles
from streams.pipeline import Pipeline

RULES_POLL_S = 10.0

log = logging.getLogger("gpubill.rules")


class RulesWatcher:
    """Reloads the pipeline's rule set when its files change; keeps the last good set when they are invalid."""

    def __init__(self, directory: Path, pipeline: Pipeline) -> None:
        self.files = RuleFiles(directory, pipeline.rules)
        self.pipeline = pipeline

    def poll(self) -> bool:
        """Reload if the files changed; True when a new rule set is in use."""
        changed = self.files.reload()
        if changed:
            try:
                self.pipeline.use_rules(self.files.rules)
            except Exception as exc:  # noqa: BLE001 - a set the rater cannot take must not stop the worker
                log.error("rule files in %s are valid but the rater refused them; still pricing with the last good "
                          "set (%s): %s", self.files.directory, self.pipeline.rules.digest[:12],
                          " ".join(f"{type(exc).__name__}: {exc}".split())[:300])
                self.files.invalid = True
                changed = False
        if self.pipeline.metrics:
            self.pipeline.metrics.rules_invalid.set(int(self.files.invalid))
        return changed
