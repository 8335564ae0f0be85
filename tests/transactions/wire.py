"""Raw transactional requests for wire-level tests (kafka.protocol classes, sent with RawClient)."""

from __future__ import annotations

from kafka.protocol.admin import DescribeTransactionsRequest, ListTransactionsRequest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.consumer.group import OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)

from onceflow.protocol.record_codec import encode_batch


def init_producer_id(tid: str | None, timeout_ms: int = 60_000, pid: int = -1, epoch: int = -1):
    return InitProducerIdRequest(
        transactional_id=tid, transaction_timeout_ms=timeout_ms, producer_id=pid, producer_epoch=epoch
    )


def add_partitions(tid: str, pid: int, epoch: int, partitions: dict[str, list[int]]):
    T = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    return AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[T(name=t, partitions=ps) for t, ps in partitions.items()],
    )


def verify_partitions(tid: str, pid: int, epoch: int, partitions: dict[str, list[int]]):
    R = AddPartitionsToTxnRequest
    X = R.AddPartitionsToTxnTransaction
    return R(
        transactions=[
            X(
                transactional_id=tid,
                producer_id=pid,
                producer_epoch=epoch,
                verify_only=True,
                topics=[X.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in partitions.items()],
            )
        ]
    )


def add_offsets(tid: str, pid: int, epoch: int, group: str):
    return AddOffsetsToTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group)


def end_txn(tid: str, pid: int, epoch: int, commit: bool):
    return EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit)


def txn_batch(values: list[bytes], pid: int, epoch: int, seq: int) -> bytes:
    return encode_batch(
        [(None, v) for v in values],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=True,
    )


def produce(topic: str, partition: int, batch: bytes, tid: str | None):
    R = ProduceRequest
    return R(
        transactional_id=tid,
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            R.TopicProduceData(
                name=topic,
                partition_data=[R.TopicProduceData.PartitionProduceData(index=partition, records=batch)],
            )
        ],
    )


def fetch(topic: str, partition: int, offset: int, isolation_level: int):
    F = FetchRequest
    return F(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=10 * 1024 * 1024,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=-1,
        topics=[
            F.FetchTopic(
                topic=topic,
                partitions=[
                    F.FetchTopic.FetchPartition(
                        partition=partition,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1024 * 1024,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


def latest_offset(topic: str, partition: int, isolation_level: int):
    L = ListOffsetsRequest
    return L(
        replica_id=-1,
        isolation_level=isolation_level,
        topics=[
            L.ListOffsetsTopic(
                name=topic,
                partitions=[
                    L.ListOffsetsTopic.ListOffsetsPartition(
                        partition_index=partition, current_leader_epoch=-1, timestamp=-1
                    )
                ],
            )
        ],
    )


def find_coordinator(key: str, key_type: int):
    return FindCoordinatorRequest(key=key, key_type=key_type, coordinator_keys=[key])


def txn_offset_commit(tid, group, pid, epoch, offsets: dict[tuple[str, int], int], generation=-1, member=""):
    R = TxnOffsetCommitRequest
    T = R.TxnOffsetCommitRequestTopic
    by_topic: dict[str, list] = {}
    for (topic, p), off in offsets.items():
        by_topic.setdefault(topic, []).append(
            T.TxnOffsetCommitRequestPartition(
                partition_index=p, committed_offset=off, committed_leader_epoch=-1, committed_metadata=""
            )
        )
    return R(
        transactional_id=tid,
        group_id=group,
        producer_id=pid,
        producer_epoch=epoch,
        generation_id=generation,
        member_id=member,
        group_instance_id=None,
        topics=[T(name=t, partitions=ps) for t, ps in by_topic.items()],
    )


def offset_fetch(group: str, topic: str, partitions: list[int], require_stable: bool):
    R = OffsetFetchRequest
    return R(
        group_id=group,
        topics=[R.OffsetFetchRequestTopic(name=topic, partition_indexes=partitions)],
        require_stable=require_stable,
    )


def write_markers(pid: int, epoch: int, commit: bool, topic: str, partitions: list[int]):
    R = WriteTxnMarkersRequest
    M = R.WritableTxnMarker
    return R(
        markers=[
            M(
                producer_id=pid,
                producer_epoch=epoch,
                transaction_result=commit,
                topics=[M.WritableTxnMarkerTopic(name=topic, partition_indexes=partitions)],
                coordinator_epoch=0,
                transaction_version=0,
            )
        ]
    )


def describe(ids: list[str]):
    return DescribeTransactionsRequest(transactional_ids=ids)


def list_txns(states=(), pids=(), duration=-1, pattern=None):
    return ListTransactionsRequest(
        state_filters=list(states),
        producer_id_filters=list(pids),
        duration_filter=duration,
        transactional_id_pattern=pattern,
    )
