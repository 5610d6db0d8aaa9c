"""Errors of the billing rules: short classes on one base, one-line messages.

    BillingRulesError                 base; never raised itself
    ├── RuleSetInvalid                a rule directory or file is missing, unreadable or
    │                                 inconsistent; str() is "<file>: <place>: <reason>"
    ├── UnknownSite (LookupError)     a site id the rules do not define
    ├── UnknownModel (LookupError)    a GPU model id the catalog does not define
    ├── NoRuleInForce (LookupError)   the id exists but no version is in force at that second
    └── InvalidPeriod (ValueError)    a billing period that is not "YYYY-MM"

`RuleSetInvalid` is raised only by `load_rules`, and only before anything is returned,
so a caller never holds a half-loaded rule set. The lookup errors are raised by
`RuleSet` methods; callers that validated a reading against `has_site`/`has_model` first
only see `NoRuleInForce` (a reading older than the first `effective_from`).
"""

from __future__ import annotations


class BillingRulesError(Exception):
    """Base of every error raised by `billing_rules`; str() is one line meant for the user.

    LookupError subclasses override KeyError-style quoting: str() is the message as given.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


MAX_REASON = 300  # characters: a reason quoting a hostile value (a 100 kB time zone) stays one short line


class RuleSetInvalid(BillingRulesError):
    """The rule set cannot be used. Fix the named file and entry, then run `gpubill rules check`.

    `file` is the rule file with its folder as the directory was given (or the directory when
    it is the directory that is wrong), `place` the entry inside it (e.g. ``site[gz-guian].tariff[0].bands``), and
    `reason` what is wrong with it.
    """

    def __init__(self, file: str, place: str, reason: str) -> None:
        self.file = file
        self.place = place
        self.reason = reason if len(reason) <= MAX_REASON else reason[:MAX_REASON - 1] + "…"
        super().__init__(" ".join(f"{file}: {place}: {self.reason}".split("\n")))


class UnknownSite(BillingRulesError, LookupError):
    """Raised for a site id that sites.toml does not define; check with `RuleSet.has_site` first."""


class UnknownModel(BillingRulesError, LookupError):
    """Raised for a GPU model that catalog.toml does not define; check with `RuleSet.has_model` first."""


class NoRuleInForce(BillingRulesError, LookupError):
    """Raised when the entry exists but its first `effective_from` is after the second asked for."""


class InvalidPeriod(BillingRulesError, ValueError):
    """Raised for a billing period string that is not "YYYY-MM" with a month 01–12."""
