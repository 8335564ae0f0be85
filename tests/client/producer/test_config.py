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


def test_numbers_and_booleans_given_as_strings_are_converted():
    config = ProducerConfig.from_mapping(
        {
            "batch.size": "1000",
            "linger.ms": " 20 ",
            "enable.idempotence": "true",
            "partitioner.ignore.keys": "TRUE",
            "max.in.flight.requests.per.connection": "5",
        }
    )
    assert config.batch_size == 1000 and type(config.batch_size) is int
    assert config.linger_ms == 20
    assert config.enable_idempotence is True
    assert config.partitioner_ignore_keys is True
    assert config.max_in_flight_requests_per_connection == 5


def test_false_given_as_a_string_turns_idempotence_off():
    # A non-empty string is truthy: without conversion "false" would have meant on.
    config = ProducerConfig.from_mapping({"enable.idempotence": "false", "acks": "1"})
    assert config.enable_idempotence is False
    assert config.acks == 1


def test_converted_strings_are_still_checked():
    with pytest.raises(InvalidConfig, match="batch.size must be positive"):
        ProducerConfig.from_mapping({"batch.size": "0"})
    with pytest.raises(InvalidConfig, match="enable.idempotence=true is refused"):
        ProducerConfig.from_mapping({"enable.idempotence": "true", "acks": "0"})


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"batch.size": "big"}, "batch.size='big' is not an integer"),
        ({"linger.ms": 1.5}, "linger.ms must be an integer"),
        ({"retries": True}, "retries must be an integer"),
        ({"enable.idempotence": "yes"}, "enable.idempotence='yes' is not a boolean"),
        ({"enable.idempotence": 1}, "enable.idempotence=1 is not a boolean"),
    ],
)
def test_unconvertible_values_are_refused_by_name(settings, message):
    with pytest.raises(InvalidConfig, match=message):
        ProducerConfig.from_mapping(settings)
