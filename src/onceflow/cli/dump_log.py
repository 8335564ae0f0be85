"""``onceflow dump-log``: print the batches (and records) of segment files, offline.

Works on the files alone (no broker), like Kafka's ``kafka-dump-log.sh``: one line per batch with
its offsets, producer fields, codec and flags, and with ``--records`` one line per record.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import click

from onceflow.cli.common import err, friendly_errors
from onceflow.protocol.compression import codec_name
from onceflow.protocol.record_codec import DecodedBatch, decode_batches
from onceflow.protocol.records import BatchHeader, scan_batches

_PREVIEW = 80  # characters of key/value shown per record


def segment_files(path: Path) -> list[Path]:
    """The ``.log`` files at ``path``: the file itself, or a partition directory's segments in offset order."""
    if path.is_dir():
        files = sorted(path.glob("*.log"))
        if not files:
            raise click.ClickException(f"{path} holds no .log segment files: is it a partition directory?")
        return files
    if not path.exists():
        raise click.ClickException(f"{path} does not exist")
    return [path]


def describe_batch(header: BatchHeader, position: int) -> str:
    timestamp_kind = "LogAppendTime" if header.timestamp_type else "CreateTime"
    return (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} count: {header.record_count} "
        f"baseSequence: {header.base_sequence} lastSequence: {header.last_sequence} "
        f"producerId: {header.producer_id} producerEpoch: {header.producer_epoch} "
        f"partitionLeaderEpoch: {header.partition_leader_epoch} "
        f"isTransactional: {str(header.is_transactional).lower()} isControl: {str(header.is_control).lower()} "
        f"position: {position} {timestamp_kind}: {header.max_timestamp} ({_when(header.max_timestamp)}) "
        f"size: {header.size} magic: {header.magic} compresscodec: {codec_name(header.compression)} "
        f"crc: {header.crc}"
    )


def describe_records(batch: DecodedBatch) -> Iterator[str]:
    if batch.control is not None:
        marker = "COMMIT" if batch.control.commit else "ABORT"
        yield f"| offset: {batch.records[0].offset} endTxnMarker: {marker} coordinatorEpoch: {batch.control.coordinator_epoch}"
        return
    for r in batch.records:
        headers = ",".join(f"{name}={_preview(value)}" for name, value in r.headers)
        yield (
            f"| offset: {r.offset} timestamp: {r.timestamp} keySize: {_size(r.key)} valueSize: {_size(r.value)} "
            f"headers: [{headers}] key: {_preview(r.key)} payload: {_preview(r.value)}"
        )


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _preview(data: bytes | None) -> str:
    if data is None:
        return "null"
    text = data.decode("utf-8", errors="backslashreplace")
    return text if len(text) <= _PREVIEW else text[:_PREVIEW] + "..."


def _when(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return "?"


def dump_segment(path: Path, with_records: bool) -> tuple[int, int]:
    """Print one segment; returns (batches, bytes after the last valid batch)."""
    # One read of the whole file: simpler than mmap (whose views must all be released before close)
    # and fine for a tool; segments are at most segment.bytes (1 GB by default).
    data = path.read_bytes()
    click.echo(f"Dumping {path}")
    batches, valid_bytes = scan_batches(data)
    position = 0
    for header, batch_view in batches:
        click.echo(describe_batch(header, position))
        if with_records:
            for decoded in decode_batches(batch_view):
                for line in describe_records(decoded):
                    click.echo(line)
        position += header.size
    return len(batches), len(data) - valid_bytes


@click.command(name="dump-log")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--records", "with_records", is_flag=True, help="Print every record too.")
def dump_log(path, with_records):
    """Print the batches of a segment file or of every segment in a partition directory."""
    with friendly_errors():
        for segment in segment_files(path):
            _batches, tail = dump_segment(segment, with_records)
            if tail:
                err.print(
                    f"warning: the last {tail} byte(s) of {segment} are not a valid batch (a torn write?)"
                )
