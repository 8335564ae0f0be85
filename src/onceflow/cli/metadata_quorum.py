"""``onceflow metadata-quorum describe --status|--replication``: the metadata quorum as
``kafka-metadata-quorum.sh`` shows it, from DescribeQuorum (asked of a broker, which asks the quorum's
leader).

``--status``: cluster id, leader and epoch, high watermark, the most a follower lags, the current
voters and observers. ``--replication``: one row per replica with its log end offset, lag and the time
since its last fetch and last caught-up moment.
"""

from __future__ import annotations

import asyncio
import time

import click

from onceflow.cli.common import bootstrap_option, client_security, friendly_errors, out
from onceflow.protocol.internal_topics import CLUSTER_METADATA_TOPIC


@click.group(name="metadata-quorum")
def metadata_quorum():
    """Look at the metadata quorum (the controllers' Raft log)."""


@metadata_quorum.command()
@click.option("--status", "what", flag_value="status", help="Leader, epoch, high watermark, voters.")
@click.option("--replication", "what", flag_value="replication", help="Each replica's log end and lag.")
@bootstrap_option
def describe(what, bootstrap):
    """Describe the metadata quorum (choose --status or --replication)."""
    if what is None:
        raise click.UsageError("choose --status or --replication")
    with friendly_errors(bootstrap):
        cluster_id, partition = asyncio.run(_describe(bootstrap, client_security()))
    hw = partition.high_watermark
    if what == "status":
        lag = max((hw - r.log_end_offset for r in partition.current_voters), default=0)
        rows = [
            ("ClusterId", cluster_id),
            ("LeaderId", partition.leader_id),
            ("LeaderEpoch", partition.leader_epoch),
            ("HighWatermark", hw),
            ("MaxFollowerLag", max(lag, 0)),
            ("CurrentVoters", [r.replica_id for r in partition.current_voters]),
            ("CurrentObservers", [r.replica_id for r in partition.observers]),
        ]
        for name, value in rows:
            out.print(f"{name + ':':<20}{value}")
        return
    from rich.table import Table

    now = int(time.time() * 1000)
    table = Table(title="__cluster_metadata-0")
    for column in ("NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"):
        table.add_column(column)
    replicas = [(r, "Voter") for r in partition.current_voters] + [
        (r, "Observer") for r in partition.observers
    ]
    for replica, kind in replicas:
        status = (
            "Leader"
            if replica.replica_id == partition.leader_id
            else f"Follower ({kind})"
            if kind == "Voter"
            else kind
        )
        table.add_row(
            str(replica.replica_id),
            str(replica.log_end_offset),
            str(max(hw - replica.log_end_offset, 0)),
            _ago(now, replica.last_fetch_timestamp),
            _ago(now, replica.last_caught_up_timestamp),
            status,
        )
    out.print(table)


def _ago(now: int, timestamp: int) -> str:
    return "-" if timestamp < 0 else f"{max(now - timestamp, 0)} ms ago"


async def _describe(bootstrap: str, security=None):
    from kafka.protocol.admin import DescribeQuorumRequest
    from kafka.protocol.metadata import MetadataRequest

    from onceflow.client.connection import Connection
    from onceflow.protocol.errors import ErrorCode, kafka_error

    host, _, port = bootstrap.split(",")[0].rpartition(":")
    conn = await Connection.open(host, int(port), security=security)
    try:
        if 55 not in conn.broker_versions:
            raise click.ClickException(
                f"{bootstrap} does not answer DescribeQuorum (not an onceflow cluster node?)"
            )
        topic = DescribeQuorumRequest.TopicData
        response = await conn.send(
            DescribeQuorumRequest(
                topics=[
                    topic(
                        topic_name=CLUSTER_METADATA_TOPIC, partitions=[topic.PartitionData(partition_index=0)]
                    )
                ]
            ),
            version=min(1, conn.broker_versions[55][1]),
        )
        metadata = await conn.send(
            MetadataRequest(topics=[], allow_auto_topic_creation=False),
            version=min(12, conn.broker_versions[3][1]),
        )
    finally:
        await conn.close()
    if response.error_code:
        raise kafka_error(
            response.error_code,
            getattr(response, "error_message", None) or ErrorCode(response.error_code).name,
        )
    partition = response.topics[0].partitions[0]
    if partition.error_code:
        raise kafka_error(partition.error_code, ErrorCode(partition.error_code).name)
    return metadata.cluster_id, partition
