"""The onceflow source's options, parsed once on the driver into a frozen, picklable value.

Option names and meanings are those of Spark's Kafka source (``docs/spark.md`` has the table), so
that a query written for Spark's Kafka connector runs here by changing only the format name. Every
option is judged when the query is defined (``load()``): a bad value is refused naming the option and
what it accepts, and an option the source does not know is refused too, with the nearest known one
suggested (Spark would ignore it, and a misspelt ``startingOffsets`` silently moves where a query
starts). Spark hands a data source its options with lower-case names; messages spell them as Spark's
guide does.

One difference: ``kafka.isolation.level`` (or ``isolation.level``) defaults to ``read_committed``,
because a pipeline that promises exactly-once output must not read the records of aborted
transactions.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from onceflow.client.security import ClientSecurity
from onceflow.client.simple import isolation_level_for_name
from onceflow.spark.kafka_params import SECURITY_CONFIGS, kafka_settings, security_settings
from onceflow.spark.option_values import OptionReader, boolean, positive_int, time_ms

log = logging.getLogger(__name__)

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetSpec",
    "SOURCE_OPTIONS",
    "TIMESTAMP_STRATEGY_ERROR",
    "TIMESTAMP_STRATEGY_LATEST",
    "TimestampSpec",
    "SourceOptions",
    "parse_offset_spec",
    "parse_source_options",
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

# Spark's defaults (KafkaSourceProvider / KafkaOffsetReaderAdmin / KafkaMicroBatchStream).
DEFAULT_POLL_TIMEOUT_MS = 120_000
DEFAULT_FETCH_OFFSET_RETRIES = 3
DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS = 1000
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000

# The source's options, as Spark's guide spells them (Spark hands them over in lower case).
SOURCE_OPTIONS = {
    name.lower(): name
    for name in (
        "assign",
        "subscribe",
        "subscribePattern",
        "startingOffsets",
        "endingOffsets",
        "startingTimestamp",
        "startingOffsetsByTimestamp",
        "endingTimestamp",
        "endingOffsetsByTimestamp",
        "startingOffsetsByTimestampStrategy",
        "failOnDataLoss",
        "kafkaConsumer.pollTimeoutMs",
        "fetchOffset.numRetries",
        "fetchOffset.retryIntervalMs",
        "maxOffsetsPerTrigger",
        "minOffsetsPerTrigger",
        "maxTriggerDelay",
        "minPartitions",
        "maxRecordsPerPartition",
        "groupIdPrefix",
        "includeHeaders",
        "isolation.level",  # onceflow's short form of kafka.isolation.level
    )
}

# The kafka.* settings the source uses; other Kafka consumer settings are named in a warning.
_USED_CONSUMER_SETTINGS = (
    frozenset(
        {
            "bootstrap.servers",
            "client.id",
            "isolation.level",
            "max.partition.fetch.bytes",
            "request.timeout.ms",
            "group.id",  # warned about on its own below
        }
    )
    | SECURITY_CONFIGS
)
_STREAM_ONLY = ("maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay")


@dataclass(frozen=True, slots=True)
class SourceOptions:
    bootstrap: str
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    starting_offsets: OffsetSpec = "latest"
    ending_offsets: OffsetSpec = "latest"
    max_offsets_per_trigger: int | None = None
    # minOffsetsPerTrigger: a stream holds a batch back while fewer offsets wait, for at most
    # maxTriggerDelay since the last batch.
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    # Starting/ending timestamps; when set, they take precedence over starting/ending_offsets.
    starting_timestamps: TimestampSpec | None = None
    ending_timestamps: TimestampSpec | None = None
    timestamp_strategy: str = TIMESTAMP_STRATEGY_ERROR
    # Split a batch's offset ranges into at least this many Spark partitions (None: one per partition),
    # and none of more than max_records_per_partition offsets.
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    isolation_level: int = 1  # read_committed
    # Records planned for a batch but gone (retention, DeleteRecords, a start beyond the log end, a
    # partition deleted): fail the query (Spark's default) or, when False, go on after a warning.
    fail_on_data_loss: bool = True
    include_headers: bool = False
    # How long a task waits for records that are planned but do not arrive (kafkaConsumer.pollTimeoutMs).
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    # How often, and how far apart, a partition whose end offset went back is asked again before
    # that counts as data loss (fetchOffset.numRetries / fetchOffset.retryIntervalMs).
    fetch_offset_retries: int = DEFAULT_FETCH_OFFSET_RETRIES
    fetch_offset_retry_interval_ms: int = DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS
    client_id: str = "onceflow-spark"
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def security(self) -> ClientSecurity | None:
        """TLS / SASL from the ``kafka.security.protocol``, ``kafka.sasl.*``, ``kafka.ssl.*`` options."""
        return ClientSecurity.from_config(self.extra)

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` belongs to the subscription (assign is handled by the caller). A pattern
        matches anywhere in the name, as Spark 4's Kafka source finds it (a search, not a whole-name
        match)."""
        if self.subscribe_pattern is not None:
            return re.search(self.subscribe_pattern, topic) is not None
        return topic in self.subscribe

    @property
    def request_timeout_s(self) -> float:
        return int(self.extra.get("request.timeout.ms", 30000)) / 1000


_JSON_EXAMPLE = '{"topicA": {"0": 23, "1": -2}, "topicB": {"0": -1}}'


def parse_offset_spec(text: str, option: str) -> OffsetSpec:
    """``earliest``, ``latest`` or Spark's JSON ``{"topic": {"0": 23, "1": -2}}`` (-2: earliest,
    -1: latest)."""
    stripped = text.strip()
    if stripped.lower() in ("earliest", "latest"):
        return stripped.lower()
    try:
        parsed = json.loads(stripped)
        spec = {
            str(topic): {int(p): int(offset) for p, offset in partitions.items()}
            for topic, partitions in parsed.items()
        }
    except (ValueError, AttributeError, TypeError):
        raise ValueError(f"option {option}={text!r} is not earliest, latest or JSON like {_JSON_EXAMPLE}")
    for topic, partitions in spec.items():
        for partition, offset in partitions.items():
            if offset < EARLIEST:
                raise ValueError(
                    f"option {option}: offset {offset} for {topic}-{partition}: use -2 (earliest), "
                    "-1 (latest) or an offset >= 0"
                )
    if not spec:
        raise ValueError(f"option {option}={text!r} names no partition; use JSON like {_JSON_EXAMPLE}")
    return spec


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


def _timestamps(opts: OptionReader, which: str) -> TimestampSpec | None:
    """``startingTimestamp`` / ``startingOffsetsByTimestamp`` (or the ending pair); the global one
    takes precedence, as in Spark."""
    if f"{which}timestamp" in opts:
        return _parse_timestamp(opts.take(f"{which}timestamp"), f"{which}Timestamp")
    if f"{which}offsetsbytimestamp" in opts:
        return _parse_timestamp_json(opts.take(f"{which}offsetsbytimestamp"), f"{which}OffsetsByTimestamp")
    return None


def _parse_assign(text: str) -> dict[str, tuple[int, ...]]:
    try:
        parsed = json.loads(text)
        assign = {str(t): tuple(int(p) for p in parts) for t, parts in parsed.items()}
    except (ValueError, AttributeError, TypeError):
        assign = None
    if not assign or not all(assign.values()):
        raise ValueError(f'option assign={text!r} is not JSON like {{"topicA": [0, 1], "topicB": [2, 4]}}')
    return assign


def _subscription(opts: OptionReader) -> tuple[tuple[str, ...], str | None, dict | None]:
    chosen = [name for name in ("assign", "subscribe", "subscribepattern") if name in opts]
    if len(chosen) != 1:
        raise ValueError(
            'give exactly one of the options "assign", "subscribe" or "subscribePattern" '
            f"(given: {', '.join(SOURCE_OPTIONS[c] for c in chosen) or 'none'})"
        )
    subscribe: tuple[str, ...] = ()
    pattern = None
    assign = None
    if "subscribe" in opts:
        text = opts.take("subscribe")
        subscribe = tuple(t.strip() for t in text.split(",") if t.strip())
        if not subscribe:
            raise ValueError(f"option subscribe={text!r} names no topic: give a comma-separated list")
    elif "subscribepattern" in opts:
        pattern = opts.take("subscribepattern").strip()
        if not pattern:
            raise ValueError("option subscribePattern is empty: give a regular expression for topic names")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"option subscribePattern={pattern!r} is not a valid regex: {exc}")
    else:
        assign = _parse_assign(opts.take("assign"))
    return subscribe, pattern, assign


def _check_offset_bounds(starting: OffsetSpec, ending: OffsetSpec, streaming: bool) -> None:
    """Spark's rules for the offsets specs of a batch read (a stream has no end)."""
    if streaming:
        return
    if starting == "latest":
        raise ValueError('startingOffsets="latest" is for streaming reads; batch reads start earlier')
    if ending == "earliest":
        raise ValueError('endingOffsets="earliest" would read nothing; use "latest" or JSON offsets')
    if isinstance(starting, dict):
        for topic, parts in starting.items():
            for p, offset in parts.items():
                if offset == LATEST:
                    raise ValueError(f"startingOffsets for {topic}-{p} can't be latest (-1) in a batch read")
    if isinstance(ending, dict):
        for topic, parts in ending.items():
            for p, offset in parts.items():
                if offset == EARLIEST:
                    raise ValueError(f"endingOffsets for {topic}-{p} can't be earliest (-2)")
    if isinstance(starting, dict) and isinstance(ending, dict):
        start_tps = {(t, p) for t, parts in starting.items() for p in parts}
        end_tps = {(t, p) for t, parts in ending.items() for p in parts}
        if start_tps != end_tps:
            raise ValueError(
                "startingOffsets and endingOffsets must name the same partitions "
                f"(only in one of them: {_names(start_tps ^ end_tps)})"
            )
        for topic, partition in sorted(start_tps):
            begin, end = starting[topic][partition], ending[topic][partition]
            if begin >= 0 and end >= 0 and begin > end:
                raise ValueError(
                    f"startingOffsets for {topic}-{partition} ({begin}) is after its endingOffsets ({end})"
                )


def _names(tps) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps))


def parse_source_options(options: Mapping[str, str], *, streaming: bool, warn: bool = True) -> SourceOptions:
    """Validate the options of a read; raises ValueError naming the bad option and what it accepts.
    Options that have no effect are named in warnings (unless ``warn`` is False)."""
    opts = OptionReader(options, SOURCE_OPTIONS, what="the onceflow source")
    bootstrap = opts.take("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise ValueError('option "kafka.bootstrap.servers" is required, e.g. 127.0.0.1:9092')
    subscribe, pattern, assign = _subscription(opts)

    # Spark's Kafka source: streams start at latest, batch reads at earliest; both end at latest.
    if streaming:
        for name in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
            if name in opts:
                raise ValueError(f"option {SOURCE_OPTIONS[name]} is for batch reads only (spark.read)")
    starting = parse_offset_spec(
        opts.take("startingoffsets", "latest" if streaming else "earliest"), "startingOffsets"
    )
    ending = parse_offset_spec(opts.take("endingoffsets", "latest"), "endingOffsets")
    starting_timestamps = _timestamps(opts, "starting")
    ending_timestamps = _timestamps(opts, "ending")
    if starting_timestamps is None and ending_timestamps is None:
        _check_offset_bounds(starting, ending, streaming)
    elif not streaming and starting == "latest" and starting_timestamps is None:
        raise ValueError('startingOffsets="latest" is for streaming reads; batch reads start earlier')
    strategy = opts.take("startingoffsetsbytimestampstrategy", TIMESTAMP_STRATEGY_ERROR).strip().lower()
    if strategy not in (TIMESTAMP_STRATEGY_ERROR, TIMESTAMP_STRATEGY_LATEST):
        raise ValueError(
            f"option startingOffsetsByTimestampStrategy={strategy!r}: use "
            f"{TIMESTAMP_STRATEGY_ERROR!r} or {TIMESTAMP_STRATEGY_LATEST!r}"
        )

    max_offsets = positive_int(opts, "maxoffsetspertrigger")
    min_offsets = positive_int(opts, "minoffsetspertrigger")
    max_delay = time_ms(opts, "maxtriggerdelay", DEFAULT_MAX_TRIGGER_DELAY_MS)
    if min_offsets is not None and max_offsets is not None and min_offsets > max_offsets:
        raise ValueError(
            f"option minOffsetsPerTrigger ({min_offsets}) is higher than maxOffsetsPerTrigger ({max_offsets})"
        )
    if not streaming:
        ignored = [SOURCE_OPTIONS[name] for name in _STREAM_ONLY if name in opts]
        if ignored and warn:
            log.warning("option(s) %s ignored in batch reads (as in Spark)", ", ".join(ignored))

    for name in ("groupidprefix", "kafka.group.id"):
        if name in opts and warn:
            log.warning(
                "option %s has no effect: the onceflow source joins no consumer group", opts.spelled(name)
            )
    opts.take("groupidprefix")
    extra = kafka_settings(
        opts.kafka_options(),
        side="source",
        used=_USED_CONSUMER_SETTINGS,
        ignored_note="the source reads by partition and offset with its own fetch settings",
        warn=warn,
    )
    extra.pop("bootstrap.servers", None)
    security_settings(extra, "source")  # checked now; SourceOptions.security reads them
    for name in ("max.partition.fetch.bytes", "request.timeout.ms"):
        if name in extra:
            positive_int({name: extra[name]}, name, f"kafka.{name}")
    isolation_text = opts.take("isolation.level", extra.get("isolation.level", "read_committed"))
    try:
        isolation_level = isolation_level_for_name(isolation_text)
    except ValueError:
        raise ValueError(
            f"option kafka.isolation.level={isolation_text!r}: use 'read_committed' or 'read_uncommitted'"
        ) from None

    parsed = SourceOptions(
        bootstrap=bootstrap,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting_offsets=starting,
        ending_offsets=ending,
        max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=max_delay,
        starting_timestamps=starting_timestamps,
        ending_timestamps=ending_timestamps,
        timestamp_strategy=strategy,
        min_partitions=positive_int(opts, "minpartitions"),
        max_records_per_partition=positive_int(opts, "maxrecordsperpartition"),
        isolation_level=isolation_level,
        fail_on_data_loss=boolean(opts, "failondataloss", True),
        include_headers=boolean(opts, "includeheaders", False),
        poll_timeout_ms=positive_int(opts, "kafkaconsumer.polltimeoutms") or DEFAULT_POLL_TIMEOUT_MS,
        fetch_offset_retries=positive_int(opts, "fetchoffset.numretries") or DEFAULT_FETCH_OFFSET_RETRIES,
        fetch_offset_retry_interval_ms=time_ms(
            opts, "fetchoffset.retryintervalms", DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS
        ),
        client_id=extra.get("client.id", "onceflow-spark"),
        extra=extra,
    )
    opts.refuse_unknown()
    return parsed
