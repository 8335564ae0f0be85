"""SCRAM credentials (RFC 5802/7677) as Kafka keeps them: salt, iterations, stored key and server key;
never the password.

``SaltedPassword = PBKDF2-HMAC(password, salt, iterations)``, ``StoredKey = H(HMAC(SaltedPassword,
"Client Key"))``, ``ServerKey = HMAC(SaltedPassword, "Server Key")``. AlterUserScramCredentials
(KIP-554) carries the salted password, computed by the client, so even an administrator's tool never
sends the password itself; the broker derives the two keys from it. Iterations are bounded as Kafka
bounds them (4096..16384 for both mechanisms).

Here, below both the broker and the controller: a single node's broker derives the keys itself, a
cluster's active controller does (its UserScramCredentialRecord carries them to every broker).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from onceflow.metadata.records import UserScramCredentialRecord
from onceflow.protocol.errors import ErrorCode

SCRAM_SHA_256, SCRAM_SHA_512 = "SCRAM-SHA-256", "SCRAM-SHA-512"

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

    def to_record(self, user: str, mechanism: str) -> UserScramCredentialRecord:
        """The UserScramCredentialRecord that gives ``user`` this credential for ``mechanism`` (a name)."""
        return UserScramCredentialRecord(
            name=user,
            mechanism=MECHANISM_IDS[mechanism],
            salt=self.salt,
            stored_key=self.stored_key,
            server_key=self.server_key,
            iterations=self.iterations,
        )

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


# ---------------------------------------------------------------- AlterUserScramCredentials' checks


@dataclass(frozen=True)
class Upsertion:
    user: str
    mechanism: int  # Kafka's ScramMechanism id: 1 SHA-256, 2 SHA-512
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True)
class Deletion:
    user: str
    mechanism: int


_DUPLICATE = (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")


def _check_name(user: str, mechanism: int) -> tuple[ErrorCode, str] | None:
    if not user:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in MECHANISMS_BY_ID:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


def _check_upsertion(upsertion: Upsertion) -> tuple[ErrorCode, str] | None:
    error = _check_name(upsertion.user, upsertion.mechanism)
    if error is not None:
        return error
    if upsertion.iterations < MIN_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if upsertion.iterations > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    if not upsertion.salt:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "The salt must not be empty"
    if not upsertion.salted_password:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "The salted password must not be empty"
    return None


def plan_alteration(
    exists: Callable[[str, str], bool], upsertions: Iterable[Upsertion], deletions: Iterable[Deletion]
) -> tuple[dict[str, Deletion], dict[str, Upsertion], dict[str, tuple[ErrorCode, str]]]:
    """Kafka's checks of one AlterUserScramCredentials (``ScramControlManager``): (the deletions, the
    upsertions, the refused users with their error), each keyed by user. ``exists(user, mechanism
    name)`` says whether a credential is there to delete. A user changed twice in one request is
    DUPLICATE_RESOURCE; deletions are checked first, as Kafka does."""
    errors: dict[str, tuple[ErrorCode, str]] = {}
    to_delete: dict[str, Deletion] = {}
    to_upsert: dict[str, Upsertion] = {}
    for deletion in deletions:
        if deletion.user in errors:
            continue
        if to_delete.pop(deletion.user, None) is not None:
            errors[deletion.user] = _DUPLICATE
            continue
        error = _check_name(deletion.user, deletion.mechanism)
        if error is None and not exists(deletion.user, MECHANISMS_BY_ID[deletion.mechanism]):
            error = (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
        if error is not None:
            errors[deletion.user] = error
        else:
            to_delete[deletion.user] = deletion
    for upsertion in upsertions:
        if upsertion.user in errors:
            continue
        if to_delete.pop(upsertion.user, None) is not None or to_upsert.pop(upsertion.user, None) is not None:
            errors[upsertion.user] = _DUPLICATE
            continue
        error = _check_upsertion(upsertion)
        if error is not None:
            errors[upsertion.user] = error
        else:
            to_upsert[upsertion.user] = upsertion
    return to_delete, to_upsert, errors
