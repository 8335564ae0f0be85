"""``__consumer_offsets`` on the broker's partition logs: the :class:`OffsetsTopic` the coordinator uses.

Like Kafka, the topic is created (as internal, with ``offsets.topic.num.partitions`` partitions) the
first time a group writes, not at broker start; if it already exists its own partition count wins
(the group -> partition hash must not change under existing data). Appends are coordinator appends
(``AppendOrigin.COORDINATOR``) of one batch each.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from onceflow.broker.group.log_format import CONSUMER_OFFSETS_TOPIC
from onceflow.broker.group.persistence import Record, StoredBatch
from onceflow.log.append_origin import AppendOrigin
from onceflow.protocol.errors import KafkaError
from onceflow.protocol.record_codec import decode_batches, encode_batch
from onceflow.protocol.records import read_header

log = logging.getLogger(__name__)


class LogOffsetsTopic:
    def __init__(self, topics: Any, num_partitions: int) -> None:
        self._topics = topics
        topic = topics.get(CONSUMER_OFFSETS_TOPIC)
        self.num_partitions = num_partitions if topic is None else len(topic.partitions)
        if topic is not None and self.num_partitions != num_partitions:
            log.info(
                "%s has %d partitions (configured %d); keeping the existing count",
                CONSUMER_OFFSETS_TOPIC,
                self.num_partitions,
                num_partitions,
            )

    def _partition(self, partition: int) -> Any:
        if self._topics.get(CONSUMER_OFFSETS_TOPIC) is None:
            self._topics.create_topic(CONSUMER_OFFSETS_TOPIC, self.num_partitions, internal=True)
        return self._topics.get_partition(CONSUMER_OFFSETS_TOPIC, partition)

    def append(
        self,
        partition: int,
        records: list[Record],
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> None:
        batch = encode_batch(
            records, producer_id=producer_id, producer_epoch=producer_epoch, transactional=transactional
        )
        view = memoryview(batch)
        self._partition(partition).append([(read_header(view), view)], origin=AppendOrigin.COORDINATOR)

    def replay(self, partition: int) -> Iterator[StoredBatch]:
        if self._topics.get(CONSUMER_OFFSETS_TOPIC) is None:
            return
        try:
            plog = self._topics.get_partition(CONSUMER_OFFSETS_TOPIC, partition).log
        except KafkaError:
            return  # led by another broker of the cluster: its coordinator replays it
        for header, view in plog.iter_batches(plog.log_start_offset):
            try:
                decoded = next(iter(decode_batches(view)))
            except (KafkaError, StopIteration) as exc:
                log.warning("%s-%d: skipping an unreadable batch: %s", CONSUMER_OFFSETS_TOPIC, partition, exc)
                continue
            yield StoredBatch(
                records=tuple((r.key or b"", r.value) for r in decoded.records),
                producer_id=header.producer_id,
                producer_epoch=header.producer_epoch,
                transactional=header.is_transactional,
                control=header.is_control,
                commit=bool(decoded.control and decoded.control.commit),
            )
