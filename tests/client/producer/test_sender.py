"""The sender against a scripted broker (no sockets): sequence numbers kept on retry, KIP-360 epoch
bumps, NOT_LEADER_OR_FOLLOWER with a leader move, and failed batches."""

from __future__ import annotations

import asyncio

from kafka.protocol.producer import ProduceRequest

from onceflow.client.connection import BrokerConnectionError
from onceflow.client.producer.accumulator import RecordAccumulator
from onceflow.client.producer.config import ProducerConfig
from onceflow.client.producer.produce_wire import PartitionResult
from onceflow.client.producer.sender import Sender
from onceflow.client.producer.transaction_manager import TransactionManager
from onceflow.protocol.errors import ErrorCode, KafkaError
from onceflow.protocol.records import read_header

TOPIC = "t"


class ScriptedBroker:
    """Answers Produce requests from a script of error codes; records every batch header it saw. An
    exception in the script fails the whole request with it, as the connection does (e.g. on a request
    timeout, which closes the connection)."""

    def __init__(self, node: int, script: list[int | BaseException] | None = None) -> None:
        self.node = node
        self.script = list(script or [])
        self.seen: list[tuple[int, int, int, int]] = []  # (node, epoch, base_sequence, count)
        self.next_offset = 0
        self.closed = False

    def version_for(self, request_cls) -> int:
        return 9

    def submit_frame(self, request):
        """A future answered on the next loop turn."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if self.script and isinstance(self.script[0], BaseException):
            error = self.script.pop(0)
            self._read(request)
            loop.call_soon(future.set_exception, error)
        else:
            loop.call_soon(future.set_result, self.answer(request))
        return future

    def _read(self, request):
        """The request's (topic, partition, batch header)s, read back from its own bytes with
        kafka-python (an independent decoder), and recorded as seen."""
        frame = request.encode(correlation_id=1, client_id="test")
        decoded = ProduceRequest.decode(frame[4:], version=request.version, header=True)
        out = []
        for topic in decoded.topic_data:
            for data in topic.partition_data:
                header = read_header(data.records)
                self.seen.append(
                    (self.node, header.producer_epoch, header.base_sequence, header.record_count)
                )
                out.append((topic.name, data.index, header))
        return out

    def answer(self, request):
        answers = []
        for topic, partition, header in self._read(request):
            code = self.script.pop(0) if self.script else 0
            offset = -1
            if code == 0:
                offset, self.next_offset = self.next_offset, self.next_offset + header.record_count
            answers.append(PartitionResult(topic, partition, code, offset, -1, None))
        return answers


class FakeNetwork:
    def __init__(self, brokers: dict[int, ScriptedBroker], leader: int = 0) -> None:
        self.brokers = brokers
        self.leaders = {(TOPIC, 0): leader}
        self.partition_counts = {TOPIC: 1}
        self.refreshes = 0
        self.last_refresh = float("inf")  # never stale: refreshes here come from errors only
        self.next_leader = leader

    def ready_connection(self, node):
        return self.brokers[node]

    async def connection(self, node):
        return self.brokers[node]

    async def refresh(self, topics):
        self.refreshes += 1
        self.leaders[(TOPIC, 0)] = self.next_leader


def run(
    script_by_node: dict[int, list],
    batches: int = 3,
    *,
    leader: int = 0,
    next_leader: int | None = None,
    config: ProducerConfig | None = None,
):
    config = config or ProducerConfig(
        batch_size=200, linger_ms=0, retry_backoff_ms=1, request_timeout_ms=1000
    )
    brokers = {node: ScriptedBroker(node, script) for node, script in script_by_node.items()}
    network = FakeNetwork(brokers, leader)
    network.next_leader = leader if next_leader is None else next_leader
    txn = TransactionManager(None)
    txn.set_producer(7, 0)

    async def scenario():
        acc = RecordAccumulator(
            batch_size=config.batch_size, linger_ms=0, buffer_memory=1 << 20, transactional=False
        )
        sender = Sender(config, acc, network, txn)
        acc._on_new_batch = sender.wakeup
        sender.start()
        futures = [acc.try_append(TOPIC, 0, 1, None, b"x" * 150, []) for _ in range(batches)]
        await asyncio.wait_for(sender.wait_idle(), 10)
        if sender._metadata_task is not None:  # a refresh asked for lands before stop() cancels it
            await asyncio.wait_for(sender._metadata_task, 10)
        await sender.stop()
        outcomes = []
        for f in futures:
            try:
                outcomes.append(f.result().offset)
            except Exception as exc:  # noqa: BLE001 - the outcome is what we check
                outcomes.append(type(exc).__name__)
        return outcomes, sender

    outcomes, sender = asyncio.run(scenario())
    seen = [s for b in brokers.values() for s in b.seen]
    return outcomes, seen, txn, network, sender


def test_all_acknowledged_sequences_count_records():
    outcomes, seen, txn, _, _ = run({0: []})
    assert outcomes == [0, 1, 2]
    assert [(epoch, seq) for _, epoch, seq, _ in seen] == [(0, 0), (0, 1), (0, 2)]


def test_retriable_error_resends_with_the_same_sequence():
    outcomes, seen, txn, _, _ = run({0: [ErrorCode.REQUEST_TIMED_OUT]}, batches=1)
    assert outcomes == [0]
    assert [(epoch, seq) for _, epoch, seq, _ in seen] == [(0, 0), (0, 0)]


def test_not_leader_refreshes_metadata_and_resends_to_the_new_leader_in_order():
    # Node 0 refuses every attempt (a retry may reach it again before the refresh lands).
    outcomes, seen, txn, network, _ = run(
        {0: [ErrorCode.NOT_LEADER_OR_FOLLOWER] * 100, 1: []}, leader=0, next_leader=1
    )
    assert network.refreshes >= 1
    on_new_leader = [(seq) for node, _, seq, _ in seen if node == 1]
    assert on_new_leader == [0, 1, 2]  # same sequences, same order
    assert outcomes == [0, 1, 2]


def _timed_out() -> KafkaError:
    return KafkaError("no answer within the request timeout", ErrorCode.REQUEST_TIMED_OUT)


def test_a_timed_out_produce_refreshes_metadata_and_resends_to_the_new_leader():
    """A request timeout closes the connection, and Kafka's NetworkClient asks for a metadata update
    on every disconnect: a lone timed-out Produce to a leader that moved away must find the new one,
    not retry the old one until metadata.max.age.ms (here never)."""
    # Node 0 stopped answering: each attempt on it times out (only a refresh leads elsewhere).
    outcomes, seen, txn, network, _ = run(
        {0: [_timed_out() for _ in range(100)], 1: []}, batches=1, leader=0, next_leader=1
    )
    assert network.refreshes >= 1
    assert [(node, seq) for node, _, seq, _ in seen][-1] == (1, 0)  # same sequence, new leader
    assert outcomes == [0]


def test_a_timed_out_produce_that_is_not_retried_still_refreshes_metadata():
    """Kafka asks for the update on the disconnect itself, whatever becomes of the batches."""
    config = ProducerConfig(
        batch_size=200, linger_ms=0, retries=0, retry_backoff_ms=1, request_timeout_ms=1000
    )
    outcomes, seen, txn, network, _ = run({0: [_timed_out()]}, batches=1, config=config)
    assert outcomes == ["KafkaError"]
    assert network.refreshes == 1


def test_a_disconnect_refreshes_metadata_even_when_the_batch_is_not_retried():
    config = ProducerConfig(
        batch_size=200, linger_ms=0, retries=0, retry_backoff_ms=1, request_timeout_ms=1000
    )
    outcomes, seen, txn, network, _ = run(
        {0: [BrokerConnectionError("lost connection")]}, batches=1, config=config
    )
    assert outcomes == ["KafkaError"]
    assert network.refreshes == 1


def test_a_request_timed_out_answered_by_the_broker_keeps_the_metadata():
    """A partition's REQUEST_TIMED_OUT in an answer (e.g. acks=all waiting on replicas) is no
    disconnect: as in Kafka (TimeoutException is no InvalidMetadataException) nothing is refreshed."""
    outcomes, seen, txn, network, _ = run({0: [ErrorCode.REQUEST_TIMED_OUT]}, batches=1)
    assert outcomes == [0]
    assert network.refreshes == 0


def test_unknown_producer_id_on_the_earliest_batch_bumps_the_epoch_and_restarts_sequences():
    outcomes, seen, txn, _, sender = run({0: [ErrorCode.UNKNOWN_PRODUCER_ID]}, batches=1)
    assert outcomes == [0]
    assert txn.producer_epoch == 1 and sender.epoch_bumps == 1
    assert [(epoch, seq) for _, epoch, seq, _ in seen] == [(0, 0), (1, 0)]


def test_the_first_batch_of_a_producer_goes_alone_until_acknowledged():
    # The broker would take any sequence from a producer it does not know, so batches 1 and 2 wait
    # for batch 0, even while it is retried.
    outcomes, seen, txn, _, _ = run({0: [ErrorCode.REQUEST_TIMED_OUT]})
    assert outcomes == [0, 1, 2]
    assert [seq for _, _, seq, _ in seen] == [0, 0, 1, 2]


def test_out_of_order_behind_an_earlier_failure_is_retried_without_a_bump():
    # After a first acknowledged batch, batch 1 times out; 2 and 3 are refused as out of order
    # because of it.
    script = [
        ErrorCode.NONE,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
    ]
    outcomes, seen, txn, _, sender = run({0: script}, batches=4)
    assert outcomes == [0, 1, 2, 3]
    assert sender.epoch_bumps == 0
    assert [seq for _, _, seq, _ in seen][1:4] == [1, 2, 3]  # pipelined once the producer was known
    assert [seq for _, _, seq, _ in seen][-3:] == [1, 2, 3]  # resent in sequence order


def test_a_batch_failing_for_good_fails_its_records_and_renumbers_the_rest_under_a_new_epoch():
    script = [
        ErrorCode.NONE,
        ErrorCode.INVALID_RECORD,
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
    ]
    outcomes, seen, txn, _, _ = run({0: script}, batches=4)
    assert outcomes[1] == "KafkaError"
    assert [outcomes[0], *outcomes[2:]] == [0, 1, 2]
    assert txn.producer_epoch == 1
    assert [(epoch, seq) for _, epoch, seq, _ in seen][-2:] == [(1, 0), (1, 1)]
