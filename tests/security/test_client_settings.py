"""The client's TLS/SASL settings under librdkafka's and Java's names, for our producer, consumer and
admin, the CLI's --command-config files, and the Spark options (kafka. prefix); bad settings are
refused before anything connects."""

from __future__ import annotations

import pytest

from onceflow.cli.common import read_properties
from onceflow.client.consumer.config import ConsumerConfig
from onceflow.client.producer.config import ProducerConfig
from onceflow.client.security import ClientSecurity
from onceflow.protocol.errors import InvalidConfig
from onceflow.spark.options import parse_source_options
from onceflow.spark.sink_options import parse_sink_options, producer_settings

SCRAM = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "u",
    "sasl.password": "p",
}


def test_librdkafka_names_for_producer_and_consumer():
    producer = ProducerConfig.from_mapping({**SCRAM, "ssl.ca.location": "/ca.pem"})
    assert (
        producer.security.sasl_mechanism == "SCRAM-SHA-512" and producer.security.ssl_ca_location == "/ca.pem"
    )
    assert "s3cret-word" not in repr(producer) and "s3cret-word" not in repr(producer.security)
    assert ConsumerConfig.from_dict({"security.protocol": "ssl"}).security.protocol == "SSL"
    assert ProducerConfig().security is None  # plain text: no TLS, no SASL


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"security.protocol": "SASL_SSL"}, "GSSAPI"),
        (
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.username": "u",
                "sasl.password": "p",
            },
            "OAUTHBEARER",
        ),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}, "sasl.username and sasl.password"),
        ({"security.protocol": "TLS"}, "security.protocol"),
        ({"security.protocol": "SSL", "ssl.certificate.location": "/c.pem"}, "go together"),
        ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "maybe"}, "https or none"),
    ],
)
def test_bad_settings_are_refused_by_name(settings, words):
    with pytest.raises(InvalidConfig, match=words):
        ProducerConfig.from_mapping(settings)


def test_java_forms_of_a_command_config(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text(
        "# comment\n! another\n"
        "security.protocol = SASL_SSL\n"
        "sasl.mechanism: SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '   username="admin" password="a\\"b";\n'
        "ssl.truststore.location=/etc/ca.pem\nssl.truststore.type=PEM\n"
    )
    settings = read_properties(str(path))
    security = ClientSecurity.from_config(settings)
    assert (security.sasl_username, security.sasl_password) == ("admin", 'a\\"b')
    assert security.ssl_ca_location == "/etc/ca.pem"
    assert security.as_settings()["sasl.mechanism"] == "SCRAM-SHA-256"
    with pytest.raises(InvalidConfig, match="PEM"):
        ClientSecurity.from_config({"security.protocol": "SSL", "ssl.truststore.type": "JKS"})
    path.write_text("security.protocol\n")
    with pytest.raises(ValueError, match="not key=value"):
        read_properties(str(path))


def test_spark_options_carry_the_settings_with_the_kafka_prefix():
    prefixed = {f"kafka.{k}": v for k, v in SCRAM.items()}
    source = parse_source_options(
        {"kafka.bootstrap.servers": "h:1", "subscribe": "t", **prefixed}, streaming=True
    )
    assert source.security.sasl_username == "u"
    sink = parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": "t", **prefixed})
    config = ProducerConfig.from_mapping(
        {"bootstrap.servers": "h:1", **producer_settings(sink.extra, {"bootstrap.servers"})}
    )
    assert config.security.protocol == "SASL_SSL"
    # Spark users write Java's forms: a JAAS line and a (PEM) truststore; the sink's producer gets
    # them under librdkafka's names.
    java = {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="u" password="p";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": "/ca.pem",
    }
    sink = parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": "t", **java})
    assert sink.extra["sasl.username"] == "u" and sink.extra["ssl.ca.location"] == "/ca.pem"
    source = parse_source_options(
        {"kafka.bootstrap.servers": "h:1", "subscribe": "t", **java}, streaming=True
    )
    assert (source.security.sasl_username, source.security.sasl_password) == ("u", "p")
