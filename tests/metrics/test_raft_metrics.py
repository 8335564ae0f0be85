"""The node's quorum and controller metrics (``broker/metrics/raft``) from the real objects, without
sockets: the in-memory quorum of a single node leads at once and reports itself as leader, its epoch,
its high watermark and its own lag (0); a controller reports the brokers and partitions of its
committed image, and is the active one only once it has activated."""

from __future__ import annotations

import asyncio

from onceflow.broker.metrics.families import Families
from onceflow.broker.metrics.raft import collect_controller, collect_quorum
from onceflow.server.quorum import LocalQuorum


def samples(collect, *args) -> dict:
    families = Families()
    collect(families, *args)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def test_a_single_voter_reports_itself_leading():
    async def scenario():
        quorum = LocalQuorum(3)
        before = samples(collect_quorum, quorum, 3)
        await quorum.start()
        quorum.append([b"a", b"b"], epoch=1)
        await asyncio.sleep(0)  # committed at the next turn of the loop
        try:
            return before, samples(collect_quorum, quorum, 3)
        finally:
            await quorum.stop()

    before, got = asyncio.run(scenario())
    assert before[("kafka_server_raft_metrics_current_leader", ())] == -1  # not started: no leader
    assert ("onceflow_raft_replica_lag", (("replica", "3"), ("role", "voter"))) not in before
    assert got[("kafka_server_raft_metrics_current_leader", ())] == 3
    assert got[("kafka_server_raft_metrics_current_epoch", ())] == 1
    # The epoch's control record and the two records: all committed.
    assert got[("kafka_server_raft_metrics_high_watermark", ())] == 3
    assert got[("kafka_server_raft_metrics_log_end_offset", ())] == 3
    assert got[("onceflow_raft_state", (("state", "leader"),))] == 1
    assert got[("onceflow_raft_replica_lag", (("replica", "3"), ("role", "voter")))] == 0


def test_a_controller_reports_its_image_and_whether_it_is_active():
    from onceflow.controller.config import ControllerConfig
    from onceflow.controller.quorum_controller import QuorumController

    controller = QuorumController(ControllerConfig(node_id=1))
    got = samples(collect_controller, controller)
    assert got[("kafka_controller_kafkacontroller_activecontrollercount", ())] == 0
    assert got[("kafka_controller_kafkacontroller_globaltopiccount", ())] == 0
    controller.activate(1, 0, 1000)
    got = samples(collect_controller, controller)
    assert got[("kafka_controller_kafkacontroller_activecontrollercount", ())] == 1
