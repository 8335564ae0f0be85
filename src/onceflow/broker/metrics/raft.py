"""The metadata quorum of a cluster node (``onceflow.raft``), read at scrape time, under the names of
Kafka's ``kafka.server:type=raft-metrics`` (KafkaRaftMetrics) as the JMX exporter reports a bean with
no rule: the leader and epoch this node knows, its high watermark and log end, its state; and, on the
leader, how far each voter and observer is behind (DescribeQuorum's view), which Kafka leaves to
``kafka-metadata-quorum describe --replication``.

``server`` is a :class:`onceflow.raft.server.RaftServer` (or anything with its ``node``, ``storage``,
``node_id`` and ``describe_quorum()``): a single broker has no quorum and reports none of these.
"""

from __future__ import annotations

from typing import Any

from onceflow.broker.metrics.families import Families, exporter_default

NO_LEADER = -1


def _raft(attribute: str) -> str:
    return exporter_default("server", "raft-metrics", attribute)


def collect_raft(families: Families, server: Any) -> None:
    node = server.node
    if node is None:  # not started
        return
    leader, epoch = node.leader_and_epoch
    storage = server.storage
    hw = node.high_watermark
    values = (
        (
            "current-leader",
            NO_LEADER if leader is None else leader,
            "The quorum leader this node knows (-1: none).",
        ),
        ("current-epoch", epoch, "The quorum epoch this node is in."),
        ("high-watermark", -1 if hw is None else hw, "The quorum's committed offset as this node knows it."),
        ("log-end-offset", storage.log_end_offset, "The end of this node's copy of the metadata log."),
        ("log-end-epoch", storage.last_fetched_epoch, "The epoch of the last record of that copy."),
    )
    for attribute, value, meaning in values:
        families.untyped(_raft(attribute), meaning, value)
    state = node.state.role.value.lower()
    families.gauge(
        "onceflow_raft_state",
        "1 for this node's quorum state (leader, follower, candidate, ...).",
        1,
        {"state": state},
    )
    is_leader = leader is not None and leader == server.node_id
    families.gauge(
        "kafka_controller_kafkacontroller_activecontrollercount",
        "1 on the node that is the active controller.",
        1 if is_leader else 0,
    )
    if not is_leader:
        return
    described = server.describe_quorum()
    end = storage.log_end_offset
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
