"""Request frames for fuzzing a broker: valid templates of every API it serves and ways to break them.

``template_frames(topic, anchor_topic)`` builds valid, length-prefixed requests (every API the broker
serves, in one or more versions; the admin, group and transaction ones are in ``fuzz_templates``). ``mutate(kind, frame, rng)`` is a pure function returning a damaged copy; ``frames()``
is the Hypothesis strategy that picks a template, a kind of damage and a seeded RNG for it.
"""

from __future__ import annotations

import random
import struct
import uuid

from hypothesis import strategies as st
from kafka.protocol.admin import DescribeConfigsRequest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest, OffsetFetchRequest
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest

from onceflow.protocol.messages import ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest

from .fuzz_templates import admin_templates, group_templates, transaction_templates
from .wire import build_batch, encode_request

MUTATIONS = (
    "valid",
    "flip",
    "truncate_consistent",
    "truncate_claiming_more",
    "wrong_length",
    "huge_length",
    "unknown_api_key",
    "unknown_version",
    "garbage",
    "splice",
    "zero_fill",
)
HUGE_LENGTHS = (2**31 - 1, 104_857_601, 0x7FFF0000, 1 << 30, -1, -(2**31), 0)
UNKNOWN_API_KEYS = (-1, 999, 32767, 93, 150, -32768)
UNKNOWN_VERSIONS = (-1, 99, 32767, 200, -32768)


def _produce(topic: str, codec: str) -> ProduceRequest:
    batch = build_batch([(b"fz-%d" % i, b"fuzz value %d" % i) for i in range(5)], codec=codec)
    return ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=5_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)],
            )
        ],
    )


def _fetch(
    topic: str,
    *,
    session_id: int = 0,
    session_epoch: int = -1,
    forget: tuple[int, ...] = (),
    topic_id: uuid.UUID | None = None,
) -> FetchRequest:
    """A Fetch of partition 0; a session id/epoch and forgotten partitions make it incremental
    (KIP-227); ``topic_id`` names the topic by id (v13+)."""
    names = {"topic_id": topic_id} if topic_id is not None else {"topic": topic}
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 16,
        isolation_level=0,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=[
            FetchRequest.FetchTopic(
                **names,
                partitions=[
                    FetchRequest.FetchTopic.FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 16,
                    )
                ],
            )
        ],
        forgotten_topics_data=[FetchRequest.ForgottenTopic(**names, partitions=list(forget))]
        if forget
        else [],
        rack_id="",
    )


def _list_offsets(topic: str) -> ListOffsetsRequest:
    return ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=topic,
                partitions=[
                    ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                        partition_index=0, current_leader_epoch=-1, timestamp=-1
                    )
                ],
            )
        ],
    )


def template_frames(topic: str, anchor_topic: str) -> list[bytes]:
    """Valid requests of every API the broker serves (at least one version each). Writes go only to
    ``topic`` (and topics named after it); the anchor topic is only ever read."""
    meta = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=True
    )
    requests = [
        (ApiVersionsRequest(client_software_name="fuzz", client_software_version="1"), 3),
        (ApiVersionsRequest(), 0),
        (meta, 1),
        (meta, 9),
        (meta, 12),
        (MetadataRequest(topics=None, allow_auto_topic_creation=False), 9),
        (_produce(topic, "none"), 9),
        (_produce(topic, "gzip"), 3),
        (_produce(topic, "zstd"), 7),
        (_fetch(anchor_topic), 12),
        (_fetch(topic), 4),
        # Fetch sessions: a full fetch that opens one, incremental ones (sessions the broker may or
        # may not have, forgotten partitions), by name and by topic id.
        (_fetch(anchor_topic, session_epoch=0), 12),
        (_fetch(anchor_topic, session_id=0x1234_5678, session_epoch=1, forget=(1, 2)), 12),
        (_fetch("", session_id=7, session_epoch=3, forget=(0,), topic_id=uuid.UUID(int=0xF00D)), 13),
        (_fetch("", session_epoch=0, topic_id=uuid.UUID(int=0xF00D)), 17),
        (_list_offsets(anchor_topic), 7),
        (_list_offsets(topic), 1),
        (FindCoordinatorRequest(key="fuzz-group", key_type=0), 2),
        (InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000), 2),
        (OffsetFetchRequest(group_id="fuzz-group", topics=None), 6),
        (
            DescribeConfigsRequest(
                resources=[
                    DescribeConfigsRequest.DescribeConfigsResource(
                        resource_type=2, resource_name=topic, configuration_keys=None
                    )
                ],
                include_synonyms=False,
            ),
            1,
        ),
        (
            ConsumerGroupHeartbeatRequest(
                group_id="fuzz-group-848",
                member_id="fuzz-member",
                member_epoch=0,
                rebalance_timeout_ms=30_000,
                subscribed_topic_names=[topic],
                topic_partitions=[],
            ),
            1,
        ),
        (
            # v0: the member joins with an empty id and the coordinator names it
            ConsumerGroupHeartbeatRequest(
                group_id="fuzz-group-848",
                member_id="",
                member_epoch=0,
                rebalance_timeout_ms=30_000,
                subscribed_topic_names=[topic],
                topic_partitions=[],
            ),
            0,
        ),
        (ConsumerGroupDescribeRequest(group_ids=["fuzz-group-848"], include_authorized_operations=False), 0),
        (ConsumerGroupDescribeRequest(group_ids=["fuzz-group-848"], include_authorized_operations=True), 1),
        *admin_templates(topic, anchor_topic),
        *group_templates(topic),
        *transaction_templates(topic),
    ]
    return [encode_request(req, version, correlation_id=i + 1) for i, (req, version) in enumerate(requests)]


def _with_length(body: bytes, length: int) -> bytes:
    return struct.pack(">i", length) + body


def mutate(kind: str, frame: bytes, rng: random.Random, other: bytes | None = None) -> bytes:
    """A damaged copy of ``frame`` (a length-prefixed request). Deterministic given ``rng``."""
    body = frame[4:]
    if kind == "valid":
        return frame
    if kind == "flip":
        damaged = bytearray(frame)
        for _ in range(rng.randint(1, 8)):
            pos = rng.randrange(4, len(damaged))
            damaged[pos] ^= rng.randint(1, 255)
        return bytes(damaged)
    if kind == "truncate_consistent":  # shorter body, length prefix tells the truth
        cut = rng.randrange(0, len(body))
        return _with_length(body[:cut], cut)
    if kind == "truncate_claiming_more":  # shorter body, prefix still claims the full length
        return frame[: rng.randrange(4, len(frame))]
    if kind == "wrong_length":
        return _with_length(body, max(0, len(body) + rng.choice((-7, -3, -1, 1, 2, 9, 64))))
    if kind == "huge_length":
        return _with_length(body[: rng.randrange(0, len(body) + 1)], rng.choice(HUGE_LENGTHS))
    if kind == "unknown_api_key":
        return _with_length(struct.pack(">h", rng.choice(UNKNOWN_API_KEYS)) + body[2:], len(body))
    if kind == "unknown_version":
        return _with_length(body[:2] + struct.pack(">h", rng.choice(UNKNOWN_VERSIONS)) + body[4:], len(body))
    if kind == "garbage":
        junk = rng.randbytes(rng.randint(0, 400))
        return _with_length(junk, len(junk)) if rng.random() < 0.8 else junk
    if kind == "splice":  # one API's header in front of another API's body
        donor = (other or frame)[4:]
        mixed = body[:8] + donor[rng.randrange(0, len(donor)) :]
        return _with_length(mixed, len(mixed))
    if kind == "zero_fill":  # a run of zeros: empty strings, zero-length arrays, null fields
        damaged = bytearray(frame)
        start = rng.randrange(12, len(damaged)) if len(damaged) > 12 else 4
        for pos in range(start, min(len(damaged), start + rng.randint(1, 16))):
            damaged[pos] = 0
        return bytes(damaged)
    raise ValueError(f"unknown mutation {kind!r}")


def frames(templates: list[bytes]) -> st.SearchStrategy[bytes]:
    """One (possibly) damaged frame: the template, the damage and its randomness come from Hypothesis."""
    return st.builds(
        lambda kind, base, other, rng: mutate(kind, base, rng, other),
        st.sampled_from(MUTATIONS),
        st.sampled_from(templates),
        st.sampled_from(templates),
        st.randoms(use_true_random=False),
    )
