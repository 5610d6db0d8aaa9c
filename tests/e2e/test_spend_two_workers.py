"""Two workers sharing the partitions agree on live spend (issue 15): each rates half the
reading partitions and tracks half the tenants' partitions of the spend table; together they
hold every second once, emit each billing event once, and store the same month to date that
the invoice arithmetic gives. Real parts: a fresh broker, chDB served by the gateway (one
process may open it), two long-running `gpubill worker` processes."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from tests.e2e.faults_helpers import committed_total, dumps, fen, fleet, start_worker, truth_of, wait_until, write_ndjson
from tests.e2e.test_spend_e2e import (
    assert_emitted_once,
    current_start,
    due,
    month_to_date,
    period_of,
    readings_from,
    register,
    stream_figures,
)
from tests.e2e.test_two_workers import members_holding_partitions, shared, stop  # noqa: F401 - `shared` is a fixture

pytestmark = pytest.mark.e2e


def spend_members(bootstrap: str, rating_group: str) -> list[frozenset[int]]:
    """The spend-topic partitions each member of the tracker group holds ([] while unstable)."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    group = f"{rating_group}.spend"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        described = admin.describe_groups([group])[group]
    except KafkaError:
        return []
    finally:
        admin.close()
    if described["group_state"] != "Stable":
        return []
    return [frozenset(p for held in member["member_assignment"]["assigned_partitions"]
                      if held["topic"] == f"{rating_group}.spend.v2" for p in held["partitions"])
            for member in described["members"]]


def test_two_workers_sharing_the_partitions_agree(shared, broker, tmp_path):  # noqa: F811 - the fixture
    start = current_start(600)
    period = period_of(start)
    readings = readings_from(start, 600, fleet(600))
    truth = truth_of(readings)
    budget = Fraction(int(month_to_date(truth, "acme") * 9 / 10))
    top_up = Fraction(int(month_to_date(truth, "beta") * 7 / 10))
    register(shared, acme_budget=str(budget), beta_top_up=str(top_up))
    expected = due(truth, acme_budget=budget, beta_top_up=top_up, period=period)
    shared.env["GPUBILL_SPEND_CONTEXT_S"] = "1"
    shared.env["GPUBILL_SPEND_TRACKER"] = "inline"  # each worker runs its share of the tracker (as `up` does)

    def logs() -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(tmp_path.glob("worker*.log")))

    workers = [start_worker(shared, log=tmp_path / f"worker{i}.log") for i in (1, 2)]
    try:
        assert wait_until(lambda: members_holding_partitions(broker.bootstrap, broker.group) == 2, 90, 0.5), logs()
        shared.run("replay", str(write_ndjson(tmp_path / "readings.ndjson", [dumps(r) for r in readings])))
        assert wait_until(lambda: committed_total(broker.bootstrap, broker.group) == len(readings), 120, 0.5), logs()
        held = spend_members(broker.bootstrap, broker.group)
        assert len(held) == 2 and all(held) and not held[0] & held[1], held  # both track, none twice

        def table_complete() -> bool:
            figures = [stream_figures(shared, tenant, period) for tenant in ("acme", "beta")]
            return all(f and (f["rented_seconds"], f["energy_mj"]) == (truth.rent_seconds[t], truth.energy_mj[t])
                       for f, t in zip(figures, ("acme", "beta")))

        assert wait_until(table_complete, 60, 1.0), logs()
        # the events of both tenants, whichever worker tracks them: each once, none missing
        assert wait_until(lambda: _emitted(broker.bootstrap, expected), 30, 1.0), logs()
        assert_emitted_once(broker.bootstrap, expected, period)
        # the positions they stored: the month to date the invoice arithmetic gives, to the fen
        for tenant in ("acme", "beta"):
            want = fen(month_to_date(truth, tenant))
            assert wait_until(lambda: (_live(shared, tenant) or {}).get("month_to_date") == want, 30, 1.0), \
                (tenant, _live(shared, tenant), want)
        assert all(w.poll() is None for w in workers), logs()
    finally:
        codes = [stop(worker) for worker in workers]
    assert codes == [0, 0], logs()


def _emitted(bootstrap: str, expected: set) -> bool:
    from tests.e2e.test_spend_e2e import billing_events, event_keys

    return expected <= set(event_keys(billing_events(bootstrap)))


def _live(gpubill, tenant: str) -> dict | None:
    return json.loads(gpubill.run("spend", "--tenant", tenant, "--json").stdout)["stream"]
