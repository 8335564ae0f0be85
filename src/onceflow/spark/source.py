"""The onceflow source: ``spark.readStream.format("onceflow")`` and ``spark.read.format("onceflow")``.

The driver side (offset planning) asks the cluster for partitions and offsets; the executor side
(``read``) fetches one topic-partition's offset range per input partition and yields Arrow batches.
Offsets live in Spark's checkpoint as ``{"topic": {"partition": next offset}}``. With
``read_committed`` (the default) a batch ends at the last stable offset, so an open transaction
holds a partition back until it is decided, as Kafka's read_committed consumers are held.
"""

from __future__ import annotations

import logging
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
    limit_end,
    offsets_at_timestamps,
    offsets_from_json,
    offsets_to_json,
    plan_ranges,
    resolve_spec,
    split_ranges,
    timestamps_for,
)
from onceflow.spark.options import EARLIEST, LATEST, TIMESTAMP_STRATEGY_LATEST, SourceOptions
from onceflow.spark.range_reader import read_range

log = logging.getLogger(__name__)

__all__ = ["OnceflowBatchReader", "OnceflowStreamReader"]


def _partition_max_bytes(options: SourceOptions) -> int:
    return int(options.extra.get("max.partition.fetch.bytes", 1048576))


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

    @property
    def cluster(self) -> BlockingCluster:
        if self._cluster is None:
            self._cluster = BlockingCluster(
                self.options.bootstrap, client_id=self.options.client_id, security=self.options.security
            )
        return self._cluster

    def close_cluster(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def _bounds(
        self,
        partitions: list,
        earliest: PartitionOffsets,
        latest: PartitionOffsets,
        *,
        ending: bool,
        missing: int = EARLIEST,
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
            return resolve_spec(options.ending_offsets, partitions, earliest, latest, missing=LATEST)
        return resolve_spec(options.starting_offsets, partitions, earliest, latest, missing=missing)

    def _input_partitions(self, start: PartitionOffsets, end: PartitionOffsets) -> list[InputPartition]:
        ranges = split_ranges(plan_ranges(start, end), self.options.min_partitions)
        return [InputPartition(r) for r in ranges]

    def read(self, partition: InputPartition | None) -> Iterator:
        offset_range: OffsetRange | None = getattr(partition, "value", None)
        if offset_range is None:
            return  # nothing to read: with no partitions planned, PySpark still reads one, empty

        with BlockingCluster(
            self.options.bootstrap, client_id=self.options.client_id, security=self.options.security
        ) as cluster:
            yield from read_range(
                cluster,
                offset_range,
                isolation_level=self.options.isolation_level,
                partition_max_bytes=_partition_max_bytes(self.options),
                fail_on_data_loss=self.options.fail_on_data_loss,
            )


class OnceflowStreamReader(_ClusterHolder, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        super().__init__(options)
        self._available_now_end: PartitionOffsets | None = None

    def _latest(self) -> PartitionOffsets:
        partitions = self.cluster.subscribed_partitions(self.options)
        return self.cluster.latest(partitions, self.options.isolation_level)

    def initialOffset(self) -> dict:
        partitions = self.cluster.subscribed_partitions(self.options)
        earliest = self.cluster.earliest(partitions)
        latest = self.cluster.latest(partitions, self.options.isolation_level)
        # A stream starts partitions absent from a JSON spec at latest (a batch read: at earliest).
        start = self._bounds(partitions, earliest, latest, ending=False, missing=LATEST)
        log.info("onceflow source starts at %s", start)
        return offsets_to_json(start)

    def prepareForTriggerAvailableNow(self) -> None:
        # Fix the target now: data arriving later belongs to the next run.
        self._available_now_end = self._latest()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets_from_json(start)
        latest = self._available_now_end if self._available_now_end is not None else self._latest()
        new = [tp for tp in latest if tp not in begin]
        if new:
            begin = {**begin, **self.cluster.earliest(new)}
        # Offsets never move back, even if a restarted broker briefly reports less.
        latest = {tp: max(end, begin[tp]) for tp, end in latest.items()}
        if isinstance(limit, ReadMaxRows):
            latest = limit_end(begin, latest, limit.max_rows)
        return offsets_to_json(latest)

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
            start = self._bounds(partitions, earliest, latest, ending=False)
            end = self._bounds(partitions, earliest, latest, ending=True)
        finally:
            self.close_cluster()
        return self._input_partitions(start, end)
