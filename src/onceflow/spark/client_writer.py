"""The exactly-once sink's :class:`~onceflow.spark.exactly_once.TransactionalWriter` on the onceflow
client: a transactional :class:`~onceflow.client.Producer` for the writes and the marker, and a
group-less :class:`~onceflow.client.Consumer` to read the marker back (OffsetFetch, require_stable).

The marker lives in the consumer group named like the task's transactional id, on partition 0 of each
topic the task wrote (see :mod:`onceflow.spark.exactly_once`). The client's
``send_offsets_to_transaction`` carries offsets without metadata, so the marker is the committed
offset itself: ``batch + 1`` ("the next batch to write"); metadata of the form ``{"batch": N}`` is
honoured too when a client carries it.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from onceflow.client import Consumer, Producer
from onceflow.client.security import ClientSecurity
from onceflow.spark.exactly_once import OutputChunk, OutputRecord, decode_marker
from onceflow.spark.sink_options import SinkOptions, producer_settings

log = logging.getLogger(__name__)

__all__ = ["ClientTransactionalWriter"]

_SKIP = {"bootstrap.servers", "client.id", "transactional.id", "group.id", "enable.idempotence"}


class ClientTransactionalWriter:
    def __init__(self, options: SinkOptions, transactional_id: str, *, two_phase: bool = False) -> None:
        """``two_phase``: a KIP-939 producer, whose transaction ``prepare`` leaves for the driver."""
        self.transactional_id = transactional_id
        self._options = options
        if two_phase:
            from onceflow.spark.two_phase import two_phase_settings

            self._producer = Producer(two_phase_settings(options, transactional_id))
            return
        settings = producer_settings(options.extra, _SKIP)
        self._producer = Producer(
            {
                **settings,
                "bootstrap.servers": options.bootstrap,
                "client.id": options.client_id,
                "transactional.id": transactional_id,
            }
        )

    def init(self) -> None:
        self._producer.init_transactions()

    def fetch_marker(self, topic: str) -> int | None:
        consumer = Consumer(
            config={
                "bootstrap.servers": self._options.bootstrap,
                "group.id": self.transactional_id,
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                **_security_settings(self._options.extra),
            }
        )
        try:
            committed = consumer.committed((topic, 0))
        finally:
            consumer.close(autocommit=False)
        if committed is None:
            return None
        from_metadata = decode_marker(committed.metadata)
        return from_metadata if from_metadata is not None else committed.offset - 1

    def begin(self) -> None:
        self._producer.begin_transaction()

    def send(self, record: OutputRecord) -> None:
        self._producer.send(
            record.topic,
            record.value,
            key=record.key,
            partition=record.partition,
            headers=record.headers or None,
        )

    def send_chunk(self, chunk: OutputChunk) -> None:
        # Failed batches fail the transaction: commit_transaction raises, so no futures are kept.
        self._producer.send_many(chunk.topic, chunk.values, chunk.keys, headers=chunk.headers)

    def send_offsets(self, batch_id: int, topics: Collection[str]) -> None:
        self._producer.send_offsets_to_transaction(
            {(topic, 0): batch_id + 1 for topic in topics}, self.transactional_id
        )

    def commit(self) -> None:
        self._producer.commit_transaction()

    def prepare(self) -> str:
        return str(self._producer.prepare_transaction())

    def abort(self) -> None:
        self._producer.abort_transaction()

    def close(self) -> None:
        self._producer.close()


def _security_settings(extra) -> dict:
    """The sink's TLS / SASL options (``kafka.security.protocol``, ...) for its marker consumer."""
    security = ClientSecurity.from_config(extra)
    return security.as_settings() if security is not None else {}
