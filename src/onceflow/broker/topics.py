"""The TopicManager: which topics exist, their partitions' logs, and the metadata file that persists them.

Cluster-level state lives in the data dir beside the partition directories:

- ``meta.properties`` (Kafka's name and ``key=value`` format): ``cluster.id``, ``node.id``;
- ``topics.json``: every topic's name, id (a random UUID, kept forever; Fetch v13+ and Metadata v10+
  name topics by id), partition count, config overrides and whether it is internal.

Both are written with ``log.durable_file.write_atomically`` (temp file, fsync, rename, fsync of the
directory). Partition ``p`` of
topic ``t`` is the ``Log`` in ``<data-dir>/t-p/``.

Log calls are synchronous file I/O on the page cache (fast); they run in the event loop for now. If
fsync-heavy configs arrive later, move appends to a worker thread per partition.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import json
import logging
import re
import resource
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from onceflow.broker.data_dir_lock import DataDirError, DataDirUnusable
from onceflow.log.durable_file import write_atomically
from onceflow.protocol.errors import (
    ErrorCode,
    InvalidPartitions,
    InvalidTopic,
    KafkaError,
    KafkaStorageError,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from onceflow.protocol.internal_topics import INTERNAL_TOPICS

log = logging.getLogger(__name__)

TOPICS_FILE = "topics.json"
META_FILE = "meta.properties"
# Kafka's per-partition file naming the topic id the directory belongs to: a directory left by a
# deleted topic of the same name is never taken for a new topic's data.
PARTITION_METADATA_FILE = "partition.metadata"
NO_LEADER = -1
MAX_TOPIC_NAME_LENGTH = 249
# Kafka's controller makes at most this many partitions per CreateTopics or CreatePartitions request
# (ReplicationControlManager.MAX_PARTITIONS_PER_BATCH, QuorumController.MAX_RECORDS_PER_USER_OP) and
# answers POLICY_VIOLATION above it: a request cannot make the broker create partitions without end.
MAX_PARTITIONS_PER_REQUEST = 10_000
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
# Kafka's settings of its internal topics (offsets.topic.segment.bytes, transaction.state.log.segment.bytes):
# compacted, so the latest committed offset, group and transaction state of every key is kept for good
# (under the delete policy, retention.ms would drop a quiet group's offsets after a week).
INTERNAL_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "104857600"}


def validate_topic_name(name: str | None) -> None:
    """Kafka's rules (``org.apache.kafka.common.internals.Topic.validate``); raises ``InvalidTopic``."""
    if not name:
        raise InvalidTopic("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopic(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopic(
            f"topic name is {len(name)} characters long; the maximum is {MAX_TOPIC_NAME_LENGTH}"
        )
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        raise InvalidTopic(
            f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_' and '-'"
        )


def _default_log_opener(directory: Path, overrides: Mapping[str, str]) -> Any:
    from onceflow.log.config import LogConfig
    from onceflow.log.log import Log

    return Log.open(directory, LogConfig.from_topic_configs(dict(overrides)))


def _default_config_validator(overrides: Mapping[str, str]) -> None:
    from onceflow.log.config import LogConfig

    LogConfig.from_topic_configs(dict(overrides))


class Partition:
    """One partition: its ``Log``, the waiters of Fetch long-polls that want to hear of new data, and
    the listeners of its high watermark.

    The high watermark is what is committed: what a reader may see, and what the coordinators wait
    for before they answer (``coordinator.runtime``). With one replica it is the log end, moved by
    each append; replication will move it when the in-sync replicas have the records, through
    :meth:`advance_high_watermark`, and the listeners need not change.

    On a cluster node the metadata image says who leads it (``leader_id``, ``leader_epoch``); a
    partition this broker holds no replica of has no log (``log`` is None) and is only known by its
    leader. A single broker's own partitions are led by itself at epoch 0.
    """

    def __init__(self, topic: str, index: int, log_: Any, leader_id: int = 0, leader_epoch: int = 0) -> None:
        self.topic = topic
        self.index = index
        self.log = log_
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self._waiters: set[asyncio.Future[None]] = set()
        # On a cluster node: this broker's replica (broker.replica.partition.ReplicatedPartition) and the
        # leader's append (the replica manager's: leader epochs in the batches, the high watermark).
        self.replica: Any = None
        self.appender: Any = None
        self._hw_listeners: list[Callable[[int], None]] = []

    def append(self, batches: list, **kwargs: Any) -> Any:
        appender = self.appender
        result = appender(batches, **kwargs) if appender is not None else self.log.append(batches, **kwargs)
        self.notify_new_data()
        if self._hw_listeners:
            self.advance_high_watermark()
        return result

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def add_high_watermark_listener(self, listener: Callable[[int], None]) -> None:
        """Call ``listener(high_watermark)`` each time the high watermark may have moved."""
        self._hw_listeners.append(listener)

    def remove_high_watermark_listener(self, listener: Callable[[int], None]) -> None:
        if listener in self._hw_listeners:
            self._hw_listeners.remove(listener)

    def advance_high_watermark(self) -> None:
        hw = self.high_watermark
        for listener in list(self._hw_listeners):
            listener(hw)

    def add_waiter(self, waiter: asyncio.Future[None]) -> None:
        self._waiters.add(waiter)

    def remove_waiter(self, waiter: asyncio.Future[None]) -> None:
        self._waiters.discard(waiter)

    def notify_new_data(self) -> None:
        if not self._waiters:
            return  # the usual case: nobody long-polls this partition right now
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    configs: dict[str, str]
    internal: bool = False
    partitions: list[Partition] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "id": str(self.topic_id),
            "partitions": len(self.partitions),
            "configs": self.configs,
            "internal": self.internal,
        }


def _cannot_open_message(directory: Path, exc: OSError) -> str:
    message = f"cannot open partition {directory}: {exc.strerror or exc}"
    if exc.errno == errno.EMFILE:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        message += (
            f" (each partition holds a file descriptor per segment and the limit is {soft}: "
            "raise it with `ulimit -n` or the service's LimitNOFILE)"
        )
    return message


class DataDirDamaged(DataDirError):
    """A file of the data dir that the broker wrote itself cannot be read back."""


def _read_topics_file(path: Path) -> list[tuple[str, uuid.UUID, dict[str, str], bool, int]]:
    """The topics listed in ``topics.json``: (name, id, config overrides, internal, partition count).
    It is always written whole (temp file, rename), so a file that does not read back was damaged
    from outside: refuse to start rather than guess which topics there were."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        return [
            (
                str(entry["name"]),
                uuid.UUID(entry["id"]),
                {str(k): str(v) for k, v in entry.get("configs", {}).items()},
                bool(entry.get("internal", False)),
                int(entry["partitions"]),
            )
            for entry in doc.get("topics", [])
        ]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DataDirDamaged(
            f"{path} cannot be read ({type(exc).__name__}: {exc}); the broker's list of topics is damaged. "
            "Restore it from a backup, or move the data dir aside to start an empty broker."
        ) from exc


def _topic_id_text(topic_id: uuid.UUID) -> str:
    # Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, no padding.
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


def _new_cluster_id() -> str:
    # Kafka's shape: a random UUID in URL-safe base64 without padding (22 characters).
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")


class TopicManager:
    """Creates, extends, deletes and looks up topics; opens their partitions' logs."""

    def __init__(
        self,
        data_dir: Path,
        *,
        node_id: int = 0,
        log_opener: Callable[[Path, Mapping[str, str]], Any] | None = None,
        config_validator: Callable[[Mapping[str, str]], None] | None = None,
        internal_topic_configs: Mapping[str, Mapping[str, str]] | None = None,
        topic_defaults: Mapping[str, str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.node_id = node_id
        # Per internal topic, settings on top of INTERNAL_TOPIC_CONFIGS from the broker config
        # (offsets.topic.segment.bytes, transaction.state.log.segment.bytes).
        self._internal_topic_configs = internal_topic_configs or {}
        # The broker's defaults of topic configs (log.retention.ms, ...), under each topic's overrides.
        self._topic_defaults = dict(topic_defaults or {})
        self._open_log = log_opener or _default_log_opener
        self._validate_configs = config_validator or _default_config_validator
        self._topics: dict[str, Topic] = {}
        self._by_id: dict[uuid.UUID, Topic] = {}
        self.cluster_id = ""
        # False once the metadata log is where topics are kept (a cluster node): topics.json is then
        # only read, once, to bring a single-node data dir's topics into the log.
        self.persist_topics_file = True
        # On a node, topics change only through the controller: create_topic and the other changes
        # below go to this (the server's TopicAdmin), and the topic is here once the change is
        # committed and replayed. None: this manager decides alone (unit tests, tools).
        self.admin: Any = None
        # (topic, partition) -> why its log could not be opened (a cluster node's replicas).
        self._open_failures: dict[tuple[str, int], str] = {}

    # -- loading and persistence -------------------------------------------------------------------

    def load(self) -> None:
        started = time.monotonic()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = self._load_or_create_meta()
        path = self.data_dir / TOPICS_FILE
        if not path.exists():
            return
        upgraded = []
        for name, topic_id, configs, internal, partitions in _read_topics_file(path):
            if name in INTERNAL_TOPICS and "cleanup.policy" not in configs:
                # Written by an onceflow without compaction, which kept internal topics under "delete".
                configs = {**INTERNAL_TOPIC_CONFIGS, **configs}
                upgraded.append(name)
            topic = Topic(name=name, topic_id=topic_id, configs=configs, internal=internal)
            for index in range(partitions):
                directory = self._partition_dir(name, index)
                if not directory.exists():
                    log.warning("%s: no directory for partition %s-%d; it starts empty", path, name, index)
                try:
                    topic.partitions.append(self._open_partition(topic, index))
                except OSError as exc:
                    # Give back what is open: a broker that failed to start may live on (tests, tools).
                    for opened in [*topic.partitions, *self.partitions()]:
                        opened.log.abandon()
                    self._topics.clear()
                    self._by_id.clear()
                    raise DataDirUnusable(_cannot_open_message(directory, exc)) from exc
            self._register(topic)
        if upgraded:
            self._persist()
            log.info("internal topics %s are compacted from now on (cleanup.policy=compact)", upgraded)
        self.log_loaded(started, f"{len(self._topics)} topics from {path}")

    def _load_or_create_meta(self, cluster_id: str | None = None) -> str:
        path = self.data_dir / META_FILE
        if path.exists():
            props = {}
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, ValueError) as exc:
                raise DataDirDamaged(
                    f"{path} cannot be read ({exc}): the data dir's identity is damaged"
                ) from exc
            for line in text.splitlines():
                if "=" in line and not line.startswith("#"):
                    key, value = line.split("=", 1)
                    props[key.strip()] = value.strip()
            if not props.get("cluster.id"):
                # Kafka refuses such a log dir too: a new id would make clients see another cluster.
                raise DataDirDamaged(f"{path} has no cluster.id: the data dir's identity is damaged")
            stored = props.get("node.id", "").strip()
            if stored and stored != str(self.node_id):
                # As Kafka: another node's data dir (a cluster node's, opened by a plain `serve`) would
                # append to that node's metadata log as a stranger, and serve its partitions as its own.
                raise DataDirUnusable(
                    f"{path} belongs to node {stored}, not to node {self.node_id}: start that node "
                    f"(node.id={stored} and its other settings) or use another data dir"
                )
            return props["cluster.id"]
        cluster_id = cluster_id or _new_cluster_id()
        write_atomically(path, f"version=1\ncluster.id={cluster_id}\nnode.id={self.node_id}\n")
        return cluster_id

    def _persist(self) -> None:
        if not self.persist_topics_file:
            return
        doc = {"version": 1, "topics": [t.to_json() for t in self._topics.values()]}
        write_atomically(self.data_dir / TOPICS_FILE, json.dumps(doc, indent=1, sort_keys=True))

    def _partition_dir(self, topic: str, index: int) -> Path:
        return self.data_dir / f"{topic}-{index}"

    def _open_partition(self, topic: Topic, index: int) -> Partition:
        return Partition(
            topic.name,
            index,
            self._open_log(self._partition_dir(topic.name, index), self.effective_configs(topic)),
            self.node_id,
        )

    def effective_configs(self, topic: Topic) -> dict[str, str]:
        """The topic's overrides on top of the broker's defaults: what its logs run with."""
        return {**self._topic_defaults, **topic.configs}

    def _register(self, topic: Topic) -> None:
        self._topics[topic.name] = topic
        self._by_id[topic.topic_id] = topic

    # -- lookups -------------------------------------------------------------------------------------

    def __contains__(self, name: str) -> bool:
        return name in self._topics

    def __iter__(self) -> Iterator[Topic]:
        return iter(list(self._topics.values()))

    def get(self, name: str) -> Topic | None:
        return self._topics.get(name)

    def get_by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self._by_id.get(topic_id)

    def get_partition(self, topic: str, index: int) -> Partition:
        """The partition, led by this broker; UNKNOWN_TOPIC_OR_PARTITION if it does not exist,
        NOT_LEADER_OR_FOLLOWER if another broker leads it (or nobody does right now)."""
        t = self._topics.get(topic)
        if t is None or not 0 <= index < len(t.partitions):
            raise UnknownTopicOrPartition(f"this broker has no partition {topic}-{index}")
        partition = t.partitions[index]
        if partition.log is None or partition.leader_id != self.node_id:
            raise KafkaError(
                f"broker {self.node_id} does not lead {topic}-{index} (leader: {partition.leader_id})",
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
            )
        return partition

    def local_partition(self, topic: str, index: int) -> Partition:
        """The partition if this broker holds a replica of it, leader or not (UNKNOWN_TOPIC_OR_PARTITION
        otherwise): for debug readers such as ListOffsets with replica id -2."""
        t = self._topics.get(topic)
        if t is None or not 0 <= index < len(t.partitions) or t.partitions[index].log is None:
            raise UnknownTopicOrPartition(f"this broker holds no replica of {topic}-{index}")
        return t.partitions[index]

    def log_loaded(self, started: float, what: str = "") -> None:
        """One INFO line for the partitions opened at start (each one's own line is DEBUG): how many,
        in how long (``started``: ``time.monotonic()`` before), and which were recovered after an
        unclean shutdown."""
        logs = [partition.log for partition in self.partitions()]
        recovered = sorted(opened.directory.name for opened in logs if opened.recovered_unclean)
        shown = ", ".join(recovered[:5]) + (f" and {len(recovered) - 5} more" if len(recovered) > 5 else "")
        log.info(
            "loaded %d partition(s)%s in %.2f s%s",
            len(logs),
            f" ({what})" if what else "",
            time.monotonic() - started,
            f"; {len(recovered)} recovered after an unclean shutdown: {shown}" if recovered else "",
        )

    def partitions(self) -> Iterator[Partition]:
        """Every partition this broker holds a log of."""
        for topic in list(self._topics.values()):
            for partition in topic.partitions:
                if partition.log is not None:
                    yield partition

    # -- changes -------------------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        configs: Mapping[str, str] | None = None,
        *,
        internal: bool = False,
        validate_only: bool = False,
    ) -> Topic:
        """Create a topic (or, with ``validate_only``, check that it could be created)."""
        if self.admin is not None and not validate_only:
            self.admin.create_topic(name, num_partitions, dict(configs or {}))
            return self._topics[name]
        validate_topic_name(name)
        if name in self._topics:
            raise TopicAlreadyExists(f"topic {name!r} already exists")
        # Kafka's metric names map '.' to '_', so names equal up to that swap may not coexist.
        collision_key = name.replace(".", "_")
        for existing in self._topics:
            if existing.replace(".", "_") == collision_key:
                raise InvalidTopic(f"topic {name!r} collides with existing topic {existing!r}")
        if num_partitions < 1:
            raise InvalidPartitions(f"number of partitions must be at least 1, not {num_partitions}")
        overrides = {k: v for k, v in (configs or {}).items() if v is not None}
        if name in INTERNAL_TOPICS:
            overrides = {**INTERNAL_TOPIC_CONFIGS, **self._internal_topic_configs.get(name, {}), **overrides}
        self._validate_configs(overrides)
        topic = Topic(
            name=name, topic_id=uuid.uuid4(), configs=overrides, internal=internal or name in INTERNAL_TOPICS
        )
        if validate_only:
            return topic
        topic.partitions = self._open_new_partitions(topic, range(num_partitions))
        self._register(topic)
        self._persist()
        log.info(
            "created topic %s (id %s) with %d partitions, configs %s",
            name,
            topic.topic_id,
            num_partitions,
            overrides,
        )
        return topic

    def _open_new_partitions(self, topic: Topic, indexes: range) -> list[Partition]:
        """Create the partitions ``indexes`` of ``topic``, all or none: if one cannot be made (no file
        descriptor or disk space left), those made already are deleted and KafkaStorageError says why,
        so the request is answered with an error and nothing half-made stays behind."""
        opened: list[Partition] = []
        try:
            for index in indexes:
                self._remove_leftover_dir(topic.name, index)
                opened.append(self._open_partition(topic, index))
        except OSError as exc:
            for partition in opened:
                try:
                    partition.log.delete()
                except Exception:
                    log.exception("could not remove partition %s-%d", topic.name, partition.index)
            failed = indexes.start + len(opened)
            # The failed open may have made its directory already.
            shutil.rmtree(self._partition_dir(topic.name, failed), ignore_errors=True)
            log.error("cannot create partition %s-%d: %s", topic.name, failed, exc)
            raise KafkaStorageError(
                f"cannot create partition {topic.name}-{failed}: {exc.strerror or exc}"
            ) from exc
        return opened

    def _remove_leftover_dir(self, name: str, index: int) -> None:
        # A directory for a topic that does not exist yet is a leftover of a deletion interrupted
        # after the metadata was written: it must not come back as the new topic's data.
        directory = self._partition_dir(name, index)
        if directory.exists():
            log.warning("removing leftover partition directory %s", directory)
            shutil.rmtree(directory)

    def create_partitions(self, name: str, total: int, *, validate_only: bool = False) -> Topic:
        """Grow topic ``name`` to ``total`` partitions (Kafka never shrinks a topic)."""
        if self.admin is not None and not validate_only:
            self.admin.create_partitions(name, total)
            return self._topics[name]
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
        current = len(topic.partitions)
        if total <= current:
            raise InvalidPartitions(
                f"topic {name!r} has {current} partitions; the new count {total} must be larger"
            )
        if validate_only:
            return topic
        topic.partitions.extend(self._open_new_partitions(topic, range(current, total)))
        self._persist()
        log.info("topic %s now has %d partitions", name, total)
        return topic

    def alter_topic_configs(
        self, name: str, overrides: Mapping[str, str], *, validate_only: bool = False
    ) -> Topic:
        """Make ``overrides`` the topic's whole set of config overrides (AlterConfigs and
        IncrementalAlterConfigs compute it): validated, applied to every partition's log at once,
        and persisted. Raises UNKNOWN_TOPIC_OR_PARTITION or INVALID_CONFIG."""
        if self.admin is not None and not validate_only:
            self.admin.alter_topic_configs(name, dict(overrides))
            return self._topics[name]
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
        new = dict(overrides)
        self._validate_configs(new)
        if validate_only:
            return topic
        from onceflow.log.config import LogConfig

        topic.configs = new
        config = None
        for partition in topic.partitions:
            reconfigure = getattr(partition.log, "reconfigure", None)  # a test's log may have none
            if reconfigure is not None:
                config = config or LogConfig.from_topic_configs(self.effective_configs(topic))
                reconfigure(config)
        self._persist()
        log.info("topic %s configs are now %s", name, new)
        return topic

    def delete_topic(self, name: str) -> Topic:
        if self.admin is not None:
            topic = self._topics.get(name)
            self.admin.delete_topic(name)
            if topic is None:
                raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
            return topic
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
        del self._topics[name]
        del self._by_id[topic.topic_id]
        self._persist()  # first, so that a crash mid-delete never resurrects a half-deleted topic
        for partition in topic.partitions:
            partition.log.delete()
            partition.notify_new_data()  # long-polls see the partition is gone
        log.info("deleted topic %s (id %s)", name, topic.topic_id)
        return topic

    # -- driven by the metadata image (a cluster node) -----------------------------------------------

    def load_identity(self, cluster_id: str | None = None) -> None:
        """Read (or write) ``meta.properties`` only: the topics come from the metadata log. A node of
        a cluster names the ``cluster_id`` it belongs to: a data dir of another cluster is refused."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = self._load_or_create_meta(cluster_id)
        if cluster_id is not None and self.cluster_id != cluster_id:
            raise DataDirUnusable(
                f"{self.data_dir / META_FILE} belongs to cluster {self.cluster_id}, not to this node's cluster "
                f"{cluster_id} (set by cluster.id or derived from controller.quorum.voters): use another data dir"
            )

    def sync_topic(
        self,
        name: str,
        topic_id: uuid.UUID,
        configs: Mapping[str, str],
        partitions: Mapping[int, tuple[int, int, bool]],
        *,
        existing: bool = False,
    ) -> Topic:
        """Make the topic what the image says: ``partitions`` maps each index to (leader, leader
        epoch, whether this broker holds a replica). Logs of new local replicas are opened (created
        if new; a directory left by another topic id is removed first); a changed config reaches
        every open log. ``existing``: the topic was there before this process started (a missing
        directory is then worth a warning). A log that cannot be opened (no file descriptor or disk
        space left) stays closed and is listed in :meth:`open_failures`."""
        topic = self._topics.get(name)
        if topic is not None and topic.topic_id != topic_id:
            self.drop_topic(name)
            topic = None
        overrides = {k: v for k, v in configs.items() if v is not None}
        changed = topic is None or topic.configs != overrides
        if topic is None:
            topic = Topic(name=name, topic_id=topic_id, configs=overrides, internal=name in INTERNAL_TOPICS)
            self._register(topic)
        elif topic.configs != overrides:
            topic.configs = overrides
            self._reconfigure(topic)
        count = max(partitions, default=-1) + 1
        changed = changed or count > len(topic.partitions)
        while len(topic.partitions) < count:
            topic.partitions.append(Partition(name, len(topic.partitions), None, NO_LEADER, -1))
        for index, (leader, leader_epoch, local) in partitions.items():
            partition = topic.partitions[index]
            partition.leader_id, partition.leader_epoch = leader, leader_epoch
            if local and partition.log is None and (name, index) not in self._open_failures:
                try:
                    partition.log = self._open_local_log(topic, index, existing)
                except KafkaStorageError as exc:
                    self._open_failures[(name, index)] = str(exc)
            elif not local and partition.log is not None:
                partition.log.delete()
                partition.log = None
            partition.notify_new_data()  # a long-poll learns of a leadership change at once
        if changed:
            self._persist()
        return topic

    def open_failures(self, name: str) -> list[str]:
        """Why partitions of ``name`` this broker should hold could not be opened (empty: none)."""
        return [message for (topic, _index), message in self._open_failures.items() if topic == name]

    def _open_local_log(self, topic: Topic, index: int, existing: bool = False) -> Any:
        directory = self._partition_dir(topic.name, index)
        marker = directory / PARTITION_METADATA_FILE
        wanted = f"version: 0\ntopic_id: {_topic_id_text(topic.topic_id)}\n"
        made = False
        try:
            if directory.exists():
                try:
                    found = marker.read_text(encoding="utf-8")
                except FileNotFoundError:
                    found = None  # written by a single-node onceflow: adopted
                if found is not None and found != wanted:
                    log.warning("removing %s: it belonged to another topic of the same name", directory)
                    shutil.rmtree(directory)
            elif existing:
                log.warning("no directory for partition %s-%d; it starts empty", topic.name, index)
            made = not directory.exists()
            # The log first (it tells a new directory from one to recover), then the marker.
            opened = self._open_log(directory, self.effective_configs(topic))
            if not marker.exists():
                try:
                    write_atomically(marker, wanted)
                except OSError:
                    getattr(opened, "abandon", lambda: None)()
                    raise
        except OSError as exc:
            log.error("cannot open partition %s-%d: %s", topic.name, index, exc)
            if made:
                shutil.rmtree(directory, ignore_errors=True)
            raise KafkaStorageError(
                f"cannot create partition {topic.name}-{index}: {exc.strerror or exc}"
            ) from exc
        log.debug("opened partition %s-%d", topic.name, index)
        return opened

    def _reconfigure(self, topic: Topic) -> None:
        from onceflow.log.config import LogConfig

        config = None
        for partition in topic.partitions:
            reconfigure = getattr(partition.log, "reconfigure", None)
            if reconfigure is not None:
                config = config or LogConfig.from_topic_configs(self.effective_configs(topic))
                reconfigure(config)

    def drop_topic(self, name: str) -> Topic | None:
        """Forget a topic the image no longer has and delete its local logs."""
        topic = self._topics.pop(name, None)
        if topic is None:
            return None
        self._by_id.pop(topic.topic_id, None)
        failed = [key for key in self._open_failures if key[0] == name]
        for key in failed:
            del self._open_failures[key]
        self._persist()  # first: a crash mid-delete must not bring the topic back
        for partition in topic.partitions:
            if partition.log is not None:
                partition.log.delete()
            partition.notify_new_data()
        for _name, index in failed:  # what a failed open left (it could not clean up without descriptors)
            shutil.rmtree(self._partition_dir(name, index), ignore_errors=True)
        log.info("deleted topic %s (id %s)", name, topic.topic_id)
        return topic

    def stray_partition_dirs(self) -> list[Path]:
        """Partition directories (with a ``partition.metadata``) of no topic this broker holds."""
        held = {self._partition_dir(p.topic, p.index) for p in self.partitions()}
        return [
            marker.parent
            for marker in self.data_dir.glob(f"*/{PARTITION_METADATA_FILE}")
            if marker.parent not in held
        ]

    # -- housekeeping --------------------------------------------------------------------------------

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Run every partition's retention; returns the number of segments deleted."""
        deleted = 0
        for partition in self.partitions():
            try:
                deleted += partition.log.apply_retention(now_ms)
            except Exception:
                log.exception("retention failed for %s-%d", partition.topic, partition.index)
        return deleted

    def flush(self) -> None:
        for partition in self.partitions():
            partition.log.flush()

    def flush_due(self) -> int:
        """fsync the partitions whose flush.messages / flush.ms say so; returns how many."""
        flushed = 0
        for partition in self.partitions():
            try:
                flushed += partition.log.flush_if_due()
            except OSError:
                log.exception("flushing %s-%d failed", partition.topic, partition.index)
        return flushed

    def close(self) -> None:
        for partition in self.partitions():
            try:
                partition.log.close()
            except Exception:
                log.exception("closing %s-%d failed", partition.topic, partition.index)
        self._topics.clear()
        self._by_id.clear()
