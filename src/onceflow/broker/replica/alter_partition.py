"""AlterPartition on the wire: the leaders' proposals as one request to the controller, and its answer
back to each proposal (Kafka's ``AlterPartitionManager`` batching, without its queue: the caller sends).

Version 3 (topic ids, the ISR with each member's broker epoch, KIP-903) is what we send; a
request-level error applies to every proposal in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from onceflow.broker.replica.isr import AlterPartitionProposal
from onceflow.protocol.errors import ErrorCode
from onceflow.protocol.messages import AlterPartitionRequest, AlterPartitionResponse

VERSION = 3

_Topic = AlterPartitionRequest.TopicData
_Partition = AlterPartitionRequest.TopicData.PartitionData
_BrokerState = AlterPartitionRequest.TopicData.PartitionData.BrokerState


@dataclass(frozen=True, slots=True)
class AlterPartitionResult:
    proposal: AlterPartitionProposal
    error: ErrorCode
    leader_epoch: int = -1
    partition_epoch: int = -1
    isr: tuple[int, ...] = ()


def build_request(
    broker_id: int, broker_epoch: int, proposals: Sequence[AlterPartitionProposal]
) -> AlterPartitionRequest:
    topics: dict[object, list] = {}
    names: dict[object, str] = {}
    for p in proposals:
        names[p.topic_id] = p.topic
        topics.setdefault(p.topic_id, []).append(
            _Partition(
                partition_index=p.partition,
                leader_epoch=p.leader_epoch,
                new_isr=[b for b, _ in p.new_isr],
                new_isr_with_epochs=[_BrokerState(broker_id=b, broker_epoch=e) for b, e in p.new_isr],
                leader_recovery_state=p.leader_recovery_state,
                partition_epoch=p.partition_epoch,
            )
        )
    return AlterPartitionRequest(
        broker_id=broker_id,
        broker_epoch=broker_epoch,
        topics=[_Topic(topic_name=names[t], topic_id=t, partitions=parts) for t, parts in topics.items()],
    )


def parse_response(
    response: AlterPartitionResponse | None, proposals: Sequence[AlterPartitionProposal]
) -> list[AlterPartitionResult]:
    """One result per proposal; a missing answer (or no response: the request failed) is a retriable
    error so the proposal is sent again."""
    if response is None:
        return [AlterPartitionResult(p, ErrorCode.REQUEST_TIMED_OUT) for p in proposals]
    if response.error_code:
        return [AlterPartitionResult(p, ErrorCode(response.error_code)) for p in proposals]
    answers = {}
    for topic in response.topics:
        for part in topic.partitions:
            answers[(topic.topic_id, part.partition_index)] = part
    results = []
    for p in proposals:
        part = answers.get((p.topic_id, p.partition))
        if part is None:
            results.append(AlterPartitionResult(p, ErrorCode.UNKNOWN_SERVER_ERROR))
        elif part.error_code:
            results.append(AlterPartitionResult(p, ErrorCode(part.error_code)))
        else:
            results.append(
                AlterPartitionResult(
                    p, ErrorCode.NONE, part.leader_epoch, part.partition_epoch, tuple(part.isr)
                )
            )
    return results
