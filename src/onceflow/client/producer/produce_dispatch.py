"""Putting Produce requests on the wire and getting their answers back to the sender.

The sender sends thousands of requests per second at Kafka's default batch.size (16 KiB), so a
request costs no task: :meth:`Connection.submit_frame` writes it at once and returns a future, and a
done callback hands the outcome to the sender: the partition results, None (acks=0), or the error
(connection lost, REQUEST_TIMED_OUT). Client faults (:mod:`onceflow.client.producer.faults`) delay a
request, lose it, or lose its answer, with timers standing in for the broker that never answers.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable

from kafka.protocol.producer import ProduceRequest

from onceflow.client.producer.batch import ProducerBatch
from onceflow.client.producer.config import ProducerConfig
from onceflow.client.producer.faults import DELAY_SEND, DROP_REQUEST, DROP_RESPONSE, ClientFaults
from onceflow.client.producer.produce_wire import MAX_VERSION, ProduceRequestFrame
from onceflow.client.producer.transaction_manager import TransactionManager
from onceflow.protocol.errors import ErrorCode, KafkaError
from onceflow.protocol.transaction_versions import FIRST_TV2_PRODUCE_VERSION

log = logging.getLogger(__name__)

# on_answer(node, batches, outcome): outcome is list[PartitionResult], None (acks=0) or an exception.
AnswerHandler = Callable[[int, list[ProducerBatch], object], None]


class ProduceDispatcher:
    def __init__(
        self,
        config: ProducerConfig,
        txn: TransactionManager,
        faults: ClientFaults | None,
        on_answer: AnswerHandler,
        metrics=None,
    ) -> None:
        self.config = config
        self.metrics = metrics  # a ProducerMetrics: request latency
        self.txn = txn
        self.faults = faults
        self.on_answer = on_answer
        self.compression = config.compression_codec
        self.request_timeout_s = config.request_timeout_ms / 1000.0

    def request_for(self, conn, batches: list[ProducerBatch]) -> ProduceRequestFrame:
        """The Produce request carrying ``batches`` (one per partition), at the version to use on ``conn``."""
        version = min(conn.version_for(ProduceRequest), MAX_VERSION)  # the highest both speak
        if self.txn.is_transactional and not self.txn.transaction_v2:
            # Produce v12+ means "the broker adds the partition" (KIP-890 part 2): a transaction of the
            # protocol v1 adds its partitions with AddPartitionsToTxn and must stay below it.
            version = min(version, FIRST_TV2_PRODUCE_VERSION - 1)
        compression = self.compression
        return ProduceRequestFrame(
            version,
            self.txn.transactional_id,
            self.config.acks,
            self.config.request_timeout_ms,
            [(batch.topic, batch.partition, batch.encode(compression)) for batch in batches],
        )

    def send(self, node: int, conn, request, batches: list[ProducerBatch], number: int) -> None:
        """Write request ``number`` now (or as a fault says); its outcome goes to ``on_answer``."""
        faults = self.faults
        if faults is not None:
            if faults.fires(DELAY_SEND, number):
                delay = faults.parameters["delay-send.ms"] / 1000.0
                asyncio.get_running_loop().call_later(
                    delay, self._send_late, node, conn, request, batches, number
                )
                return
            if faults.fires(DROP_REQUEST, number):
                self._lose_request(node, batches, number)
                return
        self._submit(node, conn, request, batches, number)

    def _send_late(self, node: int, conn, request, batches: list[ProducerBatch], number: int) -> None:
        """A delayed request (delay-send) goes now, unless it is also to be lost."""
        if self.faults.fires(DROP_REQUEST, number):
            self._lose_request(node, batches, number)
            return
        self._submit(node, conn, request, batches, number)

    def _lose_request(self, node: int, batches: list[ProducerBatch], number: int) -> None:
        log.info("fault %s: Produce request #%d not sent", DROP_REQUEST, number)
        lost = KafkaError("request lost (client fault drop-request)", ErrorCode.REQUEST_TIMED_OUT)
        asyncio.get_running_loop().call_later(self.request_timeout_s, self.on_answer, node, batches, lost)

    def _submit(self, node: int, conn, request, batches: list[ProducerBatch], number: int) -> None:
        try:
            answer = conn.submit_frame(request)
        except Exception as exc:  # noqa: BLE001 - whatever the cause, the request is not on the wire
            # The batches are the sender's in flight: answered as a lost connection (retriable), on the
            # next loop turn as any answer is, never an exception out of the sender's pass (which once
            # ended the sender with them in flight for ever).
            log.warning("Produce request #%d to broker %d not sent: %r", number, node, exc)
            lost = KafkaError(f"request not sent: {exc!r}", ErrorCode.NETWORK_EXCEPTION)
            asyncio.get_running_loop().call_soon(self.on_answer, node, batches, lost)
            return
        answer.add_done_callback(functools.partial(self._answered, node, batches, number, time.monotonic()))

    def _answered(self, node: int, batches, number: int, sent: float, answer: asyncio.Future) -> None:
        if answer.cancelled():
            outcome: object = KafkaError("request cancelled", ErrorCode.NETWORK_EXCEPTION)
        else:
            outcome = answer.exception() or answer.result()
            if self.metrics is not None:
                self.metrics.answered(sent, time.monotonic())
        faults = self.faults
        if (
            faults is not None
            and not isinstance(outcome, BaseException)
            and faults.fires(DROP_RESPONSE, number)
        ):
            log.info("fault %s: response to Produce request #%d ignored", DROP_RESPONSE, number)
            lost = KafkaError("response lost (client fault drop-response)", ErrorCode.REQUEST_TIMED_OUT)
            wait = max(0.0, self.request_timeout_s - (time.monotonic() - sent))
            asyncio.get_running_loop().call_later(wait, self.on_answer, node, batches, lost)
            return
        self.on_answer(node, batches, outcome)
