"""The API's limits, cache, access recorder and problems, on a fake clock (no database)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import orjson
import pytest

from tenant_api.cache import TtlCache
from tenant_api.limits import AuthThrottle, DownloadSlots, RateLimiter
from tenant_api.problems import Problem, bad_param
from tenant_api.records import AccessRecorder, RequestInfo


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_rate_limiter_is_a_token_bucket_per_key():
    clock = Clock()
    limiter = RateLimiter(rate_per_s=2.0, burst=3, clock=clock)
    assert [limiter.take("a") for _ in range(4)] == [0, 0, 0, 1]  # burst of 3, then wait ½ s → 1 s
    assert limiter.take("b") == 0  # another key has its own bucket
    clock.now += 0.5  # one token back at 2/s
    assert limiter.take("a") == 0 and limiter.take("a") == 1
    clock.now += 100  # refills to the burst, not beyond
    assert [limiter.take("a") for _ in range(4)] == [0, 0, 0, 1]


def test_rate_limiter_retry_after_rounds_up_to_whole_seconds():
    clock = Clock()
    limiter = RateLimiter(rate_per_s=0.1, burst=1, clock=clock)
    assert limiter.take("a") == 0
    assert limiter.take("a") == 10  # 1 token / 0.1 per s


def test_rate_limiter_forgets_the_oldest_keys_past_its_bound():
    limiter = RateLimiter(rate_per_s=1.0, burst=1, clock=Clock(), max_tracked=2)
    for key in ("a", "b", "c"):
        limiter.take(key)
    assert list(limiter._buckets) == ["b", "c"]


def test_auth_throttle_blocks_after_n_failures_until_the_oldest_leaves_the_window():
    clock = Clock()
    throttle = AuthThrottle(allowed=3, window_s=60, clock=clock)
    for step in range(3):
        assert throttle.blocked_for("10.0.0.1", "k_a") == 0
        throttle.failed("10.0.0.1", "k_a")
        clock.now += 10
    # failures at 1000, 1010, 1020; now 1030: the oldest leaves the window at 1060 → 30 s
    assert throttle.blocked_for("10.0.0.1", "k_a") == 30
    assert throttle.blocked_for("10.0.0.2", "k_a") == 0
    clock.now = 1060.0
    assert throttle.blocked_for("10.0.0.1", "k_a") == 0  # two failures left in the window
    throttle.failed("10.0.0.1", "k_a")
    assert throttle.blocked_for("10.0.0.1", "k_a") == 10  # 1010 + 60 - 1060


def test_one_key_ids_failures_do_not_lock_out_another_key_at_the_same_address():
    # issue 21, finding 8: ten bad tokens from one address (a TLS proxy: every customer) locked every key out
    throttle = AuthThrottle(allowed=10, window_s=300, clock=Clock())
    for _ in range(50):
        throttle.failed("10.0.0.1", "k_guessed")
        throttle.failed("10.0.0.1", "")  # malformed tokens count under no key id
    assert throttle.blocked_for("10.0.0.1", "k_guessed") > 0 and throttle.blocked_for("10.0.0.1", "") > 0
    assert throttle.blocked_for("10.0.0.1", "k_customer") == 0


def test_one_key_id_guessed_from_many_addresses_is_refused_where_it_was_never_opened():
    clock = Clock()
    throttle = AuthThrottle(allowed=10, window_s=300, per_key=20, clock=clock)
    throttle.succeeded("10.0.0.7", "k_a")  # its holder, from its usual address
    for n in range(20):  # rotating addresses: each under its own allowance
        assert throttle.blocked_for(f"192.0.2.{n}", "k_a") == 0
        throttle.failed(f"192.0.2.{n}", "k_a")
        clock.now += 1
    assert throttle.blocked_for("192.0.2.200", "k_a") == 280  # failures at 1000…1019, now 1020: 1000 + 300 - 1020
    assert throttle.blocked_for("10.0.0.7", "k_a") == 0  # the holder still gets in
    assert throttle.blocked_for("192.0.2.200", "k_b") == 0  # other keys are not affected
    clock.now += 300
    assert throttle.blocked_for("192.0.2.200", "k_a") == 0


def test_past_the_ceiling_of_all_failures_the_throttle_says_so():
    clock = Clock()
    throttle = AuthThrottle(allowed=10, window_s=300, per_key=20, ceiling=100, clock=clock)
    for n in range(99):
        throttle.failed(f"198.51.100.{n}", f"k_{n}")
    assert throttle.over_ceiling() == 0
    throttle.failed("198.51.100.250", "k_x")
    assert throttle.over_ceiling() == 300
    assert throttle.blocked_for("203.0.113.1", "k_customer") == 0  # nobody is refused before the check


def test_auth_throttle_keeps_bounded_memory():
    throttle = AuthThrottle(allowed=2, window_s=60, clock=Clock(), max_tracked=100)
    for n in range(1000):
        throttle.failed(f"10.0.{n // 256}.{n % 256}", f"k_{n}")
        throttle.succeeded(f"10.0.{n // 256}.{n % 256}", f"k_{n}")
    assert len(throttle._pairs.times) == 100 and len(throttle._keys.times) == 100 and len(throttle._holders) == 100
    for _ in range(50):
        throttle.failed("x", "k")
    assert len(throttle._pairs.times[("x", "k")]) == 2


def test_download_slots_cap_per_key_and_are_given_back_on_errors():
    slots = DownloadSlots(per_key=2)
    first, second = slots.acquire("k"), slots.acquire("k")
    assert first is not None and second is not None and slots.acquire("k") is None
    assert slots.acquire("other") is not None
    with first:
        pass
    with pytest.raises(RuntimeError):
        with second:
            raise RuntimeError("a failed render")
    assert slots.in_flight("k") == 0


def test_cache_builds_once_for_concurrent_askers_and_keeps_for_ttl():
    clock = Clock()
    cache = TtlCache(10, clock=clock)
    calls = []
    gate = threading.Event()

    def build():
        calls.append(1)
        gate.wait(5)
        return b"report"

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(cache.get_or_build, "k", build) for _ in range(8)]
        time.sleep(0.2)
        gate.set()
        assert [f.result() for f in futures] == [b"report"] * 8
    assert len(calls) == 1
    clock.now += 9.9
    assert cache.get_or_build("k", build) == b"report" and len(calls) == 1
    clock.now += 0.1
    assert cache.get_or_build("k", build) == b"report" and len(calls) == 2


def test_cache_keeps_no_failure_and_no_value_with_ttl_zero():
    cache = TtlCache(0, clock=Clock())
    with pytest.raises(ValueError):
        cache.get_or_build("k", lambda: (_ for _ in ()).throw(ValueError("db down")))
    calls = []
    for _ in range(2):
        cache.get_or_build("k", lambda: calls.append(1) or "v")
    assert len(calls) == 2


def test_cache_drops_oldest_entries_past_its_bound():
    cache = TtlCache(60, clock=Clock(), max_entries=2)
    for key in "abc":
        cache.put(key, key)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (None, "b", "c")


def _record(n: int) -> RequestInfo:
    return RequestInfo(method="GET", what=f"/v1/usage/{n}", client="10.0.0.1", key_id="k_x", period="2026-03",
                       fmt="csv", download=True, bytes=n)


def test_recorder_keeps_records_when_the_database_refuses_and_writes_them_later():
    written, fail = [], [True]

    def write(records):
        if fail[0]:
            raise ConnectionError("ClickHouse down")
        written.extend(records)

    recorder = AccessRecorder(write)
    for n in range(3):
        recorder.record(_record(n), 200)
    assert recorder.flush() is False and written == []
    assert recorder.health().startswith("behind: 3 records")
    fail[0] = False
    assert recorder.flush() is True
    assert [r.bytes for r in written] == [0, 1, 2] and recorder.health() == "ok"
    assert recorder.flush() is True and len(written) == 3  # nothing twice


def test_recorder_flushes_within_a_second_and_on_close():
    written = []
    recorder = AccessRecorder(written.extend, flush_s=0.2)
    recorder.start()
    recorder.record(_record(1), 200)
    deadline = time.monotonic() + 1.0
    while not written and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(written) == 1
    recorder.record(_record(2), 401)
    recorder.close()
    assert [r.status for r in written] == [200, 401]


def test_recorder_drops_the_oldest_past_its_bound_and_says_so(caplog):
    changes = []
    recorder = AccessRecorder(lambda records: None, max_pending=2, on_change=lambda p, d: changes.append((p, d)))
    for n in range(3):
        recorder.record(_record(n), 200)
    assert [r.bytes for r in recorder.pending] == [1, 2] and recorder.dropped == 1
    assert changes[-1] == (2, 1)
    assert "1 records dropped" in caplog.text


def test_refused_records_carry_the_reason_served_ones_do_not():
    written = []
    recorder = AccessRecorder(written.extend)
    info = _record(0)
    info.reason = "revoked"
    recorder.record(info, 401)
    recorder.record(info, 200)
    recorder.flush()
    assert [(r.status, r.reason) for r in written] == [(401, "revoked"), (200, "")]


def test_problem_is_rfc9457_json():
    problem = bad_param("period", "not a month like 2026-03")
    assert orjson.loads(problem.body()) == {"type": "about:blank", "title": "Bad Request", "status": 400,
                                            "detail": "period: not a month like 2026-03", "param": "period"}
    limited = Problem(429, "slow down", headers={"Retry-After": "3"})
    assert limited.title == "Too Many Requests" and limited.headers == {"Retry-After": "3"} and limited.reason == "limited"


def test_cache_keeps_at_most_max_bytes_dropping_the_oldest():
    cache = TtlCache(60, clock=Clock(), max_bytes=10, size_of=len)
    cache.put("a", b"12345")
    cache.put("b", b"12345")
    cache.put("c", b"123")  # 13 > 10: a goes
    assert (cache.get("a"), cache.get("b"), cache.get("c"), cache.bytes) == (None, b"12345", b"123", 8)
    cache.put("huge", b"x" * 11)  # served by its build, never kept
    assert cache.get("huge") is None and cache.bytes == 8
    cache.put("b", b"1")  # replacing an entry gives its bytes back
    assert cache.bytes == 4


def test_a_pool_of_server_clients_answers_503_when_none_is_free():
    from tenant_api.reads import Reads

    reads = Reads(["db1", "db2"])
    seen = []
    held = threading.Event()
    release = threading.Event()

    def hold(db):
        seen.append(db)
        held.set()
        release.wait(5)

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(reads.run, hold)
        held.wait(5)
        held.clear()
        second = pool.submit(reads.run, hold)
        held.wait(5)
        with pytest.raises(Problem) as busy:
            reads.run(lambda db: db, timeout_s=0.1)
        release.set()
        first.result(), second.result()
    assert busy.value.status == 503 and busy.value.headers["Retry-After"] == "5"
    assert sorted(seen) == ["db1", "db2"]
    assert reads.run(lambda db: db) in ("db1", "db2")  # both given back


def test_serve_reloads_changed_rules_and_keeps_the_last_good_set(tmp_path, monkeypatch):
    import shutil
    from pathlib import Path

    from billing_rules import load_rules
    from tenant_api import server

    rules_dir = tmp_path / "rules"
    shutil.copytree(Path(__file__).parents[1] / "e2e" / "rules", rules_dir)
    first = load_rules(rules_dir)
    monkeypatch.setattr(server, "RULES_POLL_S", 0.0)
    provider = server.RulesReloader(rules_dir, first)
    assert provider() is first  # unchanged files: the same set
    victim = sorted(rules_dir.glob("*.toml"))[0]
    victim.write_text(victim.read_text() + "\n[[[ not toml\n")
    assert provider() is first  # invalid: the last good set stays
    victim.write_text(victim.read_text().replace("\n[[[ not toml\n", "\n# edited\n"))
    reloaded = provider()
    assert reloaded is not first and reloaded.period_bounds("2026-03") == first.period_bounds("2026-03")


def test_cache_refreshes_ahead_in_the_background_and_never_serves_past_ttl():
    clock = Clock()
    cache = TtlCache(10, clock=clock, refresh_ahead=True)
    versions = iter(["v1", "v2", "v3"])
    built = []

    def build():
        built.append(clock.now)
        return next(versions)

    assert cache.get_or_build("k", build) == "v1"
    clock.now += 4.9  # young: served, nothing rebuilt
    assert cache.get_or_build("k", build) == "v1" and len(built) == 1
    clock.now += 0.1  # half its life: still served at once, one rebuild in the background
    assert cache.get_or_build("k", build) == "v1"
    deadline = time.monotonic() + 5
    while cache.get("k") != "v2" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cache.get_or_build("k", build) == "v2" and len(built) == 2


def test_cache_refresh_ahead_failure_keeps_the_value_until_its_ttl_then_builds():
    clock = Clock()
    cache = TtlCache(10, clock=clock, refresh_ahead=True)
    assert cache.get_or_build("k", lambda: "v1") == "v1"
    clock.now += 6
    failed = threading.Event()

    def broken():
        failed.set()
        raise ConnectionError("ClickHouse down")

    assert cache.get_or_build("k", broken) == "v1"
    assert failed.wait(5)
    deadline = time.monotonic() + 5
    while cache._building and time.monotonic() < deadline:
        time.sleep(0.01)
    failed.clear()
    assert cache.get_or_build("k", broken) == "v1"  # kept; another refresh is tried, and fails
    assert failed.wait(5)
    while cache._building and time.monotonic() < deadline:
        time.sleep(0.01)
    clock.now += 4  # past ttl: the next asker builds and waits for it
    assert cache.get_or_build("k", lambda: "v2") == "v2"
