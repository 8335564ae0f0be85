"""SCRAM credentials (RFC 5802/7677) as Kafka keeps them: salt, iterations, stored key and server key;
never the password.

``SaltedPassword = PBKDF2-HMAC(password, salt, iterations)``, ``StoredKey = H(HMAC(SaltedPassword,
"Client Key"))``, ``ServerKey = HMAC(SaltedPassword, "Server Key")``. AlterUserScramCredentials
(KIP-554) carries the salted password, computed by the client, so even an administrator's tool never
sends the password itself; the broker derives the two keys from it. Iterations are bounded as Kafka
bounds them (4096..16384 for both mechanisms).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass

from onceflow.broker.security.config import SCRAM_SHA_256, SCRAM_SHA_512

# Kafka's ScramMechanism ids (the wire "mechanism" field of KIP-554) and hash functions.
MECHANISM_IDS = {SCRAM_SHA_256: 1, SCRAM_SHA_512: 2}
MECHANISMS_BY_ID = {v: k for k, v in MECHANISM_IDS.items()}
HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_json(self) -> dict:
        b64 = base64.b64encode
        return {
            "salt": b64(self.salt).decode(),
            "stored_key": b64(self.stored_key).decode(),
            "server_key": b64(self.server_key).decode(),
            "iterations": self.iterations,
        }

    @classmethod
    def from_json(cls, data: dict) -> ScramCredential:
        b64 = base64.b64decode
        return cls(
            b64(data["salt"], validate=True),
            b64(data["stored_key"], validate=True),
            b64(data["server_key"], validate=True),
            int(data["iterations"]),
        )


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(HASHES[mechanism], password.encode(), salt, iterations)


def credential_from_salted_password(
    mechanism: str, salt: bytes, salted: bytes, iterations: int
) -> ScramCredential:
    digest = HASHES[mechanism]
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored_key = hashlib.new(digest, client_key).digest()
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    return ScramCredential(salt, stored_key, server_key, iterations)


def new_salt() -> bytes:
    return os.urandom(32)


def credential_from_password(
    mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    salt = salt if salt is not None else new_salt()
    return credential_from_salted_password(
        mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations
    )
