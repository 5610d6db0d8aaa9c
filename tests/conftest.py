"""What every test process shares: the migrated chDB template (tests/chdb_template.py), made first,
while no test holds a database open (chDB runs one at a time in a process)."""

from __future__ import annotations

import pytest

from tests.chdb_template import make_template


@pytest.fixture(scope="session", autouse=True)
def _chdb_template():
    make_template()
