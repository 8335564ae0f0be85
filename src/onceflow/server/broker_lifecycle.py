"""A broker's life as the controller sees it (Kafka's ``BrokerLifecycleManager``).

1. **Register** (BrokerRegistration): node id, cluster id, a random incarnation id for this process,
   its advertised listeners and the ``metadata.version`` range it runs. The answer's broker epoch
   names this incarnation from then on. A refused registration (DUPLICATE_BROKER_REGISTRATION while an
   older incarnation's session lives) is retried; a wrong cluster id or version is fatal.
2. **Heartbeat** every ``broker.heartbeat.interval.ms`` (BrokerHeartbeat) with the metadata offset it
   has replayed: the controller keeps it **fenced** (no leaderships, not listed to clients) until that
   offset reaches its registration, then unfences it.
3. **Controlled shutdown** (SIGTERM): heartbeats ask ``WantShutDown``; the controller moves its
   leaderships away and answers ``ShouldShutDown`` once every other broker knows, and the broker
   stops then (or when ``controlled.shutdown`` gives up after its timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Sequence

from onceflow.metadata.image import DEFAULT_METADATA_VERSION, METADATA_VERSION
from onceflow.protocol.errors import ErrorCode, KafkaError
from onceflow.protocol.messages import BrokerHeartbeatRequest, BrokerRegistrationRequest
from onceflow.server.config import Listener
from onceflow.server.controller_channel import ControllerChannel, ControllerUnavailable

log = logging.getLogger(__name__)

MIN_METADATA_VERSION = 1
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
# How long a registration waits for an active controller before saying so in the log (and waiting on).
QUORUM_WAIT_LOG_S = 10.0
# Errors of a registration worth trying again (the old incarnation's session may still expire).
_RETRY_REGISTRATION = {ErrorCode.DUPLICATE_BROKER_REGISTRATION, ErrorCode.NOT_CONTROLLER}


class RegistrationRefused(RuntimeError):
    """The controller will never take this broker (another cluster, an unsupported version)."""


class BrokerLifecycle:
    def __init__(
        self,
        node_id: int,
        cluster_id: str,
        channel: ControllerChannel,
        metadata,
        listeners: Sequence[Listener],
        *,
        heartbeat_interval_ms: int = 2000,
        rack: str | None = None,
        quorum_hint: str = "",
    ) -> None:
        self.node_id = node_id
        self.quorum_hint = quorum_hint  # the voters, for the log line of a quorum that cannot elect
        self.cluster_id = cluster_id
        self.channel = channel
        self.metadata = metadata
        self.listeners = tuple(listeners)
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000.0
        self.rack = rack
        self.incarnation_id = uuid.uuid4()
        self.broker_epoch = -1
        self.fenced = True
        self.want_shut_down = False
        self.should_shut_down = asyncio.Event()
        self.unfenced = asyncio.Event()
        self._heartbeats: asyncio.Task[None] | None = None
        self._beat_now = asyncio.Event()
        self._last_answer = 0.0  # loop time of the last heartbeat the controller answered

    async def register(self) -> int:
        """Register (retrying while the controller says to wait); returns the broker epoch."""
        request = BrokerRegistrationRequest(
            broker_id=self.node_id,
            cluster_id=self.cluster_id,
            incarnation_id=self.incarnation_id,
            listeners=[
                BrokerRegistrationRequest.Listener(
                    name=lst.name,
                    host=lst.host,
                    port=lst.port,
                    security_protocol=SECURITY_PROTOCOL_IDS[lst.security_protocol],
                )
                for lst in self.listeners
            ],
            features=[
                BrokerRegistrationRequest.Feature(
                    name=METADATA_VERSION,
                    min_supported_version=MIN_METADATA_VERSION,
                    max_supported_version=DEFAULT_METADATA_VERSION,
                )
            ],
            rack=self.rack,
            is_migrating_zk_broker=False,
            log_dirs=[],
            previous_broker_epoch=-1,
        )
        waited = False
        while True:
            try:
                response = await self.channel.send(62, 3, request, timeout_s=QUORUM_WAIT_LOG_S)
            except ControllerUnavailable:
                log.warning(
                    "broker %d: no active controller yet; the metadata quorum needs a majority of its voters "
                    "up to elect one (%s)",
                    self.node_id,
                    self.quorum_hint,
                )
                continue
            code = ErrorCode(response.error_code)
            if code is ErrorCode.NONE:
                self.broker_epoch = response.broker_epoch
                log.info(
                    "broker %d registered (incarnation %s, epoch %d)",
                    self.node_id,
                    self.incarnation_id,
                    self.broker_epoch,
                )
                return self.broker_epoch
            if code not in _RETRY_REGISTRATION:
                raise RegistrationRefused(f"the controller refused broker {self.node_id}: {code.name}")
            if not waited:
                if code is ErrorCode.DUPLICATE_BROKER_REGISTRATION:
                    log.warning(
                        "broker %d: another broker with node.id %d is registered and alive; this one waits "
                        "for it to stop (or its session to expire). Two live nodes must not share a node.id.",
                        self.node_id,
                        self.node_id,
                    )
                else:
                    log.info("broker %d registration waits: %s", self.node_id, code.name)
                waited = True
            await asyncio.sleep(min(self.heartbeat_interval_s, 0.5))

    def start_heartbeats(self) -> None:
        self._heartbeats = asyncio.create_task(self._run(), name="broker-heartbeats")

    async def stop(self) -> None:
        if self._heartbeats is not None:
            self._heartbeats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeats
            self._heartbeats = None

    async def wait_unfenced(self) -> None:
        self._beat_now.set()
        await self.unfenced.wait()

    async def controlled_shutdown(self, timeout_s: float, unreachable_s: float = 9.0) -> bool:
        """Ask to shut down and wait until the controller agrees; False if it did not within
        ``timeout_s``, or if no controller answered a heartbeat for ``unreachable_s`` (the broker
        session timeout: a controller would have fenced this broker by then anyway)."""
        self.want_shut_down = True
        self._beat_now.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not self.should_shut_down.is_set():
            if loop.time() >= deadline:
                log.warning(
                    "controlled shutdown of broker %d not acknowledged in %.0fs", self.node_id, timeout_s
                )
                return False
            if loop.time() - self._last_answer > unreachable_s:
                log.warning("controlled shutdown of broker %d: no controller answers; stopping", self.node_id)
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.should_shut_down.wait(), 0.2)
        return True

    async def _run(self) -> None:
        while True:
            try:
                await self._heartbeat()
            except KafkaError as exc:
                log.info("heartbeat of broker %d failed: %s", self.node_id, exc)
            except Exception:
                log.exception("heartbeat of broker %d failed", self.node_id)
            self._beat_now.clear()
            # Quickly while waiting to be unfenced or to shut down, else every interval.
            interval = self.heartbeat_interval_s if (not self.fenced and not self.want_shut_down) else 0.05
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._beat_now.wait(), interval)

    async def _heartbeat(self) -> None:
        request = BrokerHeartbeatRequest(
            broker_id=self.node_id,
            broker_epoch=self.broker_epoch,
            current_metadata_offset=self.metadata.offset,
            want_fence=False,
            want_shut_down=self.want_shut_down,
        )
        response = await self.channel.send(63, 1, request, timeout_s=self.heartbeat_interval_s * 2)
        self._last_answer = asyncio.get_running_loop().time()
        code = ErrorCode(response.error_code)
        if code is ErrorCode.STALE_BROKER_EPOCH:
            log.warning("broker %d: its registration is gone (stale epoch); registering again", self.node_id)
            self.fenced = True
            self.unfenced.clear()
            self.incarnation_id = uuid.uuid4()
            await self.register()
            return
        if code is not ErrorCode.NONE:
            raise KafkaError(f"heartbeat answered {code.name}", code)
        was_fenced = self.fenced
        self.fenced = response.is_fenced
        if not self.fenced:
            self.unfenced.set()
            if was_fenced:
                log.info("broker %d is unfenced", self.node_id)
        else:
            self.unfenced.clear()
        if response.should_shut_down:
            self.should_shut_down.set()
