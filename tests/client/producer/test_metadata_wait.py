"""ProducerNetwork.wait_for_topic, send()'s wait for a new topic's metadata, with the Metadata answers
scripted (no broker): what keeps it waiting and what ends the wait at once."""

from __future__ import annotations

import asyncio
import time

import pytest

from onceflow.client.producer.network import ProducerNetwork
from onceflow.protocol.errors import ErrorCode, InvalidTopic, KafkaError, TopicAuthorizationFailed

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


@pytest.mark.parametrize(
    ("code", "error_class"),
    [
        (ErrorCode.INVALID_TOPIC_EXCEPTION, InvalidTopic),
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, TopicAuthorizationFailed),
    ],
)
def test_an_invalid_or_unauthorized_topic_ends_the_wait_at_once(code, error_class):
    """Kafka's Metadata.maybeThrowExceptionForTopic: no wait cures these, so max.block.ms is not spent.
    Retriable answers before it (the topic being created, no leader yet) keep the wait going."""
    retriable = [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE]
    network, calls = scripted_network([*retriable, code, 3])
    with pytest.raises(error_class) as failed:
        wait(network, max_block_s=3600)
    assert failed.value.code == code
    assert "'t'" in str(failed.value)
    assert len(calls) == 3


def test_a_topic_known_to_be_invalid_fails_without_asking_again():
    """As Kafka's waitOnMetadata checks the cluster's invalid topics first: a name does not become valid."""
    network, calls = scripted_network([ErrorCode.INVALID_TOPIC_EXCEPTION])
    network.topic_errors[TOPIC] = ErrorCode.INVALID_TOPIC_EXCEPTION  # from an earlier answer
    with pytest.raises(InvalidTopic):
        wait(network)
    assert calls == []
