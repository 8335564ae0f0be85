"""Snapshots of the metadata log (KIP-630): a node writes its committed image as a snapshot once
enough records have been committed since the last one, and the quorum then drops the log below it,
so the metadata log does not grow for ever (the active controller writes a NoOpRecord every
``metadata.max.idle.interval.ms``) and a restart or a new follower loads one snapshot instead of
replaying every record since the cluster began.

Kafka's names and defaults: ``metadata.log.max.record.bytes.between.snapshots`` (20 MiB) and
``metadata.log.max.snapshot.interval.ms`` (1 hour: a snapshot after that long if anything at all
was committed). The image comes from the node's own replay (the controller's committed image, or the
broker's), registered as a quorum listener after it so that it has seen each batch first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from onceflow.metadata.image import MetadataImage
from onceflow.metadata.snapshot import snapshot_bytes
from onceflow.server.quorum import now_ms

log = logging.getLogger(__name__)

MAX_BYTES_BETWEEN_SNAPSHOTS = 20 * 1024 * 1024
MAX_SNAPSHOT_INTERVAL_MS = 3_600_000


class MetadataSnapshots:
    def __init__(
        self,
        quorum: Any,
        image_source: Callable[[], tuple[int, MetadataImage]],
        *,
        max_bytes: int = MAX_BYTES_BETWEEN_SNAPSHOTS,
        max_interval_ms: int = MAX_SNAPSHOT_INTERVAL_MS,
    ) -> None:
        """``image_source()``: (the offset after the last record the image holds, the image)."""
        self.quorum = quorum
        self.image_source = image_source
        self.max_bytes = max_bytes
        self.max_interval_ms = max_interval_ms
        self._bytes = 0
        self._last_ms = now_ms()

    def handle_commit(self, batch: Any) -> None:
        self._bytes += sum(len(r) for r in batch.records)
        now = now_ms()
        if self._bytes >= self.max_bytes or (self._bytes and now - self._last_ms >= self.max_interval_ms):
            self.take(now)

    def handle_load_snapshot(self, snapshot: Any) -> None:
        self._bytes = 0

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        pass

    def take(self, now: int | None = None) -> int | None:
        """Write a snapshot of the image now; the offset it ends at, or None if one exists there."""
        now = now_ms() if now is None else now
        offset, image = self.image_source()
        writer = self.quorum.create_snapshot(offset, now)
        self._bytes, self._last_ms = 0, now
        if writer is None:
            return None
        writer.append(snapshot_bytes(image))
        writer.freeze()
        log.info("metadata snapshot at offset %d", offset)
        return offset
