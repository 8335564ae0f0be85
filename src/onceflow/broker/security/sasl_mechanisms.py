"""The server side of each SASL mechanism: token in, token out, until complete or failed.

- PLAIN (RFC 4616): one token ``authzid NUL authcid NUL password``, checked against the listener's
  configured users as Kafka's ``PlainSaslServer`` does, with its messages (they reach the client).
- SCRAM-SHA-256/512 (RFC 5802/7677): two rounds against the stored credential (salt, iterations,
  stored key, server key): ``scramp``'s server reads the first message and makes the server's; the
  final one is checked here as Kafka checks it (see ``ScramServer._client_final``). Any failure (unknown user, wrong proof,
  wrong nonce, a malformed message) gives the client only Kafka's generic message, which does not
  tell whether the user exists. Channel binding and an authorization id other than the user are not
  offered (Kafka's clients send neither).

``AuthenticationFailed.client_message`` is what the client is told; None means the generic message.
"""

from __future__ import annotations

import base64
import hashlib
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
        self._hash = _HASHES[mechanism]
        self._round = 0
        self._user: str | None = None
        self._stored: ScramCredential | None = None
        self._client_first = ""
        self._server_first = ""
        self.complete = False
        self.authorization_id: str | None = None

    def _credential(self, username: str):
        self._user = username
        credential = self._lookup(username, self.mechanism)
        self._stored = credential
        if credential is None:
            return None
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def evaluate(self, token: bytes) -> bytes:
        try:
            message = token.decode("utf-8")
            if self._round == 0:
                self._round = 1
                self._server.set_client_first(message)  # an unknown user fails here
                self._client_first = message
                self._server_first = self._server.get_server_first()
                return self._server_first.encode()
            if self._round == 1:
                self._round = 2
                final = self._client_final(message)
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

    def _client_final(self, message: str) -> str:
        """Check the client's final message and give the server's (RFC 5802 section 3), as Kafka's
        ``ScramSaslServer`` does: the nonce must end with the one the server sent, not equal it
        (librdkafka before 2.1, Debian's kcat among them, sends its own nonce in front of it), and the
        proof is checked over the messages as they were sent."""
        without_proof, separator, proof_text = message.rpartition(",p=")
        if not separator:
            raise ValueError("the client's final message has no proof")
        attributes = dict(item.split("=", 1) for item in without_proof.split(","))
        bare = self._client_first.split(",", 2)[2]
        gs2_header = self._client_first[: len(self._client_first) - len(bare)]
        if attributes["c"] != base64.b64encode(gs2_header.encode()).decode():
            raise ValueError("the channel binding does not match the first message")
        server_nonce = self._server_first.split(",", 1)[0].removeprefix("r=")
        if not attributes["r"].endswith(server_nonce):
            raise ValueError("the nonce does not end with the server's")
        proof = base64.b64decode(proof_text, validate=True)
        stored = self._stored
        if stored is None or len(proof) != self._hash().digest_size:
            raise ValueError("the proof has the wrong length")
        auth_message = f"{bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(stored.stored_key, auth_message, self._hash)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(self._hash(client_key).digest(), stored.stored_key):
            raise ValueError("the proof is wrong")
        server_signature = hmac.digest(stored.server_key, auth_message, self._hash)
        return "v=" + base64.b64encode(server_signature).decode()


_HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
