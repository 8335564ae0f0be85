"""encode_response reuses the encoded body of small repeating responses (Heartbeat, AddOffsetsToTxn,
EndTxn, AddPartitionsToTxn v0-3): the framed bytes must equal kafka-python's own encoding at every
version, for every value, and a body is never reused for different values."""

import pytest
from kafka.protocol.consumer.group import HeartbeatResponse
from kafka.protocol.producer import AddOffsetsToTxnResponse, AddPartitionsToTxnResponse, EndTxnResponse

from onceflow.protocol import apis


class _Header:
    def __init__(self, correlation_id):
        self.correlation_id = correlation_id
        self.request_api_version = None

    def encode(self, flexible=False):
        return correlation_id_bytes(self.correlation_id) + (b"\x00" if flexible else b"")


def correlation_id_bytes(cid):
    return cid.to_bytes(4, "big", signed=True)


def _kafka_python_bytes(response, correlation_id, version):
    response._header = None
    response.API_VERSION = version
    response._header = _Header(correlation_id)
    return bytes(response.encode(header=True, framed=True))


def _responses(cls, make):
    return [(cls, make, version) for version in range(cls.min_version, cls.max_version + 1)]


CASES = [
    *_responses(
        EndTxnResponse,
        lambda c, v: EndTxnResponse(
            throttle_time_ms=0, error_code=c, producer_id=v, producer_epoch=v % 32768
        ),
    ),
    *_responses(HeartbeatResponse, lambda c, v: HeartbeatResponse(throttle_time_ms=v % 1000, error_code=c)),
    *_responses(
        AddOffsetsToTxnResponse, lambda c, v: AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=c)
    ),
]


@pytest.mark.parametrize(("cls", "make", "version"), CASES, ids=lambda x: getattr(x, "__name__", str(x)))
def test_same_bytes_as_kafka_python_and_no_stale_body(cls, make, version):
    for code, value, correlation_id in [
        (0, -1, 1),
        (0, -1, 2),
        (47, 12345, 3),
        (0, -1, -7),
        (0, 99, 2**31 - 1),
    ]:
        ours = apis.encode_response(make(code, value), correlation_id, version)
        assert bytes(ours) == _kafka_python_bytes(make(code, value), correlation_id, version)


def test_answers_decode_with_the_values_they_were_given():
    framed = apis.encode_response(
        EndTxnResponse(throttle_time_ms=0, error_code=0, producer_id=77, producer_epoch=5), 42, 5
    )
    body_start = 4 + 5  # size, correlation id, empty tagged fields (v5 is flexible)
    decoded = EndTxnResponse.decode(bytes(framed[body_start:]), version=5)
    assert (decoded.producer_id, decoded.producer_epoch, decoded.error_code) == (77, 5, 0)
    assert int.from_bytes(framed[4:8], "big") == 42 and int.from_bytes(framed[:4], "big") == len(framed) - 4


_TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
_PartitionResult = _TopicResult.AddPartitionsToTxnPartitionResult


def _add_partitions(results: dict[str, list[tuple[int, int]]]) -> AddPartitionsToTxnResponse:
    return AddPartitionsToTxnResponse(
        throttle_time_ms=0,
        results_by_topic_v3_and_below=[
            _TopicResult(
                name=name,
                results_by_partition=[
                    _PartitionResult(partition_index=p, partition_error_code=c) for p, c in parts
                ],
            )
            for name, parts in results.items()
        ],
    )


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_add_partitions_answers_reuse_bodies_only_for_identical_results(version):
    shapes = [
        {"orders": [(0, 0)]},
        {"orders": [(0, 0)]},
        {"orders": [(1, 0)]},  # another partition
        {"orders": [(0, 51)]},  # another code
        {"orders": [(0, 0), (1, 0)], "payments": [(3, 0)]},
        {"ordersX": [(0, 0)]},  # another topic
    ]
    for cid, shape in enumerate(shapes):
        ours = apis.encode_response(_add_partitions(shape), cid, version)
        assert bytes(ours) == _kafka_python_bytes(_add_partitions(shape), cid, version)
