"""Who rents which card: the control plane's file, re-read when it changes (streams/agent/assignments.py)."""

from __future__ import annotations

import json
import os

import pytest

from streams.agent.assignments import AssignmentsFile, parse_assignments
from streams.agent.errors import AssignmentsUnreadable
from streams.agent.metrics import AgentMetrics, Faults
from streams.agent.readings import NOT_RENTED, Assignment
from tests.unit.agent_fakes import FakeClock


def write(path, document, mtime_ns: int) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(document if isinstance(document, str) else json.dumps(document))
    os.utime(temporary, ns=(mtime_ns, mtime_ns))
    os.replace(temporary, path)  # as the control plane should: never half a file


def test_parse():
    cards = parse_assignments(b'{"cards": {"GPU-a": {"tenant": "acme", "instance": "i-1"}, "GPU-b": {"tenant": null, '
                              b'"instance": null}}}')
    assert cards == {"GPU-a": Assignment("acme", "i-1"), "GPU-b": NOT_RENTED}


@pytest.mark.parametrize("raw, why", [
    (b"{", "not JSON"),
    (b"[]", "cards"),
    (b'{"cards": []}', "cards"),
    (b'{"cards": {"GPU-a": "acme"}}', "GPU-a"),
    (b'{"cards": {"GPU-a": {"tenant": "ac me"}}}', "not an id"),
    (b'{"cards": {"GPU-a": {"tenant": "acme", "instance": 7}}}', "instance"),
    (b'{"cards": {"GPU-a": {"tenant": "acme", "plan": "x"}}}', "GPU-a"),
])
def test_malformed(raw, why):
    with pytest.raises(ValueError, match=why):
        parse_assignments(raw)


def test_reloaded_on_change_and_a_malformed_version_keeps_the_last_good_one(tmp_path):
    path = tmp_path / "assignments.json"
    write(path, {"cards": {"GPU-a": {"tenant": "acme", "instance": "i-1"}}}, 1_000_000_000)
    clock = FakeClock(0.0)
    faults = Faults(AgentMetrics(), clock=clock)
    assignments = AssignmentsFile(path, faults=faults, clock=clock)
    assignments.load()
    assert assignments.of("GPU-a") == Assignment("acme", "i-1") and assignments.of("GPU-z") == NOT_RENTED

    write(path, {"cards": {"GPU-a": {"tenant": "beta", "instance": "i-2"}}}, 2_000_000_000)
    assignments.refresh()  # within the second: not looked at yet
    assert assignments.of("GPU-a").tenant == "acme"
    clock.now += 1
    assignments.refresh()
    assert assignments.of("GPU-a") == Assignment("beta", "i-2")

    write(path, '{"cards": {"GPU-a": ', 3_000_000_000)  # malformed
    clock.now += 1
    assignments.refresh()
    clock.now += 1
    assignments.refresh()  # unchanged since: not read (nor reported) again
    assert assignments.of("GPU-a") == Assignment("beta", "i-2")
    assert faults.counts == {"assignments": 1}

    path.unlink()
    clock.now += 1
    assignments.refresh()
    assert assignments.of("GPU-a") == Assignment("beta", "i-2") and faults.counts == {"assignments": 2}

    write(path, {"cards": {}}, 4_000_000_000)
    clock.now += 1
    assignments.refresh()
    assert assignments.of("GPU-a") == NOT_RENTED


@pytest.mark.parametrize("content", [None, "not json"])
def test_missing_or_malformed_at_start_up_refuses(tmp_path, content):
    path = tmp_path / "assignments.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(AssignmentsUnreadable, match="--assignments"):
        AssignmentsFile(path, faults=Faults(AgentMetrics())).load()
