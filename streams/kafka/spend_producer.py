"""The producers of live spend: the worker's spend rounds and the tracker's changelog, one
record batch per partition, acknowledged.

After every batch a worker produces a round per (source partition, spend partition) it
changed (schemas/spend.py) — at most its source partitions × the spend partitions, whatever
the number of tenants; the tracker writes the entries it changed to its table's changelog
(streams/spend/table.py). Sent one by one through Faust's producer they would cost ≈ 0.2 ms
each on the event loop, and a batch is committed only once they are acknowledged. Grouped by
partition into one record batch each (aiokafka's `create_batch`/`send_batch`), they cost a
round trip per partition.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaProducer

from schemas.spend import MAX_RECORD_BYTES, SpendRound, encode_round

MAX_BATCH_BYTES = 2 * MAX_RECORD_BYTES  # a record the tracker accepts always fits a batch
# A changelog entry holds a round as a JSON string: its quotes escaped, up to twice as long.
MAX_CHANGELOG_BATCH_BYTES = 4 * MAX_RECORD_BYTES


class BatchedProducer:
    """Produces (partition, key, value) records to `topic`; `send` returns once the broker
    acknowledged all of them (acks=all, idempotent: a retry never duplicates)."""

    def __init__(self, bootstrap: str, topic: str, security: dict[str, Any], what: str = "records",
                 max_batch_bytes: int = MAX_BATCH_BYTES) -> None:
        self.topic, self.what = topic, what
        self._options = dict(bootstrap_servers=bootstrap.split(","), acks="all", enable_idempotence=True,
                             linger_ms=0, max_batch_size=max_batch_bytes, **security)
        self._producer: AIOKafkaProducer | None = None  # made on the running loop, at the first send
        self._stopped = False

    async def send(self, records: list[tuple[int, bytes, bytes | None]]) -> None:
        if not records:
            return
        if self._stopped:
            raise RuntimeError(f"the producer of {self.what} is stopped")
        if self._producer is None:
            self._producer = AIOKafkaProducer(**self._options)
            await self._producer.start()
        by_partition: dict[int, list[tuple[bytes, bytes | None]]] = {}
        for partition, key, value in records:
            by_partition.setdefault(partition, []).append((key, value))
        sent = []
        for partition, group in sorted(by_partition.items()):
            batch = self._producer.create_batch()
            for key, value in group:
                if batch.append(key=key, value=value, timestamp=None) is None:  # full: send it, start another
                    sent.append(await self._producer.send_batch(batch, self.topic, partition=partition))
                    batch = self._producer.create_batch()
                    if batch.append(key=key, value=value, timestamp=None) is None:
                        raise ValueError(f"a record of {len(value or b'')} bytes does not fit a record batch")
            sent.append(await self._producer.send_batch(batch, self.topic, partition=partition))
        await asyncio.gather(*sent)

    async def stop(self) -> None:
        """Flush and close; a `send` after this raises."""
        self._stopped = True
        if self._producer is not None:
            await self._producer.stop()


class SpendProducer(BatchedProducer):
    """Produces spend rounds to `topic`, each on its spend partition."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, security: dict[str, Any]) -> None:
        super().__init__(bootstrap, topic, security, what="spend rounds")
        self.partitions = partitions

    async def send(self, records: list[SpendRound]) -> None:  # type: ignore[override]
        encoded = []
        for record in records:
            value = encode_round(record)
            if len(value) > MAX_RECORD_BYTES:
                raise ValueError(f"a spend round of {len(value)} bytes is over {MAX_RECORD_BYTES} "
                                 f"({len(record.tenants)} tenants in spend partition {record.spend_partition}: "
                                 f"give the spend topic more partitions)")
            encoded.append((record.spend_partition, record.key.encode(), value))
        await super().send(encoded)
