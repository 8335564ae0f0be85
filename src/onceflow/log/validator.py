"""What Kafka's LogValidator checks, and rewrites, in a client's batches before the log appends them.

- A compacted topic refuses a record without a key (compaction keeps the latest record of each key;
  one without a key could never be kept or replaced): INVALID_RECORD.
- On a CreateTime topic, a record more than ``message.timestamp.before.max.ms`` older or
  ``message.timestamp.after.max.ms`` newer than the broker's clock is refused: INVALID_TIMESTAMP. Both
  default to no limit.
- With ``compression.type`` other than ``producer``, a batch compressed otherwise is recompressed to
  the topic's codec (``uncompressed``: none) at the topic's ``compression.<codec>.level``, keeping its
  producer id, epoch, sequence, flags and record timestamps, so that consumers read the codec the
  topic promises and idempotence and transactions work as before.

Batches the broker writes itself (markers, coordinator records) and replicated ones are not checked.
"""

from __future__ import annotations

from onceflow.log.config import LogConfig
from onceflow.protocol.compression import codec_for_name
from onceflow.protocol.errors import InvalidRecord, InvalidTimestamp
from onceflow.protocol.record_codec import decode_record_objects, rebuild_batch
from onceflow.protocol.records import BatchHeader, read_header

_NO_LIMIT = 2**63 - 1
_LEVEL_OF = {
    "gzip": "compression_gzip_level",
    "lz4": "compression_lz4_level",
    "zstd": "compression_zstd_level",
}

Batches = list[tuple[BatchHeader, memoryview]]


def validate_client_batches(config: LogConfig, batches: Batches, now_ms: int, partition: str) -> Batches:
    """Check ``batches`` against the topic's configs; returns them, recompressed where the topic's
    ``compression.type`` asks for it. Raises before anything is appended."""
    if config.compact:
        _check_keys(batches, partition)
    if not config.log_append_time and (
        config.message_timestamp_before_max_ms != _NO_LIMIT
        or config.message_timestamp_after_max_ms != _NO_LIMIT
    ):
        _check_timestamps(config, batches, now_ms, partition)
    if config.compression_type != "producer":
        batches = _recompress(config, batches)
    return batches


def _check_keys(batches: Batches, partition: str) -> None:
    for header, view in batches:
        if header.is_control:
            continue
        for record in decode_record_objects(header, view):
            if record.key is None:
                raise InvalidRecord(
                    f"Compacted topic cannot accept message without key in topic partition {partition}."
                )


def _check_timestamps(config: LogConfig, batches: Batches, now_ms: int, partition: str) -> None:
    earliest = now_ms - config.message_timestamp_before_max_ms
    latest = now_ms + config.message_timestamp_after_max_ms
    for header, view in batches:
        if header.is_control:
            continue
        # The batch's max timestamp bounds every record from above; the lower bound needs the records.
        if header.max_timestamp <= latest and config.message_timestamp_before_max_ms == _NO_LIMIT:
            continue
        for i, record in enumerate(decode_record_objects(header, view)):
            if record.timestamp >= 0 and not earliest <= record.timestamp <= latest:
                raise InvalidTimestamp(
                    f"Timestamp {record.timestamp} of message with offset {i} in the batch to {partition} is "
                    f"out of range. The timestamp should be within [{earliest}, {latest}] "
                    "(message.timestamp.before.max.ms / message.timestamp.after.max.ms)"
                )


def _recompress(config: LogConfig, batches: Batches) -> Batches:
    name = config.compression_type
    codec = codec_for_name("none" if name == "uncompressed" else name)
    level_field = _LEVEL_OF.get(name)
    level = getattr(config, level_field) if level_field else None
    out: Batches = []
    for header, view in batches:
        if header.is_control or header.compression == codec:
            out.append((header, view))
            continue
        rebuilt = bytearray(
            rebuild_batch(header, decode_record_objects(header, view), compression=codec, level=level)
        )
        out.append((read_header(rebuilt), memoryview(rebuilt)))
    return out
