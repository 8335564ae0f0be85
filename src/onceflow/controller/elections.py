"""Leaders and ISRs: what happens to partitions when a broker comes or goes, AlterPartition (56),
ElectLeaders (43), the periodic preferred-leader rebalance and unclean elections.

Each function reads an image and returns the PartitionChangeRecords (built by
:func:`onceflow.controller.partition_change.partition_change`) plus, for requests, the response.
"""

from __future__ import annotations

from collections.abc import Iterable

from kafka.protocol.admin import ElectLeadersRequest, ElectLeadersResponse

from onceflow.controller.partition_change import Election, partition_change
from onceflow.metadata.image import MetadataImage, PartitionRegistration, TopicImage
from onceflow.metadata.records import NO_LEADER, NO_LEADER_CHANGE, RECOVERING, PartitionChangeRecord
from onceflow.protocol.errors import ErrorCode
from onceflow.protocol.messages import AlterPartitionRequest, AlterPartitionResponse

UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"
ELECTION_PREFERRED = 0
ELECTION_UNCLEAN = 1


def unclean_enabled(image: MetadataImage, topic: str, default: bool) -> bool:
    """``unclean.leader.election.enable`` of a topic: its own setting, else the cluster's (the
    broker default resource), else the controller's static value."""
    for configs in (image.topic_config(topic), image.config(4, "")):
        value = configs.get(UNCLEAN_LEADER_ELECTION_ENABLE)
        if value is not None:
            return value.strip().lower() == "true"
    return default


def _all_partitions(image: MetadataImage) -> Iterable[tuple[TopicImage, int, PartitionRegistration]]:
    for topic in image.topics.values():
        for index, partition in topic.partitions.items():
            yield topic, index, partition


def isr_updates(
    image: MetadataImage,
    *,
    remove: int | None = None,
    add: int | None = None,
    unclean_default: bool = False,
    only_leaderless: bool = False,
) -> list[PartitionChangeRecord]:
    """Partition changes when broker ``remove`` leaves (fenced, shutting down, unregistered: it
    leaves every ISR and every leadership) or broker ``add`` becomes unfenced (it may now lead the
    partitions that have no leader). Kafka's ``generateLeaderAndIsrUpdates``."""

    def acceptable(replica: int) -> bool:
        return replica != remove and (replica == add or image.is_active(replica))

    records = []
    for topic, index, partition in _all_partitions(image):
        if remove is not None and remove not in partition.isr and partition.leader != remove:
            continue
        if only_leaderless and partition.has_leader:
            continue
        if add is not None and add not in partition.isr and not only_leaderless:
            continue
        target = tuple(r for r in partition.isr if r != remove)
        election = (
            Election.UNCLEAN if unclean_enabled(image, topic.name, unclean_default) else Election.ONLINE
        )
        record = partition_change(
            partition, topic.id, index, acceptable, target_isr=target, election=election
        )
        if record is not None:
            records.append(record)
    return records


def has_leaderships(image: MetadataImage, broker_id: int) -> bool:
    return any(p.leader == broker_id for _, _, p in _all_partitions(image))


# ---------------------------------------------------------------- AlterPartition (56)

_APTopic = AlterPartitionResponse.TopicData
_APPartition = AlterPartitionResponse.TopicData.PartitionData


def _validate_alter(
    image: MetadataImage, broker_id: int, partition: PartitionRegistration | None, data, version: int
) -> tuple[ErrorCode, list[tuple[int, int]]]:
    """Kafka's checks of one partition of an AlterPartition, in Kafka's order; the new ISR."""
    if partition is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []
    if version >= 3:
        new_isr = [(s.broker_id, s.broker_epoch) for s in data.new_isr_with_epochs]
    else:
        new_isr = [(b, -1) for b in data.new_isr]
    # A leader ahead of us: this controller is likely stale; let the leader find the new one.
    if data.leader_epoch > partition.leader_epoch or data.partition_epoch > partition.partition_epoch:
        return ErrorCode.NOT_CONTROLLER, new_isr
    if data.leader_epoch < partition.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH, new_isr
    if broker_id != partition.leader:
        return ErrorCode.INVALID_REQUEST, new_isr
    if data.partition_epoch < partition.partition_epoch:
        return ErrorCode.INVALID_UPDATE_VERSION, new_isr
    ids = [b for b, _ in new_isr]
    if len(set(ids)) != len(ids) or any(b not in partition.replicas for b in ids):
        return ErrorCode.INVALID_REQUEST, new_isr
    if partition.leader not in ids:
        return ErrorCode.INVALID_REQUEST, new_isr
    recovery = getattr(data, "leader_recovery_state", 0) or 0
    if recovery == RECOVERING and len(ids) > 1:
        return ErrorCode.INVALID_REQUEST, new_isr
    if partition.leader_recovery_state != RECOVERING and recovery == RECOVERING:
        return ErrorCode.INVALID_REQUEST, new_isr
    for replica, epoch in new_isr:
        broker = image.broker(replica)
        if (
            broker is None
            or broker.fenced
            or broker.in_controlled_shutdown
            or (epoch != -1 and broker.epoch != epoch)
        ):
            return (
                ErrorCode.INELIGIBLE_REPLICA if version > 1 else ErrorCode.OPERATION_NOT_ATTEMPTED
            ), new_isr
    return ErrorCode.NONE, new_isr


def alter_partition(
    image: MetadataImage, request: AlterPartitionRequest, version: int, unclean_default: bool
) -> tuple[list[PartitionChangeRecord], AlterPartitionResponse]:
    """A partition leader's new ISR (the broker epoch was checked by the caller)."""
    records: list[PartitionChangeRecord] = []
    topics = []
    for topic_data in request.topics:
        if version > 1:
            topic = image.topic_by_id(topic_data.topic_id)
            unknown = ErrorCode.UNKNOWN_TOPIC_ID
        else:
            topic = image.topic(topic_data.topic_name)
            unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        answers = []
        topics.append(
            _APTopic(topic_name=topic_data.topic_name, topic_id=topic_data.topic_id, partitions=answers)
        )
        for data in topic_data.partitions:
            if topic is None:
                answers.append(_APPartition(partition_index=data.partition_index, error_code=int(unknown)))
                continue
            partition = topic.partition(data.partition_index)
            error, new_isr = _validate_alter(image, request.broker_id, partition, data, version)
            if error != ErrorCode.NONE:
                answers.append(_APPartition(partition_index=data.partition_index, error_code=int(error)))
                continue
            recovery = getattr(data, "leader_recovery_state", 0) or 0
            election = (
                Election.UNCLEAN if unclean_enabled(image, topic.name, unclean_default) else Election.ONLINE
            )
            record = partition_change(
                partition,
                topic.id,
                data.partition_index,
                image.is_active,
                target_isr=tuple(b for b, _ in new_isr),
                election=election,
                target_recovery_state=recovery,
            )
            if record is not None:
                records.append(record)
                partition = partition.merge(record)
                if record.leader not in (NO_LEADER_CHANGE, request.broker_id):
                    # the change moved leadership away from the requester: it must refresh first
                    error = ErrorCode.NEW_LEADER_ELECTED if version > 1 else ErrorCode.FENCED_LEADER_EPOCH
                    answers.append(_APPartition(partition_index=data.partition_index, error_code=int(error)))
                    continue
            answers.append(
                _APPartition(
                    partition_index=data.partition_index,
                    error_code=0,
                    leader_id=partition.leader,
                    leader_epoch=partition.leader_epoch,
                    isr=list(partition.isr),
                    leader_recovery_state=partition.leader_recovery_state,
                    partition_epoch=partition.partition_epoch,
                )
            )
    return records, AlterPartitionResponse(throttle_time_ms=0, error_code=0, topics=topics)


# ---------------------------------------------------------------- ElectLeaders (43)

_Result = ElectLeadersResponse.ReplicaElectionResult
_PartitionResult = ElectLeadersResponse.ReplicaElectionResult.PartitionResult


def elect_one(
    image: MetadataImage, topic_name: str, index: int, election_type: int
) -> tuple[ErrorCode, str | None, PartitionChangeRecord | None]:
    topic = image.topic(topic_name)
    partition = None if topic is None else topic.partition(index)
    if partition is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic_name}-{index}", None
    if election_type == ELECTION_PREFERRED and partition.has_preferred_leader:
        return ErrorCode.ELECTION_NOT_NEEDED, None, None
    if election_type == ELECTION_UNCLEAN and partition.has_leader:
        return ErrorCode.ELECTION_NOT_NEEDED, None, None
    election = Election.PREFERRED if election_type == ELECTION_PREFERRED else Election.UNCLEAN
    record = partition_change(partition, topic.id, index, image.is_active, election=election)
    if record is None:
        if election_type == ELECTION_PREFERRED:
            return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, None, None
        return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, None, None
    return ErrorCode.NONE, None, record


def elect_leaders(
    image: MetadataImage, request: ElectLeadersRequest
) -> tuple[list[PartitionChangeRecord], ElectLeadersResponse]:
    election_type = getattr(request, "election_type", ELECTION_PREFERRED)
    if election_type not in (ELECTION_PREFERRED, ELECTION_UNCLEAN):
        return [], ElectLeadersResponse(
            throttle_time_ms=0, error_code=int(ErrorCode.INVALID_REQUEST), replica_election_results=[]
        )
    records: list[PartitionChangeRecord] = []
    results = []
    if request.topic_partitions is None:
        # every partition; those that already have the wanted leader are left out of the answer
        for name in sorted(image.topic_ids):
            answers = []
            for index in sorted(image.topic(name).partitions):
                error, message, record = elect_one(image, name, index, election_type)
                if record is not None:
                    records.append(record)
                if error != ErrorCode.ELECTION_NOT_NEEDED:
                    answers.append(
                        _PartitionResult(partition_id=index, error_code=int(error), error_message=message)
                    )
            results.append(_Result(topic=name, partition_result=answers))
    else:
        for wanted in request.topic_partitions:
            answers = []
            for index in wanted.partitions:
                error, message, record = elect_one(image, wanted.topic, index, election_type)
                if record is not None:
                    records.append(record)
                answers.append(
                    _PartitionResult(partition_id=index, error_code=int(error), error_message=message)
                )
            results.append(_Result(topic=wanted.topic, partition_result=answers))
    return records, ElectLeadersResponse(throttle_time_ms=0, error_code=0, replica_election_results=results)


# ---------------------------------------------------------------- periodic elections


def rebalance(image: MetadataImage, percentage: int, max_elections: int) -> list[PartitionChangeRecord]:
    """Preferred-leader elections for brokers whose imbalance is above ``percentage``
    (``leader.imbalance.per.broker.percentage``): of the partitions a broker is the preferred
    replica of, the share it does not lead. Kafka's ZooKeeper-era rule; the preferred replica must
    be active and in the ISR (an election that cannot move leadership writes nothing)."""
    preferred: dict[int, list[tuple[TopicImage, int, PartitionRegistration]]] = {}
    for topic, index, partition in _all_partitions(image):
        preferred.setdefault(partition.preferred_replica, []).append((topic, index, partition))
    records: list[PartitionChangeRecord] = []
    for broker_id in sorted(preferred):
        owned = preferred[broker_id]
        misplaced = [entry for entry in owned if entry[2].leader != broker_id]
        if not misplaced or len(misplaced) * 100 <= percentage * len(owned):
            continue
        if not image.is_active(broker_id):
            continue
        for topic, index, partition in misplaced:
            if len(records) >= max_elections:
                return records
            if broker_id not in partition.isr:
                continue
            record = partition_change(
                partition, topic.id, index, image.is_active, election=Election.PREFERRED
            )
            if record is not None:
                records.append(record)
    return records


def unclean_elections(
    image: MetadataImage, unclean_default: bool, max_elections: int
) -> list[PartitionChangeRecord]:
    """Leaders for leaderless partitions of topics that allow unclean election."""
    records: list[PartitionChangeRecord] = []
    for topic, index, partition in _all_partitions(image):
        if len(records) >= max_elections:
            break
        if partition.leader != NO_LEADER or not unclean_enabled(image, topic.name, unclean_default):
            continue
        record = partition_change(partition, topic.id, index, image.is_active, election=Election.UNCLEAN)
        if record is not None:
            records.append(record)
    return records
