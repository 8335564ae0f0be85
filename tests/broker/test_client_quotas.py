"""Client quotas without sockets (entities, Kafka's precedence, sensors sharing, throttle times with an
injected clock, the store), then AlterClientQuotas / DescribeClientQuotas on the wire, persisted."""

from __future__ import annotations

import asyncio
import json

import pytest
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

from onceflow.broker.quotas.entities import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    Filter,
    check_ops,
    entity,
)
from onceflow.broker.quotas.manager import ANONYMOUS, ClientQuotas
from onceflow.broker.quotas.store import FileQuotaStore
from onceflow.protocol.errors import ErrorCode, InvalidRequest, UnsupportedVersion

from .raw_client import RawClient, build_batch, running_broker
from .test_produce_fetch import fetch_request, fetched, produce_request


class MemoryStore:
    def __init__(self) -> None:
        self.saved: list[dict] = []

    def load(self) -> dict:
        return {}

    def save(self, quotas) -> None:
        self.saved.append({e: dict(v) for e, v in quotas.items()})


def quotas_with(*settings: tuple[dict, str, float]) -> ClientQuotas:
    quotas = ClientQuotas(MemoryStore())
    quotas.alter(
        [(entity(names.items()), {key: value}) for names, key, value in settings], validate_only=False
    )
    return quotas


# -- entities and checks --------------------------------------------------------------------------------


def test_entities_and_values_are_checked_as_kafka_checks_them():
    assert entity([(CLIENT_ID, "app"), (USER, None)]) == ((CLIENT_ID, "app"), (USER, None))
    for pairs, message in (
        ([], "empty client quota entity"),
        ([(USER, "a"), (USER, "b")], "duplicate entity entry user"),
        ([("group", "g")], "Unhandled client quota entity type"),
        ([(CLIENT_ID, "")], "Empty client-id"),
        ([("ip", "127.0.0.1")], "not supported by onceflow yet"),
    ):
        with pytest.raises(InvalidRequest, match=message):
            entity(pairs)
    assert check_ops([(PRODUCER_BYTE_RATE, 1024.0, False), (REQUEST_PERCENTAGE, 0, True)]) == {
        PRODUCER_BYTE_RATE: 1024.0,
        REQUEST_PERCENTAGE: None,
    }
    for ops, message in (
        ([("bogus", 1.0, False)], "Invalid configuration key bogus"),
        ([(PRODUCER_BYTE_RATE, 0.0, False)], "must be greater than 0"),
        ([(PRODUCER_BYTE_RATE, 1.5, False)], "cannot be a fractional value"),
        ([(CONSUMER_BYTE_RATE, 1.0, False), (CONSUMER_BYTE_RATE, 2.0, False)], "Duplicate quota key"),
    ):
        with pytest.raises(InvalidRequest, match=message):
            check_ops(ops)
    assert check_ops([(REQUEST_PERCENTAGE, 12.5, False)]) == {REQUEST_PERCENTAGE: 12.5}


def test_describe_filters_match_exact_default_and_specified_entities():
    client = entity([(CLIENT_ID, "app")])
    default_client = entity([(CLIENT_ID, None)])
    both = entity([(USER, ANONYMOUS), (CLIENT_ID, "app")])
    everything = [client, default_client, both]

    def matching(components, strict):
        return [e for e in everything if Filter(components, strict).matches(e)]

    assert matching([], False) == everything
    assert matching([(CLIENT_ID, MATCH_EXACT, "app")], False) == [client, both]
    assert matching([(CLIENT_ID, MATCH_EXACT, "app")], True) == [client]
    assert matching([(CLIENT_ID, MATCH_DEFAULT, None)], True) == [default_client]
    assert matching([(USER, MATCH_SPECIFIED, None)], False) == [both]
    with pytest.raises(InvalidRequest, match="more than once"):
        Filter([(USER, MATCH_SPECIFIED, None), (USER, MATCH_EXACT, "a")], False)
    with pytest.raises(InvalidRequest, match="should not be used with"):
        Filter([("ip", MATCH_SPECIFIED, None), (USER, MATCH_SPECIFIED, None)], False)
    with pytest.raises(UnsupportedVersion):
        Filter([("group", MATCH_SPECIFIED, None)], False)


# -- precedence and throttling ----------------------------------------------------------------------------


def test_the_most_specific_quota_applies_in_kafkas_order():
    quotas = quotas_with(
        ({"client-id": None}, PRODUCER_BYTE_RATE, 1.0),
        ({"client-id": "app"}, PRODUCER_BYTE_RATE, 2.0),
        ({"user": None}, PRODUCER_BYTE_RATE, 3.0),
        ({"user": None, "client-id": "app"}, PRODUCER_BYTE_RATE, 4.0),
        ({"user": ANONYMOUS}, PRODUCER_BYTE_RATE, 5.0),
        ({"user": ANONYMOUS, "client-id": "app"}, PRODUCER_BYTE_RATE, 6.0),
    )

    def bound(user, client_id):
        return quotas.quota_for(PRODUCER_BYTE_RATE, user, client_id)[1]

    assert bound(ANONYMOUS, "app") == 6.0  # user + client-id
    assert bound(ANONYMOUS, "other") == 5.0  # the user alone
    assert bound("alice", "app") == 4.0  # <default> user + client-id
    assert bound("alice", "other") == 3.0  # <default> user
    quotas = quotas_with(
        ({"client-id": None}, PRODUCER_BYTE_RATE, 1.0), ({"client-id": "app"}, PRODUCER_BYTE_RATE, 2.0)
    )
    assert bound(ANONYMOUS, "app") == 2.0 and bound(ANONYMOUS, "other") == 1.0
    assert quotas.quota_for(CONSUMER_BYTE_RATE, ANONYMOUS, "app")[1] is None  # each key on its own


def test_a_client_id_quota_is_measured_per_client_id_and_a_user_quota_is_shared():
    per_client = quotas_with(({"client-id": None}, PRODUCER_BYTE_RATE, 1000.0))
    # 11 windows of 1 s: a first burst is measured over 10 s, so 10,000 bytes pass unthrottled.
    assert per_client.record(PRODUCER_BYTE_RATE, ANONYMOUS, "a", 10_000, 0) == 0
    assert per_client.record(PRODUCER_BYTE_RATE, ANONYMOUS, "b", 10_000, 0) == 0  # its own sensor
    # 20,000 over 10 s is twice the quota: silent for another (20 - 10) / 10 * 10 s.
    assert per_client.record(PRODUCER_BYTE_RATE, ANONYMOUS, "a", 10_000, 0) == 10_000
    shared = quotas_with(({"user": None}, PRODUCER_BYTE_RATE, 1000.0))
    assert shared.record(PRODUCER_BYTE_RATE, ANONYMOUS, "a", 10_000, 0) == 0
    assert shared.record(PRODUCER_BYTE_RATE, ANONYMOUS, "b", 10_000, 0) == 10_000  # the same user's rate


def test_request_percentage_throttle_is_capped_at_one_window_and_no_quota_records_nothing():
    quotas = quotas_with(({"client-id": "busy"}, REQUEST_PERCENTAGE, 10.0))
    # 500 percent-seconds (5 s of a thread) at once: far over 10 %, but the throttle is at most 1 s.
    assert quotas.record(REQUEST_PERCENTAGE, ANONYMOUS, "busy", 500.0, 0) == 1000
    assert quotas.record(REQUEST_PERCENTAGE, ANONYMOUS, "idle", 500.0, 0) == 0
    assert quotas.record(PRODUCER_BYTE_RATE, ANONYMOUS, "busy", 10**9, 0) == 0
    assert quotas.any_enabled
    assert not ClientQuotas(MemoryStore()).any_enabled


def test_changes_are_saved_before_they_apply_and_validate_only_changes_nothing():
    store = MemoryStore()
    quotas = ClientQuotas(store)
    app = entity([(CLIENT_ID, "app")])
    quotas.alter([(app, {PRODUCER_BYTE_RATE: 100.0})], validate_only=True)
    assert store.saved == [] and not quotas.any_enabled
    quotas.alter([(app, {PRODUCER_BYTE_RATE: 100.0, CONSUMER_BYTE_RATE: 200.0})], validate_only=False)
    assert store.saved == [{app: {PRODUCER_BYTE_RATE: 100.0, CONSUMER_BYTE_RATE: 200.0}}]
    quotas.alter([(app, {PRODUCER_BYTE_RATE: None, CONSUMER_BYTE_RATE: None})], validate_only=False)
    assert store.saved[-1] == {} and quotas.describe(Filter([], False)) == []

    class BrokenStore(MemoryStore):
        def save(self, quotas) -> None:
            raise OSError("disk full")

    quotas = ClientQuotas(BrokenStore())
    with pytest.raises(OSError):
        quotas.alter([(app, {PRODUCER_BYTE_RATE: 100.0})], validate_only=False)
    assert not quotas.any_enabled  # not saved, not applied


def test_the_file_store_round_trips_and_names_a_damaged_file(tmp_path):
    store = FileQuotaStore(tmp_path)
    assert store.load() == {}
    saved = {
        entity([(CLIENT_ID, None)]): {REQUEST_PERCENTAGE: 50.0},
        entity([(USER, ANONYMOUS), (CLIENT_ID, "app")]): {PRODUCER_BYTE_RATE: 1048576.0},
    }
    store.save(saved)
    assert FileQuotaStore(tmp_path).load() == saved
    assert not list(tmp_path.glob("*.tmp"))
    store.path.write_text(
        json.dumps({"version": 1, "quotas": [{"entity": [["user", "a"]], "values": {"x": 1}}]})
    )
    with pytest.raises(ValueError, match="client-quotas.json is damaged"):
        store.load()


# -- on the wire ------------------------------------------------------------------------------------------


def _alter(entries, validate_only=False) -> AlterClientQuotasRequest:
    r = AlterClientQuotasRequest
    return r(
        entries=[
            r.EntryData(
                entity=[r.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in names],
                ops=[r.EntryData.OpData(key=k, value=v, remove=remove) for k, v, remove in ops],
            )
            for names, ops in entries
        ],
        validate_only=validate_only,
    )


def _describe(components, strict=False) -> DescribeClientQuotasRequest:
    r = DescribeClientQuotasRequest
    return r(
        components=[r.ComponentData(entity_type=t, match_type=m, match=s) for t, m, s in components],
        strict=strict,
    )


def test_alter_and_describe_client_quotas_on_the_wire_survive_a_restart(tmp_path):
    async def alter_then_describe():
        async with running_broker(tmp_path) as broker:
            client = await RawClient.connect(broker.port)
            answer = await client.request(
                _alter(
                    [
                        ([("client-id", "app")], [(PRODUCER_BYTE_RATE, 1048576.0, False)]),
                        ([("client-id", None)], [(CONSUMER_BYTE_RATE, 2048.0, False)]),
                        ([("client-id", "bad")], [(PRODUCER_BYTE_RATE, -1.0, False)]),
                        ([("ip", "127.0.0.1")], [("connection_creation_rate", 5.0, False)]),
                    ]
                ),
                1,
            )
            assert [e.error_code for e in answer.entries] == [
                0,
                0,
                ErrorCode.INVALID_REQUEST,
                ErrorCode.INVALID_REQUEST,
            ]
            assert "must be greater than 0" in answer.entries[2].error_message
            assert [(e.entity_type, e.entity_name) for e in answer.entries[1].entity] == [("client-id", None)]
            await client.close()

    async def describe():
        async with running_broker(tmp_path) as broker:  # restarted on the same data dir
            client = await RawClient.connect(broker.port)
            every = await client.request(_describe([]), 1)
            assert every.error_code == 0
            described = {
                tuple((e.entity_type, e.entity_name) for e in entry.entity): {
                    v.key: v.value for v in entry.values
                }
                for entry in every.entries
            }
            assert described == {
                (("client-id", "app"),): {PRODUCER_BYTE_RATE: 1048576.0},
                (("client-id", None),): {CONSUMER_BYTE_RATE: 2048.0},
            }
            default = await client.request(_describe([("client-id", MATCH_DEFAULT, None)], strict=True), 0)
            assert len(default.entries) == 1 and default.entries[0].entity[0].entity_name is None
            bad = await client.request(_describe([("client-id", MATCH_EXACT, None)]), 1)
            assert bad.error_code == ErrorCode.INVALID_REQUEST
            await client.close()

    asyncio.run(alter_then_describe())
    asyncio.run(describe())


def test_answers_over_quota_carry_their_throttle_time_at_every_version(tmp_path):
    # Two windows of 1 s: a first burst is judged over 1 s, so throttle times stay short.
    async def scenario():
        async with running_broker(tmp_path, quota_window_num=2) as broker:
            broker.topics.create_topic("t", 1)
            client = await RawClient.connect(broker.port)  # client-id "broker-tests"
            answer = await client.request(
                _alter(
                    [
                        ([("client-id", "broker-tests")], [(PRODUCER_BYTE_RATE, 10_000.0, False)]),
                        ([("client-id", "broker-tests")], [(CONSUMER_BYTE_RATE, 10_000.0, False)]),
                    ]
                ),
                0,
            )
            assert {e.error_code for e in answer.entries} == {ErrorCode.INVALID_REQUEST}  # one entity twice
            answer = await client.request(
                _alter(
                    [
                        (
                            [("client-id", "broker-tests")],
                            [(PRODUCER_BYTE_RATE, 10_000.0, False), (CONSUMER_BYTE_RATE, 10_000.0, False)],
                        )
                    ]
                ),
                0,
            )
            assert answer.entries[0].error_code == 0
            batch = build_batch([bytes(12_000)])
            produced = await client.request(produce_request("t", {0: batch}), 9)
            assert produced.responses[0].partition_responses[0].error_code == 0
            assert 0 < produced.throttle_time_ms <= 1000  # 12 KB in 1 s against 10 KB/s: ~200 ms
            for version in (4, 12):  # the field is patched into the encoded answer: plain and flexible
                answer = await client.request(fetch_request("t", {0: 0}), version)
                assert fetched(answer).records and 0 < answer.throttle_time_ms <= 5000, version
            assert broker.limit_events.counts["produce-throttled"] == 1
            assert broker.limit_events.counts["fetch-throttled"] == 2
            await client.close()

    asyncio.run(scenario())
