"""Request decoding: kafka-python decodes a null where the schema forbids one; we refuse it."""

import pytest
from kafka.protocol.admin import DeleteTopicsRequest, DescribeTransactionsRequest
from kafka.protocol.admin.groups import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer.offsets import ListOffsetsRequest
from kafka.protocol.metadata.metadata import MetadataRequest

from onceflow.protocol.apis import decode_request
from onceflow.protocol.errors import InvalidRequest


def _frame(request, version: int) -> bytes:
    request.API_VERSION = version
    request.with_header(correlation_id=1, client_id="t")
    return bytes(request.encode(header=True))


def test_null_array_where_the_schema_forbids_it_is_an_invalid_request():
    topic = ListOffsetsRequest.ListOffsetsTopic(name="t", partitions=None)
    request = ListOffsetsRequest(replica_id=-1, topics=[topic], version=1)
    with pytest.raises(InvalidRequest, match="partitions is null"):
        decode_request(_frame(request, 1), ListOffsetsRequest, 1)


def test_null_array_where_the_schema_allows_it_decodes():
    # Metadata v1+ uses a null topic list to mean "all topics".
    request = MetadataRequest(topics=None, version=4)
    header, body = decode_request(_frame(request, 4), MetadataRequest, 4)
    assert header.correlation_id == 1
    assert body.topics is None


@pytest.mark.parametrize(
    "request_, version, field",
    [
        (ListGroupsRequest(states_filter=["Stable"], types_filter=[None]), 5, "types_filter"),
        (ListGroupsRequest(states_filter=[None, "Empty"]), 4, "states_filter"),
        (DescribeGroupsRequest(groups=["g", None], include_authorized_operations=False), 5, "groups"),
        (DeleteGroupsRequest(groups_names=[None]), 2, "groups_names"),
        (DescribeTransactionsRequest(transactional_ids=[None]), 0, "transactional_ids"),
        (DeleteTopicsRequest(topic_names=[None], timeout_ms=1000), 1, "topic_names"),
    ],
    ids=lambda x: type(x).__name__ if hasattr(x, "API_KEY") else str(x),
)
def test_a_null_element_in_an_array_of_strings_is_an_invalid_request(request_, version, field):
    # Kafka's generated parsers refuse it ("non-nullable field ... element was serialized as null");
    # kafka-python decodes it as None, which crashed the ListGroups handler (found by the fuzzer).
    with pytest.raises(InvalidRequest, match=f"{field} has a null element"):
        decode_request(_frame(request_, version), type(request_), version)


def _kafka_python_framed(response, correlation_id: int, version: int) -> bytes:
    response._header = None
    response.API_VERSION = version
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


def test_encode_response_gives_kafka_pythons_bytes_for_every_version():
    from kafka.protocol.metadata import ApiVersionsResponse
    from kafka.protocol.producer import EndTxnResponse, ProduceResponse

    from onceflow.protocol.apis import encode_response

    partition = ProduceResponse.TopicProduceResponse.PartitionProduceResponse(
        index=0, error_code=0, base_offset=5, log_append_time_ms=-1, log_start_offset=0, record_errors=[]
    )
    produce = ProduceResponse(
        responses=[ProduceResponse.TopicProduceResponse(name="t", partition_responses=[partition])],
        throttle_time_ms=0,
    )
    end_txn = EndTxnResponse(throttle_time_ms=0, error_code=0, producer_id=1, producer_epoch=2)
    # ApiVersions keeps a v0 response header even at its flexible versions.
    api_versions = ApiVersionsResponse(
        error_code=0,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=0, min_version=0, max_version=12)],
        throttle_time_ms=0,
    )
    for response, versions in ((produce, range(13)), (end_txn, range(6)), (api_versions, range(5))):
        for version in versions:
            ours = bytes(encode_response(response, 4242, version))
            assert ours == _kafka_python_framed(response, 4242, version), (type(response).__name__, version)
