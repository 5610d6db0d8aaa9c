"""Rule sets on the books (issue 37): every rule set that priced money, its files' text by revision.

    record_rule_set(db, rules, directory)   the files of `rules` recorded once per revision
    rule_set_files(db, revision)            {file name: text} of a recorded revision, None when unknown
    rules_of(db, revision)                  that rule set loaded again from its recorded files, None when unknown
    priced_under(db)                        {period: revision} the books say priced each invoiced period

The revision that priced an invoice is on it (rules_revision) and on a re-rating (rerate_runs);
the files are here, so that what priced a document can always be read back, and a rebuild
prices each invoiced period under the revision that priced it (gpubill/cli/rebuild.py).
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

import orjson

from billing import books
from billing.tenants import utc_ms
from billing_rules.loader import RULE_FILES
from schemas.books import RuleSetLoaded, RuleSetRow

__all__ = ["priced_under", "record_rule_set", "rule_set_files", "rules_of"]


def _revision_of(files: dict[str, bytes]) -> str:
    """RuleSet.revision of these files (billing_rules/loader.py computes it the same way)."""
    sha = hashlib.sha256()
    for name in RULE_FILES:
        data = files[name]
        sha.update(f"{name}\0{len(data)}\0".encode() + data)
    return sha.hexdigest()[:12]  # RuleSet.revision: the first 12 hex digits


def record_rule_set(db: Any, rules: Any, directory: Path) -> bool:
    """Record the files of `directory` as rule set `rules.revision` unless the books have it;
    True when recorded now. Nothing when the files on disk are no longer the ones `rules` was
    loaded from (they changed since): the next command records what it loads."""
    if db.query("SELECT count() FROM rule_sets WHERE revision = {r:String}", {"r": rules.revision})[0][0]:
        return False
    try:
        files = {name: (directory / name).read_bytes() for name in RULE_FILES}
    except OSError:
        return False
    if _revision_of(files) != rules.revision:
        return False
    text = {name: data.decode("utf-8") for name, data in files.items()}
    books.record(db, RuleSetLoaded(kind="rules_loaded", rule_set=RuleSetRow(
        revision=rules.revision, files=orjson.dumps(text, option=orjson.OPT_SORT_KEYS).decode(),
        first_loaded_at=utc_ms(None))))
    return True


def rule_set_files(db: Any, revision: str) -> dict[str, str] | None:
    rows = db.query("SELECT files FROM rule_sets FINAL WHERE revision = {r:String}", {"r": revision})
    return orjson.loads(rows[0][0]) if rows else None


def rules_of(db: Any, revision: str) -> Any:
    """The rule set `revision` loaded from its recorded files (byte for byte what was hashed), or
    None when the books do not have it; RuleSetInvalid should those files no longer load."""
    files = rule_set_files(db, revision)
    if files is None:
        return None
    from billing_rules import load_rules

    with tempfile.TemporaryDirectory(prefix="gpubill-rules-") as directory:
        for name, text in files.items():
            (Path(directory) / name).write_bytes(text.encode("utf-8"))
        loaded = load_rules(Path(directory))
    if loaded.revision != revision:
        raise ValueError(f"rule set {revision} on the books loads as {loaded.revision}")
    return loaded


# Per period: the revision of its latest re-rating, else the one revision its standing invoices
# (issued, voided) were priced under — none when they disagree or did not record it.
_PRICED_SQL = """
SELECT period, argMax(rules_revision, finished_at) FROM rerate_runs FINAL WHERE rules_revision != '' GROUP BY period
UNION ALL
SELECT period, any(rules_revision) FROM invoices FINAL
WHERE status IN ('issued', 'voided') AND period NOT IN (SELECT period FROM rerate_runs)
GROUP BY period HAVING uniqExact(rules_revision) = 1 AND any(rules_revision) != ''
"""


def priced_under(db: Any) -> dict[str, str]:
    """{period: the revision that priced it}: its latest re-rating's, else its invoices' when they
    agree. A period whose invoices were priced under several (a rule edit between two runs of
    it) is left out: the rated data does not say which hour was priced under which."""
    return {period: revision for period, revision in db.query(_PRICED_SQL)}
