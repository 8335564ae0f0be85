"""A produce whose write fails part-way (a full disk) is answered KAFKA_STORAGE_ERROR and leaves
nothing behind: later produces are acknowledged at the next offsets, fetched intact, and still there
after a restart."""

from __future__ import annotations

import asyncio

from kafka.record.default_records import DefaultRecordBatch
from tests.helpers.disk import file_size_limit

from onceflow.protocol.errors import ErrorCode

from .raw_client import RawClient, build_batch, running_broker
from .test_produce_fetch import fetch_request, fetched, partition_response, produce_request


def _values(records: bytes) -> list[tuple[int, bytes]]:
    out, pos = [], 0
    while pos < len(records):
        size = int.from_bytes(records[pos + 8 : pos + 12], "big") + 12
        batch = DefaultRecordBatch(bytes(records[pos : pos + size]))
        assert batch.validate_crc()
        out.extend((r.offset, r.value) for r in batch)
        pos += size
    return out


def test_failed_write_is_storage_error_and_acknowledged_records_survive(tmp_path):
    expected = [(0, b"a"), (1, b"b"), (2, b"after")]

    async def read_all(port: int) -> list[tuple[int, bytes]]:
        client = await RawClient.connect(port)
        try:
            response = await client.request(fetch_request("t", {0: 0}), 12)
            assert fetched(response).error_code == 0
            return _values(fetched(response).records)
        finally:
            await client.close()

    async def scenario():
        async with running_broker(tmp_path) as broker:
            broker.topics.create_topic("t", 1)
            client = await RawClient.connect(broker.port)
            first = await client.request(produce_request("t", {0: build_batch([b"a", b"b"])}, acks=-1), 9)
            assert partition_response(first).error_code == 0
            segment = broker.topics.get_partition("t", 0).log.segment_paths()[-1]
            with file_size_limit(segment.stat().st_size + 100):
                refused = await client.request(
                    produce_request("t", {0: build_batch([b"x" * 3000])}, acks=-1), 9
                )
            assert partition_response(refused).error_code == ErrorCode.KAFKA_STORAGE_ERROR
            later = await client.request(produce_request("t", {0: build_batch([b"after"])}, acks=-1), 9)
            assert (partition_response(later).error_code, partition_response(later).base_offset) == (0, 2)
            await client.close()
            assert await read_all(broker.port) == expected
        async with running_broker(tmp_path) as restarted:
            assert await read_all(restarted.port) == expected

    asyncio.run(scenario())
