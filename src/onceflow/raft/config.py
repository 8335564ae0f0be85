"""The quorum's settings under Kafka's names (``controller.quorum.*``) and defaults, and the parser
of ``controller.quorum.voters``.

``from_properties`` takes the Kafka-named keys (as ``onceflow serve --config`` will pass them);
the dataclass fields are the same names in snake case without the common prefix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from onceflow.protocol.errors import InvalidConfig

PREFIX = "controller.quorum."
VOTERS = PREFIX + "voters"

# Kafka's raft client hard-codes these (KafkaRaftClient): batches and fetches of up to 8 MiB.
MAX_BATCH_SIZE_BYTES = 8 * 1024 * 1024
MAX_FETCH_SIZE_BYTES = MAX_BATCH_SIZE_BYTES
# A leader resigns when a majority of voters has not fetched for this many fetch timeouts.
CHECK_QUORUM_TIMEOUT_FACTOR = 1.5
# The unit of a candidate's exponential election backoff (Kafka's RETRY_BACKOFF_BASE_MS).
ELECTION_BACKOFF_BASE_MS = 100
# A leader forgets an observer that has not fetched for this long (Kafka's OBSERVER_SESSION_TIMEOUT_MS).
OBSERVER_SESSION_TIMEOUT_MS = 300_000


@dataclass(frozen=True)
class RaftConfig:
    """``controller.quorum.*`` with Kafka's defaults (QuorumConfig), plus the fetch wait the broker
    config ``replica.fetch.wait.max.ms`` gives Kafka's raft client."""

    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    append_linger_ms: int = 25
    # replica.fetch.wait.max.ms: how long the leader holds a Fetch that found nothing new.
    fetch_max_wait_ms: int = 500
    # Bytes of one FetchSnapshot answer (Kafka sends up to MAX_FETCH_SIZE_BYTES; small in tests).
    fetch_snapshot_max_bytes: int = MAX_FETCH_SIZE_BYTES
    fetch_max_bytes: int = MAX_FETCH_SIZE_BYTES

    _KAFKA_NAMES = {
        "election_timeout_ms": PREFIX + "election.timeout.ms",
        "fetch_timeout_ms": PREFIX + "fetch.timeout.ms",
        "election_backoff_max_ms": PREFIX + "election.backoff.max.ms",
        "request_timeout_ms": PREFIX + "request.timeout.ms",
        "retry_backoff_ms": PREFIX + "retry.backoff.ms",
        "append_linger_ms": PREFIX + "append.linger.ms",
        "fetch_max_wait_ms": "replica.fetch.wait.max.ms",
    }

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                name = self._KAFKA_NAMES.get(field.name, field.name)
                raise InvalidConfig(f"{name} must be a non-negative integer, got {value!r}")
        if self.fetch_snapshot_max_bytes < 1 or self.fetch_max_bytes < 1:
            raise InvalidConfig("fetch sizes must be at least one byte")

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> RaftConfig:
        """The settings among ``properties`` (Kafka names); others are left to their owners."""
        values = {}
        for field_name, kafka_name in cls._KAFKA_NAMES.items():
            if kafka_name in properties:
                text = str(properties[kafka_name]).strip()
                try:
                    values[field_name] = int(text)
                except ValueError:
                    raise InvalidConfig(f"{kafka_name} must be an integer, got {text!r}") from None
        return cls(**values)


def parse_voters(text: str) -> dict[int, tuple[str, int]]:
    """``controller.quorum.voters`` (``1@host:9093,2@host:9094``) as ``{node id: (host, port)}``.

    Raises ``InvalidConfig`` with one line naming what is wrong: a malformed entry, a repeated id.
    """
    voters: dict[int, tuple[str, int]] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        node, sep, address = entry.partition("@")
        host, colon, port = address.rpartition(":")
        if not sep or not colon or not host:
            raise InvalidConfig(f"{VOTERS}: {entry!r} is not of the form <node id>@<host>:<port>")
        try:
            node_id, port_number = int(node), int(port)
        except ValueError:
            raise InvalidConfig(f"{VOTERS}: {entry!r} needs a numeric node id and port") from None
        if node_id < 0 or not 0 < port_number < 65536:
            raise InvalidConfig(f"{VOTERS}: {entry!r} has an out-of-range node id or port")
        if node_id in voters:
            raise InvalidConfig(f"{VOTERS}: node id {node_id} appears more than once")
        voters[node_id] = (host.strip("[]"), port_number)
    if not voters:
        raise InvalidConfig(f"{VOTERS} names no voters")
    return voters
