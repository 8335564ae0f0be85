"""Log compaction: how fast the cleaner works, and what it saves a coordinator that replays its log.

    python bench/compaction.py [--quick] [--keys K] [--updates U] [--rounds R]

A compacted partition like a busy ``__consumer_offsets`` one: K keys (group, topic, partition) each
updated U times, ~100-byte records, 100 records per batch, written through the produce path into
segments of ``--segment-mb``. Each round builds that log afresh, then times, interleaved:

- ``replay_before`` / ``replay_after``: reading every batch back and decoding every record (what a group
  or transaction coordinator does when it loads its partition), before and after cleaning;
- ``clean``: one cleaning of every sealed segment (``onceflow.log.cleaner.clean``: offset map,
  rewrite, install), reported as MB of log read per second.

Reported: medians, bytes before/after, and the replay speed-up. Progress goes to stderr; the last stdout
line is one JSON object (see /work/shared/BENCH.md).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit, median, progress  # noqa: E402
from aiokafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402

from onceflow.log import cleaner  # noqa: E402
from onceflow.log.config import LogConfig  # noqa: E402
from onceflow.log.log import Log  # noqa: E402
from onceflow.protocol.record_codec import decode_record_objects  # noqa: E402
from onceflow.protocol.records import validate_produce_records  # noqa: E402

MB = 1024 * 1024
RECORDS_PER_BATCH = 100
VALUE = b"x" * 80


def build_log(directory: Path, keys: int, updates: int, segment_mb: int) -> Log:
    config = LogConfig(cleanup_policy="compact", segment_bytes=segment_mb * MB, min_cleanable_dirty_ratio=0.0)
    log = Log.open(directory, config)
    now = int(time.time() * 1000)
    pending = []
    for update in range(updates):
        for key in range(keys):
            pending.append((b"group-%06d" % key, VALUE + b"%08d" % update))
            if len(pending) == RECORDS_PER_BATCH:
                _append(log, pending, now)
                pending = []
    if pending:
        _append(log, pending, now)
    log.roll()
    return log


def _append(log: Log, pairs: list[tuple[bytes, bytes]], now: int) -> None:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 10**8)
    for i, (key, value) in enumerate(pairs):
        builder.append(i, timestamp=now, key=key, value=value, headers=[])
    log.append(validate_produce_records(bytearray(builder.build())))


def replay(log: Log) -> tuple[float, int]:
    start = time.perf_counter()
    count = 0
    for header, view in log.iter_batches(log.log_start_offset):
        count += len(decode_record_objects(header, view))
    return time.perf_counter() - start, count


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--keys", type=int)
    parser.add_argument("--updates", type=int)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--segment-mb", type=int, default=16)
    args = parser.parse_args()
    keys = args.keys or (2_000 if args.quick else 10_000)
    updates = args.updates or (50 if args.quick else 100)
    rounds = args.rounds or 3
    clean_s, clean_mb_s, before_s, after_s = [], [], [], []
    sizes: tuple[int, int] = (0, 0)
    counts: tuple[int, int] = (0, 0)
    root = Path(tempfile.mkdtemp(prefix="onceflow-bench-compaction-"))
    try:
        for round_no in range(rounds):
            directory = root / f"round{round_no}" / "__consumer_offsets-0"
            log = build_log(directory, keys, updates, args.segment_mb)
            size_before = log.size_in_bytes
            seconds, count_before = replay(log)
            before_s.append(seconds)
            start = time.perf_counter()
            result = cleaner.clean(log, int(time.time() * 1000))
            elapsed = time.perf_counter() - start
            assert result is not None
            clean_s.append(elapsed)
            clean_mb_s.append(result.bytes_read / MB / elapsed)
            seconds, count_after = replay(log)
            after_s.append(seconds)
            assert count_after == keys, (count_after, keys)  # exactly the latest record of each key
            sizes, counts = (size_before, log.size_in_bytes), (count_before, count_after)
            progress(
                f"round {round_no + 1}/{rounds}: {size_before / MB:.1f} MB -> {log.size_in_bytes / MB:.2f} MB "
                f"in {elapsed:.2f} s ({clean_mb_s[-1]:.1f} MB/s); replay {before_s[-1]:.3f} s -> {after_s[-1]:.4f} s"
            )
            log.close()
            shutil.rmtree(directory.parent, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    emit(
        {
            "bench": "compaction",
            "unit": "s (clean, replay), MB/s (clean_mb_per_s)",
            "results": {
                "clean_s": round(median(clean_s), 3),
                "clean_mb_per_s": round(median(clean_mb_s), 1),
                "replay_before_s": round(median(before_s), 3),
                "replay_after_s": round(median(after_s), 4),
                "bytes_before": sizes[0],
                "bytes_after": sizes[1],
                "records_before": counts[0],
                "records_after": counts[1],
            },
            "ratios": {"replay_before/after": round(median(before_s) / median(after_s), 1)},
            "params": {"keys": keys, "updates": updates, "rounds": rounds, "segment_mb": args.segment_mb},
        }
    )


if __name__ == "__main__":
    main()
