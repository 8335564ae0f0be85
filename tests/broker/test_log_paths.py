"""Broker paths that depend on the partition log's rules: sizes, timestamps, retention, shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

from onceflow.protocol.errors import ErrorCode
from onceflow.protocol.records import read_header

from .raw_client import RawClient, build_batch, running_broker
from .test_produce_fetch import fetch_request, list_offsets_request, partition_response, produce_request


def run(coro):
    return asyncio.run(coro)


def test_oversized_batch_is_message_too_large(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            broker.topics.create_topic("small", 1, {"max.message.bytes": "200"})
            client = await RawClient.connect(broker.port)
            part = partition_response(
                await client.request(produce_request("small", {0: build_batch([b"x" * 500])}), 9)
            )
            assert part.error_code == ErrorCode.MESSAGE_TOO_LARGE
            part = partition_response(
                await client.request(produce_request("small", {0: build_batch([b"ok"])}), 9)
            )
            assert (part.error_code, part.base_offset) == (0, 0)
            await client.close()

    run(scenario())


def test_log_append_time_topic_and_list_offsets_by_timestamp(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            broker.topics.create_topic("lat", 1, {"message.timestamp.type": "LogAppendTime"})
            broker.topics.create_topic("ct", 1)
            client = await RawClient.connect(broker.port)
            old = 1_000_000_000_000
            part = partition_response(
                await client.request(produce_request("lat", {0: build_batch([b"a"], timestamp_ms=old)}), 9)
            )
            assert part.error_code == 0 and part.log_append_time_ms > old
            data = (await client.request(fetch_request("lat", {0: 0}), 12)).responses[0].partitions[0].records
            header = read_header(data)
            assert header.timestamp_type == 1 and header.max_timestamp == part.log_append_time_ms

            for i, ts in enumerate((old, old + 1000, old + 2000)):
                await client.request(
                    produce_request("ct", {0: build_batch([b"v%d" % i], timestamp_ms=ts)}), 9
                )
            for query, expected in (
                (old - 5, (0, old)),
                (old + 500, (1, old + 1000)),
                (old + 2000, (2, old + 2000)),
                (old + 9000, (-1, -1)),
            ):
                response = await client.request(list_offsets_request("ct", query), 8)
                found = response.topics[0].partitions[0]
                assert (found.error_code, found.offset, found.timestamp) == (0, *expected)
            # Max timestamp (-3, v7+): the record with the largest timestamp, wherever it is.
            await client.request(produce_request("ct", {0: build_batch([b"late"], timestamp_ms=old - 50)}), 9)
            found = (await client.request(list_offsets_request("ct", -3), 8)).topics[0].partitions[0]
            assert (found.error_code, found.offset, found.timestamp) == (0, 2, old + 2000)
            await client.close()

    run(scenario())


def test_retention_runs_periodically(tmp_path):
    async def scenario():
        config = {"log_retention_check_interval_ms": 20}
        async with running_broker(tmp_path, **config) as broker:
            topic = broker.topics.create_topic("r", 1, {"retention.ms": "1", "segment.bytes": "1024"})
            plog = topic.partitions[0].log
            client = await RawClient.connect(broker.port)
            for _ in range(3):  # one segment each: two batches do not fit in segment.bytes
                request = produce_request("r", {0: build_batch([b"x" * 600], timestamp_ms=1000)})
                assert partition_response(await client.request(request, 9)).error_code == 0
            # Old segments go once the retention task runs; wait for it (bounded), not for a time.
            for _ in range(500):
                if plog.log_start_offset > 0:
                    break
                await asyncio.sleep(0.01)
            assert plog.log_start_offset > 0
            earliest = (await client.request(list_offsets_request("r", -2), 8)).topics[0].partitions[0]
            assert earliest.offset == plog.log_start_offset
            await client.close()

    run(scenario())


def test_run_serves_until_sigterm_then_exits_cleanly(tmp_path):
    code = (
        "import logging, sys; from pathlib import Path;"
        "logging.basicConfig(level=logging.INFO, stream=sys.stderr);"
        "from onceflow.broker.config import BrokerConfig; from onceflow.server.node import run;"
        f"run(None, BrokerConfig(port=0, data_dir=Path({str(tmp_path)!r})))"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        line = ""
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if "onceflow broker listening on 127.0.0.1:" in line or not line:
                break
        assert "onceflow broker listening on 127.0.0.1:" in line
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert (tmp_path / "meta.properties").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
