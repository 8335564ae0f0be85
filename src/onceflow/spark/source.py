"""The onceflow source: ``spark.readStream.format("onceflow")`` and ``spark.read.format("onceflow")``.

The driver side (offset planning) asks the cluster for partitions and offsets; the executor side
(``read``) fetches one topic-partition's offset range per input partition and yields Arrow batches.
Offsets live in Spark's checkpoint as ``{"topic": {"partition": next offset}}``. With
``read_committed`` (the default) a batch ends at the last stable offset, so an open transaction
holds a partition back until it is decided, as Kafka's read_committed consumers are held.

Data loss as Spark's Kafka source counts it fails the query (``failOnDataLoss``, default true) or,
with ``failOnDataLoss=false``, is logged and passed over: a start beyond a partition's end, a
partition that is gone, a partition whose end went back below what was read (asked again
``fetchOffset.numRetries`` times first), a new partition whose log no longer starts at 0, and records
deleted before a task read them (:mod:`onceflow.spark.range_reader`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from onceflow.spark.cluster import BlockingCluster
from onceflow.spark.offsets import (
    OffsetRange,
    PartitionOffsets,
    TopicPartition,
    limit_end,
    offsets_at_timestamps,
    offsets_from_json,
    offsets_to_json,
    plan_ranges,
    resolve_spec,
    split_ranges,
    timestamps_for,
)
from onceflow.spark.options import TIMESTAMP_STRATEGY_LATEST, SourceOptions
from onceflow.spark.range_reader import DataLoss, read_range

log = logging.getLogger(__name__)

__all__ = ["OnceflowBatchReader", "OnceflowStreamReader"]

_READ_COMMITTED = 1


def _partition_max_bytes(options: SourceOptions) -> int:
    return int(options.extra.get("max.partition.fetch.bytes", 1048576))


def _names(partitions) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(partitions))


class _ClusterHolder:
    """A driver-side connection that is opened on first use and never pickled (Spark ships readers
    to executors, and an event loop cannot travel)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._cluster: BlockingCluster | None = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_cluster"] = None
        return state

    def _connect(self) -> BlockingCluster:
        return BlockingCluster(
            self.options.bootstrap,
            client_id=self.options.client_id,
            request_timeout_s=self.options.request_timeout_s,
            security=self.options.security,
        )

    @property
    def cluster(self) -> BlockingCluster:
        if self._cluster is None:
            self._cluster = self._connect()
        return self._cluster

    def close_cluster(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def _data_loss(self, message: str) -> None:
        """Spark's reportDataLoss: fail the query, or with failOnDataLoss=false log and go on."""
        if self.options.fail_on_data_loss:
            raise DataLoss(
                f"{message}. Some data may have been lost. If the query should go on past such a "
                'loss, set the source option failOnDataLoss "false".'
            )
        log.warning("%s; going on (failOnDataLoss=false): some data may have been lost", message)

    def _within_ends(
        self, offsets: PartitionOffsets, ends: PartitionOffsets, option: str
    ) -> PartitionOffsets:
        """``offsets`` with each one beyond its partition's end reported as data loss and, when the query
        goes on (failOnDataLoss=false), moved to that end."""
        beyond = {tp: offset for tp, offset in offsets.items() if offset > ends[tp]}
        if not beyond:
            return offsets
        described = ", ".join(
            f"{t}-{p} is {o} (the end is {ends[(t, p)]})" for (t, p), o in sorted(beyond.items())
        )
        self._data_loss(f"{option} is beyond the partition's end: {described}")
        return {**offsets, **{tp: ends[tp] for tp in beyond}}

    def _bounds(
        self,
        partitions: list,
        earliest: PartitionOffsets,
        latest: PartitionOffsets,
        *,
        ending: bool,
    ) -> PartitionOffsets:
        """Where a read starts (or, ``ending``, ends): by timestamp when the options give one (they
        take precedence, as in Spark), else by the offsets spec."""
        options = self.options
        spec = options.ending_timestamps if ending else options.starting_timestamps
        which = "ending" if ending else "starting"
        if spec is not None:
            option = f"{which}Timestamp" if isinstance(spec, int) else f"{which}OffsetsByTimestamp"
            timestamps = timestamps_for(spec, partitions, option)
            found = self.cluster.offsets_for_times(timestamps, isolation_level=options.isolation_level)
            # Spark: an end with no record at or after its timestamp is the latest offset.
            strategy = TIMESTAMP_STRATEGY_LATEST if ending else options.timestamp_strategy
            return offsets_at_timestamps(found, timestamps, latest, strategy=strategy, option=option)
        if ending:
            return resolve_spec(options.ending_offsets, partitions, earliest, latest, option="endingOffsets")
        return resolve_spec(options.starting_offsets, partitions, earliest, latest, option="startingOffsets")

    def _input_partitions(self, start: PartitionOffsets, end: PartitionOffsets) -> list[InputPartition]:
        ranges = plan_ranges(start, end)
        ranges = split_ranges(ranges, self.options.min_partitions, self.options.max_records_per_partition)
        return [InputPartition(r) for r in ranges]

    def read(self, partition: InputPartition | None) -> Iterator:
        offset_range: OffsetRange | None = getattr(partition, "value", None)
        if offset_range is None:
            return  # nothing to read: with no partitions planned, PySpark still reads one, empty

        options = self.options
        with self._connect() as cluster:
            yield from read_range(
                cluster,
                offset_range,
                isolation_level=options.isolation_level,
                partition_max_bytes=_partition_max_bytes(options),
                fail_on_data_loss=options.fail_on_data_loss,
                include_headers=options.include_headers,
                poll_timeout_ms=options.poll_timeout_ms,
            )


class OnceflowStreamReader(_ClusterHolder, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        super().__init__(options)
        self._available_now_end: PartitionOffsets | None = None
        self._last_trigger = 0.0  # minOffsetsPerTrigger: when a batch was last let through

    def _latest(self) -> PartitionOffsets:
        partitions = self.cluster.subscribed_partitions(self.options)
        return self.cluster.latest(partitions, self.options.isolation_level)

    def initialOffset(self) -> dict:
        partitions = self.cluster.subscribed_partitions(self.options)
        earliest = self.cluster.earliest(partitions)
        latest = self.cluster.latest(partitions, self.options.isolation_level)
        start = self._bounds(partitions, earliest, latest, ending=False)
        # A stream may start inside an open transaction: beyond the stable offset, up to the log end.
        log_end = (
            latest if self.options.isolation_level != _READ_COMMITTED else self.cluster.latest(partitions, 0)
        )
        start = self._within_ends(start, log_end, "startingOffsets")
        log.info("onceflow source starts at %s", start)
        return offsets_to_json(start)

    def prepareForTriggerAvailableNow(self) -> None:
        # Fix the target now: data arriving later belongs to the next run.
        self._available_now_end = self._latest()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def _checked_latest(self, begin: PartitionOffsets) -> tuple[PartitionOffsets, set[TopicPartition]]:
        """The latest offsets, and the partitions of ``begin`` whose log end went below it. A partition
        that is gone or went back is asked again (fetchOffset.numRetries times, fetchOffset.retryIntervalMs
        apart: a restarting broker can answer so for a moment) before it counts as data loss."""
        attempts = 1 if self._available_now_end is not None else 1 + self.options.fetch_offset_retries
        for attempt in range(attempts):
            latest = self._available_now_end if self._available_now_end is not None else self._latest()
            gone = {tp for tp in begin if tp not in latest}
            low = {tp for tp, offset in begin.items() if tp in latest and latest[tp] < offset}
            if low and self.options.isolation_level == _READ_COMMITTED:
                # Below the stable offset may only mean an open transaction: compare with the log end.
                log_end = self.cluster.latest(sorted(low), 0)
                low = {tp for tp in low if log_end[tp] < begin[tp]}
            if not gone and not low:
                return latest, set()
            if attempt + 1 < attempts:
                time.sleep(self.options.fetch_offset_retry_interval_ms / 1000)
        if gone:
            self._data_loss(f"partitions {_names(gone)} are gone")
        if low:
            described = ", ".join(f"{t}-{p} from {begin[(t, p)]} to {latest[(t, p)]}" for t, p in sorted(low))
            self._data_loss(f"the end offset of a partition went back: {described}")
        return latest, low

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets_from_json(start)
        latest, went_back = self._checked_latest(begin)
        # A partition that went back starts again from its end (failOnDataLoss=false; else raised).
        begin = {tp: offset for tp, offset in begin.items() if tp in latest}
        begin.update({tp: latest[tp] for tp in went_back})
        new = [tp for tp in latest if tp not in begin]
        if new:
            first = self.cluster.earliest(new)
            late = {tp: offset for tp, offset in first.items() if offset != 0}
            if late:
                described = ", ".join(f"{t}-{p} starts at {o}" for (t, p), o in sorted(late.items()))
                self._data_loss(f"new partitions do not start at offset 0: {described}")
            begin.update(first)
        # Offsets never move back otherwise: a stable offset below the start means a transaction is open.
        latest = {tp: max(end, begin[tp]) for tp, end in latest.items()}
        if self._hold_back(begin, latest):
            return start
        if isinstance(limit, ReadMaxRows):
            latest = limit_end(begin, latest, limit.max_rows)
        return offsets_to_json(latest)

    def _hold_back(self, begin: PartitionOffsets, latest: PartitionOffsets) -> bool:
        """minOffsetsPerTrigger, as Spark's Kafka source: no batch while fewer offsets wait, unless
        maxTriggerDelay passed since the last batch (Trigger.AvailableNow reads what is there)."""
        minimum = self.options.min_offsets_per_trigger
        if minimum is None or self._available_now_end is not None:
            return False
        now = time.time()
        if (now - self._last_trigger) * 1000 >= self.options.max_trigger_delay_ms:
            self._last_trigger = now
            return False
        waiting = sum(max(0, end - begin[tp]) for tp, end in latest.items())
        if waiting < minimum:
            return True
        self._last_trigger = now
        return False

    def reportLatestOffset(self) -> dict | None:
        return offsets_to_json(self._latest())

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return self._input_partitions(offsets_from_json(start), offsets_from_json(end))

    def commit(self, end: dict) -> None:
        # Kafka keeps the data; nothing to release. Progress is in Spark's checkpoint.
        pass

    def stop(self) -> None:
        self.close_cluster()


class OnceflowBatchReader(_ClusterHolder, DataSourceReader):
    def partitions(self) -> list[InputPartition]:
        try:
            partitions = self.cluster.subscribed_partitions(self.options)
            earliest = self.cluster.earliest(partitions)
            latest = self.cluster.latest(partitions, self.options.isolation_level)
            start = self._within_ends(
                self._bounds(partitions, earliest, latest, ending=False), latest, "startingOffsets"
            )
            end = self._within_ends(
                self._bounds(partitions, earliest, latest, ending=True), latest, "endingOffsets"
            )
        finally:
            self.close_cluster()
        after = {tp: (start[tp], end[tp]) for tp in start if start[tp] > end[tp]}
        if after:
            described = ", ".join(
                f"{t}-{p} starts at {a} and ends at {b}" for (t, p), (a, b) in sorted(after.items())
            )
            raise ValueError(f"the read starts after it ends: {described}")
        return self._input_partitions(start, end)
