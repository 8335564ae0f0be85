"""DescribeLogDirs (35): the broker's one log directory (the data dir) with the size of each
partition's log, as kafka-python's ``describe_log_dirs``, Kafka's ``kafka-log-dirs`` tool and
monitoring tools ask.

As Kafka: a null topic list means every topic (internal ones included); partitions the broker does not
have a log of (on a cluster: those other brokers hold) are left out rather than refused. Per partition: the bytes of its segments, an offset lag of 0
(one replica: the log end is the high watermark) and never a future log (no AlterReplicaLogDirs).
From v4 the volume's total and usable bytes (Kafka's ``getTotalSpace`` / ``getUsableSpace``). Needs
DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED and no results.
"""

from __future__ import annotations

import os

from kafka.protocol.admin import DescribeLogDirsRequest, DescribeLogDirsResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import CLUSTER, DESCRIBE, authorize
from onceflow.protocol.errors import ErrorCode

API_KEY = 35
MIN_VERSION = 0
MAX_VERSION = 4
REQUEST = DescribeLogDirsRequest

_Result = DescribeLogDirsResponse.DescribeLogDirsResult
_TopicResult = _Result.DescribeLogDirsTopic
_PartitionResult = _TopicResult.DescribeLogDirsPartition


def _wanted(ctx: RequestContext, request: DescribeLogDirsRequest) -> dict[str, list[int]]:
    """Topic -> partition indexes to describe, only those that exist, in request order."""
    if request.topics is None:
        wanted = {t.name: [p.index for p in t.partitions if p.log is not None] for t in ctx.topics}
        return {name: indexes for name, indexes in wanted.items() if indexes}
    wanted = {}
    for t in request.topics:
        topic = ctx.topics.get(t.topic)
        if topic is not None:
            indexes = wanted.setdefault(t.topic, [])
            indexes.extend(
                p
                for p in t.partitions
                if 0 <= p < len(topic.partitions) and topic.partitions[p].log is not None and p not in indexes
            )
    return {name: indexes for name, indexes in wanted.items() if indexes}


async def handle(ctx: RequestContext, request: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    if not authorize(ctx, DESCRIBE, CLUSTER):
        return DescribeLogDirsResponse(
            throttle_time_ms=0, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), results=[]
        )
    topics = [
        _TopicResult(
            name=name,
            partitions=[
                _PartitionResult(
                    partition_index=index,
                    partition_size=ctx.topics.get(name).partitions[index].log.size_in_bytes,
                    offset_lag=0,
                    is_future_key=False,
                )
                for index in indexes
            ],
        )
        for name, indexes in _wanted(ctx, request).items()
    ]
    data_dir = os.path.abspath(ctx.config.data_dir)
    volume = os.statvfs(data_dir)
    result = _Result(
        error_code=0,
        log_dir=data_dir,
        topics=topics,
        total_bytes=volume.f_blocks * volume.f_frsize,
        usable_bytes=volume.f_bavail * volume.f_frsize,
    )
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=[result])
