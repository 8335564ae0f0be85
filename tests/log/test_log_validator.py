"""Kafka's LogValidator rules on a client's batches (``onceflow.log.validator`` through ``Log.append``):
message.timestamp.before/after.max.ms and compression.type's recompression."""

import pytest
from tests.log.batches import decode, make_batch, produce

from onceflow.log.config import LogConfig
from onceflow.log.log import Log
from onceflow.protocol import records
from onceflow.protocol.errors import InvalidTimestamp

NOW = 1_700_000_000_000
HOUR = 3_600_000


def open_log(tmp_path, **config):
    return Log.open(tmp_path / "t-0", LogConfig(**config), clock_ms=lambda: NOW)


def stored_codecs(log):
    data = log.read(0, 1 << 20)
    out, pos = [], 0
    while pos < len(data):
        header = records.read_header(data, pos)
        out.append(header.compression)
        pos += header.size
    return out


def test_a_record_too_far_in_the_future_or_past_is_refused_and_nothing_is_written(tmp_path):
    log = open_log(tmp_path, message_timestamp_after_max_ms=HOUR, message_timestamp_before_max_ms=24 * HOUR)
    produce(log, make_batch(2, timestamp=NOW + HOUR, step_ms=0))  # at the limit: accepted
    with pytest.raises(InvalidTimestamp, match=r"out of range.*within \[1699913600000, 1700003600000\]"):
        produce(log, make_batch(1, timestamp=NOW + HOUR + 1))
    # The first record is fine, the second is a day and a millisecond old: the batch is refused whole.
    with pytest.raises(InvalidTimestamp, match="offset 1 in the batch"):
        produce(log, make_batch(2, timestamp=NOW, step_ms=-(24 * HOUR + 1)))
    assert log.log_end_offset == 2


def test_timestamps_are_not_checked_on_log_append_time_topics_or_without_limits(tmp_path):
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime", message_timestamp_after_max_ms=0)
    produce(log, make_batch(1, timestamp=NOW + 10 * HOUR))  # the broker's time replaces it
    unlimited = Log.open(tmp_path / "u-0", LogConfig(), clock_ms=lambda: NOW)
    produce(unlimited, make_batch(1, timestamp=0), make_batch(1, timestamp=NOW + 1000 * HOUR))
    assert log.log_end_offset == 1 and unlimited.log_end_offset == 2


@pytest.mark.parametrize(("topic", "sent", "stored"), [("zstd", 0, 4), ("lz4", 1, 3), ("uncompressed", 1, 0)])
def test_compression_type_recompresses_what_the_producer_sent_otherwise(tmp_path, topic, sent, stored):
    log = open_log(tmp_path, compression_type=topic)
    produce(log, make_batch(3, timestamp=NOW, value=b"x" * 100, compression=sent))
    produce(log, make_batch(2, timestamp=NOW + 7, compression=stored))  # already the topic's: kept as sent
    assert stored_codecs(log) == [stored, stored]
    # Every record keeps its offset, value and timestamp.
    assert decode(log.read(0, 1 << 20)) == [
        (0, b"x" * 100, NOW),
        (1, b"x" * 100, NOW + 1),
        (2, b"x" * 100, NOW + 2),
    ] + [
        (3, b"v", NOW + 7),
        (4, b"v", NOW + 8),
    ]


def test_producer_keeps_every_codec(tmp_path):
    log = open_log(tmp_path)
    for codec in (0, 1, 2, 3, 4):
        produce(log, make_batch(1, timestamp=NOW, compression=codec))
    assert stored_codecs(log) == [0, 1, 2, 3, 4]
