"""Per-partition offsets of a whole data directory in one file: Kafka's ``OffsetCheckpointFile``.

The broker keeps its partitions' high watermarks in ``<data-dir>/replication-offset-checkpoint``
(written every ``replica.high.watermark.checkpoint.interval.ms`` and at shutdown), so that a restarted
replica knows how much of its log was committed before it hears from the leader again: its consumers
never see past it, and the LSO never passes it. Lines are ``topic partition offset`` in
``checkpoint_file``'s format, version 0, as Kafka writes them.

A checkpoint is a lower bound, never the truth: the log clamps what it reads into its own
``[log start, log end]``, and the leader moves it forward again as followers fetch.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from onceflow.log.checkpoint_file import CorruptCheckpoint, read_checkpoint, write_checkpoint

log = logging.getLogger(__name__)

HIGH_WATERMARK_FILE = "replication-offset-checkpoint"
CHECKPOINT_VERSION = 0

TopicPartition = tuple[str, int]


def _parse(fields: list[str]) -> tuple[TopicPartition, int]:
    if len(fields) != 3:
        raise ValueError("expected 'topic partition offset'")
    return (fields[0], int(fields[1])), int(fields[2])


def read_offsets(path: Path) -> dict[TopicPartition, int]:
    """The offsets in the checkpoint at ``path``; empty when there is none. A damaged file is reported
    and read as empty: the offsets it held are lower bounds that the leaders give back."""
    try:
        entries = read_checkpoint(path, CHECKPOINT_VERSION, _parse)
    except CorruptCheckpoint as exc:
        log.error("%s; starting without the checkpointed offsets", exc)
        return {}
    return dict(entries or ())


def write_offsets(path: Path, offsets: Mapping[TopicPartition, int]) -> None:
    """Replace the checkpoint at ``path`` with ``offsets`` (durably)."""
    lines = [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())]
    write_checkpoint(path, CHECKPOINT_VERSION, lines)


def high_watermark_path(data_dir: Path) -> Path:
    return Path(data_dir) / HIGH_WATERMARK_FILE
