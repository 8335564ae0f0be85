"""The four sequence flows of the idempotence seed note (000_*, figures 2-5), over the wire.

One partition, one producer id, the seed's batches with their sequence ranges (A/114-120 ... F/151-155:
a producer the partition does not know yet may start at any sequence, KIP-360). Lost ACKs and lost
requests come from the broker's fault points, switched on only around the request they hit; the
log is read back with Fetch after each flow.
"""

from __future__ import annotations

import pytest
from tests.conftest import topic_name
from tests.helpers.wire import WireClient

from onceflow.broker import faults
from onceflow.protocol.errors import ErrorCode

from .inprocess import ThreadedBroker
from .wire import (
    batch,
    create_topic,
    describe_producers,
    fetch_values,
    init_producer_id,
    produce,
    read_produce_response,
    send_without_reading,
)

pytestmark = pytest.mark.onceflow_only

# name -> (first sequence, record count), as in the figures
SEED_BATCHES = {"A": (114, 7), "B": (121, 4), "C": (125, 8), "D": (133, 10), "E": (143, 8), "F": (151, 5)}
OK = ErrorCode.NONE
OUT_OF_ORDER = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def values_of(name: str) -> list[bytes]:
    return [b"%s%d" % (name.encode(), i) for i in range(SEED_BATCHES[name][1])]


def seed_batch(name: str, pid: int, epoch: int = 0, first_seq: int | None = None) -> bytes:
    first = SEED_BATCHES[name][0] if first_seq is None else first_seq
    return batch(values_of(name), pid, epoch, first)


def expected_log(*names: str) -> list[bytes]:
    return [value for name in names for value in values_of(name)]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    broker = ThreadedBroker(tmp_path_factory.mktemp("onceflow")).start()
    yield broker
    broker.stop()


@pytest.fixture
def flow(server):
    """A fresh topic, a connection and a new producer id; fault points cleared afterwards."""
    topic = topic_name("seed")
    client = WireClient(server.bootstrap)
    create_topic(client, topic)
    pid = init_producer_id(client).producer_id
    yield server, client, topic, pid
    server.faults.clear()
    client.close()


def barrier(client: WireClient, topic: str) -> None:
    """Return once the broker has handled every request sent before on this connection: it runs them in
    order and answers in order, so the answer to one more request means the earlier ones are done
    (whether or not their own answers were dropped)."""
    describe_producers(client, topic, [0])


def stored(client: WireClient, topic: str) -> list[bytes]:
    records = fetch_values(client, topic)
    assert [offset for offset, _ in records] == list(range(len(records)))
    return [value for _, value in records]


def send_pipelined(client: WireClient, topic: str, records: list[bytes]) -> list:
    """Put every request on the wire before reading any answer (requests in flight at once)."""
    base = 1000
    for i, data in enumerate(records):
        send_without_reading(client, topic, data, base + i)
    answers = [read_produce_response(client) for _ in records]
    assert [correlation_id for correlation_id, _ in answers] == [base + i for i in range(len(records))]
    return [ack for _, ack in answers]


def test_figure2_all_batches_acknowledged_in_order(flow):
    _server, client, topic, pid = flow
    first = send_pipelined(client, topic, [seed_batch(n, pid) for n in "ABC"])
    second = send_pipelined(client, topic, [seed_batch(n, pid) for n in "DE"])
    acks = first + second
    assert [a.error_code for a in acks] == [OK] * 5
    assert [a.base_offset for a in acks] == [0, 7, 11, 19, 29]
    assert stored(client, topic) == expected_log(*"ABCDE")


def test_figure3_lost_acks_of_d_and_e_resent_and_stored_once(flow):
    server, client, topic, pid = flow
    assert [produce(client, topic, seed_batch(n, pid)).error_code for n in "ABC"] == [OK] * 3
    server.faults.set(faults.DROP_RESPONSE_AFTER_APPEND, 1.0)
    send_without_reading(client, topic, seed_batch("D", pid), 900)
    send_without_reading(client, topic, seed_batch("E", pid), 901)
    barrier(client, topic)  # D and E are appended, but their ACKs are lost
    server.faults.clear()
    resent = [produce(client, topic, seed_batch(n, pid)) for n in "DE"]
    assert [(a.error_code, a.base_offset) for a in resent] == [(OK, 19), (OK, 29)]  # the original offsets
    assert stored(client, topic) == expected_log(*"ABCDE")


def test_figure4_lost_batch_c_makes_d_and_e_out_of_order_until_c_arrives(flow):
    server, client, topic, pid = flow
    assert [produce(client, topic, seed_batch(n, pid)).error_code for n in "AB"] == [OK] * 2
    server.faults.set(faults.DROP_REQUEST_BEFORE_APPEND, 1.0)
    send_without_reading(client, topic, seed_batch("C", pid), 900)  # lost on the way
    barrier(client, topic)
    server.faults.clear()
    assert [produce(client, topic, seed_batch(n, pid)).error_code for n in "DE"] == [OUT_OF_ORDER] * 2
    assert stored(client, topic) == expected_log(*"AB")
    # As the seed says: the producer bumps its epoch and resends from the batch after the last ACK.
    sequence = 0
    acks = []
    for name in "CDE":
        acks.append(produce(client, topic, seed_batch(name, pid, epoch=1, first_seq=sequence)))
        sequence += SEED_BATCHES[name][1]
    assert [(a.error_code, a.base_offset) for a in acks] == [(OK, 11), (OK, 19), (OK, 29)]
    assert stored(client, topic) == expected_log(*"ABCDE")


def test_figure5_six_in_flight_with_a_lost_ack_is_stored_twice_after_an_epoch_bump(flow):
    server, client, topic, pid = flow
    server.faults.set(faults.DROP_RESPONSE_AFTER_APPEND, 1.0)
    send_without_reading(client, topic, seed_batch("A", pid), 900)
    barrier(client, topic)
    server.faults.clear()
    acks = send_pipelined(client, topic, [seed_batch(n, pid) for n in "BCDEF"])  # six in flight with A
    assert [a.error_code for a in acks] == [OK] * 5
    # A is older than the five cached batches (B..F): not recognised as a duplicate.
    assert produce(client, topic, seed_batch("A", pid)).error_code == OUT_OF_ORDER
    assert stored(client, topic) == expected_log(*"ABCDEF")
    # The producer bumps its epoch and resends A from sequence 0: the broker stores it again.
    again = produce(client, topic, seed_batch("A", pid, epoch=1, first_seq=0))
    assert (again.error_code, again.base_offset) == (OK, 42)
    assert stored(client, topic) == expected_log(*"ABCDEFA")
