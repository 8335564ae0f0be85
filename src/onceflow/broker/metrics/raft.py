"""The node's side of the cluster, read at scrape time: its metadata quorum (``raft``), its controller
when it has that role, and how far its broker has replayed the metadata log.

- The quorum, under the names of Kafka's ``kafka.server:type=raft-metrics`` (KafkaRaftMetrics) as the
  JMX exporter reports a bean with no rule: the leader and epoch this node knows, the high watermark
  and log end of its copy of the log, its state; and, on the leader, how far each voter and observer
  is behind (DescribeQuorum's view, which Kafka leaves to ``kafka-metadata-quorum describe
  --replication``). ``quorum`` is the node's ``MetadataQuorum`` (``server.raft_quorum.RaftQuorum``,
  or the in-memory ``LocalQuorum`` of a build without Raft).
- The controller, as Kafka's KRaft controllers report ``kafka.controller:type=KafkaController``:
  ``ActiveControllerCount`` is 1 on the active one only (so the sum over the cluster is 1), the
  broker and partition counts are every controller's own committed image. ``controller`` is the
  node's ``controller.quorum_controller.QuorumController``.
- The broker's replay (``broker-metadata-metrics``): the last metadata offset applied to its image.
"""

from __future__ import annotations

from typing import Any

from onceflow.broker.metrics.families import Families, exporter_default, jmx

NO_LEADER = -1


def _raft(attribute: str) -> str:
    return exporter_default("server", "raft-metrics", attribute)


def collect_quorum(families: Families, quorum: Any, node_id: int) -> None:
    leader, epoch = quorum.leader
    raft = getattr(quorum, "raft", None)  # the RaftServer of a RaftQuorum
    node = raft.node if raft is not None else None
    if raft is not None and node is None:
        return  # not started yet
    # What is written (a RaftQuorum's own log_end_offset is the leader's next append, and only its).
    end = raft.storage.log_end_offset if raft is not None else getattr(quorum, "log_end_offset", None)
    values = [
        (
            "current-leader",
            NO_LEADER if leader is None else leader,
            "The quorum leader this node knows (-1: none).",
        ),
        ("current-epoch", epoch, "The quorum epoch this node is in."),
        ("high-watermark", quorum.high_watermark, "The quorum's committed offset as this node knows it."),
    ]
    if end is not None:
        values.append(("log-end-offset", end, "The end of this node's copy of the metadata log."))
    if raft is not None:
        values.append(
            ("log-end-epoch", raft.storage.last_fetched_epoch, "The epoch of the last record of that copy.")
        )
    for attribute, value, meaning in values:
        families.untyped(_raft(attribute), meaning, value)
    if node is not None:
        state = node.state.role.value.lower()
    else:
        state = "leader" if leader == node_id else "follower"
    families.gauge(
        "onceflow_raft_state",
        "1 for this node's quorum state (leader, follower, candidate, ...).",
        1,
        {"state": state},
    )
    if leader is None or leader != node_id or end is None:
        return
    described = quorum.describe()
    if described is None:
        return
    for role, replicas in (("voter", described.voters), ("observer", described.observers)):
        for replica in replicas:
            if replica.log_end_offset < 0:
                continue  # not heard from in this epoch
            families.gauge(
                "onceflow_raft_replica_lag",
                "Records a replica of the metadata log is behind the leader's log end (on the leader).",
                max(end - replica.log_end_offset, 0),
                {"replica": str(replica.replica_id), "role": role},
            )


def collect_controller(families: Families, controller: Any) -> None:
    image = controller.committed_image
    active = fenced = 0
    for broker in image.brokers.values():
        if broker.fenced:
            fenced += 1
        else:
            active += 1
    n_topics = n_partitions = offline = imbalanced = 0
    for topic in image.topics.values():
        n_topics += 1
        for partition in topic.partitions.values():
            n_partitions += 1
            if not partition.has_leader:
                offline += 1
            elif not partition.has_preferred_leader:
                imbalanced += 1
    committed = controller.committed_offset
    values = (
        ("ActiveControllerCount", int(controller.active), "1 on the node that is the active controller."),
        ("ActiveBrokerCount", active, "Brokers registered and not fenced."),
        ("FencedBrokerCount", fenced, "Brokers registered and fenced."),
        ("GlobalTopicCount", n_topics, "Topics in the cluster."),
        ("GlobalPartitionCount", n_partitions, "Partitions in the cluster."),
        ("OfflinePartitionsCount", offline, "Partitions without a leader."),
        ("PreferredReplicaImbalanceCount", imbalanced, "Partitions not led by their preferred replica."),
        ("LastCommittedRecordOffset", committed, "The last metadata offset this controller knows committed."),
        (
            "LastAppliedRecordOffset",
            controller.next_offset - 1 if controller.active else committed,
            "The last metadata offset in this controller's image (the active one's includes what it "
            "wrote and the quorum has not committed yet).",
        ),
    )
    for name, value, meaning in values:
        families.gauge(jmx("controller", "KafkaController", name), meaning, value)


def collect_metadata_replay(families: Families, metadata: Any) -> None:
    families.untyped(
        exporter_default("server", "broker-metadata-metrics", "last-applied-record-offset"),
        "The last metadata offset replayed into this broker's image.",
        metadata.offset,
    )
