"""Micro-benchmark of the partition log: append and read throughput, recovery time after a crash.

    python bench/log_append.py [--quick] [--dir DIR]

Appends go through the produce path (``validate_produce_records`` then ``Log.append``: header unpack,
CRC32C, offset patch, one write). Reads fetch the whole log back in ``max_bytes``-sized pieces.
Recovery writes a log of ``--recovery-mb`` in one segment (Kafka's default segment.bytes is 1 GiB),
drops it without a clean shutdown (``Log.abandon``, as after ``kill -9``) and times ``Log.open``,
which CRC-scans the active segment; a clean reopen is timed too.

Progress goes to stderr; the last stdout line is one JSON object (see /work/shared/BENCH.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from aiokafka.record.default_records import DefaultRecordBatchBuilder

from onceflow.log.config import LogConfig
from onceflow.log.log import Log
from onceflow.protocol.records import validate_produce_records

MB = 1024 * 1024


def build_batch(batch_bytes: int, record_bytes: int = 1000) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=batch_bytes * 2,
    )
    value = b"x" * record_bytes
    count = max(1, batch_bytes // (record_bytes + 10))
    for i in range(count):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=None, value=value, headers=[])
    return bytes(builder.build())


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def time_appends(directory: Path, batch: bytes, total_bytes: int, config: LogConfig) -> tuple[float, Log]:
    log = Log.open(directory, config)
    count = max(1, total_bytes // len(batch))
    start = time.perf_counter()
    for _ in range(count):
        # A fresh writable buffer per call, as a request buffer would be (its copy is not timed apart).
        log.append(validate_produce_records(bytearray(batch)))
    elapsed = time.perf_counter() - start
    return count * len(batch) / MB / elapsed, log


def time_reads(log: Log, max_bytes: int) -> float:
    start = time.perf_counter()
    offset = log.log_start_offset
    end = log.log_end_offset
    read = 0
    while offset < end:
        data = log.read(offset, max_bytes)
        read += len(data)
        # next offset = last offset of the last batch + 1, from its header
        last_pos = len(data)
        pos = 0
        while pos < last_pos:
            batch_length = int.from_bytes(data[pos + 8 : pos + 12], "big")
            last_delta = int.from_bytes(data[pos + 23 : pos + 27], "big")
            base = int.from_bytes(data[pos : pos + 8], "big")
            offset = base + last_delta + 1
            pos += batch_length + 12
    elapsed = time.perf_counter() - start
    return read / MB / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, finishes in well under a minute")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    rounds = args.rounds or 3
    append_mb = 128 if args.quick else 512
    recovery_mb = 256 if args.quick else 1024
    root = Path(tempfile.mkdtemp(prefix="onceflow-bench-", dir=args.dir))
    config = LogConfig(segment_bytes=1073741824, retention_ms=-1)
    small_config = LogConfig(segment_bytes=64 * MB, retention_ms=-1)
    batch_1m = build_batch(1_000_000)  # under max.message.bytes (1048588)
    batch_16k = build_batch(16 * 1024)
    results: dict[str, list[float]] = {
        "append_1MB_batches": [],
        "append_16KB_batches": [],
        "read_1MB_fetches": [],
        "recovery_unclean_s": [],
        "reopen_clean_s": [],
    }
    try:
        for round_no in range(1, rounds + 1):
            directory = root / f"append-{round_no}" / "bench-0"
            rate, log = time_appends(directory, batch_1m, append_mb * MB, small_config)
            results["append_1MB_batches"].append(rate)
            results["read_1MB_fetches"].append(time_reads(log, MB))
            log.delete()
            rate, log = time_appends(
                root / f"small-{round_no}" / "bench-0", batch_16k, append_mb * MB // 4, small_config
            )
            results["append_16KB_batches"].append(rate)
            log.delete()
            progress(
                f"round {round_no}: append 1MB {results['append_1MB_batches'][-1]:.0f} MB/s, "
                f"16KB {results['append_16KB_batches'][-1]:.0f} MB/s, read {results['read_1MB_fetches'][-1]:.0f} MB/s"
            )

            directory = root / f"recovery-{round_no}" / "bench-0"
            _, log = time_appends(directory, batch_1m, recovery_mb * MB, config)
            end = log.log_end_offset
            log.abandon()  # no flush, no clean-shutdown marker: as after kill -9
            start = time.perf_counter()
            log = Log.open(directory, config)
            results["recovery_unclean_s"].append(time.perf_counter() - start)
            if log.log_end_offset != end:
                raise SystemExit(f"recovery lost data: log end {log.log_end_offset}, expected {end}")
            log.close()
            start = time.perf_counter()
            log = Log.open(directory, config)
            results["reopen_clean_s"].append(time.perf_counter() - start)
            log.delete()
            progress(
                f"round {round_no}: recovery of {recovery_mb} MB after unclean shutdown "
                f"{results['recovery_unclean_s'][-1]:.3f} s, clean reopen {results['reopen_clean_s'][-1]:.4f} s"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    medians = {name: round(statistics.median(values), 4) for name, values in results.items()}
    print(
        json.dumps(
            {
                "bench": "log_append",
                "unit": "MB/s",
                "results": medians,
                "units": {"recovery_unclean_s": "s", "reopen_clean_s": "s"},
                "params": {
                    "append_mb": append_mb,
                    "recovery_mb": recovery_mb,
                    "batch_bytes": [len(batch_1m), len(batch_16k)],
                    "read_max_bytes": MB,
                    "rounds": rounds,
                    "quick": args.quick,
                },
            }
        )
    )


if __name__ == "__main__":
    main()
