"""Kafka's connection limits, as bookkeeping without sockets: which new connection to refuse.

- ``max.connections``: connections open at once on the broker;
- ``max.connections.per.ip``: connections open at once from one address, except the addresses named
  in ``max.connections.per.ip.overrides`` (``host:count,host:count``; a name is resolved once, at
  start), which get their own count (KIP-308 era);
- ``max.connection.creation.rate``: new connections per second on the broker (KIP-612), measured over
  the quota sample windows (``quota.window.num`` x ``quota.window.size.seconds``) as Kafka measures
  it, so a burst is judged against the whole horizon.

All default to Kafka's 2147483647 (no limit). A refused connection is closed at once, before a byte is
read, and counted. Kafka's acceptor closes one over the per-address limit the same way, but over
``max.connections`` or the creation rate it stops accepting until a slot frees or the throttle delay
passes (the connection waits in the kernel's accept queue). asyncio's server cannot stop accepting
for a while, so here those are closed at once too: the client reconnects after its backoff, which
comes to much the same.

Only connections that were let in count towards the rate, so a flood of refused connections does not
keep the rate above the limit for the clients that are admitted.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Mapping

from onceflow.broker.limit_events import CONNECTION_CREATION_RATE, MAX_CONNECTIONS, MAX_CONNECTIONS_PER_IP
from onceflow.broker.sampled_rate import SampledRate

NO_LIMIT = 2**31 - 1  # Kafka's Int.MaxValue defaults


def parse_per_ip_overrides(text: str, resolve: Callable[[str], str] = socket.gethostbyname) -> dict[str, int]:
    """``"127.0.0.2:20,broker-host:5"`` -> ``{"127.0.0.2": 20, "<its address>": 5}``; raises ValueError
    naming the bad entry."""
    overrides: dict[str, int] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        host = host.strip().strip("[]")
        try:
            limit = int(count)
        except ValueError:
            limit = -1
        if not sep or not host or limit < 0:
            raise ValueError(
                f"max.connections.per.ip.overrides: {entry!r} is not host:count (e.g. 127.0.0.2:20)"
            )
        try:
            address = str(ipaddress.ip_address(host))
        except ValueError:
            try:
                address = resolve(host)
            except OSError as exc:
                raise ValueError(
                    f"max.connections.per.ip.overrides: cannot resolve {host!r}: {exc}"
                ) from None
        overrides[address] = limit
    return overrides


class ConnectionLimits:
    """Counts open connections per address; ``admit`` says whether a new one may stay."""

    def __init__(
        self,
        *,
        max_connections: int = NO_LIMIT,
        max_connections_per_ip: int = NO_LIMIT,
        per_ip_overrides: Mapping[str, int] | None = None,
        max_creation_rate: int = NO_LIMIT,
        quota_window_num: int = 11,
        quota_window_size_ms: int = 1000,
    ) -> None:
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.per_ip_overrides = dict(per_ip_overrides or {})
        self.max_creation_rate = max_creation_rate
        self._creation_rate = SampledRate(quota_window_num, quota_window_size_ms)
        self.open_by_address: dict[str, int] = {}
        self.open = 0

    def limit_for(self, address: str) -> int:
        return self.per_ip_overrides.get(address, self.max_connections_per_ip)

    def admit(self, address: str, now_ms: int) -> str | None:
        """Count a new connection from ``address`` and return None, or return the kind of limit it is
        over (a ``limit_events`` kind) and count nothing. Every admitted connection is ``release``d."""
        if self.open >= self.max_connections:
            return MAX_CONNECTIONS
        if self.open_by_address.get(address, 0) >= self.limit_for(address):
            return MAX_CONNECTIONS_PER_IP
        if self.max_creation_rate < NO_LIMIT:
            self._creation_rate.record(1.0, now_ms)
            if self._creation_rate.rate(now_ms) > self.max_creation_rate:
                self._creation_rate.record(-1.0, now_ms)  # refused: not a connection created
                return CONNECTION_CREATION_RATE
        self.open += 1
        self.open_by_address[address] = self.open_by_address.get(address, 0) + 1
        return None

    def release(self, address: str) -> None:
        """An admitted connection from ``address`` closed."""
        count = self.open_by_address.get(address, 0)
        if count <= 0:
            return
        self.open -= 1
        if count == 1:
            del self.open_by_address[address]
        else:
            self.open_by_address[address] = count - 1
