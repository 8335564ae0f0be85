"""The Spark source and sink over SASL_SSL, with the options Spark users write for Kafka's Java client
(``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config`` with Java's SCRAM
login module, a PEM ``kafka.ssl.truststore.location``): the exactly-once sink writes a batch, a
batch read returns it, and a wrong password fails the read instead of reading nothing.

One secured broker for the module (tests/helpers/secure_broker.py), the session-wide SparkSession.
"""

from __future__ import annotations

import uuid

import pytest
from tests.helpers.secure_broker import PASSWORDS, SecureBroker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    secure = SecureBroker(tmp_path_factory.mktemp("secure-spark"))
    secure.start()
    yield secure
    secure.stop()


def java_options(broker: SecureBroker, password: str = PASSWORDS["admin"]) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": broker.scram()["bootstrap.servers"],
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="admin" password="{password}";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(broker.pki.ca),
    }


def test_the_sink_writes_and_the_source_reads_over_sasl_ssl(spark, broker):
    from onceflow.client import AdminClient

    topic = f"spark-secure-{uuid.uuid4().hex[:8]}"
    with AdminClient(broker.bootstrap, security=broker.scram()) as admin:
        admin.create_topic(topic, partitions=2)
    rows = spark.createDataFrame([(f"k{n}", f"v{n}") for n in range(10)], "key STRING, value STRING")
    writer = rows.write.format("onceflow").mode("append").option("topic", topic)
    for key, value in java_options(broker).items():
        writer = writer.option(key, value)
    writer.option("guarantee", "exactly-once").save()

    reader = spark.read.format("onceflow").option("subscribe", topic)
    for key, value in java_options(broker).items():
        reader = reader.option(key, value)
    values = sorted(r.value.decode() for r in reader.load().select("value").collect())
    assert values == sorted(f"v{n}" for n in range(10))


def test_a_wrong_password_fails_the_read(spark, broker):
    reader = spark.read.format("onceflow").option("subscribe", "anything")
    for key, value in java_options(broker, password="guess").items():
        reader = reader.option(key, value)
    with pytest.raises(Exception, match="(?i)authentication"):
        reader.load().collect()
