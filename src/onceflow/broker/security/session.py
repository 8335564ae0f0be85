"""What every request of one connection shares: the listener it came in on, the client's address, and
the principal the connection authenticated as (``User:ANONYMOUS`` until it does, and for good on a
listener without authentication). The connection owns it and updates the principal; handlers read it
through ``RequestContext.session``."""

from __future__ import annotations

from dataclasses import dataclass

from onceflow.broker.security.principal import ANONYMOUS, KafkaPrincipal


@dataclass(slots=True, eq=False)  # one per connection: compared by identity
class Session:
    listener: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"
    client_host: str = ""
    principal: KafkaPrincipal = ANONYMOUS


# The session of requests made without a connection (tests calling handlers directly).
LOCAL = Session(client_host="127.0.0.1")
