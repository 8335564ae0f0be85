"""RaftServer: three nodes on loopback in one event loop, on files, talking Kafka's wire protocol;
and the controller listener answering a plain Kafka client's ApiVersions and DescribeQuorum."""

from __future__ import annotations

import asyncio
import struct

import pytest
from tests.helpers.broker import LOOPBACK, free_port

from onceflow.protocol import apis
from onceflow.protocol.errors import ErrorCode
from onceflow.raft import wire
from onceflow.raft.config import RaftConfig
from onceflow.raft.file_storage import FileStorage
from onceflow.raft.messages import DescribeQuorumRequest
from onceflow.raft.quorum_state import Role
from onceflow.raft.server import RaftServer

CONFIG = RaftConfig(election_timeout_ms=300, fetch_timeout_ms=600, election_backoff_max_ms=300)


class Values:
    def __init__(self) -> None:
        self.values: list[bytes] = []
        self.leader: tuple[int | None, int] = (None, 0)

    def handle_commit(self, batch) -> None:
        self.values.extend(batch.records)

    def handle_load_snapshot(self, snapshot) -> None:
        self.values = list(snapshot.records)

    def handle_leader_change(self, leader_id, epoch) -> None:
        self.leader = (leader_id, epoch)


async def until(predicate, timeout_s: float = 30.0):
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        found = predicate()
        if found:
            return found
        await asyncio.sleep(0.02)
    raise AssertionError("timed out")


async def ask(port: int, api_key: int, version: int, message) -> object:
    """One request on a fresh connection, as any Kafka client would send it."""
    reader, writer = await asyncio.open_connection(LOOPBACK, port)
    try:
        message.API_VERSION = version
        message.with_header(correlation_id=42, client_id="test")
        writer.write(bytes(message.encode(header=True, framed=True)))
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        frame = await reader.readexactly(size)
        return apis.response_class(api_key).decode(frame, version=version, header=True)
    finally:
        writer.close()


@pytest.fixture
def cluster(tmp_path):
    voters = {i: (LOOPBACK, free_port()) for i in (1, 2, 3)}
    machines = {i: Values() for i in (*voters, 100)}
    servers = {
        i: RaftServer(i, voters, FileStorage(tmp_path / f"n{i}"), CONFIG, listener=machines[i])
        for i in machines
    }
    return servers, machines


def test_three_servers_elect_replicate_and_describe_the_quorum(cluster) -> None:
    servers, machines = cluster

    async def scenario() -> None:
        for server in servers.values():
            await server.start()
        try:
            leader_id = await until(
                lambda: next(
                    (
                        i
                        for i, m in machines.items()
                        if m.leader[0] == i and servers[i].node.state.role is Role.LEADER
                    ),
                    None,
                )
            )
            leader = servers[leader_id]
            for n in range(5):
                leader.append([b"v%d" % n])
                await asyncio.sleep(0.01)
            # Node 100 is not a voter: an observer (a broker) that fetches the log all the same.
            await until(lambda: all(m.values == [b"v%d" % n for n in range(5)] for m in machines.values()))
            assert servers[100].port is None and servers[100].node.state.leader_id == leader_id

            follower = next(i for i in (1, 2, 3) if i != leader_id)
            response = await ask(
                servers[follower].port, wire.DESCRIBE_QUORUM, 1, wire.request_to_wire(DescribeQuorumRequest())
            )
            assert response.topics[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            response = await ask(
                leader.port, wire.DESCRIBE_QUORUM, 1, wire.request_to_wire(DescribeQuorumRequest())
            )
            (partition,) = response.topics[0].partitions
            assert (partition.error_code, partition.leader_id) == (0, leader_id)
            assert partition.high_watermark == leader.node.high_watermark
            assert sorted(v.replica_id for v in partition.current_voters) == [1, 2, 3]
            assert [o.replica_id for o in partition.observers] == [100]

            versions_request = apis.request_class(18)(client_software_name="t", client_software_version="1")
            versions = await ask(leader.port, 18, 3, versions_request)
            served = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
            assert (
                served[wire.VOTE] == (0, 0)
                and served[wire.FETCH] == (13, 16)
                and served[wire.DESCRIBE_QUORUM] == (0, 1)
            )
        finally:
            for server in servers.values():
                await server.stop(resign_timeout_ms=500)

    asyncio.run(scenario())
    assert all(server.failure is None for server in servers.values())
