"""Replicated partitions on real logs, wired by direct calls: the unit tests' cluster of one partition."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from onceflow.broker.replica.config import ReplicaConfig
from onceflow.broker.replica.fetcher import (
    EpochEndOffset,
    EpochRequestData,
    FetchRequestData,
    LeaderOffsets,
    ReplicaFetcher,
)
from onceflow.broker.replica.partition import ReplicatedPartition
from onceflow.log.config import LogConfig
from onceflow.log.log import Log
from onceflow.metadata.image import PartitionRegistration
from onceflow.protocol import records
from onceflow.protocol.errors import ErrorCode
from onceflow.protocol.record_codec import encode_batch

TOPIC = "t"
KEY = (TOPIC, 0)
LAG_MS = 10_000


@dataclass
class Brokers:
    """A BrokerView: registered epochs, and who may join an ISR."""

    epochs: dict[int, int] = field(default_factory=lambda: {1: 101, 2: 102, 3: 103})
    ineligible: set[int] = field(default_factory=set)

    def broker_epoch(self, broker_id: int) -> int | None:
        return self.epochs.get(broker_id)

    def isr_eligible(self, broker_id: int) -> bool:
        return broker_id in self.epochs and broker_id not in self.ineligible


def replica(tmp_path: Path, broker_id: int, brokers: Brokers | None = None, **topic) -> ReplicatedPartition:
    configs = {"min.insync.replicas": "2", **{k.replace("_", "."): str(v) for k, v in topic.items()}}
    log = Log.open(tmp_path / f"b{broker_id}" / "t-0", LogConfig.from_topic_configs(configs))
    config = ReplicaConfig(broker_id=broker_id, replica_lag_time_max_ms=LAG_MS, replica_fetch_backoff_ms=100)
    return ReplicatedPartition(TOPIC, 0, log, config, brokers or Brokers(), topic_id="tid")


def registration(leader: int, isr=(1, 2, 3), leader_epoch=1, partition_epoch=1, replicas=(1, 2, 3)):
    return PartitionRegistration(
        replicas=tuple(replicas),
        isr=tuple(isr),
        leader=leader,
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
    )


def batch(first_seq=0, count=1, pid=7):
    raw = bytearray(
        encode_batch(
            [(None, b"s%d" % (first_seq + i)) for i in range(count)],
            producer_id=pid,
            producer_epoch=0,
            base_sequence=first_seq,
            timestamp_ms=1_000,
        )
    )
    return records.validate_produce_records(raw)


def plain_batch(count=1):
    raw = bytearray(encode_batch([(None, b"x")] * count, timestamp_ms=1_000))
    return records.validate_produce_records(raw)


def fetcher_for(follower: ReplicatedPartition, now=0, **kwargs) -> ReplicaFetcher:
    fetcher = ReplicaFetcher(
        follower.leader_id, follower.config, broker_epoch=100 + follower.broker_id, **kwargs
    )
    fetcher.add_partition(follower, now)
    return fetcher


def round_trip(fetcher: ReplicaFetcher, leader: ReplicatedPartition, now: int) -> object:
    """Send the fetcher's next request to ``leader`` and hand the answer back; returns the request."""
    request = fetcher.next_request(now)
    if isinstance(request, FetchRequestData):
        answers = {k: leader.fetch_for_follower(f, now) for k, f in request.partitions.items()}
        fetcher.handle_fetch(request, answers, now)
    elif isinstance(request, EpochRequestData):
        answers = {}
        for key, (current, epoch) in request.partitions.items():
            error, found, end = leader.last_offset_for_leader_epoch(current, epoch, require_leader=True)
            answers[key] = EpochEndOffset(error, found, end)
        fetcher.handle_epochs(request, answers, now)
    elif request is not None:
        answers = {}
        for key, current in request.partitions.items():
            error = leader.check_leader_epoch(current)
            answers[key] = (
                LeaderOffsets(error, leader.log.log_start_offset, leader.log.log_end_offset)
                if error == ErrorCode.NONE
                else LeaderOffsets(error)
            )
        fetcher.handle_leader_offsets(request, answers, now)
    return request


def commit_alter(leader: ReplicatedPartition, now: int, proposals=None) -> tuple[int, ...]:
    """Accept ``proposals`` (default: every AlterPartition the leader has queued) as the controller
    would."""
    isr: tuple[int, ...] = ()
    for proposal in leader.drain_alter_partitions() if proposals is None else proposals:
        isr = tuple(sorted(proposal.isr_ids))
        leader.handle_alter_partition(
            proposal,
            ErrorCode.NONE,
            now,
            leader_epoch=proposal.leader_epoch,
            partition_epoch=proposal.partition_epoch + 1,
            isr=isr,
        )
    return isr
