"""The onceflow source's options, parsed once on the driver into a frozen, picklable value.

Option names are those of Spark's Kafka source (``kafka.bootstrap.servers``, ``subscribe``,
``subscribePattern``, ``assign``, ``startingOffsets``, ``endingOffsets``, ``startingTimestamp``,
``startingOffsetsByTimestamp``, ``endingTimestamp``, ``endingOffsetsByTimestamp``,
``startingOffsetsByTimestampStrategy``, ``maxOffsetsPerTrigger``, ``minPartitions``,
``failOnDataLoss``) so that a query written for Spark's Kafka connector runs here by changing only
the format name. Options of Spark's that the source does not honour are named in a warning, not
silently dropped.
One difference: ``isolation.level`` defaults to ``read_committed``, because a pipeline that promises
exactly-once output must not read the records of aborted transactions.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from onceflow.client.security import ClientSecurity
from onceflow.client.simple import isolation_level_for_name

log = logging.getLogger(__name__)

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetSpec",
    "TIMESTAMP_STRATEGY_ERROR",
    "TIMESTAMP_STRATEGY_LATEST",
    "TimestampSpec",
    "AT_LEAST_ONCE",
    "EXACTLY_ONCE",
    "SinkOptions",
    "SourceOptions",
    "parse_sink_options",
    "parse_offset_spec",
    "parse_source_options",
    "producer_settings",
]

# In the JSON form of startingOffsets / endingOffsets, as in Spark's Kafka source.
EARLIEST = -2
LATEST = -1

# A spec is "earliest", "latest", or {topic: {partition: offset or EARLIEST/LATEST}}.
OffsetSpec = str | dict[str, dict[int, int]]
# Timestamps (ms since the epoch) to start or end at: one for every partition (startingTimestamp), or
# {topic: {partition: timestamp}} (startingOffsetsByTimestamp).
TimestampSpec = int | dict[str, dict[int, int]]

# What to do for a partition with no record at or after its starting timestamp (Spark's
# startingOffsetsByTimestampStrategy): fail the query, or start at the partition's latest offset.
TIMESTAMP_STRATEGY_ERROR = "error"
TIMESTAMP_STRATEGY_LATEST = "latest"

# Spark's Kafka source options this source reads (lower case; kafka.* are all taken as client settings).
_SOURCE_OPTIONS = frozenset(
    {
        "subscribe",
        "subscribepattern",
        "assign",
        "startingoffsets",
        "endingoffsets",
        "startingtimestamp",
        "startingoffsetsbytimestamp",
        "endingtimestamp",
        "endingoffsetsbytimestamp",
        "startingoffsetsbytimestampstrategy",
        "maxoffsetspertrigger",
        "minpartitions",
        "failondataloss",
        "isolation.level",
        "includeheaders",  # the headers column is always there
    }
)


@dataclass(frozen=True, slots=True)
class SourceOptions:
    bootstrap: str
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    starting_offsets: OffsetSpec = "latest"
    ending_offsets: OffsetSpec = "latest"
    max_offsets_per_trigger: int | None = None
    # Starting/ending timestamps; when set, they take precedence over starting/ending_offsets.
    starting_timestamps: TimestampSpec | None = None
    ending_timestamps: TimestampSpec | None = None
    timestamp_strategy: str = TIMESTAMP_STRATEGY_ERROR
    # Split a batch's offset ranges into at least this many Spark partitions (None: one per partition).
    min_partitions: int | None = None
    isolation_level: int = 1  # read_committed
    # Records planned for a batch but deleted before it read them (retention, DeleteRecords): fail the
    # query (Spark's default) or, when False, skip to the log start with a warning.
    fail_on_data_loss: bool = True
    client_id: str = "onceflow-spark"
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def security(self) -> ClientSecurity | None:
        """TLS / SASL from the ``kafka.security.protocol``, ``kafka.sasl.*``, ``kafka.ssl.*`` options."""
        return ClientSecurity.from_config(self.extra)

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` belongs to the subscription (assign is handled by the caller)."""
        if self.subscribe_pattern is not None:
            return re.fullmatch(self.subscribe_pattern, topic) is not None
        return topic in self.subscribe


def _lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    # Spark hands Python data sources a case-insensitive dict; be as lenient with plain dicts.
    return {str(k).lower(): str(v) for k, v in options.items()}


def parse_offset_spec(text: str, option: str) -> OffsetSpec:
    """``earliest``, ``latest`` or Spark's JSON ``{"topic": {"0": 23, "1": -2}}``."""
    stripped = text.strip()
    if stripped.lower() in ("earliest", "latest"):
        return stripped.lower()
    try:
        parsed = json.loads(stripped)
        return {
            str(topic): {int(p): int(offset) for p, offset in partitions.items()}
            for topic, partitions in parsed.items()
        }
    except (ValueError, AttributeError, TypeError):
        raise ValueError(
            f'option {option}={text!r} is not earliest, latest or JSON like {{"topic": {{"0": 23}}}}'
        )


def _parse_timestamp(text: str, option: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"option {option}={text!r} must be a timestamp in milliseconds since the epoch")
    return value


def _parse_timestamp_json(text: str, option: str) -> dict[str, dict[int, int]]:
    try:
        parsed = json.loads(text)
        spec = {
            str(topic): {int(p): int(ts) for p, ts in partitions.items()}
            for topic, partitions in parsed.items()
        }
    except (ValueError, AttributeError, TypeError):
        spec = None
    if not spec or any(ts < 0 for parts in spec.values() for ts in parts.values()):
        raise ValueError(
            f'option {option}={text!r} is not JSON like {{"topic": {{"0": 1700000000000}}}} '
            "(timestamps in milliseconds since the epoch)"
        )
    return spec


def _timestamps(opts: Mapping[str, str], which: str) -> TimestampSpec | None:
    """``startingTimestamp`` / ``startingOffsetsByTimestamp`` (or the ending pair); the global one
    takes precedence, as in Spark."""
    if f"{which}timestamp" in opts:
        return _parse_timestamp(opts[f"{which}timestamp"], f"{which}Timestamp")
    if f"{which}offsetsbytimestamp" in opts:
        return _parse_timestamp_json(opts[f"{which}offsetsbytimestamp"], f"{which}OffsetsByTimestamp")
    return None


def _positive_int(opts: Mapping[str, str], name: str, option: str) -> int | None:
    if name not in opts:
        return None
    try:
        value = int(opts[name])
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"option {option}={opts[name]!r} must be a positive integer")
    return value


def _parse_assign(text: str) -> dict[str, tuple[int, ...]]:
    try:
        parsed = json.loads(text)
        return {str(t): tuple(int(p) for p in parts) for t, parts in parsed.items()}
    except (ValueError, AttributeError, TypeError):
        raise ValueError(f'option assign={text!r} is not JSON like {{"topicA": [0, 1]}}')


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate the options of a read; raises ValueError naming the bad option and a fix."""
    opts = _lower_keys(options)
    bootstrap = opts.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise ValueError('option "kafka.bootstrap.servers" is required, e.g. 127.0.0.1:9092')
    chosen = [name for name in ("subscribe", "subscribepattern", "assign") if opts.get(name)]
    if len(chosen) != 1:
        raise ValueError('give exactly one of the options "subscribe", "subscribePattern" or "assign"')
    subscribe = tuple(t.strip() for t in opts.get("subscribe", "").split(",") if t.strip())
    pattern = opts.get("subscribepattern")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"option subscribePattern={pattern!r} is not a valid regex: {exc}")
    assign = _parse_assign(opts["assign"]) if "assign" in opts else None

    # Spark's Kafka source: streams start at latest, batch reads at earliest; both end at latest.
    starting = parse_offset_spec(
        opts.get("startingoffsets", "latest" if streaming else "earliest"), "startingOffsets"
    )
    ending = parse_offset_spec(opts.get("endingoffsets", "latest"), "endingOffsets")
    if streaming and "endingoffsets" in opts:
        raise ValueError('option "endingOffsets" is for batch reads only (spark.read)')
    if not streaming and starting == "latest":
        raise ValueError('startingOffsets="latest" is for streaming reads; batch reads start earlier')
    if ending == "earliest":
        raise ValueError('endingOffsets="earliest" would read nothing; use "latest" or JSON offsets')
    starting_timestamps = _timestamps(opts, "starting")
    ending_timestamps = _timestamps(opts, "ending")
    if streaming and ending_timestamps is not None:
        raise ValueError('options "endingTimestamp" and "endingOffsetsByTimestamp" are for batch reads only')
    strategy = opts.get("startingoffsetsbytimestampstrategy", TIMESTAMP_STRATEGY_ERROR).strip().lower()
    if strategy not in (TIMESTAMP_STRATEGY_ERROR, TIMESTAMP_STRATEGY_LATEST):
        raise ValueError(
            f"option startingOffsetsByTimestampStrategy={strategy!r}: use "
            f"{TIMESTAMP_STRATEGY_ERROR!r} or {TIMESTAMP_STRATEGY_LATEST!r}"
        )
    unused = sorted(k for k in opts if k not in _SOURCE_OPTIONS and not k.startswith("kafka."))
    if unused:
        log.warning("the onceflow source does not use the option(s) %s", ", ".join(unused))

    fail_on_data_loss = opts.get("failondataloss", "true").strip().lower()
    if fail_on_data_loss not in ("true", "false"):
        raise ValueError(f"option failOnDataLoss={opts['failondataloss']!r} must be true or false")

    extra = {k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.")}
    extra.pop("bootstrap.servers", None)
    return SourceOptions(
        bootstrap=bootstrap,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting_offsets=starting,
        ending_offsets=ending,
        max_offsets_per_trigger=_positive_int(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger"),
        starting_timestamps=starting_timestamps,
        ending_timestamps=ending_timestamps,
        timestamp_strategy=strategy,
        min_partitions=_positive_int(opts, "minpartitions", "minPartitions"),
        isolation_level=isolation_level_for_name(
            opts.get("isolation.level", opts.get("kafka.isolation.level", "read_committed"))
        ),
        fail_on_data_loss=fail_on_data_loss == "true",
        client_id=extra.get("client.id", "onceflow-spark"),
        extra=extra,
    )


# The sink's producers batch more than Kafka's defaults (batch.size 16384): a task writes a whole
# partition of a micro-batch at once, and larger batches measured ~1.45x faster here. A
# ``kafka.batch.size`` / ``kafka.linger.ms`` option overrides them.
SINK_PRODUCER_DEFAULTS = {"batch.size": "262144", "linger.ms": "5"}

AT_LEAST_ONCE = "at-least-once"
EXACTLY_ONCE = "exactly-once"


@dataclass(frozen=True, slots=True)
class SinkOptions:
    bootstrap: str
    topic: str | None = None  # None: every row names its topic in a ``topic`` column
    guarantee: str = EXACTLY_ONCE
    transactional_id_prefix: str | None = None  # None: derived from the streaming query's id
    client_id: str = "onceflow-spark-sink"
    extra: dict[str, str] = field(default_factory=dict)


def producer_settings(extra: Mapping[str, str], skip: frozenset[str] | set[str] = frozenset()) -> dict:
    """The ``kafka.``-prefixed sink options as producer settings; Spark hands every option over as a
    string, so integers and booleans are converted back."""
    settings: dict[str, object] = {}
    for key, value in extra.items():
        if key in skip:
            continue
        text = value.strip()
        if text.lstrip("-").isdigit():
            settings[key] = int(text)
        elif text.lower() in ("true", "false"):
            settings[key] = text.lower() == "true"
        else:
            settings[key] = value
    return settings


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate the options of a write; raises ValueError naming the bad option and a fix."""
    opts = _lower_keys(options)
    bootstrap = opts.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise ValueError('option "kafka.bootstrap.servers" is required, e.g. 127.0.0.1:9092')
    guarantee = opts.get("guarantee", EXACTLY_ONCE).strip().lower()
    if guarantee not in (EXACTLY_ONCE, AT_LEAST_ONCE):
        raise ValueError(f"option guarantee={guarantee!r}: use {EXACTLY_ONCE!r} or {AT_LEAST_ONCE!r}")
    extra = {
        **SINK_PRODUCER_DEFAULTS,
        **{k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.")},
    }
    extra.pop("bootstrap.servers", None)
    return SinkOptions(
        bootstrap=bootstrap,
        topic=opts.get("topic") or None,
        guarantee=guarantee,
        transactional_id_prefix=opts.get("transactional.id.prefix") or None,
        client_id=extra.get("client.id", "onceflow-spark-sink"),
        extra=extra,
    )
