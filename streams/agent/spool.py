"""The spool: readings on local disk from the moment they are taken until Kafka has them.

Layout of `--spool DIR`:

    lock                      held (flock) by the one agent that owns the directory
    000000000001.seg ...      segments: append-only frames, a new segment every `segment_bytes`
    cursor.json               "acknowledged up to" (segment, byte offset) and the agent's state

A frame is `length (u32) | crc32 (u32) | body`, body = `kind (u8) | appended_ms (u64) |
key length (u16) | key | value`, big-endian. Kinds: usage, power (a reading: key = gpu_uuid,
value = its JSON bytes, sent as they are), and mark (the agent's state after the batch
it ends: the trace position, each card's last second and counter).

The steps, and what each guarantees:

 1. `append` writes a batch's frames and its mark with one write and fsyncs the segment
    before it returns: a reading the sender can see is on disk. A write that fails (a full
    disk) is cut back to where it began and raised: the caller keeps the batch and tries again.
 2. `peek` hands the sender frames from the cursor on, in spool order.
 3. `ack` is called with the end of the frames Kafka acknowledged (acks=all). It writes the
    cursor (temporary file, fsync, rename, fsync of the directory), and only then deletes
    the segments wholly before it. A crash between Kafka's acknowledgement and the cursor
    resends those readings: duplicates with the same bytes, which the worker drops.
 4. `open` after a restart or a kill -9: the last segment may end in a frame cut short or
    failing its CRC (the write was never fsync'd whole, so no reading of it was ever
    reported as taken); it is cut off, with a log line and a `spool_torn` fault. A bad
    frame followed by intact ones, or in a segment before the last, is not a crash's
    trace but damage to what was fsync'd: SpoolDamaged, and the agent does not start.

The spool never evicts: past `max_bytes` it says so (`full`) and the agent stops sampling.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import struct
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from streams.agent.errors import AgentError, SpoolDamaged, SpoolLocked

log = logging.getLogger("gpubill.agent.spool")

FRAME = struct.Struct(">II")  # body length, crc32 of the body
BODY = struct.Struct(">BQH")  # kind, appended at (ms since the epoch), key length
KINDS = {"usage": 1, "power": 2}
KIND_NAMES = {code: name for name, code in KINDS.items()}
MARK = 9
MAX_BODY = 16 << 20  # a larger length is damage, not a frame
SEGMENT_SUFFIX = ".seg"
CURSOR = "cursor.json"

Position = tuple[int, int]  # (segment id, byte offset in it)


@dataclass(frozen=True, slots=True)
class Record:
    """A reading to spool: its kind (its topic), key (gpu_uuid) and value (the JSON bytes)."""

    kind: str
    key: bytes
    value: bytes


@dataclass(frozen=True, slots=True)
class Spooled:
    """A reading read back from the spool, and the position just after its frame."""

    kind: str
    key: bytes
    value: bytes
    appended_ms: int
    end: Position


@dataclass(frozen=True, slots=True)
class Batch:
    """What `peek` hands the sender: readings in spool order and the position after the
    last frame read (marks included), to be acknowledged when all of them are."""

    records: list[Spooled]
    end: Position


def frame(kind: int, appended_ms: int, key: bytes, value: bytes) -> bytes:
    """One frame's bytes."""
    body = BODY.pack(kind, appended_ms, len(key)) + key + value
    return FRAME.pack(len(body), zlib.crc32(body)) + body


def _parse(buffer: bytes | memoryview, offset: int) -> tuple[int, int, bytes, bytes, int] | None:
    """(kind, appended_ms, key, value, end) of the frame at `offset`, or None when the bytes
    there are not a whole, intact frame."""
    if offset + FRAME.size > len(buffer):
        return None
    length, crc = FRAME.unpack_from(buffer, offset)
    start, end = offset + FRAME.size, offset + FRAME.size + length
    if length < BODY.size or length > MAX_BODY or end > len(buffer):
        return None
    body = bytes(buffer[start:end])
    if zlib.crc32(body) != crc:
        return None
    kind, appended_ms, key_len = BODY.unpack_from(body, 0)
    if BODY.size + key_len > length or (kind not in KIND_NAMES and kind != MARK):
        return None
    key = body[BODY.size:BODY.size + key_len]
    return kind, appended_ms, key, body[BODY.size + key_len:], end


def _intact_after(data: bytes, offset: int) -> bool:
    """Whether whole, intact frames follow a bad one at `offset`, up to the end of `data`.

    Each append is one write, fsync'd before the next begins: what a crash can leave
    undone is the end of the last append, and nothing intact comes after the first bad
    byte of it. Intact frames after a bad one mean damage to what was fsync'd."""
    for start in range(offset + 1, len(data) - FRAME.size + 1):
        position = start
        while (parsed := _parse(data, position)) is not None:
            position = parsed[4]
            if position == len(data):
                return True
    return False


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Spool:
    """The spool in `directory`; see the module docstring. Thread-safe for one appender
    (the sampler) and one reader (the sender)."""

    def __init__(self, directory: Path, *, max_bytes: int, segment_bytes: int = 4 << 20,
                 clock: Callable[[], float] = time.time, on_torn: Callable[[str], None] | None = None) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        # A segment is deleted once wholly acknowledged, so the spool shrinks by segments: with
        # at most a quarter of the cap in one, a spool over its cap can always get back under.
        self.segment_bytes = max(64 << 10, min(segment_bytes, max_bytes // 4))
        self.clock = clock
        self.on_torn = on_torn
        self._lock = threading.Lock()
        self._grown = threading.Condition(self._lock)
        self._sizes: dict[int, int] = {}  # segment id → bytes (durable: whole, fsync'd frames)
        self._fd: int | None = None  # the active (last) segment, open for appending
        self._cursor: Position = (0, 0)
        self._state: dict[str, Any] = {}
        self._unacked = 0
        self._oldest_ms: int | None = None
        self._lock_fd: int | None = None

    # ------------------------------------------------------------------ opening

    def open(self) -> dict[str, Any]:
        """Take the directory (SpoolLocked when another agent has it), cut a torn tail, and
        return the agent's last state (the newest mark, or the cursor's; {} for a new spool)."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self.directory / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise AgentError(f"--spool {self.directory}: cannot be used ({exc.strerror}); give a writable "
                             "directory on local disk") from exc
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise SpoolLocked(str(self.directory)) from None
            raise
        cursor = self._read_cursor()
        self._cursor = (cursor.get("segment", 0), cursor.get("offset", 0))
        self._state = cursor.get("state", {})
        segments = sorted(int(p.name[:-len(SEGMENT_SUFFIX)]) for p in self.directory.glob("*" + SEGMENT_SUFFIX)
                          if p.name[:-len(SEGMENT_SUFFIX)].isdigit())
        for segment in [s for s in segments if s < self._cursor[0]]:  # acked; its deletion was cut short
            self._path(segment).unlink(missing_ok=True)
        segments = [s for s in segments if s >= self._cursor[0]]
        if not segments or segments[0] != self._cursor[0]:
            self._cursor = (segments[0], 0) if segments else (self._cursor[0], 0)
        for index, segment in enumerate(segments):
            self._scan(segment, last=index == len(segments) - 1)
        if segments:
            last = segments[-1]
            if self._sizes[last] < self.segment_bytes:
                self._fd = os.open(self._path(last), os.O_WRONLY | os.O_APPEND)
        return dict(self._state)

    def _read_cursor(self) -> dict[str, Any]:
        path = self.directory / CURSOR
        try:
            document = json.loads(path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise SpoolDamaged(f"spool {path}: cannot be read ({exc}); it is written atomically, so this is damage "
                               "on disk: move the spool aside and start the agent on an empty one") from exc
        if not (isinstance(document, dict) and isinstance(document.get("segment"), int)
                and isinstance(document.get("offset"), int) and isinstance(document.get("state", {}), dict)):
            raise SpoolDamaged(f"spool {path}: not a cursor; move the spool aside and start on an empty one")
        return document

    def _scan(self, segment: int, *, last: bool) -> None:
        path = self._path(segment)
        data = path.read_bytes()
        offset = 0
        from_offset = self._cursor[1] if segment == self._cursor[0] else 0
        while offset < len(data):
            parsed = _parse(data, offset)
            if parsed is None:
                if not last or _intact_after(data, offset):
                    raise SpoolDamaged(f"spool segment {path} is damaged at byte {offset} (not its tail): move it "
                                       "aside and start the agent again; its readings after that byte are lost")
                self._cut(path, offset, len(data))
                data = data[:offset]
                break
            kind, appended_ms, _key, value, end = parsed
            if kind == MARK:
                self._state = json.loads(value)
            elif offset >= from_offset:
                self._unacked += 1
                if self._oldest_ms is None:
                    self._oldest_ms = appended_ms
            offset = end
        self._sizes[segment] = len(data)

    def _cut(self, path: Path, offset: int, size: int) -> None:
        """A torn tail: the frame at `offset` was never fsync'd whole. Cut it off."""
        with open(path, "r+b") as handle:
            handle.truncate(offset)
            os.fsync(handle.fileno())
        message = f"spool {path}: cut a torn last frame ({size - offset} bytes at byte {offset}) left by a crash"
        if self.on_torn:
            self.on_torn(message)
        else:
            log.warning(message)

    def _path(self, segment: int) -> Path:
        return self.directory / f"{segment:012d}{SEGMENT_SUFFIX}"

    # ------------------------------------------------------------------ the sampler's side

    def append(self, records: list[Record], state: dict[str, Any]) -> None:
        """Write `records` and a mark holding `state`, fsync'd, before returning. OSError (a
        full disk, say) leaves the spool as it was: the caller keeps its records."""
        now_ms = int(self.clock() * 1000)
        data = b"".join(frame(KINDS[r.kind], now_ms, r.key, r.value) for r in records)
        data += frame(MARK, now_ms, b"", json.dumps(state, separators=(",", ":")).encode())
        with self._lock:
            if self._fd is None or self._sizes[self._active] >= self.segment_bytes:
                self._roll()
            segment, start = self._active, self._sizes[self._active]
            try:
                view = memoryview(data)
                while view:
                    written = os.write(self._fd, view)
                    view = view[written:]
                os.fsync(self._fd)
            except OSError:
                try:
                    os.ftruncate(self._fd, start)  # the torn part goes; what was there stays
                except OSError:
                    pass  # `open` cuts it after a restart
                raise
            self._sizes[segment] = start + len(data)
            self._state = state
            if self._unacked == 0 and records:
                self._oldest_ms = now_ms
            self._unacked += len(records)
            self._grown.notify_all()

    @property
    def _active(self) -> int:
        return max(self._sizes) if self._sizes else self._cursor[0]

    def _roll(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        segment = self._active + 1 if self._sizes else max(self._cursor[0], 1)
        self._fd = os.open(self._path(segment), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o600)
        _fsync_dir(self.directory)  # the new file's name is durable before anything is reported in it
        self._sizes[segment] = 0
        if self._cursor[0] < segment and not any(s < segment for s in self._sizes):
            self._cursor = (segment, 0)

    # ------------------------------------------------------------------ the sender's side

    def peek(self, limit: int) -> Batch:
        """Up to `limit` readings from the cursor on, in spool order (marks are passed over)."""
        with self._lock:
            cursor = self._cursor
            sizes = dict(self._sizes)
        segment, offset = cursor
        records: list[Spooled] = []
        end: Position = cursor
        for current in sorted(s for s in sizes if s >= segment):
            start = offset if current == segment else 0
            size = sizes[current]
            if start >= size:
                if current != max(sizes) and current + 1 in sizes:
                    end = (current + 1, 0)
                continue
            with open(self._path(current), "rb") as handle:
                handle.seek(start)
                # Read what `limit` frames need (readings are a few hundred bytes), not the whole segment.
                data = handle.read(min(size - start, max(64 << 10, limit * 512)))
                position = 0
                while start + position < size and len(records) < limit:
                    parsed = _parse(data, position)
                    if parsed is None:
                        more = handle.read(min(size - start - len(data), max(64 << 10, limit * 512)))
                        if not more:  # only a torn tail is ever cut, at open: this is damage meanwhile
                            raise SpoolDamaged(f"spool segment {self._path(current)} changed under the agent at "
                                               f"byte {start + position}")
                        data = data[position:] + more
                        start, position = start + position, 0
                        continue
                    kind, appended_ms, key, value, frame_end = parsed
                    position = frame_end
                    end = (current, start + frame_end)
                    if kind != MARK:
                        records.append(Spooled(KIND_NAMES[kind], key, value, appended_ms, end))
            if len(records) >= limit:
                break
        if records:
            with self._lock:
                if self._cursor == cursor:
                    self._oldest_ms = records[0].appended_ms
        return Batch(records, end)

    def ack(self, upto: Position, records: int) -> None:
        """Kafka acknowledged the `records` readings up to `upto`: move the cursor there
        (durably), then delete the segments wholly before it."""
        with self._lock:
            if upto <= self._cursor:
                return
            segment, offset = upto
            active = self._active
            # A wholly acknowledged, full segment goes too: the next append starts a new one.
            if offset >= self._sizes.get(segment, 0) and (segment != active or offset >= self.segment_bytes):
                if segment == active and self._fd is not None:
                    os.close(self._fd)
                    self._fd = None
                upto = (segment + 1, 0)
            self._cursor = upto
            self._unacked = max(0, self._unacked - records)
            if self._unacked == 0:
                self._oldest_ms = None  # else: the acknowledged one's until the next peek (an overestimate)
            state = self._state
            gone = [s for s in self._sizes if s < upto[0]]
            self._write_cursor(upto, state)
            for s in gone:
                del self._sizes[s]
        for s in gone:
            self._path(s).unlink(missing_ok=True)

    def _write_cursor(self, cursor: Position, state: dict[str, Any]) -> None:
        path = self.directory / CURSOR
        temporary = path.with_suffix(".tmp")
        body = json.dumps({"segment": cursor[0], "offset": cursor[1], "state": state}, separators=(",", ":"))
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, body.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
        _fsync_dir(self.directory)

    def wait(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for an append (returns at once when readings are unacked)."""
        with self._grown:
            if self._unacked == 0:
                self._grown.wait(timeout_s)

    # ------------------------------------------------------------------ figures

    @property
    def bytes(self) -> int:
        """Bytes of the segment files, acknowledged parts of live segments included."""
        with self._lock:
            return sum(self._sizes.values())

    @property
    def unacked(self) -> int:
        """Readings spooled and not yet acknowledged."""
        return self._unacked

    @property
    def full(self) -> bool:
        """True while the spool holds `max_bytes` or more: the agent samples nothing new."""
        return self.bytes >= self.max_bytes

    def oldest_unacked_age_s(self) -> float:
        """Seconds since the oldest unacknowledged reading was spooled (0 when none)."""
        oldest = self._oldest_ms
        if self._unacked == 0 or oldest is None:
            return 0.0
        return max(0.0, self.clock() - oldest / 1000)

    @property
    def state(self) -> dict[str, Any]:
        return dict(self._state)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None
