"""The liveness watchdog (streams/liveness.py, issue 40) with a clock of the test's own: a stall is
lag without committed progress for `stall_s`, and nothing else is."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from streams.liveness import (
    WAITING_BATCHES, WAITING_CLICKHOUSE, WAITING_KAFKA, WAITING_REBALANCE, Observation, Watchdog,
)
from streams.metrics import Metrics

U0, U1, P0 = ("gpu.usage.v1", 0), ("gpu.usage.v1", 1), ("gpu.power.v1", 0)


def seen(ends, committed, **kwargs) -> Observation:
    return Observation(ends=dict(ends), committed=dict(committed), **kwargs)


def run(watchdog: Watchdog, steps):
    """Observe each (second, observation) in turn; the verdicts."""
    return [watchdog.observe(observation, now) for now, observation in steps]


def test_lag_without_progress_for_stall_s_is_a_stall_and_not_a_second_earlier():
    dog = Watchdog(stall_s=10)
    # assigned at t=0 with 50 behind on U0 (end 150, committed 100); nothing moves
    verdicts = run(dog, [(t, seen({U0: 150, U1: 20}, {U0: 100, U1: 20})) for t in (0, 5, 9.9, 10, 12)])
    assert [v.stalled for v in verdicts] == [False, False, False, True, True]
    stall = verdicts[3]
    assert stall.partitions == (("gpu.usage.v1", 0, 50),)  # U1 has no lag: not named
    assert stall.lag == 50 and stall.stalled_s == 10 and stall.new and stall.restart
    assert stall.waiting_on == WAITING_KAFKA  # nothing in flight, nothing retried
    assert verdicts[4].stalled_s == 12 and not verdicts[4].new  # the same stall: logged and counted once


def test_no_alarm_without_lag_however_long_nothing_moves():
    dog = Watchdog(stall_s=10)
    verdicts = run(dog, [(t, seen({U0: 100, P0: 7}, {U0: 100, P0: 7})) for t in range(0, 1000, 5)])
    assert not any(v.stalled for v in verdicts)


def test_progress_restarts_the_clock():
    dog = Watchdog(stall_s=10)
    verdicts = run(dog, [
        (0, seen({U0: 500}, {U0: 100})),
        (8, seen({U0: 500}, {U0: 200})),  # moved at 8: the clock restarts there
        (17, seen({U0: 600}, {U0: 200})),  # 9 s after the move: not yet
        (18, seen({U0: 600}, {U0: 200})),  # 10 s after it
    ])
    assert [v.stalled for v in verdicts] == [False, False, False, True]
    assert verdicts[3].stalled_s == 10


def test_a_recovered_stall_ends_and_a_later_one_is_new_again():
    dog = Watchdog(stall_s=10)
    verdicts = run(dog, [
        (0, seen({U0: 500}, {U0: 100})),
        (10, seen({U0: 500}, {U0: 100})),  # stalled
        (12, seen({U0: 500}, {U0: 500})),  # caught up
        (13, seen({U0: 900}, {U0: 500})),  # new lag: its clock stands at 12 (its last observation without lag)
        (21, seen({U0: 900}, {U0: 500})),  # 9 s
        (22, seen({U0: 900}, {U0: 500})),  # 10 s: a second stall
    ])
    assert [(v.stalled, v.new) for v in verdicts] == [
        (False, False), (True, True), (False, False), (False, False), (False, False), (True, True)]


def test_an_idle_partition_starts_its_clock_when_lag_appears_not_at_its_last_commit():
    dog = Watchdog(stall_s=10)
    verdicts = run(dog, [
        (0, seen({U0: 100}, {U0: 100})),
        (300, seen({U0: 100}, {U0: 100})),  # idle for five minutes
        (302, seen({U0: 160}, {U0: 100})),  # readings arrive: clock still at 300 (its last idle observation)
        (309, seen({U0: 160}, {U0: 100})),
        (310, seen({U0: 160}, {U0: 100})),
    ])
    assert [v.stalled for v in verdicts] == [False, False, False, False, True]


def test_a_newly_assigned_partition_has_stall_s_of_grace():
    dog = Watchdog(stall_s=10)
    verdicts = run(dog, [
        (0, seen({U0: 100}, {U0: 100})),
        (50, seen({U0: 100, U1: 900}, {U0: 100, U1: 0})),  # U1 assigned at 50 with 900 behind
        (59, seen({U0: 100, U1: 900}, {U0: 100, U1: 0})),
        (60, seen({U0: 100, U1: 900}, {U0: 100, U1: 0})),
    ])
    assert [v.stalled for v in verdicts] == [False, False, False, True]
    assert verdicts[3].partitions == (("gpu.usage.v1", 1, 900),)


def test_a_rebalance_restarts_every_clock_and_is_not_judged_while_it_lasts():
    dog = Watchdog(stall_s=10)
    verdicts = run(dog, [
        (0, seen({U0: 500}, {U0: 100})),
        (6, seen({}, {U0: 100}, rebalancing=True)),
        (9, seen({}, {U0: 100}, rebalancing=True)),
        (12, seen({U0: 500}, {U0: 100})),  # 12 s without progress, but assigned again at 12: grace
        (21, seen({U0: 500}, {U0: 100})),
        (22, seen({U0: 500}, {U0: 100})),
    ])
    assert [v.stalled for v in verdicts] == [False, False, False, False, False, True]


def test_a_rebalance_that_lasts_stall_s_is_a_stall_itself():
    dog = Watchdog(stall_s=10)
    verdicts = run(dog, [(t, seen({}, {}, rebalancing=True)) for t in (0, 5, 10)])
    assert [v.stalled for v in verdicts] == [False, False, True]
    assert verdicts[2].waiting_on == WAITING_REBALANCE and verdicts[2].restart and verdicts[2].partitions == ()


def test_a_partition_given_up_is_forgotten():
    dog = Watchdog(stall_s=10)
    verdicts = run(dog, [
        (0, seen({U0: 500, U1: 500}, {U0: 100, U1: 100})),
        (5, seen({U1: 500}, {U1: 400})),  # U0 went to another worker; U1 moves
        (10, seen({U0: 500, U1: 500}, {U0: 100, U1: 500})),  # U0 back at 10: new grace
        (19, seen({U0: 500, U1: 500}, {U0: 100, U1: 500})),
    ])
    assert not any(v.stalled for v in verdicts)


def test_sink_retries_since_the_last_progress_say_clickhouse_and_do_not_restart():
    dog = Watchdog(stall_s=10)
    verdicts = run(dog, [
        (0, seen({U0: 500}, {U0: 100}, sink_retries=7)),  # 7 retries of an outage long ago
        (10, seen({U0: 500}, {U0: 100}, sink_retries=7, batches_in_flight=2)),
        (12, seen({U0: 500}, {U0: 100}, sink_retries=9, batches_in_flight=2)),  # retrying now
    ])
    assert [v.stalled for v in verdicts] == [False, True, True]
    assert (verdicts[1].waiting_on, verdicts[1].restart) == (WAITING_BATCHES, True)  # old retries are history
    assert (verdicts[2].waiting_on, verdicts[2].restart) == (WAITING_CLICKHOUSE, False)


def test_a_pause_restarts_every_clock():
    dog = Watchdog(stall_s=10)
    assert not dog.observe(seen({U0: 500}, {U0: 100}), 0).stalled
    dog.pause()  # the broker did not answer for a while
    assert not dog.observe(seen({U0: 500}, {U0: 100}), 30).stalled  # 30 s without progress, but judged afresh
    assert dog.observe(seen({U0: 500}, {U0: 100}), 40).stalled


def test_zero_is_off_not_a_watchdog():
    with pytest.raises(ValueError, match="0 turns the check off"):
        Watchdog(stall_s=0)


def test_the_gauges_follow_the_verdicts_and_a_stall_is_counted_once():
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    dog = Watchdog(stall_s=10)
    for now, observation in [(0, seen({U0: 500}, {U0: 100})), (10, seen({U0: 500}, {U0: 100})),
                             (14, seen({U0: 500}, {U0: 100}))]:
        metrics.liveness(dog.observe(observation, now))
    value = registry.get_sample_value
    assert value("gpubill_worker_stalled") == 1 and value("gpubill_worker_stalled_seconds") == 14
    assert value("gpubill_worker_stalls_total", {"waiting_on": "kafka"}) == 1  # two stalled verdicts, one stall
    metrics.liveness(dog.observe(seen({U0: 500}, {U0: 500}), 15))
    assert value("gpubill_worker_stalled") == 0 and value("gpubill_worker_stalled_seconds") == 0
