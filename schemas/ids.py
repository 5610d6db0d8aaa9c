"""The one id syntax of gpubill (SPEC §3: "an id in the rule files' id syntax").

Tenants, sites, models, plans and credits are named by ids: an ASCII letter or digit, then
up to 63 letters, digits, `.`, `_` or `-`. Nothing else — no `/`, spaces, control or
look-alike characters — so an id is safe in a log line, a terminal, SQL parameters and a
metric label. It is still never used as a file name as is (see reports' file naming).
"""

from __future__ import annotations

import re

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
MAX_ID_LEN = 64
_ID = re.compile(ID_PATTERN)


def is_id(value: object) -> bool:
    """True when `value` is a str in the id syntax (`re.fullmatch`: no trailing newline)."""
    return isinstance(value, str) and _ID.fullmatch(value) is not None
