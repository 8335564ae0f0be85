"""The controller-facing APIs we wrote schemas for (AlterPartition, BrokerRegistration, BrokerHeartbeat,
UnregisterBroker, AllocateProducerIds, Envelope): our bytes are what kio (generated from Kafka's own
schemas) writes, at every version kio has, both ways."""

from __future__ import annotations

import datetime
import importlib
import io
import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64, u16

from onceflow.protocol import apis
from onceflow.protocol import messages as m

INCARNATION = uuid.UUID(int=0xABCDEF)
TOPIC_ID = uuid.UUID(int=0x1234)
NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


def _kio(module: str, version: int, name: str):
    return getattr(importlib.import_module(f"kio.schema.{module}.v{version}"), name)


def _kio_bytes(entity) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def _both_ways(ours, version: int, kio_entity) -> None:
    ours_bytes = bytes(ours.encode(version=version))
    assert ours_bytes == _kio_bytes(kio_entity)
    decoded = entity_reader(type(kio_entity))(memoryview(ours_bytes), 0)
    assert (decoded[0] if isinstance(decoded, tuple) else decoded) == kio_entity
    again = type(ours).decode(ours_bytes, version=version)
    again._header = None  # a decoded message's header slot is unset (a kafka-python quirk)
    assert bytes(again.encode(version=version)) == ours_bytes


@pytest.mark.parametrize("version", range(5))
def test_broker_registration_request(version):
    k = _kio("broker_registration", version, "BrokerRegistrationRequest")
    fields = dict(broker_id=i32(3), cluster_id="cluster", incarnation_id=INCARNATION, features=(), rack="r1")
    listener_cls = importlib.import_module(f"kio.schema.broker_registration.v{version}.request").Listener
    fields["listeners"] = (
        listener_cls(name="PLAINTEXT", host="127.0.0.1", port=u16(9092), security_protocol=i16(0)),
    )
    if version >= 1:
        fields["is_migrating_zk_broker"] = False
    if version >= 2:
        fields["log_dirs"] = (uuid.UUID(int=5),)
    if version >= 3:
        fields["previous_broker_epoch"] = i64(-1)
    ours = m.BrokerRegistrationRequest(
        broker_id=3,
        cluster_id="cluster",
        incarnation_id=INCARNATION,
        listeners=[
            m.BrokerRegistrationRequest.Listener(
                name="PLAINTEXT", host="127.0.0.1", port=9092, security_protocol=0
            )
        ],
        features=[],
        rack="r1",
        is_migrating_zk_broker=False,
        log_dirs=[uuid.UUID(int=5)],
        previous_broker_epoch=-1,
    )
    _both_ways(ours, version, k(**fields))


@pytest.mark.parametrize("version", range(5))
def test_broker_registration_response(version):
    k = _kio("broker_registration", version, "BrokerRegistrationResponse")
    kio_entity = k(throttle_time=NO_THROTTLE, error_code=ErrorCode(101), broker_epoch=i64(42))
    ours = m.BrokerRegistrationResponse(throttle_time_ms=0, error_code=101, broker_epoch=42)
    _both_ways(ours, version, kio_entity)


@pytest.mark.parametrize("version", range(2))
def test_broker_heartbeat(version):
    kreq = _kio("broker_heartbeat", version, "BrokerHeartbeatRequest")
    extra = {"offline_log_dirs": (uuid.UUID(int=9),)} if version >= 1 else {}
    _both_ways(
        m.BrokerHeartbeatRequest(
            broker_id=2,
            broker_epoch=77,
            current_metadata_offset=1000,
            want_fence=False,
            want_shut_down=True,
            offline_log_dirs=[uuid.UUID(int=9)] if version >= 1 else [],
        ),
        version,
        kreq(
            broker_id=i32(2),
            broker_epoch=i64(77),
            current_metadata_offset=i64(1000),
            want_fence=False,
            want_shut_down=True,
            **extra,
        ),
    )
    kresp = _kio("broker_heartbeat", version, "BrokerHeartbeatResponse")
    _both_ways(
        m.BrokerHeartbeatResponse(
            throttle_time_ms=0, error_code=0, is_caught_up=True, is_fenced=False, should_shut_down=False
        ),
        version,
        kresp(
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode(0),
            is_caught_up=True,
            is_fenced=False,
            should_shut_down=False,
        ),
    )


@pytest.mark.parametrize("version", [2, 3])  # kio has AlterPartition v2-v3 only
def test_alter_partition(version):
    req_mod = importlib.import_module(f"kio.schema.alter_partition.v{version}.request")
    partition = dict(partition_index=i32(1), leader_epoch=i32(4), partition_epoch=i32(9))
    if version <= 2:
        partition["new_isr"] = (i32(1), i32(2))
    else:
        partition["new_isr_with_epochs"] = (
            req_mod.BrokerState(broker_id=i32(1), broker_epoch=i64(10)),
            req_mod.BrokerState(broker_id=i32(2), broker_epoch=i64(-1)),
        )
    if version >= 1:
        partition["leader_recovery_state"] = i8(0)
    topic = {"topic_name": "orders"} if version <= 1 else {"topic_id": TOPIC_ID}
    kio_req = req_mod.AlterPartitionRequest(
        broker_id=i32(1),
        broker_epoch=i64(10),
        topics=(req_mod.TopicData(**topic, partitions=(req_mod.PartitionData(**partition),)),),
    )
    R = m.AlterPartitionRequest
    ours = R(
        broker_id=1,
        broker_epoch=10,
        topics=[
            R.TopicData(
                topic_name="orders",
                topic_id=TOPIC_ID,
                partitions=[
                    R.TopicData.PartitionData(
                        partition_index=1,
                        leader_epoch=4,
                        partition_epoch=9,
                        new_isr=[1, 2],
                        leader_recovery_state=0,
                        new_isr_with_epochs=[
                            R.TopicData.PartitionData.BrokerState(broker_id=1, broker_epoch=10),
                            R.TopicData.PartitionData.BrokerState(broker_id=2, broker_epoch=-1),
                        ],
                    )
                ],
            )
        ],
    )
    _both_ways(ours, version, kio_req)

    resp_mod = importlib.import_module(f"kio.schema.alter_partition.v{version}.response")
    rpartition = dict(
        partition_index=i32(1),
        error_code=ErrorCode(0),
        leader_id=i32(1),
        leader_epoch=i32(4),
        isr=(i32(1),),
        partition_epoch=i32(10),
    )
    if version >= 1:
        rpartition["leader_recovery_state"] = i8(0)
    kio_resp = resp_mod.AlterPartitionResponse(
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode(0),
        topics=(resp_mod.TopicData(**topic, partitions=(resp_mod.PartitionData(**rpartition),)),),
    )
    S = m.AlterPartitionResponse
    ours_resp = S(
        throttle_time_ms=0,
        error_code=0,
        topics=[
            S.TopicData(
                topic_name="orders",
                topic_id=TOPIC_ID,
                partitions=[
                    S.TopicData.PartitionData(
                        partition_index=1,
                        error_code=0,
                        leader_id=1,
                        leader_epoch=4,
                        isr=[1],
                        leader_recovery_state=0,
                        partition_epoch=10,
                    )
                ],
            )
        ],
    )
    _both_ways(ours_resp, version, kio_resp)


def test_unregister_broker_and_allocate_producer_ids():
    _both_ways(
        m.UnregisterBrokerRequest(broker_id=4),
        0,
        _kio("unregister_broker", 0, "UnregisterBrokerRequest")(broker_id=i32(4)),
    )
    _both_ways(
        m.UnregisterBrokerResponse(throttle_time_ms=0, error_code=102, error_message="no such broker"),
        0,
        _kio("unregister_broker", 0, "UnregisterBrokerResponse")(
            throttle_time=NO_THROTTLE, error_code=ErrorCode(102), error_message="no such broker"
        ),
    )
    _both_ways(
        m.AllocateProducerIdsRequest(broker_id=1, broker_epoch=12),
        0,
        _kio("allocate_producer_ids", 0, "AllocateProducerIdsRequest")(
            broker_id=i32(1), broker_epoch=i64(12)
        ),
    )
    _both_ways(
        m.AllocateProducerIdsResponse(
            throttle_time_ms=0, error_code=0, producer_id_start=3000, producer_id_len=1000
        ),
        0,
        _kio("allocate_producer_ids", 0, "AllocateProducerIdsResponse")(
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode(0),
            producer_id_start=i64(3000),
            producer_id_len=i32(1000),
        ),
    )


def test_envelope():
    _both_ways(
        m.EnvelopeRequest(
            request_data=b"\x00\x13inner", request_principal=None, client_host_address=b"\x7f\x00\x00\x01"
        ),
        0,
        _kio("envelope", 0, "EnvelopeRequest")(
            request_data=b"\x00\x13inner", request_principal=None, client_host_address=b"\x7f\x00\x00\x01"
        ),
    )
    _both_ways(
        m.EnvelopeResponse(response_data=b"resp", error_code=ErrorCode(0)),
        0,
        _kio("envelope", 0, "EnvelopeResponse")(response_data=b"resp", error_code=ErrorCode(0)),
    )


def test_the_new_apis_decode_by_api_key():
    for key, name in [
        (56, "AlterPartition"),
        (58, "Envelope"),
        (62, "BrokerRegistration"),
        (63, "BrokerHeartbeat"),
        (64, "UnregisterBroker"),
        (67, "AllocateProducerIds"),
    ]:
        assert apis.request_class(key).__name__ == f"{name}Request"
        assert apis.response_class(key).__name__ == f"{name}Response"
