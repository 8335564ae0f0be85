"""The server side of each SASL mechanism: token in, token out, until complete or failed.

- PLAIN (RFC 4616): one token ``authzid NUL authcid NUL password``, checked against the listener's
  configured users as Kafka's ``PlainSaslServer`` does, with its messages (they reach the client).
- SCRAM-SHA-256/512 (RFC 5802/7677): two rounds, run by ``scramp``'s server against the stored
  credential (salt, iterations, stored key, server key). Any failure (unknown user, wrong proof,
  wrong nonce, a malformed message) gives the client only Kafka's generic message, which does not
  tell whether the user exists. Channel binding and an authorization id other than the user are not
  offered (Kafka's clients send neither).

``AuthenticationFailed.client_message`` is what the client is told; None means the generic message.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping

import scramp

from onceflow.broker.security.scram import ScramCredential


class AuthenticationFailed(Exception):  # noqa: N818 - Kafka's name for the condition
    def __init__(self, reason: str, client_message: str | None = None) -> None:
        super().__init__(reason)
        self.client_message = client_message


class PlainServer:
    mechanism = "PLAIN"

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.complete = False
        self.authorization_id: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise AuthenticationFailed("PLAIN takes one token", "Unexpected token after PLAIN authentication")
        text = token.decode("utf-8", errors="replace")
        parts = text.split("\x00", 3)
        if len(parts) != 3:
            message = f"Invalid SASL/PLAIN response: expected 3 tokens, got {min(len(parts), 4)}"
            raise AuthenticationFailed(message, message)
        authzid, username, password = parts
        if not username:
            raise AuthenticationFailed("no username", "Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("no password", "Authentication failed: password not specified")
        expected = self._users.get(username)
        # compare_digest against something even for an unknown user: the time does not tell.
        matches = hmac.compare_digest(
            password.encode(), (expected if expected is not None else "\x00").encode()
        )
        if expected is None or not matches:
            raise AuthenticationFailed(
                f"invalid password for user {username!r}"
                if expected is not None
                else f"unknown user {username!r}",
                "Authentication failed: Invalid username or password",
            )
        if authzid and authzid != username:
            raise AuthenticationFailed(
                "authorization id differs from the user",
                "Authentication failed: Client requested an authorization id that is different from username",
            )
        self.complete = True
        self.authorization_id = username
        return b""


class ScramServer:
    def __init__(self, mechanism: str, lookup: Callable[[str, str], ScramCredential | None]) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._server = scramp.ScramMechanism(mechanism).make_server(self._credential)
        self._round = 0
        self._user: str | None = None
        self.complete = False
        self.authorization_id: str | None = None

    def _credential(self, username: str):
        self._user = username
        credential = self._lookup(username, self.mechanism)
        if credential is None:
            return None
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def evaluate(self, token: bytes) -> bytes:
        try:
            message = token.decode("utf-8")
            if self._round == 0:
                self._round = 1
                self._server.set_client_first(message)  # an unknown user fails here
                return self._server.get_server_first().encode()
            if self._round == 1:
                self._round = 2
                self._server.set_client_final(message)
                final = self._server.get_server_final()
                self.complete = True
                self.authorization_id = self._user
                return final.encode()
        except (
            scramp.ScramException,
            UnicodeDecodeError,
            ValueError,
            TypeError,
            KeyError,
            IndexError,
        ) as exc:
            raise AuthenticationFailed(
                f"{self.mechanism} exchange failed for {self._user!r}: {exc}"
            ) from None
        raise AuthenticationFailed(f"unexpected token after {self.mechanism} completed")
