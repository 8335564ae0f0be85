"""SCRAM credentials as Kafka keeps them (salt, iterations, stored and server keys): the code lives in
``metadata.scram``, where a cluster's controller derives them too; re-exported here for the broker's
SASL mechanisms and its credential store."""

from onceflow.metadata.scram import (
    DEFAULT_ITERATIONS,
    HASHES,
    MAX_ITERATIONS,
    MECHANISM_IDS,
    MECHANISMS_BY_ID,
    MIN_ITERATIONS,
    ScramCredential,
    credential_from_password,
    credential_from_salted_password,
    new_salt,
    salted_password,
)

__all__ = [
    "DEFAULT_ITERATIONS",
    "HASHES",
    "MAX_ITERATIONS",
    "MECHANISM_IDS",
    "MECHANISMS_BY_ID",
    "MIN_ITERATIONS",
    "ScramCredential",
    "credential_from_password",
    "credential_from_salted_password",
    "new_salt",
    "salted_password",
]
