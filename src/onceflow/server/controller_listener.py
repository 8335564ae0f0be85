"""The controller listener: where brokers (and the other voters) reach a node's controller.

It speaks the Kafka wire protocol with the broker's framing (``ClientProtocol``), and serves:

- ApiVersions (18), with this listener's own API list;
- the controller APIs (``controller_apis``: BrokerRegistration, BrokerHeartbeat, UnregisterBroker,
  AlterPartition, AllocateProducerIds, and the admin requests brokers send on), answered once their
  records are committed; NOT_CONTROLLER from a controller that is not the active one;
- DescribeQuorum (55), and the quorum's own APIs (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch,
  FetchSnapshot) when the quorum serves them (``quorum_apis``).

Security (``security``, built by the broker's listener code from the same settings): TLS from the
listener's keystore, a required client certificate (mTLS), SASL PLAIN through the broker's
``SaslAuthenticator`` before any other request is served, as on a client listener. Who may do what
once authenticated is ``authorizer``'s (``server.controller_authorization``: CLUSTER_ACTION on the
cluster, as Kafka's controller asks), checked before anything is served; without one, any
authenticated peer may send anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kafka.protocol.admin import DescribeQuorumRequest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from onceflow.broker.client_protocol import ClientProtocol
from onceflow.broker.connection import RequestReceived, SupportedApi
from onceflow.broker.handlers import sasl_authenticate, sasl_handshake
from onceflow.broker.handlers.describe_quorum import error_response, response_for
from onceflow.broker.security.config import ListenerSecurity, is_loopback
from onceflow.broker.security.sasl_authenticator import SaslAuthenticator
from onceflow.broker.security.session import Session
from onceflow.controller.quorum_controller import NotController
from onceflow.protocol import apis
from onceflow.protocol.errors import ErrorCode, KafkaError
from onceflow.server.controller_apis import CONTROLLER_APIS, operation_for
from onceflow.server.controller_authorization import ControllerAuthorizer
from onceflow.server.controller_errors import error_answer
from onceflow.server.controller_runner import ControllerRunner

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 104857600
TLS_HANDSHAKE_TIMEOUT_S = 10.0
_SASL_HANDLERS = {sasl_handshake.API_KEY: sasl_handshake, sasl_authenticate.API_KEY: sasl_authenticate}
# (api version, request, correlation id) -> the encoded answer, for the quorum's own APIs.
QuorumHandler = Callable[[int, Any], Awaitable[Any]]


class ControllerListener:
    def __init__(
        self,
        runner: ControllerRunner,
        quorum: Any,
        host: str,
        port: int,
        quorum_apis: Mapping[int, tuple[int, int, Any, QuorumHandler]] | None = None,
        security: ListenerSecurity | None = None,
        authorizer: ControllerAuthorizer | None = None,
    ) -> None:
        self.runner = runner
        self.security = security
        self.authorizer = authorizer
        self.quorum = quorum
        self.host = host
        self.port = port
        self._quorum_apis = dict(quorum_apis or {})
        self.supported = {
            18: SupportedApi(18, 0, 4, ApiVersionsRequest),
            55: SupportedApi(55, 0, 1, DescribeQuorumRequest),
            **{
                key: SupportedApi(key, api.min_version, api.max_version, api.request_class)
                for key, api in CONTROLLER_APIS.items()
            },
            **{
                key: SupportedApi(key, low, high, cls)
                for key, (low, high, cls, _h) in self._quorum_apis.items()
            },
        }
        if security is not None and security.sasl is not None:
            self.supported.update(
                {
                    key: SupportedApi(key, h.MIN_VERSION, h.MAX_VERSION, h.REQUEST)
                    for key, h in _SASL_HANDLERS.items()
                }
            )
        self._server: asyncio.Server | None = None
        self._connections: set[ClientProtocol] = set()

    async def start(self) -> None:
        context = self.security.ssl_context if self.security is not None else None
        self._server = await asyncio.get_running_loop().create_server(
            self._new_connection,
            self.host or None,
            self.port,
            reuse_address=True,
            ssl=context,
            ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if context is not None else None,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        protocol = self.security.protocol if self.security is not None else "PLAINTEXT"
        log.info("controller listener on %s:%d (%s)", self.host or "0.0.0.0", self.port, protocol)
        if self.security is not None and not self.security.authenticates and not is_loopback(self.host):
            log.warning(
                "controller listener %s on %s:%d has no authentication: anyone who can reach it can join "
                "the quorum's traffic, register brokers and send admin requests (map it to SASL_SSL, or SSL "
                "with ssl.client.auth=required; see docs/security.md)",
                self.security.name,
                self.host or "0.0.0.0",
                self.port,
            )

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.abort()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    def _new_connection(self) -> ClientProtocol:
        security = self.security
        sasl = security.sasl if security is not None else None
        session = (
            Session(listener=security.name, security_protocol=security.protocol)
            if security is not None
            else Session()
        )
        connection = ClientProtocol(
            functools.partial(self._dispatch, session),
            self.supported,
            max_request_bytes=MAX_REQUEST_BYTES,
            on_close=self._connections.discard,
            session=session,
            # SCRAM is refused on a cluster's listeners (server.security): PLAIN's users only.
            authenticator=SaslAuthenticator(sasl, None) if sasl is not None else None,
            max_unauthenticated_bytes=sasl.max_receive_size if sasl is not None else None,
            certificate_principal=security.certificate_principal
            if security is not None and security.protocol == "SSL"
            else None,
        )
        self._connections.add(connection)
        return connection

    async def _dispatch(self, session: Session, event: RequestReceived) -> bytes | None:
        header = event.header
        refusal = self.refused(session, header.api_key, header.api_version, event.request)
        if refusal is not None:
            return apis.encode_response(refusal, header.correlation_id, header.api_version)
        if header.api_key in self._quorum_apis:
            # The quorum encodes its own answers (a Fetch may wait for data first).
            return await self._quorum_apis[header.api_key][3](
                header.api_version, event.request, header.correlation_id
            )
        response = await self.answer(header.api_key, header.api_version, event.request)
        return apis.encode_response(response, header.correlation_id, header.api_version)

    def refused(self, session: Session, api_key: int, version: int, request: Any) -> Any | None:
        """None if ``session``'s principal may send this request here; else the answer to give it
        (CLUSTER_AUTHORIZATION_FAILED), with nothing run."""
        if self.authorizer is None or self.authorizer.allows(session, api_key):
            return None
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        if api_key == 55:
            return error_response(code, "cluster authorization failed")
        if api_key in self._quorum_apis:
            from onceflow.raft import wire  # only a quorum serving the Raft APIs gets here

            return wire.error_response(api_key, version, code)
        return error_answer(api_key, request, code, "cluster authorization failed")

    async def answer(self, api_key: int, version: int, request: Any) -> Any:
        if api_key == 18:
            return ApiVersionsResponse(
                error_code=0,
                api_keys=[
                    ApiVersionsResponse.ApiVersion(
                        api_key=a.api_key, min_version=a.min_version, max_version=a.max_version
                    )
                    for a in sorted(self.supported.values(), key=lambda a: a.api_key)
                ],
                throttle_time_ms=0,
            )
        if api_key in _SASL_HANDLERS:  # after the exchange: ILLEGAL_SASL_STATE, as on a broker listener
            return await _SASL_HANDLERS[api_key].handle(None, request)
        if api_key == 55:
            description = self.quorum.describe()
            if description is None:
                return error_response(ErrorCode.NOT_LEADER_OR_FOLLOWER, "this node does not lead the quorum")
            return response_for(description, version)
        try:
            return await self.runner.call(operation_for(self.runner.controller, api_key, request, version))
        except NotController as exc:
            return error_answer(api_key, request, ErrorCode.NOT_CONTROLLER, str(exc))
        except KafkaError as exc:
            return error_answer(api_key, request, exc.code, str(exc))
