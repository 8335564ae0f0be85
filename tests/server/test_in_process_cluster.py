"""Three nodes in one event loop on a shared in-process quorum (``shared_quorum``): everything a
cluster does above the Raft seam, over real sockets.

Node 1's controller is the active one; brokers 2 and 3 register with it, heartbeat and forward admin
requests to it over its controller listener. Checked: every broker lists all three; a 6-partition
topic created through broker 3 has its leaders on all three, each broker opens only its own
partitions' logs, a partition asked of the wrong broker is NOT_LEADER_OR_FOLLOWER with the real
leader in Metadata; our client produces to and reads from every partition through one bootstrap
broker, idempotent and transactional (markers cross brokers); producer ids never repeat across
brokers; a deleted topic disappears from every broker's disk.
"""

from __future__ import annotations

import asyncio
import socket
import time

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    CreateTopicsRequest,
    DescribeLogDirsRequest,
    DescribeQuorumRequest,
)
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest
from tests.broker.raw_client import build_batch
from tests.server.shared_quorum import SharedLog

from onceflow.broker.config import BrokerConfig
from onceflow.client import AsyncClient
from onceflow.client.connection import Connection
from onceflow.client.consumer import AsyncConsumer
from onceflow.client.consumer import TopicPartition as TP
from onceflow.client.producer.producer import AsyncProducer
from onceflow.protocol.errors import ErrorCode
from onceflow.server.config import server_config
from onceflow.server.node import Node

PARTITIONS = 6


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _configs(root):
    ports = {node_id: _free_port() for node_id in (1, 2, 3)}
    voters = ",".join(f"{n}@127.0.0.1:{p}" for n, p in ports.items())
    result = {}
    for node_id, port in ports.items():
        server = server_config(
            {
                "node.id": str(node_id),
                "process.roles": "broker,controller",
                "controller.quorum.voters": voters,
                "listeners": f"PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{port}",
                "controller.listener.names": "CONTROLLER",
            }
        )
        broker = BrokerConfig(port=0, data_dir=root / f"node-{node_id}", group_initial_rebalance_delay_ms=0)
        result[node_id] = (server, broker)
    return result, ports


async def _request(port: int, request, version: int):
    conn = await Connection.open("127.0.0.1", port)
    try:
        return await conn.send(request, version=version)
    finally:
        await conn.close()


async def _start_cluster(root) -> tuple[dict[int, Node], SharedLog]:
    configs, ports = _configs(root)
    log = SharedLog(1, ("127.0.0.1", ports[1]))
    nodes = {
        node_id: Node(server, broker, quorum_factory=lambda node, _cid: log.view(node.node_id))
        for node_id, (server, broker) in configs.items()
    }
    await nodes[1].start()  # the leader's node first: the others register with its controller
    await asyncio.gather(nodes[2].start(), nodes[3].start())
    return nodes, log


def test_three_nodes_on_one_quorum(tmp_path):
    async def scenario():
        nodes, _log = await _start_cluster(tmp_path)
        try:
            await _check_cluster(nodes)
        finally:
            for node_id in (3, 2, 1):  # the controller's node last: the others shut down through it
                await nodes[node_id].stop()

    asyncio.run(asyncio.wait_for(scenario(), 120))


async def _check_cluster(nodes: dict[int, Node]) -> None:
    ports = {node_id: node.port for node_id, node in nodes.items()}
    bootstrap = f"127.0.0.1:{ports[1]}"
    # every broker lists all three, on the listener it was asked on
    for port in ports.values():
        answer = await _request(port, MetadataRequest(topics=None, allow_auto_topic_creation=False), 12)
        assert sorted((b.node_id, b.port) for b in answer.brokers) == sorted((n, p) for n, p in ports.items())
        assert answer.controller_id == 1

    # a topic created through broker 3 (forwarded to node 1's controller)
    async with AsyncClient(f"127.0.0.1:{ports[3]}") as client:
        await client.create_topic("spread", partitions=PARTITIONS)
    answer = await _request(
        ports[2],
        MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name="spread", topic_id=None)],
            allow_auto_topic_creation=False,
        ),
        12,
    )
    leaders = {p.partition_index: p.leader_id for p in answer.topics[0].partitions}
    assert sorted(set(leaders.values())) == [1, 2, 3]
    for node_id, node in nodes.items():
        mine = {p for p, leader in leaders.items() if leader == node_id}
        on_disk = {int(d.name.rsplit("-", 1)[1]) for d in node.data_dir.glob("spread-*")}
        assert on_disk == mine, f"broker {node_id} holds {on_disk}, leads {mine}"
        # DescribeLogDirs (the console's sizes, kafka-log-dirs) lists the partitions this broker holds
        dirs = await _request(node.port, DescribeLogDirsRequest(topics=None), 4)
        listed = {
            p.partition_index for t in dirs.results[0].topics if t.name == "spread" for p in t.partitions
        }
        assert listed == mine, f"broker {node_id} described {listed}, holds {mine}"

    # the wrong broker answers NOT_LEADER_OR_FOLLOWER
    partition, leader = next((p, n) for p, n in leaders.items() if n != 1)
    request = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="spread",
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(
                        index=partition, records=build_batch([b"x"])
                    )
                ],
            )
        ],
    )
    wrong = await _request(ports[1], request, 9)
    assert wrong.responses[0].partition_responses[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    right = await _request(ports[leader], request, 9)
    assert right.responses[0].partition_responses[0].error_code == 0

    # our client: idempotent and transactional over the three brokers, found through one
    async with AsyncProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True}) as producer:
        for p in range(PARTITIONS):
            await producer.send_and_wait("spread", value=f"idem-{p}".encode(), partition=p)
    async with AsyncProducer({"bootstrap.servers": bootstrap, "transactional.id": "t1"}) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        for p in range(PARTITIONS):
            await producer.send("spread", value=f"tx-{p}".encode(), partition=p)
        await producer.commit_transaction()
    async with AsyncConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", isolation_level="read_committed"
    ) as consumer:
        consumer.assign([TP("spread", p) for p in range(PARTITIONS)])
        got: dict[int, list[bytes]] = {}
        deadline = time.monotonic() + 30
        while sum(len(v) for v in got.values()) < 2 * PARTITIONS + 1 and time.monotonic() < deadline:
            for tp, records in (await consumer.getmany(timeout_ms=300)).items():
                got.setdefault(tp.partition, []).extend(r.value for r in records)
    expected = {p: [f"idem-{p}".encode(), f"tx-{p}".encode()] for p in range(PARTITIONS)}
    expected[partition] = [b"x", *expected[partition]]
    assert got == expected

    # a consumer group whose coordinator is on another broker than the one bootstrapped from
    async with AsyncConsumer(
        "spread",
        bootstrap_servers=bootstrap,
        group_id="g-spread",
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        enable_auto_commit=False,
    ) as member:
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 2 * PARTITIONS + 1 and time.monotonic() < deadline:
            seen += sum(len(records) for records in (await member.getmany(timeout_ms=300)).values())
        await member.commit()
        committed = await member.committed(TP("spread", 0))
    assert seen == 2 * PARTITIONS + 1 and committed is not None and committed.offset >= 2

    # a standby controller's listener says NOT_CONTROLLER; DescribeQuorum through any broker
    standby = nodes[2].server.controller_listener().port
    topic = CreateTopicsRequest.CreatableTopic
    asked = CreateTopicsRequest(
        topics=[topic(name="direct", num_partitions=1, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=1000,
        validate_only=False,
    )
    refused = await _request(standby, asked, 7)
    assert [t.error_code for t in refused.topics] == [ErrorCode.NOT_CONTROLLER]
    quorum = await _request(ports[3], DescribeQuorumRequest(topics=[]), 1)
    assert quorum.topics[0].partitions[0].leader_id == 1
    described = sorted(r.replica_id for r in quorum.topics[0].partitions[0].current_voters)
    assert described == [1, 2, 3]

    # client quotas are the controller's: set through broker 2, in force on broker 3
    quota = AlterClientQuotasRequest.EntryData
    alter = AlterClientQuotasRequest(
        entries=[
            quota(
                entity=[quota.EntityData(entity_type="client-id", entity_name="slow")],
                ops=[quota.OpData(key="producer_byte_rate", value=1024.0, remove=False)],
            )
        ],
        validate_only=False,
    )
    altered = await _request(ports[2], alter, 1)
    assert [e.error_code for e in altered.entries] == [0]
    await nodes[3].metadata.wait_until(lambda image: image.client_quotas, 10)
    assert nodes[3].services.quotas.quota_for("producer_byte_rate", "", "slow")[1] == 1024.0
    assert nodes[3].services.quotas.quota_for("producer_byte_rate", "", "other")[1] is None

    # producer ids come from controller blocks: no two brokers hand out the same one
    handed = [node.services.producer_ids.generate_producer_id() for node in nodes.values()]
    assert len(set(handed)) == 3

    # deleting the topic removes it from every broker's disk
    async with AsyncClient(f"127.0.0.1:{ports[2]}") as client:
        await client.delete_topic("spread")
    for node in nodes.values():
        await node.metadata.wait_until(lambda image: image.topic("spread") is None, 10)
        assert not list(node.data_dir.glob("spread-*"))
