"""The metadata quorum's metrics (``broker/metrics/raft``) from a real single-voter RaftServer: it
leads at once, so it reports itself as leader and active controller, its epoch, and its own lag (0)."""

from __future__ import annotations

import asyncio

from onceflow.broker.metrics.families import Families
from onceflow.broker.metrics.raft import collect_raft
from onceflow.raft.memory_storage import MemoryStorage
from onceflow.raft.server import RaftServer


def samples(server) -> dict:
    families = Families()
    collect_raft(families, server)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def test_a_single_voter_reports_itself_leading():
    async def scenario():
        server = RaftServer(3, {3: ("127.0.0.1", 0)}, MemoryStorage())
        assert samples(server) == {}  # not started: nothing to say
        await server.start()
        try:
            for _ in range(200):
                if server.node.leader_and_epoch[0] == 3 and server.node.high_watermark is not None:
                    break
                await asyncio.sleep(0.01)
            server.append([b"record"])
            for _ in range(200):
                if server.node.high_watermark == server.storage.log_end_offset:
                    break
                await asyncio.sleep(0.01)
            return samples(server)
        finally:
            await server.stop()

    got = asyncio.run(scenario())
    assert got[("kafka_server_raft_metrics_current_leader", ())] == 3
    assert got[("kafka_server_raft_metrics_current_epoch", ())] >= 1
    assert (
        got[("kafka_server_raft_metrics_high_watermark", ())]
        == got[("kafka_server_raft_metrics_log_end_offset", ())]
        > 0
    )
    assert got[("onceflow_raft_state", (("state", "leader"),))] == 1
    assert got[("kafka_controller_kafkacontroller_activecontrollercount", ())] == 1
    assert got[("onceflow_raft_replica_lag", (("replica", "3"), ("role", "voter")))] == 0
