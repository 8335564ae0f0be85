"""How a broker reaches the active controller: in process when its own node's controller is active,
else over the network to the leader's controller listener (Kafka's ``NodeToControllerChannelManager``).

Admin requests a client sent to the broker (CreateTopics, DeleteTopics, configs ...) and the broker's
own requests (BrokerRegistration, BrokerHeartbeat, AllocateProducerIds) both go through
:meth:`ControllerChannel.send`: it finds the active controller, sends the request as it is (on the
controller listener; no Envelope: the broker has already authorized it), and retries on
NOT_CONTROLLER or a lost connection until the request's time is up, as Kafka's channel does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from onceflow.controller.quorum_controller import NotController
from onceflow.protocol.errors import ErrorCode, KafkaError
from onceflow.server.controller_apis import CONTROLLER_APIS, operation_for
from onceflow.server.controller_runner import ControllerRunner
from onceflow.server.quorum import MetadataQuorum

log = logging.getLogger(__name__)

RETRY_BACKOFF_S = 0.05
LEADER_CHECK_S = 0.1  # how often a request waiting on a remote controller checks who leads the quorum
# A request sent on to a remote controller: (address, api key, version, request) -> response.
RemoteSend = Callable[[tuple[str, int], int, int, Any], Awaitable[Any]]


class ControllerUnavailable(KafkaError):
    """No controller could be reached in time (answered as the API's retriable error)."""

    code = ErrorCode.NOT_CONTROLLER


class ControllerChannel:
    def __init__(
        self,
        quorum: MetadataQuorum,
        local: ControllerRunner | None,
        remote_send: RemoteSend | None = None,
        *,
        timeout_s: float = 30.0,
    ) -> None:
        self.quorum = quorum
        self.local = local
        self.remote_send = remote_send
        self.timeout_s = timeout_s

    async def send(self, api_key: int, version: int, request: Any, timeout_s: float | None = None) -> Any:
        """The active controller's response to ``request`` (sent at ``version``)."""
        api = CONTROLLER_APIS[api_key]
        version = min(version, api.max_version)
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        last: Exception | None = None
        while True:
            try:
                return await self._send_once(api_key, version, request)
            except (TimeoutError, NotController, ConnectionError, OSError) as exc:
                last = exc
            except KafkaError as exc:
                if exc.code is not ErrorCode.NOT_CONTROLLER:
                    raise
                last = exc
            if time.monotonic() >= deadline:
                raise ControllerUnavailable(f"no active controller answered in time: {last}")
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def describe_quorum(self, version: int) -> Any:
        """DescribeQuorum, answered by the quorum's leader (this node's own quorum when it leads)."""
        from kafka.protocol.admin import DescribeQuorumRequest

        from onceflow.broker.handlers.describe_quorum import METADATA_TOPIC, response_for

        description = self.quorum.describe()
        if description is not None:
            return response_for(description, version)
        address = self.quorum.leader_address()
        if address is None or self.remote_send is None:
            raise ControllerUnavailable("no quorum leader is known right now")
        topic = DescribeQuorumRequest.TopicData
        request = DescribeQuorumRequest(
            topics=[topic(topic_name=METADATA_TOPIC, partitions=[topic.PartitionData(partition_index=0)])]
        )
        try:
            return await self.remote_send(address, 55, version, request)
        except (TimeoutError, ConnectionError, OSError) as exc:
            raise ControllerUnavailable(f"the quorum's leader did not answer: {exc}") from exc

    async def _send_once(self, api_key: int, version: int, request: Any) -> Any:
        local = self.local
        if local is not None and local.active:
            return await local.call(operation_for(local.controller, api_key, request, version))
        leader_id, _epoch = self.quorum.leader
        if local is not None and leader_id == self.quorum.node_id:
            raise NotController("this node leads the quorum but its controller is not active yet")
        address = self.quorum.leader_address()
        if address is None or self.remote_send is None:
            raise NotController("no controller is known to lead right now")
        response = await self._send_while_leading(address, api_key, version, request)
        if says_not_controller(response):
            raise NotController(f"{address[0]}:{address[1]} is not the active controller")
        return response

    async def _send_while_leading(
        self, address: tuple[str, int], api_key: int, version: int, request: Any
    ) -> Any:
        """The remote controller's answer, given up as soon as the quorum names another leader: a
        controller that stopped (SIGSTOP, a cut link) may hold the connection open without answering,
        and its successor must not wait for that request's timeout (Kafka's channel moves to the new
        controller too)."""
        leader = self.quorum.leader
        send = asyncio.ensure_future(self.remote_send(address, api_key, version, request))
        try:
            while True:
                done, _pending = await asyncio.wait({send}, timeout=LEADER_CHECK_S)
                if done:
                    return send.result()
                if self.quorum.leader != leader:
                    raise NotController(f"the quorum's leader moved from node {leader[0]} while it was asked")
        finally:
            if not send.done():
                send.cancel()


def says_not_controller(response: Any) -> bool:
    """Whether a controller's answer is NOT_CONTROLLER (at the top, or for every entry)."""
    if getattr(response, "error_code", None) == ErrorCode.NOT_CONTROLLER:
        return True
    for field in ("topics", "results", "responses"):
        items = getattr(response, field, None)
        if items:
            return all(getattr(item, "error_code", 0) == ErrorCode.NOT_CONTROLLER for item in items)
    return False
