"""The rule files of a directory, reloaded when they change: the one mechanism every long-running
part uses — the worker (streams/rules_watcher.py), the scheduler (`gpubill scheduler`,
billing/scheduler.py `add_jobs`) and the tenant API (tenant_api/server.py).

    files = RuleFiles(directory, rules)    the set in use now: `rules`, already loaded from there
    files.reload() -> bool                 True when the files changed and a new set is in use
    files()                                reload, then the set in use (a rules source to call per run)

A change is seen by the files' names, sizes and modification times (a stat of each, no read
while nothing changed). A changed directory is loaded whole by `load_rules` (validated as a
set); an invalid edit is refused whole, logged at ERROR with the file, place and reason, and
the last good set stays in use until a valid edit (`invalid` says so meanwhile). When to poll
is the caller's: no clock here.
"""

from __future__ import annotations

import logging
from pathlib import Path

from billing_rules.errors import BillingRulesError
from billing_rules.loader import load_rules
from billing_rules.ruleset import RuleSet

__all__ = ["RuleFiles"]

log = logging.getLogger("gpubill.rules")


class RuleFiles:
    """The rule set in use for `directory`; see the module docstring."""

    def __init__(self, directory: Path | str, rules: RuleSet | None = None) -> None:
        self.directory = Path(directory)
        self._stamp = self._files()
        self.rules = rules if rules is not None else load_rules(self.directory)
        self.invalid = False  # True while the files on disk are invalid (the last good set is in use)

    def reload(self) -> bool:
        """Load the files again if they changed since last seen; True when a new set is in use."""
        stamp = self._files()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            rules = load_rules(self.directory)
        except BillingRulesError as exc:
            self.invalid = True
            log.error("rule files in %s changed but are invalid; still using the last good set (%s): %s",
                      self.directory, self.rules.digest[:12], exc)
            return False
        self.rules, self.invalid = rules, False
        log.warning("rule files in %s changed: now using rule set %s", self.directory, rules.digest[:12])
        return True

    def __call__(self) -> RuleSet:
        """The set to use now (after `reload`)."""
        self.reload()
        return self.rules

    def _files(self) -> tuple:
        try:
            return tuple(sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in self.directory.glob("*.toml")))
        except OSError:
            return ()
