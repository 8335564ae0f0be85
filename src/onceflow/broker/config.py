"""The broker's configuration: Kafka's broker config names in snake case, with Kafka's defaults.

Only the host, port and data dir differ from a Kafka broker's defaults (onceflow listens on loopback
and keeps its data under the working directory unless told otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# The levels of the transaction.version feature this broker supports (Kafka 4.x: 0..2).
MIN_TRANSACTION_VERSION = 0
MAX_TRANSACTION_VERSION = 2


@dataclass
class BrokerConfig:
    host: str = "127.0.0.1"
    port: int = 9092  # 0 = any free port; Broker.port tells which one was bound
    data_dir: Path = field(default_factory=lambda: Path("./onceflow-data"))
    node_id: int = 0
    auto_create_topics_enable: bool = True  # auto.create.topics.enable
    num_partitions: int = 1  # num.partitions: partitions of auto-created topics and of CreateTopics(-1)
    default_replication_factor: int = 1  # default.replication.factor
    socket_request_max_bytes: int = 104857600  # socket.request.max.bytes (100 MB)
    # The memory of all requests being read or waiting for their handler (KIP-72's pool; see
    # broker/memory_pool.py). Kafka's default is -1, no bound: a few hundred connections announcing
    # big frames then took the broker past the machine's memory. 256 MiB holds a few hundred 1 MB
    # produce requests at once, 2.5 times the largest single request; 0 or less: no bound, as in Kafka.
    queued_max_request_bytes: int = 268435456  # queued.max.request.bytes
    # Connection limits (broker/connection_limits.py; Kafka's names and defaults, 2147483647 = none): a
    # connection over one is closed at once. Overrides: "host:count,host:count".
    max_connections: int = 2147483647  # max.connections
    max_connections_per_ip: int = 2147483647  # max.connections.per.ip
    max_connections_per_ip_overrides: str = ""  # max.connections.per.ip.overrides
    max_connection_creation_rate: int = 2147483647  # max.connection.creation.rate (per second)
    # The sample windows rates are measured over (connection creation rate, client quotas).
    quota_window_num: int = 11  # quota.window.num
    quota_window_size_seconds: int = 1  # quota.window.size.seconds
    # A connection that reads and writes nothing for this long is closed (negative: never).
    connections_max_idle_ms: int = 600000  # connections.max.idle.ms (10 minutes)
    # Defaults of the topic configs for topics that do not set their own (Kafka's broker names; the
    # topic config each one backs is in TOPIC_CONFIG_DEFAULTS_FROM). `onceflow serve` also takes
    # log.retention.hours / log.retention.minutes and log.roll.hours, as Kafka does.
    message_max_bytes: int = 1048588  # message.max.bytes -> max.message.bytes
    log_segment_bytes: int = 1073741824  # log.segment.bytes -> segment.bytes
    log_roll_ms: int = 604800000  # log.roll.ms -> segment.ms
    log_retention_ms: int = 604800000  # log.retention.ms -> retention.ms (-1: keep for ever)
    log_retention_bytes: int = -1  # log.retention.bytes -> retention.bytes
    log_index_interval_bytes: int = 4096  # log.index.interval.bytes -> index.interval.bytes
    log_index_size_max_bytes: int = 10485760  # log.index.size.max.bytes -> segment.index.bytes
    log_message_timestamp_type: str = "CreateTime"  # log.message.timestamp.type -> message.timestamp.type
    log_cleanup_policy: str = "delete"  # log.cleanup.policy -> cleanup.policy
    log_cleaner_delete_retention_ms: int = 86400000  # log.cleaner.delete.retention.ms -> delete.retention.ms
    log_cleaner_min_cleanable_ratio: float = (
        0.5  # log.cleaner.min.cleanable.ratio -> min.cleanable.dirty.ratio
    )
    log_cleaner_min_compaction_lag_ms: int = 0  # log.cleaner.min.compaction.lag.ms -> min.compaction.lag.ms
    log_cleaner_max_compaction_lag_ms: int = (
        2**63 - 1
    )  # log.cleaner.max.compaction.lag.ms -> max.compaction.lag.ms
    compression_type: str = "producer"  # compression.type -> compression.type
    compression_gzip_level: int = -1  # compression.gzip.level
    compression_lz4_level: int = 9  # compression.lz4.level
    compression_zstd_level: int = 3  # compression.zstd.level
    min_insync_replicas: int = 1  # min.insync.replicas
    log_message_timestamp_before_max_ms: int = 2**63 - 1  # -> message.timestamp.before.max.ms
    log_message_timestamp_after_max_ms: int = 2**63 - 1  # -> message.timestamp.after.max.ms
    log_flush_interval_messages: int = 2**63 - 1  # log.flush.interval.messages -> flush.messages
    log_flush_interval_ms: int = 2**63 - 1  # log.flush.interval.ms -> flush.ms
    unclean_leader_election_enable: bool = False  # unclean.leader.election.enable (the controller's)
    log_preallocate: bool = False  # log.preallocate -> preallocate (no effect)
    log_segment_delete_delay_ms: int = 60000  # -> file.delete.delay.ms (no effect: deleted at once)
    log_roll_jitter_ms: int = 0  # log.roll.jitter.ms -> segment.jitter.ms (no effect)
    log_local_retention_ms: int = -2  # -> local.retention.ms (no effect: no tiered storage)
    log_local_retention_bytes: int = -2  # -> local.retention.bytes (no effect)
    log_message_downconversion_enable: bool = True  # -> message.downconversion.enable (no effect)
    log_retention_check_interval_ms: int = 300000  # log.retention.check.interval.ms
    # How often partitions are checked against flush.ms. Kafka's default is Long.MAX_VALUE (never),
    # which leaves flush.ms without effect on a partition that goes quiet; here a check is cheap.
    log_flush_scheduler_interval_ms: int = 1000  # log.flush.scheduler.interval.ms
    # Compaction of cleanup.policy=compact topics (__consumer_offsets and __transaction_state among them).
    log_cleaner_enable: bool = True  # log.cleaner.enable
    log_cleaner_backoff_ms: int = 15000  # log.cleaner.backoff.ms: the pause between cleaning passes
    # log.cleaner.dedupe.buffer.size: the memory one cleaning's offset map may use (a key costs its length
    # plus ~100 bytes in CPython); a cleaning whose dirty keys do not fit stops early and the next goes on.
    log_cleaner_dedupe_buffer_size: int = 134217728
    # segment.bytes of the internal topics when they are created (the cleaner compacts sealed segments).
    offsets_topic_segment_bytes: int = 104857600  # offsets.topic.segment.bytes
    transaction_state_log_segment_bytes: int = 104857600  # transaction.state.log.segment.bytes
    group_initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    # Groups of the consumer protocol (KIP-848): how often members heartbeat, and after how long
    # without a heartbeat a member is removed. A rebalance reaches a member at its next heartbeat.
    group_consumer_heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms
    group_consumer_session_timeout_ms: int = 45000  # group.consumer.session.timeout.ms
    # Incremental fetch sessions (KIP-227; broker/fetch_session.py): how many the broker keeps (0: none,
    # every fetch is answered sessionless), and how long one must be idle, or have existed, before a
    # new session may evict it.
    max_incremental_fetch_session_cache_slots: int = 1000  # max.incremental.fetch.session.cache.slots
    min_incremental_fetch_session_eviction_ms: int = 120000  # min.incremental.fetch.session.eviction.ms
    # Transaction coordinator (broker/txn): Kafka's names and defaults.
    transaction_max_timeout_ms: int = 900000  # transaction.max.timeout.ms
    transactional_id_expiration_ms: int = 604800000  # transactional.id.expiration.ms
    transaction_state_log_num_partitions: int = 50  # transaction.state.log.num.partitions
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3600000
    # transaction.two.phase.commit.enable: whether producers may ask for KIP-939 two-phase commit
    # (InitProducerId v6 with enable2Pc); refused per producer with TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # while false, Kafka's default.
    transaction_two_phase_commit_enable: bool = False
    # transaction.version: the finalized level of Kafka's feature (KIP-890), as `kafka-storage format
    # --feature transaction.version=N` sets it; 2 is the default of a new Kafka 4.x cluster. ApiVersions
    # advertises it and clients pick their transaction protocol from it (2: implicit partitions, an
    # epoch bump per EndTxn v5). As in Kafka, the broker answers each request by its API version.
    transaction_version: int = 2
    # Partition replication (broker/replica; Kafka's names and defaults).
    replica_lag_time_max_ms: int = 30000  # replica.lag.time.max.ms: out of the ISR after this long behind
    replica_fetch_max_bytes: int = 1048576  # replica.fetch.max.bytes (per partition)
    replica_fetch_response_max_bytes: int = 10485760  # replica.fetch.response.max.bytes
    replica_fetch_wait_max_ms: int = 500  # replica.fetch.wait.max.ms
    replica_fetch_min_bytes: int = 1  # replica.fetch.min.bytes
    replica_fetch_backoff_ms: int = 1000  # replica.fetch.backoff.ms
    replica_high_watermark_checkpoint_interval_ms: int = 5000  # replica.high.watermark.checkpoint.interval.ms
    # The internal topics' replication factors (a cluster of one broker uses 1) and the transaction
    # log's min.insync.replicas; __consumer_offsets takes the broker's min.insync.replicas, as in Kafka.
    offsets_topic_replication_factor: int = 3  # offsets.topic.replication.factor
    transaction_state_log_replication_factor: int = 3  # transaction.state.log.replication.factor
    transaction_state_log_min_isr: int = 2  # transaction.state.log.min.isr
    # Prometheus metrics (broker/metrics; docs/metrics.md): HTTP /metrics on this port, -1: none, 0: any
    # free port. onceflow's own settings: Kafka leaves metrics to the JMX exporter, whose names we use.
    metrics_port: int = -1  # metrics.port
    metrics_host: str = ""  # metrics.host: the address to bind (empty: the broker's host)
    # Fault points by name -> probability 0..1, plus parameters such as "delay-response.ms".
    faults: dict[str, float] = field(default_factory=dict)
    # TLS, SASL and the authorizer, as Kafka's settings by their own names (ssl.*, sasl.*,
    # listener.name.<l>.*, authorizer.class.name, super.users, ...): broker/security/config.py reads
    # and checks them against the node's listeners. Empty: no TLS, no SASL, no authorizer.
    security: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir)
        self._check_topic_config_defaults()
        if 0 < self.queued_max_request_bytes < self.socket_request_max_bytes:
            raise ValueError(
                f"queued.max.request.bytes ({self.queued_max_request_bytes}) must be at least "
                f"socket.request.max.bytes ({self.socket_request_max_bytes}), or <= 0 for no bound"
            )
        for name in ("max_connections", "max_connections_per_ip", "max_connection_creation_rate"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name.replace('_', '.')} must be >= 0, not {getattr(self, name)}")
        from onceflow.broker.connection_limits import parse_per_ip_overrides

        overrides = parse_per_ip_overrides(self.max_connections_per_ip_overrides)  # raises ValueError
        if self.max_connections_per_ip == 0 and not overrides:
            raise ValueError(
                "max.connections.per.ip can be 0 only if max.connections.per.ip.overrides is set"
            )
        if self.quota_window_num < 1 or self.quota_window_size_seconds < 1:
            raise ValueError(
                f"quota.window.num and quota.window.size.seconds must be >= 1, not "
                f"{self.quota_window_num} and {self.quota_window_size_seconds}"
            )
        if self.connections_max_idle_ms == 0:
            raise ValueError("connections.max.idle.ms must be positive (or negative: never close), not 0")
        for name in ("offsets_topic_segment_bytes", "transaction_state_log_segment_bytes"):
            value = getattr(self, name)
            if not 14 <= value <= 2**31 - 1:  # segment.bytes' own bounds
                raise ValueError(f"{name.replace('_', '.')} must be in [14, {2**31 - 1}], not {value}")
        if self.log_flush_scheduler_interval_ms <= 0:
            raise ValueError(
                f"log.flush.scheduler.interval.ms must be positive, not {self.log_flush_scheduler_interval_ms}"
            )
        if self.log_cleaner_backoff_ms < 0:
            raise ValueError(f"log.cleaner.backoff.ms must be >= 0, not {self.log_cleaner_backoff_ms}")
        if self.max_incremental_fetch_session_cache_slots < 0:
            raise ValueError(
                "max.incremental.fetch.session.cache.slots must be >= 0, "
                f"not {self.max_incremental_fetch_session_cache_slots}"
            )
        if self.min_incremental_fetch_session_eviction_ms < 0:
            raise ValueError(
                "min.incremental.fetch.session.eviction.ms must be >= 0, "
                f"not {self.min_incremental_fetch_session_eviction_ms}"
            )
        if not -1 <= self.metrics_port <= 65535:
            raise ValueError(
                f"metrics.port must be -1 (no metrics), 0 (any free port) or a port, not {self.metrics_port}"
            )
        if self.metrics_port > 0 and self.metrics_port == self.port and self.metrics_host in ("", self.host):
            raise ValueError(f"metrics.port {self.metrics_port} is the broker's own port: choose another")
        if not MIN_TRANSACTION_VERSION <= self.transaction_version <= MAX_TRANSACTION_VERSION:
            raise ValueError(
                f"transaction.version must be {MIN_TRANSACTION_VERSION}..{MAX_TRANSACTION_VERSION}, "
                f"not {self.transaction_version}"
            )

    def topic_config_defaults(self) -> dict[str, str]:
        """Every topic config's value for a topic that does not set it: this broker's settings, and
        Kafka's defaults for the few topic configs no broker config backs."""
        from onceflow.log.config import TOPIC_CONFIG_DEFAULTS

        broker = {
            name: _config_text(getattr(self, attr)) for name, attr in TOPIC_CONFIG_DEFAULTS_FROM.items()
        }
        return {**TOPIC_CONFIG_DEFAULTS, **broker}

    def _check_topic_config_defaults(self) -> None:
        from onceflow.log.config import LogConfig
        from onceflow.protocol.errors import InvalidConfig

        for name, value in self.topic_config_defaults().items():
            if name not in TOPIC_CONFIG_DEFAULTS_FROM:
                continue
            try:
                LogConfig.from_topic_configs({name: value})
            except InvalidConfig as exc:
                raise ValueError(f"{TOPIC_CONFIG_DEFAULTS_FROM[name].replace('_', '.')}: {exc}") from None


def _config_text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# Topic config -> the BrokerConfig field that is its default (Kafka's broker config of that name).
TOPIC_CONFIG_DEFAULTS_FROM = {
    "segment.bytes": "log_segment_bytes",
    "segment.ms": "log_roll_ms",
    "retention.ms": "log_retention_ms",
    "retention.bytes": "log_retention_bytes",
    "index.interval.bytes": "log_index_interval_bytes",
    "segment.index.bytes": "log_index_size_max_bytes",
    "message.timestamp.type": "log_message_timestamp_type",
    "max.message.bytes": "message_max_bytes",
    "cleanup.policy": "log_cleanup_policy",
    "delete.retention.ms": "log_cleaner_delete_retention_ms",
    "min.cleanable.dirty.ratio": "log_cleaner_min_cleanable_ratio",
    "min.compaction.lag.ms": "log_cleaner_min_compaction_lag_ms",
    "max.compaction.lag.ms": "log_cleaner_max_compaction_lag_ms",
    "compression.type": "compression_type",
    "compression.gzip.level": "compression_gzip_level",
    "compression.lz4.level": "compression_lz4_level",
    "compression.zstd.level": "compression_zstd_level",
    "min.insync.replicas": "min_insync_replicas",
    "message.timestamp.before.max.ms": "log_message_timestamp_before_max_ms",
    "message.timestamp.after.max.ms": "log_message_timestamp_after_max_ms",
    "flush.messages": "log_flush_interval_messages",
    "flush.ms": "log_flush_interval_ms",
    "unclean.leader.election.enable": "unclean_leader_election_enable",
    "preallocate": "log_preallocate",
    "file.delete.delay.ms": "log_segment_delete_delay_ms",
    "segment.jitter.ms": "log_roll_jitter_ms",
    "local.retention.ms": "log_local_retention_ms",
    "local.retention.bytes": "log_local_retention_bytes",
    "message.downconversion.enable": "log_message_downconversion_enable",
}
