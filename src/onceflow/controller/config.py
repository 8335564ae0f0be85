"""The controller's settings, with Kafka's names and defaults, and the result of an operation."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from onceflow.metadata.image import DEFAULT_METADATA_VERSION

# (resource type, resource name, the resource's configs after the change) -> an error message, or
# None if they are valid. The controller knows no config semantics of its own: the server passes
# the broker's topic-config checks here (onceflow.log.config), keeping the layers apart.
ConfigValidator = Callable[[int, str, Mapping[str, str]], "str | None"]

# Kafka hands out producer ids in blocks of this many (ProducerIdControlManager).
PRODUCER_ID_BLOCK_SIZE = 1000


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    node_id: int = 1
    # The cluster id brokers must present when they register; None accepts any (tests).
    cluster_id: str | None = None
    broker_session_timeout_ms: int = 9000
    num_partitions: int = 1
    default_replication_factor: int = 1
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    # Kafka's QuorumController checks for leaderless partitions of unclean topics this often.
    unclean_leader_election_interval_ms: int = 5 * 60 * 1000
    # metadata.max.idle.interval.ms: a NoOpRecord after this long without a write (0: never).
    metadata_max_idle_interval_ms: int = 500
    # How many preferred-leader elections one rebalance pass may start (Kafka's maxElectionsPerImbalance).
    max_elections_per_imbalance: int = 1000
    metadata_version: int = DEFAULT_METADATA_VERSION
    config_validator: ConfigValidator | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class ControllerResult:
    """What one operation decided: the records to append (in one batch, in this order) and the
    response to send once the log has committed up to ``wait_offset``.

    ``wait_offset`` is the offset of the last record the response depends on: this operation's last
    record, or, for an operation that wrote nothing, the last record written before it (the answer
    may describe uncommitted state; it must not be sent before that state is committed). -1: answer
    at once.
    """

    records: tuple[Any, ...]
    response: Any
    wait_offset: int = -1
