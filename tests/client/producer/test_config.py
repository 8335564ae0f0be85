"""ProducerConfig: Kafka's names and defaults, refusals that say why."""

import pytest

from onceflow.client.producer import ProducerConfig
from onceflow.protocol.errors import InvalidConfig


def test_defaults_are_kafkas():
    config = ProducerConfig()
    assert config.enable_idempotence is True
    assert config.acks == -1
    assert config.max_in_flight_requests_per_connection == 5
    assert config.batch_size == 16384
    assert config.buffer_memory == 33554432
    assert config.delivery_timeout_ms == 120000
    assert config.request_timeout_ms == 30000
    assert config.max_block_ms == 60000


def test_from_mapping_takes_dotted_names_and_normalises_acks():
    config = ProducerConfig.from_mapping({"linger.ms": 7, "acks": "1", "compression.type": "zstd"})
    assert (config.linger_ms, config.acks, config.compression_codec) == (7, 1, 4)
    assert config.enable_idempotence is False  # implicit idempotence yields to acks=1, as in Kafka
    assert config.to_mapping()["linger.ms"] == 7


def test_unknown_setting_is_named():
    with pytest.raises(InvalidConfig, match="lingr.ms"):
        ProducerConfig.from_mapping({"lingr.ms": 5})


def test_six_in_flight_with_idempotence_is_refused_and_says_why():
    with pytest.raises(InvalidConfig, match="remembers only the last 5 batches"):
        ProducerConfig(enable_idempotence=True, max_in_flight_requests_per_connection=6)


def test_unsafe_switch_allows_six_in_flight():
    config = ProducerConfig(
        enable_idempotence=True,
        max_in_flight_requests_per_connection=6,
        unsafe_allow_max_in_flight_above_5=True,
    )
    assert config.enable_idempotence and config.max_in_flight_requests_per_connection == 6


@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        ({"acks": 1}, "needs acks=all"),
        ({"acks": 0}, "needs acks=all"),
        ({"retries": 0}, "needs retries > 0"),
    ],
)
def test_explicit_idempotence_conflicts_are_refused(settings, reason):
    with pytest.raises(InvalidConfig, match=reason):
        ProducerConfig(enable_idempotence=True, **settings)


def test_transactional_id_needs_idempotence():
    with pytest.raises(InvalidConfig, match="transactional.id needs enable.idempotence"):
        ProducerConfig(transactional_id="t", enable_idempotence=False)
    with pytest.raises(InvalidConfig, match="transactional.id is set"):
        ProducerConfig(transactional_id="t", acks=1)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"compression_type": "brotli"}, "compression.type"),
        ({"acks": "some"}, "acks must be"),
        ({"batch_size": 0}, "batch.size must be positive"),
        ({"linger_ms": -1}, "linger.ms must not be negative"),
        ({"delivery_timeout_ms": 1000}, "delivery.timeout.ms"),
        ({"partitioner_class": "Nope"}, "partitioner.class"),
    ],
)
def test_bad_values_are_refused_by_name(settings, message):
    with pytest.raises(InvalidConfig, match=message):
        ProducerConfig(**settings)
