"""Connections from this node to other nodes, one per address, opened on first use and dropped on any
failure so the next request reconnects (possibly to another leader). A node keeps two sets: one to
the controllers' listener (brokers to the active controller) and one to the other brokers'
inter-broker listener (replica fetches, transaction markers, AddPartitionsToTxn), each opened with
that listener's security (``server.peer_security``: TLS, a client certificate, SASL).

The client package is imported on first use: a single node never reaches another, and importing the
whole client would slow every broker start."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 30.0


def _has_header_slot(request: Any) -> bool:
    try:
        request._header  # noqa: B018 - an attribute test
    except AttributeError:
        return False
    return True


class PeerConnections:
    def __init__(self, client_id: str, security: Any = None) -> None:
        """``security``: the ``client.security.ClientSecurity`` connections open with (None: plain)."""
        self.client_id = client_id
        self.security = security
        self._connections: dict[tuple[str, int], Any] = {}
        self._opening: dict[tuple[str, int], asyncio.Future[Any]] = {}
        self._refusals: dict[tuple[str, int], str] = {}  # the last refusal logged, per address

    async def _connection(self, address: tuple[str, int]) -> Any:
        from onceflow.client.connection import Connection

        found = self._connections.get(address)
        if found is not None and not found.closed:
            return found
        pending = self._opening.get(address)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._opening[address] = future
        try:
            connection = await Connection.open(
                address[0],
                address[1],
                client_id=self.client_id,
                request_timeout_s=REQUEST_TIMEOUT_S,
                connect_timeout_s=2.0,
                security=self.security,
            )
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: callers waiting on it see it raised
            raise
        finally:
            self._opening.pop(address, None)
        future.set_result(connection)
        self._connections[address] = connection
        return connection

    async def send(self, address: tuple[str, int], api_key: int, version: int, request: Any) -> Any:
        """``request`` at ``version`` (capped at what the peer serves) to ``address``; raises
        ConnectionError when the peer cannot be reached. Runs as a task of its own: a broker handler
        runs its first step outside any task, where the client connection's timeouts cannot work."""
        return await asyncio.get_running_loop().create_task(self._send(address, api_key, version, request))

    async def _send(self, address: tuple[str, int], api_key: int, version: int, request: Any) -> Any:
        from onceflow.client.connection import BrokerConnectionError
        from onceflow.protocol.errors import KafkaError

        try:
            try:
                connection = await self._connection(address)
            except BrokerConnectionError:
                raise
            except KafkaError as exc:
                # Refused by the other node (a wrong password, a SASL mechanism it does not offer):
                # callers retry as for an unreachable node; the reason is logged once.
                if self._refusals.get(address) != str(exc):
                    self._refusals[address] = str(exc)
                    log.warning("cannot connect to %s:%d: %s", address[0], address[1], exc)
                raise ConnectionError(str(exc)) from exc
            low, high = connection.broker_versions.get(api_key, (0, -1))
            if high < 0:
                raise ConnectionError(f"{address[0]}:{address[1]} does not serve API {api_key}")
            if not _has_header_slot(request):
                request._header = None  # decoded from a client's frame: never given a header of its own
            return await connection.send(request, version=max(low, min(version, high)))
        except BrokerConnectionError as exc:
            await self._drop(address)
            raise ConnectionError(str(exc)) from exc

    async def _drop(self, address: tuple[str, int]) -> None:
        connection = self._connections.pop(address, None)
        if connection is not None:
            await connection.close()

    async def close(self) -> None:
        for address in list(self._connections):
            await self._drop(address)
