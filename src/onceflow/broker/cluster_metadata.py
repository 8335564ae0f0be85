"""The broker's view of the cluster: the metadata image it has replayed, and what it does about it.

:class:`ClusterMetadata` listens to the metadata quorum (a voter's own log, or the log a broker-only
node fetches as an observer): every committed batch is replayed into a new immutable
``MetadataImage``, and the broker acts on what changed (Kafka's ``BrokerMetadataPublisher``):

- topics it holds replicas of get their logs opened (created if new), with the topic's configs;
- partitions of other brokers are known by their leader and leader epoch, so that a request for one
  is answered NOT_LEADER_OR_FOLLOWER, and Metadata names the real leader;
- a deleted topic's logs are deleted, and the group coordinator forgets its committed offsets;
- a changed topic config reaches the open logs at once;
- changed ACLs reach the authorizer, changed SCRAM credentials the SASL logins (a cluster broker's
  security state is the image's: :class:`ImageAclStore`, :class:`ImageScramStore`).

Handlers read :attr:`image` (Metadata, DescribeCluster, FindCoordinator) and the ``TopicManager``
(Produce, Fetch, ListOffsets); both follow the same replay.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from onceflow.metadata.image import MetadataImage
from onceflow.metadata.records import RESOURCE_TOPIC, from_bytes
from onceflow.metadata.snapshot import load_snapshot

log = logging.getLogger(__name__)


def _decode(record: Any) -> Any:
    return from_bytes(bytes(record)) if isinstance(record, bytes | bytearray | memoryview) else record


class ClusterMetadata:
    """The replayed image of one broker and its publication to the broker's logs."""

    def __init__(
        self,
        node_id: int,
        topics: Any,
        *,
        on_partitions_deleted: Callable[[Iterable[tuple[str, int]]], None] | None = None,
    ) -> None:
        self.node_id = node_id
        self.topics = topics
        self.image = MetadataImage.EMPTY
        self.offset = -1  # the last offset replayed
        self.leader_id: int | None = None  # the quorum's leader: the active controller
        self.leader_epoch = -1
        self.on_partitions_deleted = on_partitions_deleted
        # Called with the image's client quotas whenever they change (a cluster broker's quotas).
        self.on_quotas: Callable[[Any], None] | None = None
        # Called with the image's ACLs (id -> binding) / SCRAM credentials whenever they change.
        self.on_acls: Callable[[Any], None] | None = None
        self.on_scram_credentials: Callable[[Any], None] | None = None
        # Called with each image once the logs follow it (the replica manager acts on it then).
        self.on_image: Callable[[MetadataImage], None] | None = None
        # Whether the logs follow the image yet (the broker opens them once it has caught up).
        self._publishing = False
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._changed: list[asyncio.Future[None]] = []

    # ------------------------------------------------------------ quorum listener

    def handle_commit(self, batch: Any) -> None:
        records = [_decode(r) for r in batch.records]
        before = self.image
        if records:
            self.image = before.apply_all(records)
        self.offset = batch.last_offset
        if self._publishing and self.image is not before:
            self._publish(before, self.image)
        self._wake()

    def handle_load_snapshot(self, snapshot: Any) -> None:
        before = self.image
        self.image = load_snapshot(_decode(r) for r in snapshot.records)
        self.offset = snapshot.offset - 1
        if self._publishing:
            self._publish(before, self.image)
        self._wake()

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        self.leader_id, self.leader_epoch = leader_id, epoch

    # ------------------------------------------------------------ waiting for replay

    async def wait_for_offset(self, offset: int) -> None:
        """Return once every record up to ``offset`` has been replayed."""
        if self.offset >= offset:
            return
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, future))
        await future

    async def wait_until(self, predicate: Callable[[MetadataImage], bool], timeout_s: float) -> bool:
        """Wait (up to ``timeout_s``) for an image that satisfies ``predicate``; whether one came."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not predicate(self.image):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            future = loop.create_future()
            self._changed.append(future)
            try:
                await asyncio.wait_for(future, remaining)
            except TimeoutError:
                return predicate(self.image)
        return True

    def _wake(self) -> None:
        changed, self._changed = self._changed, []
        for future in changed:
            if not future.done():
                future.set_result(None)
        if not self._waiters:
            return
        still = []
        for offset, future in self._waiters:
            if offset <= self.offset:
                if not future.done():
                    future.set_result(None)
            else:
                still.append((offset, future))
        self._waiters = still

    # ------------------------------------------------------------ publishing to the logs

    def start_publishing(self) -> None:
        """Open the logs of everything the image has so far; from now on every change reaches them."""
        self._publishing = True
        started = time.monotonic()
        self._publish(MetadataImage.EMPTY, self.image, existing=True)
        self.topics.log_loaded(started)

    def _publish(self, before: MetadataImage, after: MetadataImage, existing: bool = False) -> None:
        if self.on_quotas is not None and before.client_quotas is not after.client_quotas:
            self.on_quotas(after.client_quotas)
        if self.on_acls is not None and before.acls is not after.acls:
            self.on_acls(after.acls)
        if self.on_scram_credentials is not None and before.scram_credentials is not after.scram_credentials:
            self.on_scram_credentials(after.scram_credentials)
        deleted = [t for topic_id, t in before.topics.items() if topic_id not in after.topics]
        for topic in deleted:
            dropped = self.topics.drop_topic(topic.name)
            if dropped is not None and self.on_partitions_deleted is not None:
                self.on_partitions_deleted((topic.name, index) for index in topic.partitions)
        configs_changed = before.configs is not after.configs
        for topic_id, topic in after.topics.items():
            old = before.topics.get(topic_id)
            if old is topic and not (
                configs_changed
                and before.configs.get((RESOURCE_TOPIC, topic.name))
                is not after.configs.get((RESOURCE_TOPIC, topic.name))
            ):
                continue
            self.topics.sync_topic(
                topic.name,
                topic_id,
                after.topic_config(topic.name),
                {
                    index: (p.leader, p.leader_epoch, self.node_id in p.replicas)
                    for index, p in topic.partitions.items()
                },
                existing=existing,
            )
        if self.on_image is not None:
            self.on_image(after)

    # ------------------------------------------------------------ what handlers ask

    def quota_store(self) -> ImageQuotaStore:
        return ImageQuotaStore(self)

    def controller_id(self) -> int:
        """The id Metadata responses give as the controller: clients cannot reach controllers in a
        KRaft cluster, so, as Kafka, an alive broker (the active controller if it is one)."""
        alive = [b.id for b in self.image.unfenced_brokers()]
        if self.leader_id in alive:
            return self.leader_id
        return min(alive) if alive else -1


class ImageQuotaStore:
    """The client-quota store of a cluster broker: the quotas are the image's (the controller
    decides them: AlterClientQuotas is forwarded), never saved by the broker itself."""

    def __init__(self, metadata: ClusterMetadata) -> None:
        self.metadata = metadata

    def load(self) -> dict:
        return {
            quota_entity: dict(values) for quota_entity, values in self.metadata.image.client_quotas.items()
        }

    def save(self, quotas) -> None:
        raise OSError("a cluster broker's client quotas change through the controller")


class ImageAclStore:
    """The ACL store of a cluster broker: the image's ACLs (CreateAcls / DeleteAcls go to the
    controller), never saved by the broker itself."""

    def __init__(self, metadata: ClusterMetadata) -> None:
        self.metadata = metadata

    def load(self) -> list:
        return list(self.metadata.image.acls.values())

    def save(self, acls) -> None:
        raise OSError("a cluster broker's ACLs change through the controller")


class ImageScramStore:
    """The SCRAM credential store of a cluster broker: the image's (AlterUserScramCredentials goes to
    the controller), never saved by the broker itself."""

    def __init__(self, metadata: ClusterMetadata) -> None:
        self.metadata = metadata

    def load(self) -> dict:
        return dict(self.metadata.image.scram_credentials)

    def save(self, credentials) -> None:
        raise OSError("a cluster broker's SCRAM credentials change through the controller")
