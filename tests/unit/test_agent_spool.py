"""The agent's spool: append before send, remove only what Kafka acknowledged, survive a kill -9 (streams/agent/spool.py)."""

from __future__ import annotations

import errno
import os

import pytest

from streams.agent import spool as spool_module
from streams.agent.errors import SpoolDamaged, SpoolLocked
from streams.agent.spool import FRAME, Record, Spool


def rec(i: int, kind: str = "power") -> Record:
    return Record(kind, f"GPU-{i % 3}".encode(), f'{{"n":{i}}}'.encode())


def open_spool(path, **kw) -> tuple[Spool, dict]:
    spool = Spool(path, max_bytes=kw.pop("max_bytes", 64 << 20), **kw)
    return spool, spool.open()


def values(batch) -> list[bytes]:
    return [r.value for r in batch.records]


def test_append_peek_ack_in_order(tmp_path):
    spool, state = open_spool(tmp_path)
    assert state == {} and spool.unacked == 0
    spool.append([rec(0), rec(1, "usage")], {"n": 1})
    spool.append([rec(2)], {"n": 2})
    batch = spool.peek(10)
    assert values(batch) == [b'{"n":0}', b'{"n":1}', b'{"n":2}']
    assert [r.kind for r in batch.records] == ["power", "usage", "power"]
    assert [r.key for r in batch.records] == [b"GPU-0", b"GPU-1", b"GPU-2"]
    assert spool.unacked == 3
    spool.ack(batch.records[0].end, 1)  # only the first acknowledged
    assert spool.unacked == 2
    assert values(spool.peek(10)) == [b'{"n":1}', b'{"n":2}']  # the rest is sent again, in order
    spool.ack(spool.peek(10).end, 2)
    assert spool.unacked == 0 and spool.peek(10).records == []


def test_peek_stops_at_the_limit(tmp_path):
    spool, _ = open_spool(tmp_path)
    spool.append([rec(i) for i in range(7)], {})
    assert values(spool.peek(3)) == [b'{"n":0}', b'{"n":1}', b'{"n":2}']


def test_a_restart_resends_what_was_not_acknowledged_and_returns_the_last_state(tmp_path):
    spool, _ = open_spool(tmp_path)
    spool.append([rec(0), rec(1)], {"trace": 10})
    spool.append([rec(2)], {"trace": 20})
    spool.ack(spool.peek(1).records[0].end, 1)
    # no close: as after a kill -9 (the flock goes with the process; here we release it by hand)
    os.close(spool._lock_fd)
    again, state = open_spool(tmp_path)
    assert state == {"trace": 20}
    assert again.unacked == 2
    assert values(again.peek(10)) == [b'{"n":1}', b'{"n":2}']


def test_the_state_survives_when_everything_was_acknowledged(tmp_path):
    spool, _ = open_spool(tmp_path, segment_bytes=1)  # every append fills its segment (64 KiB minimum)
    spool.append([rec(0)], {"trace": 99})
    spool.ack(spool.peek(10).end, 1)
    spool.close()
    again, state = open_spool(tmp_path)
    assert state == {"trace": 99} and again.unacked == 0


def test_segments_roll_and_acknowledged_ones_are_deleted(tmp_path):
    spool, _ = open_spool(tmp_path, segment_bytes=64 << 10)
    big = Record("power", b"k", b"x" * 40_000)
    for _ in range(4):  # 40 KB each: a new segment every second append (64 KiB)
        spool.append([big], {})
    segments = sorted(p.name for p in tmp_path.glob("*.seg"))
    assert segments == ["000000000001.seg", "000000000002.seg"]
    batch = spool.peek(3)
    assert len(batch.records) == 3
    spool.ack(batch.end, 3)
    assert sorted(p.name for p in tmp_path.glob("*.seg")) == ["000000000002.seg"]  # segment 1 wholly acknowledged
    spool.ack(spool.peek(10).end, 1)
    assert spool.unacked == 0 and list(tmp_path.glob("*.seg")) == []  # full and acknowledged: gone
    spool.append([rec(5)], {})
    assert sorted(p.name for p in tmp_path.glob("*.seg")) == ["000000000003.seg"]
    assert values(spool.peek(10)) == [b'{"n":5}']


def test_a_torn_tail_is_cut_with_a_line_and_the_rest_is_kept(tmp_path):
    torn = []
    spool, _ = open_spool(tmp_path)
    spool.append([rec(0), rec(1)], {"s": 1})
    spool.close()
    path = tmp_path / "000000000001.seg"
    whole = path.stat().st_size
    with open(path, "ab") as handle:  # a kill -9 in the middle of the next write
        handle.write(spool_module.frame(2, 0, b"GPU-0", b'{"n":2}')[:-3])
    again = Spool(tmp_path, max_bytes=64 << 20, on_torn=torn.append)
    state = again.open()
    assert path.stat().st_size == whole
    assert len(torn) == 1 and "torn" in torn[0]
    assert state == {"s": 1}
    assert values(again.peek(10)) == [b'{"n":0}', b'{"n":1}']
    again.append([rec(3)], {"s": 2})  # appends go on after the cut
    assert values(again.peek(10)) == [b'{"n":0}', b'{"n":1}', b'{"n":3}']


def test_a_flipped_byte_in_the_last_frame_is_a_torn_tail(tmp_path):
    spool, _ = open_spool(tmp_path)
    spool.append([rec(0)], {})
    spool.append([rec(1)], {})
    spool.close()
    path = tmp_path / "000000000001.seg"
    data = bytearray(path.read_bytes())
    data[-2] ^= 0xFF  # inside the last frame (the second batch's mark)
    path.write_bytes(bytes(data))
    again, _ = open_spool(tmp_path)
    assert values(again.peek(10)) == [b'{"n":0}', b'{"n":1}']


@pytest.mark.parametrize("segment_bytes, big", [(64 << 10, 40_000), (64 << 20, 10)])
def test_damage_before_the_tail_refuses_to_start(tmp_path, segment_bytes, big):
    """In a segment before the last (big records: one segment each), or followed by intact frames."""
    spool, _ = open_spool(tmp_path, segment_bytes=segment_bytes)
    spool.append([Record("power", b"k", b"x" * big)], {})
    spool.append([Record("power", b"k", b"x" * big)], {})
    spool.append([Record("power", b"k", b"x" * big)], {})
    spool.close()
    first = tmp_path / "000000000001.seg"
    data = bytearray(first.read_bytes())
    data[FRAME.size + 3] ^= 0xFF  # in the first frame's body
    first.write_bytes(bytes(data))
    with pytest.raises(SpoolDamaged, match="000000000001.seg is damaged at byte 0"):
        open_spool(tmp_path)


def test_a_second_agent_cannot_take_the_same_spool(tmp_path):
    open_spool(tmp_path)
    with pytest.raises(SpoolLocked, match="held by another gpubill agent"):
        open_spool(tmp_path)


def test_full_at_the_cap_and_nothing_is_evicted(tmp_path):
    spool, _ = open_spool(tmp_path, max_bytes=256 << 10)  # segments of 64 KiB (a quarter of the cap)
    records = [Record("power", b"k", b"x" * 1000) for _ in range(300)]  # ~300 KB > the cap
    for i in range(0, 300, 10):
        spool.append(records[i:i + 10], {})
    assert spool.full
    assert spool.unacked == 300  # the spool refuses nothing itself: the agent stops sampling
    assert len(spool.peek(1000).records) == 300
    # Kafka takes the oldest: whole segments go, and the spool is under its cap again
    batch = spool.peek(150)
    spool.ack(batch.end, 150)
    assert not spool.full and spool.unacked == 150


def test_a_failed_write_leaves_the_spool_as_it_was(tmp_path, monkeypatch):
    spool, _ = open_spool(tmp_path)
    spool.append([rec(0)], {"s": 1})
    size = spool.bytes
    real_write = os.write

    def half_then_enospc(fd, data):
        real_write(fd, bytes(data[:10]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(spool_module.os, "write", half_then_enospc)
    with pytest.raises(OSError):
        spool.append([rec(1)], {"s": 2})
    monkeypatch.undo()
    assert spool.bytes == size == (tmp_path / "000000000001.seg").stat().st_size
    assert spool.unacked == 1 and spool.state == {"s": 1}
    spool.append([rec(1)], {"s": 2})  # the disk has room again: the kept batch goes in whole
    assert values(spool.peek(10)) == [b'{"n":0}', b'{"n":1}']


def test_oldest_unacknowledged_age(tmp_path):
    now = [1000.0]
    spool, _ = open_spool(tmp_path, clock=lambda: now[0])
    assert spool.oldest_unacked_age_s() == 0.0
    spool.append([rec(0)], {})
    now[0] = 1030.0
    spool.append([rec(1)], {})
    assert spool.oldest_unacked_age_s() == 30.0
    batch = spool.peek(1)
    spool.ack(batch.records[0].end, 1)
    spool.peek(10)
    assert spool.oldest_unacked_age_s() == 0.0  # the one left was spooled at 1030 = now
    spool.ack(spool.peek(10).end, 1)
    assert spool.oldest_unacked_age_s() == 0.0
