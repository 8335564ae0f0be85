"""ProducerNetwork.wait_for_topic, send()'s wait for a new topic's metadata, with the Metadata answers
scripted (no broker): what keeps it waiting and what ends the wait at once."""

from __future__ import annotations

import asyncio
import time

from onceflow.client.producer.network import ProducerNetwork
from onceflow.protocol.errors import ErrorCode, KafkaError

TOPIC = "t"


def scripted_network(answers: list) -> tuple[ProducerNetwork, list]:
    """A network whose metadata refreshes take the next of ``answers`` in turn: an exception to raise,
    a partition count for the topic, or an error code the broker answered for it."""
    network = ProducerNetwork("127.0.0.1:1", client_id="t", request_timeout_ms=1000, retry_backoff_ms=1)
    calls = []

    async def refresh(topics):
        calls.append(list(topics))
        answer = answers.pop(0) if answers else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, ErrorCode):
            network.topic_errors[TOPIC] = answer
        else:
            network.topic_errors.pop(TOPIC, None)
            network.partition_counts[TOPIC] = answer

    network.refresh = refresh
    return network, calls


def wait(network: ProducerNetwork, max_block_s: float = 60.0) -> int:
    async def scenario():
        try:
            # The guard is far below max.block.ms: a wait that ignores an answer runs into it.
            async with asyncio.timeout(20):
                return await network.wait_for_topic(TOPIC, time.monotonic() + max_block_s)
        finally:
            await network.close()

    return asyncio.run(scenario())


def test_a_timed_out_metadata_request_is_sent_again():
    """A request timeout closes the connection; the next refresh goes on a new one."""
    timed_out = KafkaError("MetadataRequest timed out", ErrorCode.REQUEST_TIMED_OUT)
    network, calls = scripted_network([timed_out, 3])
    assert wait(network) == 3
    assert len(calls) == 2
