"""ProduceResponse encoded by hand: the same bytes as kafka-python at every version we serve, and
None (kafka-python's turn) for the shapes it does not know."""

from __future__ import annotations

import pytest
from kafka.protocol.producer import ProduceResponse

from onceflow.protocol import apis
from onceflow.protocol.produce_response import encode_produce_response

TR = ProduceResponse.TopicProduceResponse
PR = TR.PartitionProduceResponse


def _partition(index: int, code: int = 0, message: str | None = None, **fields) -> PR:
    values = {"base_offset": 123_456_789_012, "log_append_time_ms": -1, "log_start_offset": 7}
    values.update(fields)
    return PR(index=index, error_code=code, record_errors=[], error_message=message, **values)


def _response() -> ProduceResponse:
    return ProduceResponse(
        responses=[
            TR(
                name="alpha", partition_responses=[_partition(0), _partition(3, log_append_time_ms=1_700_000)]
            ),
            TR(name="bêta", partition_responses=[_partition(1, 6, "This server is not the leader")]),
            TR(name="empty", partition_responses=[]),
        ],
        throttle_time_ms=250,
    )


def _kafka_python(response: ProduceResponse, correlation_id: int, version: int) -> bytes:
    response._header = None
    response.API_VERSION = version
    response._header = apis._ResponseHeader(correlation_id)
    return bytes(response.encode(header=True, framed=True))


@pytest.mark.parametrize("version", range(3, 13))
def test_the_bytes_are_kafka_pythons_at_every_version(version):
    ours = encode_produce_response(_response(), 42, version)
    assert ours is not None
    assert bytes(ours) == _kafka_python(_response(), 42, version)
    decoded = ProduceResponse.decode(bytes(ours)[4:], version=version, header=True)
    assert decoded.header.correlation_id == 42
    assert decoded.responses[1].partition_responses[0].error_code == 6


@pytest.mark.parametrize("version", [3, 9, 12])
def test_encode_response_uses_it_and_agrees(version):
    assert bytes(apis.encode_response(_response(), 9, version)) == _kafka_python(_response(), 9, version)


def test_shapes_it_does_not_know_are_left_to_kafka_python():
    with_record_errors = _response()
    err = PR.BatchIndexAndErrorMessage(batch_index=0, batch_index_error_message="bad")
    with_record_errors.responses[0].partition_responses[0].record_errors = [err]
    assert encode_produce_response(with_record_errors, 1, 10) is None
    assert bytes(apis.encode_response(with_record_errors, 1, 10)) == _kafka_python(with_record_errors, 1, 10)
    with_leader = _response()
    leader = PR.LeaderIdAndEpoch(leader_id=0, leader_epoch=3)
    with_leader.responses[0].partition_responses[0] = _partition(0, 6, current_leader=leader)
    assert encode_produce_response(with_leader, 1, 10) is None
    assert encode_produce_response(_response(), 1, 13) is None  # topic ids
    assert encode_produce_response(_response(), 1, 2) is None
