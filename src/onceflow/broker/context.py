"""What a request handler gets: the request's identity and the broker's named services.

Deliberately not a service locator: each service is a named, typed attribute, and every one exists
before the broker serves its first request (the coordinators have loaded their partitions by then),
so no handler checks for a missing one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from onceflow.broker.config import BrokerConfig
    from onceflow.broker.faults import Faults
    from onceflow.broker.fetch_session import FetchSessionCache
    from onceflow.broker.group.service import GroupService
    from onceflow.broker.quotas.manager import ClientQuotas
    from onceflow.broker.topics import TopicManager
    from onceflow.broker.txn.pid_manager import ProducerIdManager
    from onceflow.broker.txn.service import TransactionService


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
    # The data dir's one producer-id allocator (InitProducerId; the transaction coordinator shares it).
    producer_ids: ProducerIdManager
    groups: GroupService
    transactions: TransactionService
    quotas: ClientQuotas | None = None  # client quotas (broker/quotas)


@dataclass(frozen=True, slots=True)
class RequestContext:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    services: BrokerServices

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
    def producer_ids(self) -> ProducerIdManager:
        return self.services.producer_ids

    @property
    def groups(self) -> GroupService:
        return self.services.groups

    @property
    def transactions(self) -> TransactionService:
        return self.services.transactions

    @property
    def quotas(self) -> ClientQuotas | None:
        return self.services.quotas


class CloseConnection(Exception):  # noqa: N818 - an instruction, not an error condition
    """Raised by a handler when Kafka's answer is to close the connection (e.g. a failed acks=0
    produce, where closing is the only way the client can learn of the failure)."""
