"""Kafka record batches (message format v2) for tests, as a broker sends them in a fetch."""

from __future__ import annotations

from aiokafka.codec import gzip_encode
from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy  # its C twin ignores offsets

GZIP = 1


class _Builder(_DefaultRecordBatchBuilderPy):
    def _maybe_compress(self) -> bool:
        """Compress even when it does not pay: aiokafka sends a small batch uncompressed."""
        if self._compression_type != GZIP:
            return False
        header = self.HEADER_STRUCT.size
        self._buffer[header:] = gzip_encode(bytes(self._buffer[header:]))
        return True


def record_batch(base: int, records: list[tuple], *, gzip: bool = False) -> bytes:
    """One batch of `records` — (offset, key, value, timestamp, headers) — at base offset
    `base` (offsets ≥ base; the broker writes the base offset, outside the CRC)."""
    builder = _Builder(magic=2, compression_type=GZIP if gzip else 0, is_transactional=0, producer_id=-1,
                       producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for offset, key, value, timestamp, headers in records:
        builder.append(offset - base, timestamp=timestamp, key=key, value=value, headers=list(headers))
    data = bytearray(builder.build())
    data[:8] = base.to_bytes(8, "big")
    return bytes(data)
