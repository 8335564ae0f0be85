"""SaslAuthenticate (36), when it reaches a handler: on a listener without SASL, or after the
connection authenticated (``security.sasl_authenticator`` answers every token of an exchange).
Kafka answers these ILLEGAL_SASL_STATE."""

from __future__ import annotations

from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse

from onceflow.broker.context import RequestContext
from onceflow.protocol.errors import ErrorCode

API_KEY = 36
MIN_VERSION = 0
MAX_VERSION = 2
REQUEST = SaslAuthenticateRequest


async def handle(ctx: RequestContext, request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(
        error_code=int(ErrorCode.ILLEGAL_SASL_STATE),
        error_message="SaslAuthenticate request received after successful authentication",
        auth_bytes=b"",
        session_lifetime_ms=0,
    )
