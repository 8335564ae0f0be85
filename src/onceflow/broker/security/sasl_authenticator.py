"""One connection's SASL state machine on a SASL listener (Kafka's ``SaslServerAuthenticator``), sans-IO.

The connection hands it every request before dispatching it (``receive``) with the current time; it
answers with one of:

- ``PASS``: dispatch as usual (ApiVersions before the handshake; anything once authenticated);
- ``Reply``: the answer to a SaslHandshake or SaslAuthenticate, made here. ``failed`` replies go out
  after ``connection.failed.authentication.delay.ms`` and the connection closes after them;
  ``principal`` is set when the exchange completed;
- ``Close``: close now, answering nothing (what Kafka does with any other request before
  authentication, and with any request once the session expired).

States, in Kafka's order (KIP-152)::

    HANDSHAKE_OR_VERSIONS --ApiVersions--> HANDSHAKE --SaslHandshake--> AUTHENTICATE --...--> COMPLETE
              \\----------------SaslHandshake------------------/                    \\--> FAILED

Re-authentication (KIP-368): with ``connections.max.reauth.ms`` the session has an end, told to the
client in the last SaslAuthenticate answer (v1+). A client that used SaslAuthenticate v1+ may then
send SaslHandshake again (at most once a second) with the same mechanism and authenticate as the
same principal; requests keep being served meanwhile. A request arriving after the end closes the
connection. Without an end, SaslHandshake and SaslAuthenticate on an authenticated connection go to
their handlers, which answer ILLEGAL_SASL_STATE as Kafka's do.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from onceflow.broker.security.config import PLAIN, SaslSettings
from onceflow.broker.security.principal import KafkaPrincipal, user
from onceflow.broker.security.sasl_mechanisms import AuthenticationFailed, PlainServer, ScramServer
from onceflow.broker.security.scram import ScramCredential
from onceflow.protocol.errors import ErrorCode

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
MIN_REAUTH_INTERVAL_MS = 1000


class State(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "handshake or versions"
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    REAUTH_BAD_MECHANISM = "re-authentication with another mechanism"
    COMPLETE = "complete"
    FAILED = "failed"


class _Pass:
    def __repr__(self) -> str:
        return "PASS"


PASS = _Pass()


@dataclass(frozen=True, slots=True)
class Reply:
    response: Any  # a kafka.protocol response object
    failed: bool = False
    principal: KafkaPrincipal | None = None  # authenticated (or re-authenticated) as
    reason: str = ""  # why it failed, for the broker's log


@dataclass(frozen=True, slots=True)
class Close:
    reason: str


Verdict = _Pass | Reply | Close


class SaslAuthenticator:
    def __init__(
        self, settings: SaslSettings, scram_lookup: Callable[[str, str], ScramCredential | None] | None
    ) -> None:
        self._settings = settings
        self._scram_lookup = scram_lookup or (lambda _user, _mechanism: None)
        self.state = State.HANDSHAKE_OR_VERSIONS
        self._server: PlainServer | ScramServer | None = None
        self.mechanism: str | None = None
        self.principal: KafkaPrincipal | None = None
        self.session_end_ms: int | None = None  # the session's end (connections.max.reauth.ms)
        self._client_supports_reauth = False
        self._reauth_started_ms: int | None = None
        self._reauthenticating = False

    @property
    def failed_delay_ms(self) -> int:
        """connection.failed.authentication.delay.ms: how long a failure's answer waits."""
        return self._settings.failed_authentication_delay_ms

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    def receive(self, api_key: int, api_version: int, request: Any, now_ms: int) -> Verdict:
        state = self.state
        if state is State.FAILED:
            return Close("its authentication failed")
        if self.principal is not None:  # authenticated; maybe re-authenticating
            if self.session_end_ms is not None and now_ms > self.session_end_ms:
                return Close(f"its SASL session of {self.principal} ended (connections.max.reauth.ms)")
            if api_key == SASL_HANDSHAKE and state is State.COMPLETE and self._may_reauthenticate(now_ms):
                self._reauthenticating = True
                self._reauth_started_ms = now_ms
                return self._handshake(request, api_version)
            if api_key == SASL_AUTHENTICATE and state is State.AUTHENTICATE:
                return self._authenticate(request, api_version, now_ms)
            if state is State.REAUTH_BAD_MECHANISM and api_key == SASL_AUTHENTICATE:
                self.state = State.FAILED
                return Close(f"re-authentication asked for another mechanism than {self.mechanism}")
            return PASS
        if state is State.HANDSHAKE_OR_VERSIONS and api_key == API_VERSIONS:
            self.state = State.HANDSHAKE
            return PASS
        if api_key == SASL_HANDSHAKE and state in (State.HANDSHAKE_OR_VERSIONS, State.HANDSHAKE):
            return self._handshake(request, api_version)
        if state is State.AUTHENTICATE:
            if api_key == SASL_AUTHENTICATE:
                return self._authenticate(request, api_version, now_ms)
            if api_key == SASL_HANDSHAKE:
                return self._fail(
                    SaslHandshakeResponse(
                        error_code=int(ErrorCode.ILLEGAL_SASL_STATE),
                        mechanisms=list(self._settings.mechanisms),
                    ),
                    "a second SaslHandshake during authentication",
                )
        self.state = State.FAILED
        return Close(f"API key {api_key} before SASL authentication (state: {state.value})")

    def _may_reauthenticate(self, now_ms: int) -> bool:
        if self.session_end_ms is None or not self._client_supports_reauth:
            return False
        started = self._reauth_started_ms
        return started is None or now_ms - started >= MIN_REAUTH_INTERVAL_MS

    def _handshake(self, request: Any, api_version: int) -> Verdict:
        mechanism = request.mechanism
        enabled = list(self._settings.mechanisms)
        if api_version == 0:
            # Listed in ApiVersions (librdkafka before 2.1, as in Debian's kcat, will not use SASL
            # with a broker that does not list it, though it then speaks v1), but v0 would be
            # followed by raw SASL tokens outside Kafka's framing: refused, clearly.
            return self._fail(
                SaslHandshakeResponse(error_code=int(ErrorCode.UNSUPPORTED_VERSION), mechanisms=enabled),
                "SaslHandshake v0 (raw SASL tokens, before KIP-152) is not supported; clients use v1",
            )
        if mechanism not in enabled:
            return self._fail(
                SaslHandshakeResponse(
                    error_code=int(ErrorCode.UNSUPPORTED_SASL_MECHANISM), mechanisms=enabled
                ),
                f"asked for SASL mechanism {mechanism!r}; enabled: {', '.join(enabled)}",
            )
        if self._reauthenticating and mechanism != self.mechanism:
            self.state = State.REAUTH_BAD_MECHANISM
        else:
            self.mechanism = mechanism
            if mechanism == PLAIN:
                self._server = PlainServer(self._settings.plain_users)
            else:
                self._server = ScramServer(mechanism, self._scram_lookup)
            self.state = State.AUTHENTICATE
        return Reply(SaslHandshakeResponse(error_code=0, mechanisms=enabled))

    def _authenticate(self, request: Any, api_version: int, now_ms: int) -> Verdict:
        server = self._server
        assert server is not None  # AUTHENTICATE is entered with one
        if api_version > 0:
            self._client_supports_reauth = True
        what = "re-authentication" if self._reauthenticating else "authentication"
        try:
            token = server.evaluate(bytes(request.auth_bytes or b""))
        except AuthenticationFailed as exc:
            message = exc.client_message or (
                f"Authentication failed during {what} due to invalid credentials with SASL mechanism "
                f"{self.mechanism}"
            )
            return self._fail(
                self._authenticate_response(ErrorCode.SASL_AUTHENTICATION_FAILED, message), str(exc)
            )
        except Exception as exc:  # a mechanism bug must not take the broker down: fail this connection
            return self._fail(
                self._authenticate_response(
                    ErrorCode.SASL_AUTHENTICATION_FAILED, f"Authentication failed during {what}"
                ),
                f"unexpected error in {self.mechanism}: {exc!r}",
            )
        if not server.complete:
            return Reply(self._authenticate_response(ErrorCode.NONE, None, token))
        principal = user(server.authorization_id or "")
        if self._reauthenticating and principal != self.principal:
            message = (
                f"Cannot change principals during re-authentication from {self.principal.type}."
                f"{self.principal.name}: {principal.type}.{principal.name}"
            )
            return self._fail(
                self._authenticate_response(ErrorCode.SASL_AUTHENTICATION_FAILED, message), message
            )
        lifetime = self._settings.reauth_ms.get(self.mechanism or "", 0)
        self.session_end_ms = now_ms + lifetime if lifetime > 0 else None
        self.principal = principal
        self.state = State.COMPLETE
        self._reauthenticating = False
        return Reply(self._authenticate_response(ErrorCode.NONE, None, token, lifetime), principal=principal)

    @staticmethod
    def _authenticate_response(
        code: ErrorCode, message: str | None, token: bytes = b"", lifetime_ms: int = 0
    ):
        return SaslAuthenticateResponse(
            error_code=int(code), error_message=message, auth_bytes=token, session_lifetime_ms=lifetime_ms
        )

    def _fail(self, response: Any, reason: str) -> Reply:
        self.state = State.FAILED
        return Reply(response, failed=True, reason=reason)
