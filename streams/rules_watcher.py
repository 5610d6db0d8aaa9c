"""Reload the rule files when they change; an invalid edit is refused whole and the last good
set stays in use (metric gpubill_rules_invalid)."""

from __future__ import annotations

import logging
from pathlib import Path

from billing_rules import BillingRulesError, load_rules
from streams.pipeline import Pipeline

log = logging.getLogger("gpubill.worker")

RULES_POLL_S = 10.0


class RulesWatcher:
    """Reloads the rule set when its files change; keeps the last good set when they are invalid."""

    def __init__(self, directory: Path, pipeline: Pipeline) -> None:
        self.directory = directory
        self.pipeline = pipeline
        self.seen = self._stamp()

    def _stamp(self) -> tuple:
        try:
            return tuple(sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in self.directory.glob("*.toml")))
        except OSError:
            return ()

    def poll(self) -> bool:
        """Reload if the files changed; True when a new rule set is in use."""
        stamp = self._stamp()
        if stamp == self.seen:
            return False
        self.seen = stamp
        try:
            rules = load_rules(self.directory)
        except BillingRulesError as exc:
            log.error("rule files changed but are invalid, still pricing with the last good set: %s", exc)
            if self.pipeline.metrics:
                self.pipeline.metrics.rules_invalid.set(1)
            return False
        self.pipeline.use_rules(rules)
        if self.pipeline.metrics:
            self.pipeline.metrics.rules_invalid.set(0)
        log.warning("rule files changed: now pricing with rule set %s", rules.digest[:12])
        return True
