"""The ``kafka.``-prefixed options of the source and the sink: Kafka client settings.

Spark's Kafka connector hands every ``kafka.*`` option to Kafka's Java client, which warns about names
it does not know and fails on bad values when the client is built, inside the query. Here each one is
judged when the query is defined, by the same rules on both sides:

- settings Spark's connector itself refuses (``auto.offset.reset``, the (de)serializers,
  ``enable.auto.commit``, ``interceptor.classes``) are refused with Spark's reason;
- security settings are the onceflow client's (``client.security``): ``security.protocol``,
  ``sasl.mechanism``, ``sasl.username`` / ``sasl.password`` or ``sasl.jaas.config``,
  ``ssl.truststore.location`` / ``ssl.ca.location`` and the client's certificate and key, all PEM;
  any other ``ssl.*`` / ``sasl.*`` setting (Kerberos, JKS stores) is refused, and the values are
  checked here (``security_settings``);
- a name that is no Kafka client setting is refused, with the nearest one suggested (Kafka's client
  would only log it, and a misspelt setting silently keeps its default);
- a Kafka setting the onceflow side does not use is named in a warning;
- the rest are used (their values are checked by the caller: the sink builds its producer's config).
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping

from onceflow.client.security import SETTINGS, ClientSecurity, is_security_setting
from onceflow.protocol.errors import InvalidConfig

log = logging.getLogger(__name__)

__all__ = ["CONSUMER_CONFIGS", "PRODUCER_CONFIGS", "SECURITY_CONFIGS", "kafka_settings", "security_settings"]

# The security settings the onceflow client takes (and the PEM store types it accepts).
SECURITY_CONFIGS = frozenset((*SETTINGS, "ssl.truststore.type", "ssl.keystore.type"))

# Kafka 4.x's client settings, by name (ConsumerConfig / ProducerConfig and the common ones they
# define). ssl.* and sasl.* are recognised by prefix.
_COMMON_CONFIGS = frozenset(
    {
        "bootstrap.servers",
        "client.dns.lookup",
        "client.id",
        "connections.max.idle.ms",
        "enable.metrics.push",
        "interceptor.classes",
        "metadata.max.age.ms",
        "metadata.recovery.strategy",
        "metric.reporters",
        "metrics.num.samples",
        "metrics.recording.level",
        "metrics.sample.window.ms",
        "receive.buffer.bytes",
        "reconnect.backoff.max.ms",
        "reconnect.backoff.ms",
        "request.timeout.ms",
        "retry.backoff.max.ms",
        "retry.backoff.ms",
        "security.protocol",
        "security.providers",
        "send.buffer.bytes",
        "socket.connection.setup.timeout.max.ms",
        "socket.connection.setup.timeout.ms",
    }
)
CONSUMER_CONFIGS = _COMMON_CONFIGS | {
    "allow.auto.create.topics",
    "auto.commit.interval.ms",
    "auto.offset.reset",
    "check.crcs",
    "client.rack",
    "default.api.timeout.ms",
    "enable.auto.commit",
    "exclude.internal.topics",
    "fetch.max.bytes",
    "fetch.max.wait.ms",
    "fetch.min.bytes",
    "group.id",
    "group.instance.id",
    "group.protocol",
    "group.remote.assignor",
    "heartbeat.interval.ms",
    "isolation.level",
    "key.deserializer",
    "max.partition.fetch.bytes",
    "max.poll.interval.ms",
    "max.poll.records",
    "partition.assignment.strategy",
    "session.timeout.ms",
    "value.deserializer",
}
PRODUCER_CONFIGS = _COMMON_CONFIGS | {
    "acks",
    "batch.size",
    "buffer.memory",
    "compression.gzip.level",
    "compression.lz4.level",
    "compression.type",
    "compression.zstd.level",
    "delivery.timeout.ms",
    "enable.idempotence",
    "key.serializer",
    "linger.ms",
    "max.block.ms",
    "max.in.flight.requests.per.connection",
    "max.request.size",
    "metadata.max.idle.ms",
    "partitioner.adaptive.partitioning.enable",
    "partitioner.availability.timeout.ms",
    "partitioner.class",
    "partitioner.ignore.keys",
    "retries",
    "transaction.timeout.ms",
    "transactional.id",
    "value.serializer",
}

# Refused by Spark's Kafka source, with its reasons.
_SOURCE_REFUSED = {
    "auto.offset.reset": (
        "set the source option startingOffsets (earliest, latest or JSON offsets) instead: the query "
        "keeps its own offsets, so that no data is missed when partitions appear"
    ),
    "key.deserializer": "keys are read as bytes; cast or parse the key column instead",
    "value.deserializer": "values are read as bytes; cast or parse the value column instead",
    "enable.auto.commit": "the source commits no offsets: the query keeps them in its checkpoint",
    "interceptor.classes": "interceptors could change records behind the query's back",
}
# Refused by Spark's Kafka sink (the serializers), and the transactional ones the sink sets itself.
_SINK_REFUSED = {
    "key.serializer": "keys are written as bytes (string or binary key column); serialize in the query",
    "value.serializer": "values are written as bytes (string or binary value column); serialize in the query",
    "interceptor.classes": "interceptors could change records behind the query's back",
    "transactional.id": (
        "the exactly-once sink gives each task its own transactional id; set the sink option "
        "transactional.id.prefix to choose their prefix"
    ),
}


def _security_refusal(key: str, value: str) -> str | None:
    if is_security_setting(key):
        return None
    if key.startswith(("ssl.", "sasl.")) or key == "security.providers":
        return (
            "the onceflow client takes security.protocol, sasl.mechanism, sasl.username and "
            "sasl.password (or sasl.jaas.config), ssl.truststore.location or ssl.ca.location, "
            "ssl.certificate.location, ssl.key.location and ssl.key.password, all PEM (no Kerberos, "
            "no JKS stores)"
        )
    return None


def security_settings(settings: Mapping[str, str], side: str) -> dict[str, str]:
    """The security settings among ``settings`` (Kafka's or librdkafka's names), checked now and given
    under librdkafka's names (what the onceflow producer and consumer take); {} for none. Raises
    ValueError naming what is wrong."""
    given = {key: value for key, value in settings.items() if is_security_setting(key)}
    try:
        security = ClientSecurity.from_config(given)
    except InvalidConfig as exc:
        raise ValueError(f"the onceflow {side}'s kafka.* security options: {exc}") from None
    return security.as_settings() if security is not None else {}


def kafka_settings(
    options: Mapping[str, str],
    *,
    side: str,
    used: frozenset[str],
    ignored_note: str,
    warn: bool = True,
) -> dict[str, str]:
    """The ``kafka.*`` options (keys lower case, as Spark hands them over) as Kafka settings, without
    the prefix. Raises ValueError for one refused or unknown; warns about known ones not in ``used``.
    ``side`` is "source" or "sink"."""
    known = CONSUMER_CONFIGS if side == "source" else PRODUCER_CONFIGS
    refused = _SOURCE_REFUSED if side == "source" else _SINK_REFUSED
    settings: dict[str, str] = {}
    unused: list[str] = []
    for option, value in options.items():
        if not option.startswith("kafka."):
            continue
        key = option[len("kafka.") :]
        why = refused.get(key) or _security_refusal(key, value)
        if why is not None:
            raise ValueError(f"option {option} is not supported by the onceflow {side}: {why}")
        if key not in known and not key.startswith(("ssl.", "sasl.")):
            close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.8)
            hint = f"; did you mean kafka.{close[0]}?" if close else ""
            what = "consumer" if side == "source" else "producer"
            raise ValueError(f"option {option}: {key!r} is not a Kafka {what} setting{hint}")
        if key not in used:
            unused.append(option)
        settings[key] = value
    if unused and warn:
        log.warning(
            "the onceflow %s does not use the option(s) %s (%s)",
            side,
            ", ".join(sorted(unused)),
            ignored_note,
        )
    return settings
