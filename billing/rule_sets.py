"""Rule sets on the books (issue 37): every rule set that priced money, its files' text by revision.

    record_rule_set(db, rules, directory)   the files of `rules` recorded once per revision
    rule_set_files(db, revision)            {file name: text} of a recorded revision, None when unknown

The revision that priced an invoice is on it (rules_revision) and on the rated generations; the
files are here, so that what priced a document can always be read back. (A rebuild rates the
readings under the rules in use now; pricing each hour under its own revision is not built yet.)
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import orjson

from billing import books
from billing.tenants import utc_ms
from billing_rules.loader import RULE_FILES
from schemas.books import RuleSetLoaded, RuleSetRow

__all__ = ["record_rule_set", "rule_set_files"]


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
