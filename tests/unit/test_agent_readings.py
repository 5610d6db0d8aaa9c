"""A card-second → its readings' bytes: power_w from whole mW, deterministic ids (streams/agent/readings.py)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from streams.agent.readings import (
    NOT_RENTED, Assignment, CardSample, event_id, power_reading, power_w_text, ts_text, usage_reading,
)

UUID = "GPU-8f2c1a10-3b1e-4c55-9d1e-0a4b6c7d8e9f"
SECOND = 1772323205  # 2026-03-01T00:00:05Z: 20,513 days × 86,400 s + 5 s


@pytest.mark.parametrize("power_mw, text", [
    (123_456, "123.456"),  # 123 W and 456 mW
    (5, "0.005"),
    (100, "0.1"),
    (120_000, "120"),  # trailing zeros go: the same number
    (0, "0"),
    (1, "0.001"),
    (5_000_000, "5000"),
    (4_999_999_999, "4999999.999"),  # no float: every digit stays
])
def test_power_w_is_written_from_whole_milliwatts(power_mw, text):
    assert power_w_text(power_mw) == text
    assert Decimal(text) * 1000 == power_mw


@pytest.mark.parametrize("bad", [-1, 1.5, True, "12"])
def test_power_w_refuses_what_is_not_whole_milliwatts(bad):
    with pytest.raises(ValueError):
        power_w_text(bad)


def test_ts_is_the_whole_second_in_utc():
    assert ts_text(SECOND) == "2026-03-01T00:00:05Z"
    assert ts_text(0) == "1970-01-01T00:00:00Z"


def test_event_ids_depend_on_kind_card_and_second_only():
    assert event_id("usage", UUID, SECOND) == f"u:{UUID}:{SECOND}"
    assert event_id("power", UUID, SECOND) == f"p:{UUID}:{SECOND}"
    assert event_id("power", UUID, SECOND) == event_id("power", UUID, SECOND)
    assert len({event_id(k, u, s) for k in ("usage", "power") for u in (UUID, UUID + "x") for s in (SECOND, SECOND + 1)}) == 8


def test_a_long_card_id_is_hashed_to_fit_128_characters():
    long = "G" * 300
    ident = event_id("power", long, SECOND)
    # "p:" + "sha256-" + 64 hex + ":" + 10 digits = 84
    assert len(ident) == 84 and ident.startswith("p:sha256-")
    assert ident != event_id("power", long + "H", SECOND)
    edge = "G" * 104  # 2 + 104 + 1 + 10 = 117 ≤ 128, but 104 + 24 > 128: hashed too (a second may have 21 digits)
    assert len(event_id("usage", edge, SECOND)) <= 128


def test_usage_reading_bytes():
    sample = CardSample(UUID, "A800-80G", 37, 20_480, 412_345)
    got = usage_reading(sample, SECOND, "guian-1", "node-7", Assignment("acme", "i-42"))
    assert got == (
        b'{"kind":"usage","event_id":"u:' + UUID.encode() + b':1772323205","ts":"2026-03-01T00:00:05Z",'
        b'"site":"guian-1","node":"node-7","gpu_uuid":"' + UUID.encode() + b'","gpu_model":"A800-80G",'
        b'"tenant":"acme","instance":"i-42","util_pct":37,"mem_used_mib":20480}'
    )


def test_a_card_nobody_rents_has_null_tenant_and_instance_and_decimal_util_is_kept():
    sample = CardSample(UUID, "RTX4090", Decimal("37.25"), 0, 1)
    document = json.loads(usage_reading(sample, SECOND, "guian-1", "n", NOT_RENTED), parse_float=Decimal)
    assert document["tenant"] is None and document["instance"] is None
    assert document["util_pct"] == Decimal("37.25")


def test_power_reading_carries_the_counter_only_with_its_epoch():
    with_counter = CardSample(UUID, "A800-80G", 1, 1, 123_456, 9_000_000_000, "boot-a/550.54.15")
    assert power_reading(with_counter, SECOND, "guian-1", "n") == (
        b'{"kind":"power","event_id":"p:' + UUID.encode() + b':1772323205","ts":"2026-03-01T00:00:05Z",'
        b'"site":"guian-1","node":"n","gpu_uuid":"' + UUID.encode() + b'","power_w":123.456,'
        b'"energy_mj":9000000000,"energy_epoch":"boot-a/550.54.15"}'
    )
    half = CardSample(UUID, "A800-80G", 1, 1, 123_456, 9_000_000_000, None)
    assert b"energy" not in power_reading(half, SECOND, "guian-1", "n")


def test_text_from_outside_is_escaped_and_ascii():
    sample = CardSample('GPU-"\u00e9\n', "A800-80G", 1, 1, 1)
    raw = power_reading(sample, SECOND, "guian-1", "nöde")
    assert raw.isascii()
    assert json.loads(raw)["gpu_uuid"] == 'GPU-"\u00e9\n' and json.loads(raw)["node"] == "nöde"


# --------------------------------------------------------------- held to the worker's definition

SITES, MODELS = {"guian-1"}, {"RTX4090", "A800-80G", "H800-80G"}


def worker_parse(raw: bytes, kind: str):
    """The worker's own definition of a valid reading (schemas/events.py), someone else's parser."""
    from schemas.events import parse_reading

    return parse_reading(raw, known_sites=SITES, known_models=MODELS, now_s=SECOND + 60, expect_kind=kind)


def test_the_worker_accepts_the_agents_readings():
    sample = CardSample(UUID, "H800-80G", Decimal("99.5"), 81_000, 700_001)
    usage = worker_parse(usage_reading(sample, SECOND, "guian-1", "node-7", Assignment("acme", "i-42")), "usage")
    assert (usage.event_id, usage.second, usage.tenant, usage.util_pct) == (f"u:{UUID}:{SECOND}", SECOND, "acme",
                                                                           Decimal("99.5"))
    power = worker_parse(power_reading(sample, SECOND, "guian-1", "node-7"), "power")
    assert power.power_mw == 700_001  # 700.001 W, back to the same milliwatts
    unrented = worker_parse(usage_reading(sample, SECOND, "guian-1", "n", NOT_RENTED), "usage")
    assert unrented.tenant is None


def test_the_worker_accepts_the_agents_counter():
    sample = CardSample(UUID, "A800-80G", 1, 1, 123_456, 9_000_000_000, "boot-a/550.54.15")
    power = worker_parse(power_reading(sample, SECOND, "guian-1", "n"), "power")
    assert (power.energy_mj, power.energy_epoch) == (9_000_000_000, "boot-a/550.54.15")
