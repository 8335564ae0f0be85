"""What a request handler gets: the request's identity and the broker's named services.

Deliberately not a service locator: each service is a named, typed attribute, and every one exists
before the broker serves its first request (the coordinators have loaded their partitions by then),
so no handler checks for a missing one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from onceflow.broker.security.session import LOCAL, Session

if TYPE_CHECKING:
    from onceflow.broker.cluster_metadata import ClusterMetadata
    from onceflow.broker.config import BrokerConfig
    from onceflow.broker.faults import Faults
    from onceflow.broker.fetch_session import FetchSessionCache
    from onceflow.broker.group.service import GroupService
    from onceflow.broker.metrics.broker_metrics import BrokerMetrics
    from onceflow.broker.quotas.manager import ClientQuotas
    from onceflow.broker.replica.service import ReplicationService
    from onceflow.broker.security.authorizer import StandardAuthorizer
    from onceflow.broker.security.credentials import ScramCredentials
    from onceflow.broker.topics import TopicManager
    from onceflow.broker.txn.coordinator import ProducerIdSource
    from onceflow.broker.txn.service import TransactionService
    from onceflow.server.controller_channel import ControllerChannel
    from onceflow.server.txn_router import TransactionRouter


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
    # The broker's one producer-id allocator (InitProducerId; the transaction coordinator shares it):
    # a single node's ProducerIdManager, a cluster broker's blocks from the controller.
    producer_ids: ProducerIdSource
    groups: GroupService
    transactions: TransactionService
    quotas: ClientQuotas  # client quotas (broker/quotas)
    # The cluster: the replayed metadata image (broker.cluster_metadata.ClusterMetadata) and the
    # channel to the active controller that admin requests are forwarded on.
    metadata: ClusterMetadata | None = None
    controller: ControllerChannel | None = None
    # Which broker coordinates a transactional id, and asking it (server.txn_router); None: this one.
    txn_router: TransactionRouter | None = None
    # A cluster broker: client quotas are the metadata image's, changed through the controller.
    quotas_from_metadata: bool = False
    # Partition replication (broker.replica.service.ReplicationService); None: partitions are not
    # replicated (a broker run without a node, in tests and tools).
    replication: ReplicationService | None = None
    # broker/security: the ACL authorizer (None: none configured, everything is allowed, as in Kafka)
    # and the SCRAM credentials (None only in tools and tests that build services by hand).
    authorizer: StandardAuthorizer | None = None
    scram: ScramCredentials | None = None
    # A cluster broker: ACLs and SCRAM credentials are the metadata image's, changed through the
    # controller (CreateAcls, DeleteAcls and AlterUserScramCredentials are forwarded).
    security_from_metadata: bool = False
    # The broker's metrics counters, only when it serves metrics (metrics.port): Produce and Fetch count.
    metrics: BrokerMetrics | None = None


@dataclass(frozen=True, slots=True)
class RequestContext:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    services: BrokerServices
    # The connection's listener, client address and principal (broker/security/session).
    session: Session = LOCAL

    @property
    def listener(self) -> str:
        """The listener the request came in on (answers name every broker's endpoint on it)."""
        return self.session.listener

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
    def producer_ids(self) -> ProducerIdSource:
        return self.services.producer_ids

    @property
    def groups(self) -> GroupService:
        return self.services.groups

    @property
    def transactions(self) -> TransactionService:
        return self.services.transactions

    @property
    def quotas(self) -> ClientQuotas:
        return self.services.quotas

    @property
    def metadata(self) -> ClusterMetadata | None:
        return self.services.metadata

    @property
    def txn_router(self) -> TransactionRouter | None:
        return self.services.txn_router

    @property
    def controller(self) -> ControllerChannel | None:
        return self.services.controller


class CloseConnection(Exception):  # noqa: N818 - an instruction, not an error condition
    """Raised by a handler when Kafka's answer is to close the connection (e.g. a failed acks=0
    produce, where closing is the only way the client can learn of the failure)."""
