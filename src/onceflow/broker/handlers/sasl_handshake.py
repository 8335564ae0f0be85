"""SaslHandshake (17), when it reaches a handler: on a listener without SASL, or on a connection that
already authenticated and cannot re-authenticate now (see ``security.sasl_authenticator``, which
answers every handshake that starts an authentication). Kafka answers these ILLEGAL_SASL_STATE.

Only v1 is served: v0 is followed by raw SASL tokens outside Kafka's framing (before KIP-152), which
no client we know sends to a broker that offers v1.
"""

from __future__ import annotations

from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse

from onceflow.broker.context import RequestContext
from onceflow.protocol.errors import ErrorCode

API_KEY = 17
MIN_VERSION = 1
MAX_VERSION = 1
REQUEST = SaslHandshakeRequest


async def handle(ctx: RequestContext, request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(error_code=int(ErrorCode.ILLEGAL_SASL_STATE), mechanisms=[])
