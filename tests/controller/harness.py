"""A controller on a fake in-memory log, and request builders for the controller's APIs."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
)

from onceflow.controller.config import ControllerConfig, ControllerResult
from onceflow.controller.quorum_controller import QuorumController
from onceflow.metadata.records import to_bytes
from onceflow.protocol.messages import (
    AllocateProducerIdsRequest,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    UnregisterBrokerRequest,
)

CLUSTER = "onceflow-test"


@dataclass
class Batch:
    base_offset: int
    last_offset: int
    records: list
    epoch: int = 1


@dataclass
class FakeLog:
    """Appended batches in order; ``commit_to`` delivers them to a controller as committed."""

    batches: list[Batch] = field(default_factory=list)
    committed: int = -1

    @property
    def end_offset(self) -> int:
        return self.batches[-1].last_offset + 1 if self.batches else 0

    def append(self, result: ControllerResult, epoch: int = 1) -> Batch | None:
        if not result.records:
            return None
        base = self.end_offset
        batch = Batch(base, base + len(result.records) - 1, [to_bytes(r) for r in result.records], epoch)
        assert batch.last_offset == result.wait_offset, "the controller predicted other offsets"
        self.batches.append(batch)
        return batch

    def truncate_after(self, offset: int) -> None:
        self.batches = [b for b in self.batches if b.last_offset <= offset]


def controller(config: ControllerConfig | None = None, seed: int = 0) -> tuple[QuorumController, FakeLog]:
    """An active controller on an empty log that commits every batch at once (see :func:`run`)."""
    ctl = QuorumController(
        config or ControllerConfig(cluster_id=CLUSTER, metadata_max_idle_interval_ms=0), random.Random(seed)
    )
    log = FakeLog()
    run(ctl, log, ctl.activate(1, 0, 0))
    return ctl, log


def run(ctl: QuorumController, log: FakeLog, result: ControllerResult):
    """Append a result's records and commit them at once; the response."""
    batch = log.append(result, ctl.epoch)
    if batch is not None:
        ctl.handle_commit(batch)
    return result.response


def register(
    ctl,
    log,
    broker_id: int,
    now_ms: int = 0,
    incarnation: int | None = None,
    rack: str | None = None,
    metadata_versions=(1, 14),
):
    request = BrokerRegistrationRequest(
        broker_id=broker_id,
        cluster_id=CLUSTER,
        incarnation_id=uuid.UUID(int=incarnation if incarnation is not None else 1000 + broker_id),
        listeners=[
            BrokerRegistrationRequest.Listener(
                name="PLAINTEXT", host="127.0.0.1", port=9000 + broker_id, security_protocol=0
            )
        ],
        features=[
            BrokerRegistrationRequest.Feature(
                name="metadata.version",
                min_supported_version=metadata_versions[0],
                max_supported_version=metadata_versions[1],
            )
        ],
        rack=rack,
    )
    return run(ctl, log, ctl.register_broker(request, now_ms))


def heartbeat(
    ctl,
    log,
    broker_id: int,
    now_ms: int = 0,
    offset: int | None = None,
    want_fence=False,
    want_shut_down=False,
    epoch: int | None = None,
):
    broker = ctl.image.broker(broker_id)
    request = BrokerHeartbeatRequest(
        broker_id=broker_id,
        broker_epoch=broker.epoch if epoch is None else epoch,
        current_metadata_offset=log.end_offset - 1 if offset is None else offset,
        want_fence=want_fence,
        want_shut_down=want_shut_down,
    )
    return run(ctl, log, ctl.broker_heartbeat(request, now_ms))


def live_cluster(brokers=3, config=None, seed=0, racks=None):
    """An active controller with ``brokers`` registered and unfenced brokers (ids 1..n)."""
    ctl, log = controller(config, seed)
    for b in range(1, brokers + 1):
        register(ctl, log, b, rack=None if racks is None else racks[b - 1])
    for b in range(1, brokers + 1):
        heartbeat(ctl, log, b)
    return ctl, log


def create_topics_request(*topics, validate_only=False):
    """``topics``: (name, partitions, replication factor) or (name, {index: [brokers]}) or with configs."""
    T = CreateTopicsRequest.CreatableTopic
    out = []
    for spec in topics:
        name, rest = spec[0], spec[1:]
        configs = []
        if rest and isinstance(rest[-1], dict) and all(isinstance(k, str) for k in rest[-1]):
            configs = [T.CreatableTopicConfig(name=k, value=v) for k, v in rest[-1].items()]
            rest = rest[:-1]
        if rest and isinstance(rest[0], dict):
            assignments = [
                T.CreatableReplicaAssignment(partition_index=i, broker_ids=b) for i, b in rest[0].items()
            ]
            out.append(
                T(
                    name=name,
                    num_partitions=-1,
                    replication_factor=-1,
                    assignments=assignments,
                    configs=configs,
                )
            )
        else:
            partitions, factor = (rest + (-1, -1))[:2]
            out.append(
                T(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=factor,
                    assignments=[],
                    configs=configs,
                )
            )
    return CreateTopicsRequest(topics=out, timeout_ms=1000, validate_only=validate_only)


def create_topics(ctl, log, *topics, validate_only=False, now_ms=0, check=True):
    """CreateTopics; with ``check`` every topic must have been created."""
    response = run(
        ctl, log, ctl.create_topics(create_topics_request(*topics, validate_only=validate_only), now_ms)
    )
    if check:
        assert [t.error_message for t in response.topics if t.error_code] == []
    return response


def create_partitions(ctl, log, name, count, assignments=None, validate_only=False):
    T = CreatePartitionsRequest.CreatePartitionsTopic
    request = CreatePartitionsRequest(
        topics=[
            T(
                name=name,
                count=count,
                assignments=None
                if assignments is None
                else [T.CreatePartitionsAssignment(broker_ids=a) for a in assignments],
            )
        ],
        timeout_ms=1000,
        validate_only=validate_only,
    )
    return run(ctl, log, ctl.create_partitions(request, 0))


def delete_topics(ctl, log, *names, version=5):
    request = DeleteTopicsRequest(topic_names=list(names), timeout_ms=1000)
    return run(ctl, log, ctl.delete_topics(request, 0, version=version))


def alter_partition(
    ctl,
    log,
    topic,
    index,
    isr,
    leader=None,
    leader_epoch=None,
    partition_epoch=None,
    epochs=None,
    version=3,
    broker_epoch=None,
    now_ms=0,
):
    image = ctl.image
    t = image.topic(topic)
    p = t.partition(index)
    leader = p.leader if leader is None else leader
    R = AlterPartitionRequest
    data = R.TopicData.PartitionData(
        partition_index=index,
        leader_epoch=p.leader_epoch if leader_epoch is None else leader_epoch,
        partition_epoch=p.partition_epoch if partition_epoch is None else partition_epoch,
        new_isr=list(isr),
        new_isr_with_epochs=[
            R.TopicData.PartitionData.BrokerState(
                broker_id=b,
                broker_epoch=(epochs or {}).get(b, image.broker(b).epoch if image.broker(b) else -1),
            )
            for b in isr
        ],
        leader_recovery_state=0,
    )
    request = R(
        broker_id=leader,
        broker_epoch=image.broker(leader).epoch if broker_epoch is None else broker_epoch,
        topics=[R.TopicData(topic_name=topic, topic_id=t.id, partitions=[data])],
    )
    return run(ctl, log, ctl.alter_partition(request, now_ms, version=version))


def elect(ctl, log, election_type, partitions=None, now_ms=0):
    T = ElectLeadersRequest.TopicPartitions
    request = ElectLeadersRequest(
        election_type=election_type,
        topic_partitions=None
        if partitions is None
        else [T(topic=t, partitions=ps) for t, ps in partitions.items()],
        timeout_ms=1000,
    )
    return run(ctl, log, ctl.elect_leaders(request, now_ms))


def alter_configs(ctl, log, resource_type, name, *ops, validate_only=False):
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    request = IncrementalAlterConfigsRequest(
        resources=[
            R(
                resource_type=resource_type,
                resource_name=name,
                configs=[R.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops],
            )
        ],
        validate_only=validate_only,
    )
    return run(ctl, log, ctl.incremental_alter_configs(request, 0))


def alter_quotas(ctl, log, entity, ops, validate_only=False):
    E = AlterClientQuotasRequest.EntryData
    request = AlterClientQuotasRequest(
        entries=[
            E(
                entity=[E.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                ops=[E.OpData(key=k, value=v, remove=rm) for k, v, rm in ops],
            )
        ],
        validate_only=validate_only,
    )
    return run(ctl, log, ctl.alter_client_quotas(request, 0))


def allocate_producer_ids(ctl, log, broker_id, epoch=None):
    broker = ctl.image.broker(broker_id)
    request = AllocateProducerIdsRequest(
        broker_id=broker_id, broker_epoch=broker.epoch if epoch is None else epoch
    )
    return run(ctl, log, ctl.allocate_producer_ids(request, 0))


def unregister(ctl, log, broker_id):
    return run(ctl, log, ctl.unregister_broker(UnregisterBrokerRequest(broker_id=broker_id), 0))
