"""SaslHandshake (17), when it reaches a handler: on a listener without SASL, or on a connection that
already authenticated and cannot re-authenticate now (see ``security.sasl_authenticator``, which
answers every handshake that starts an authentication). Kafka answers these ILLEGAL_SASL_STATE.

v0 and v1 are listed, as Kafka lists them: librdkafka before 2.1 (Debian's kcat) uses no SASL with a
broker that does not list v0, although it then speaks v1. A v0 handshake itself, which raw SASL tokens
outside Kafka's framing would follow (before KIP-152), is refused with UNSUPPORTED_VERSION.
"""

from __future__ import annotations

from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse

from onceflow.broker.context import RequestContext
from onceflow.protocol.errors import ErrorCode

API_KEY = 17
MIN_VERSION = 0
MAX_VERSION = 1
REQUEST = SaslHandshakeRequest


async def handle(ctx: RequestContext, request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(error_code=int(ErrorCode.ILLEGAL_SASL_STATE), mechanisms=[])
