"""What a request handler gets: the request's identity and the broker's named services.

Deliberately not a service locator: each service is a named attribute, and services that later
issues add (producer ids, group and transaction coordinators) are ``None`` until they exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from onceflow.broker.config import BrokerConfig
    from onceflow.broker.faults import Faults
    from onceflow.broker.fetch_session import FetchSessionCache
    from onceflow.broker.quotas.manager import ClientQuotas
    from onceflow.broker.topics import TopicManager


@dataclass(slots=True)
class BrokerServices:
    """The broker-wide services shared by every request."""

    config: BrokerConfig
    topics: TopicManager
    faults: Faults
    cluster_id: str
    advertised_host: str
    advertised_port: int
    fetch_sessions: FetchSessionCache
    producer_ids: Any = None
    groups: Any = None
    transactions: Any = None
    quotas: ClientQuotas | None = None  # client quotas (broker/quotas)
    # The cluster: the replayed metadata image (broker.cluster_metadata.ClusterMetadata) and the
    # channel to the active controller that admin requests are forwarded on.
    metadata: Any = None
    controller: Any = None
    # Which broker coordinates a transactional id, and asking it (server.txn_router); None: this one.
    txn_router: Any = None
    # A cluster broker: client quotas are the metadata image's, changed through the controller.
    quotas_from_metadata: bool = False
    # Partition replication (broker.replica.service.ReplicationService); None: partitions are not
    # replicated (a broker run without a node, in tests and tools).
    replication: Any = None


@dataclass(frozen=True, slots=True)
class RequestContext:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    services: BrokerServices
    listener: str = "PLAINTEXT"  # the listener the request came in on

    @property
    def config(self) -> BrokerConfig:
        return self.services.config

    @property
    def topics(self) -> TopicManager:
        return self.services.topics

    @property
    def faults(self) -> Faults:
        return self.services.faults

    @property
    def fetch_sessions(self) -> FetchSessionCache:
        return self.services.fetch_sessions

    @property
    def producer_ids(self) -> Any:
        return self.services.producer_ids

    @property
    def groups(self) -> Any:
        return self.services.groups

    @property
    def transactions(self) -> Any:
        return self.services.transactions

    @property
    def quotas(self) -> ClientQuotas | None:
        return self.services.quotas

    @property
    def metadata(self) -> Any:
        return self.services.metadata

    @property
    def txn_router(self) -> Any:
        return self.services.txn_router

    @property
    def controller(self) -> Any:
        return self.services.controller


class CloseConnection(Exception):  # noqa: N818 - an instruction, not an error condition
    """Raised by a handler when Kafka's answer is to close the connection (e.g. a failed acks=0
    produce, where closing is the only way the client can learn of the failure)."""
