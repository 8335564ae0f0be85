"""The onceflow sink's options and the columns it takes, checked when a write is defined.

Names as in Spark's Kafka sink (``kafka.bootstrap.servers``, ``topic``, ``kafka.*`` producer settings)
plus onceflow's ``guarantee`` and ``transactional.id.prefix``. The producer settings are built into a
producer config on the driver, so a bad one is refused there, by Kafka's name, instead of failing every
task. The input's columns follow Spark's Kafka sink: ``value`` (string or binary) required; ``key``
(string or binary), ``topic`` (string; required unless the ``topic`` option is set, which overrides
it), ``partition`` (int) and ``headers`` (array of key/value structs) optional; other columns are
ignored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from onceflow.client.producer.config import ProducerConfig
from onceflow.protocol.errors import InvalidConfig
from onceflow.spark.kafka_params import SECURITY_CONFIGS, kafka_settings, security_settings
from onceflow.spark.option_values import OptionReader, boolean

__all__ = [
    "AT_LEAST_ONCE",
    "EXACTLY_ONCE",
    "EXACTLY_ONCE_ATOMIC",
    "GUARANTEES",
    "SINK_OPTIONS",
    "SINK_PRODUCER_DEFAULTS",
    "SinkOptions",
    "check_sink_schema",
    "parse_sink_options",
    "producer_settings",
]

AT_LEAST_ONCE = "at-least-once"
EXACTLY_ONCE = "exactly-once"
# KIP-939: every task prepares its transaction and the driver commits the batch's transactions
# together, so that a read_committed reader sees a micro-batch whole or not at all.
EXACTLY_ONCE_ATOMIC = "exactly-once-atomic"
GUARANTEES = (EXACTLY_ONCE, EXACTLY_ONCE_ATOMIC, AT_LEAST_ONCE)

# The sink's producers batch more than Kafka's defaults (batch.size 16384): a task writes a whole
# partition of a micro-batch at once, and larger batches measured ~1.45x faster here. A
# ``kafka.batch.size`` / ``kafka.linger.ms`` option overrides them.
SINK_PRODUCER_DEFAULTS = {"batch.size": "262144", "linger.ms": "5"}

SINK_OPTIONS = {
    name.lower(): name
    for name in (
        "topic",
        "includeHeaders",  # as in Spark's sink: a headers column is written whenever there is one
        "guarantee",
        "transactional.id.prefix",
        # Set by Spark itself for streaming writes.
        "checkpointLocation",
        "queryName",
    )
}

_PRODUCER_SETTINGS = frozenset(f.name.replace("_", ".") for f in dataclasses.fields(ProducerConfig))
# Set by the sink itself, per task.
_SET_BY_SINK = frozenset({"bootstrap.servers", "client.id", "transactional.id"})


@dataclass(frozen=True, slots=True)
class SinkOptions:
    bootstrap: str
    topic: str | None = None  # None: every row names its topic in a ``topic`` column
    guarantee: str = EXACTLY_ONCE
    transactional_id_prefix: str | None = None  # None: derived from the streaming query's id
    client_id: str = "onceflow-spark-sink"
    extra: dict[str, str] = field(default_factory=dict)
    checkpoint_location: str | None = None  # Spark's, for streaming writes

    @property
    def transactional(self) -> bool:
        return self.guarantee in (EXACTLY_ONCE, EXACTLY_ONCE_ATOMIC)


def producer_settings(extra: Mapping[str, str], skip: frozenset[str] | set[str] = frozenset()) -> dict:
    """The ``kafka.``-prefixed sink options as producer settings, without those in ``skip`` (the
    producer config parses Kafka's string values itself)."""
    return {key: value for key, value in extra.items() if key not in skip}


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate the options of a write; raises ValueError naming the bad option and what it accepts."""
    opts = OptionReader(options, SINK_OPTIONS, what="the onceflow sink")
    bootstrap = (opts.take("kafka.bootstrap.servers") or "").strip()
    if not bootstrap:
        raise ValueError('option "kafka.bootstrap.servers" is required, e.g. 127.0.0.1:9092')
    guarantee = opts.take("guarantee", EXACTLY_ONCE).strip().lower()
    if guarantee not in GUARANTEES:
        raise ValueError(
            f"option guarantee={guarantee!r}: use {EXACTLY_ONCE!r}, {EXACTLY_ONCE_ATOMIC!r} or {AT_LEAST_ONCE!r}"
        )
    topic = opts.take("topic")
    topic = topic.strip() if topic is not None else None
    if topic == "":
        raise ValueError(
            'option topic is empty: name a topic, or leave the option out to use a "topic" column'
        )
    boolean(opts, "includeheaders", False)
    checkpoint_location = opts.take("checkpointlocation")
    opts.take("queryname")
    prefix = opts.take("transactional.id.prefix")
    settings = kafka_settings(
        opts.kafka_options(),
        side="sink",
        used=_PRODUCER_SETTINGS | SECURITY_CONFIGS,
        ignored_note="the onceflow producer has no such setting",
    )
    # Only what the producer takes: the other Kafka settings were named in a warning.
    extra = {
        **SINK_PRODUCER_DEFAULTS,
        **{k: v for k, v in settings.items() if k in _PRODUCER_SETTINGS and k not in SECURITY_CONFIGS},
        **security_settings(settings, "sink"),  # under the names the producer takes
    }
    extra.pop("bootstrap.servers", None)
    _check_producer_settings(extra, guarantee)
    opts.refuse_unknown()
    return SinkOptions(
        bootstrap=bootstrap,
        topic=topic,
        guarantee=guarantee,
        transactional_id_prefix=prefix.strip() or None if prefix is not None else None,
        client_id=extra.get("client.id", "onceflow-spark-sink"),
        extra=extra,
        checkpoint_location=checkpoint_location,
    )


def _check_producer_settings(extra: Mapping[str, str], guarantee: str) -> None:
    """Build the producer config a task will build, so that a bad setting is refused now."""
    settings = producer_settings(extra, _SET_BY_SINK)
    if guarantee in (EXACTLY_ONCE, EXACTLY_ONCE_ATOMIC):
        settings["transactional.id"] = "onceflow-sink-check"
    if guarantee == EXACTLY_ONCE_ATOMIC:
        settings["transaction.two.phase.commit.enable"] = True
    try:
        ProducerConfig.from_mapping(settings)
    except InvalidConfig as exc:
        raise ValueError(
            f"the sink's kafka.* options do not make a valid producer ({guarantee}): {exc}"
        ) from None


_HEADERS_TYPE = "array<struct<key:string,value:binary>>"


def check_sink_schema(schema, topic_option: str | None) -> None:
    """Spark's Kafka sink's rules for the input's columns (``schema`` is a Spark StructType);
    raises ValueError naming the column and the types it takes."""
    types = {f.name.lower(): f.dataType.simpleString() for f in schema.fields}
    if "value" not in types:
        raise ValueError(
            'the sink needs a "value" column (string or binary); name one with .alias("value") '
            f"(columns: {', '.join(f.name for f in schema.fields)})"
        )
    rules = {"value": ("string", "binary"), "key": ("string", "binary"), "partition": ("int",)}
    rules["headers"] = (_HEADERS_TYPE,)
    if topic_option is None:
        rules["topic"] = ("string",)
        if "topic" not in types:
            raise ValueError(
                'say where to write: set the option "topic", or give the rows a "topic" column (string)'
            )
    for column, accepted in rules.items():
        if column in types and types[column] not in accepted:
            raise ValueError(
                f'the sink\'s "{column}" column is {types[column]}; it must be {" or ".join(accepted)}'
            )
