"""onceflow's client: an asyncio core (:mod:`.connection`, :mod:`.async_client`) and a blocking
facade (:mod:`.simple`). The full producer and consumer will grow here."""

from onceflow.client.admin import AdminClient, AsyncAdminClient
from onceflow.client.async_client import AsyncClient, ClusterMetadata, parse_bootstrap
from onceflow.client.connection import BrokerConnectionError, Connection
from onceflow.client.consumer import AsyncConsumer, Consumer, ConsumerConfig
from onceflow.client.producer import AsyncProducer, Producer, ProducerConfig
from onceflow.client.simple import ConsumedRecord, SimpleClient

__all__ = [
    "AdminClient",
    "AsyncAdminClient",
    "AsyncConsumer",
    "Consumer",
    "ConsumerConfig",
    "AsyncProducer",
    "Producer",
    "ProducerConfig",
    "AsyncClient",
    "BrokerConnectionError",
    "ClusterMetadata",
    "Connection",
    "ConsumedRecord",
    "SimpleClient",
    "parse_bootstrap",
]
