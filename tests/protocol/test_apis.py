"""Request decoding: kafka-python decodes a null where the schema forbids one; we refuse it."""

import pytest
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
