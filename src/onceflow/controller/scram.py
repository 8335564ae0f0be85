"""Users' SCRAM credentials: AlterUserScramCredentials (51, KIP-554) as UserScramCredentialRecord /
RemoveUserScramCredentialRecord (Kafka's ``ScramControlManager``).

Brokers forward the request here after authorizing it (ALTER on the cluster). The checks are Kafka's
(``metadata.scram.plan_alteration``, the same a single node applies): one change per user, a known
mechanism, iterations within 4096..16384, a salt and salted password, and a credential to delete.
The controller derives the stored and server keys from the salted password, so the record, the log
and every broker's image hold those keys and never the salted password.
"""

from __future__ import annotations

from kafka.protocol.admin import AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse

from onceflow.metadata.image import MetadataImage
from onceflow.metadata.records import RemoveUserScramCredentialRecord
from onceflow.metadata.scram import (
    MECHANISMS_BY_ID,
    Deletion,
    Upsertion,
    credential_from_salted_password,
    plan_alteration,
)

_Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult


def alter_user_scram_credentials(
    image: MetadataImage, request: AlterUserScramCredentialsRequest
) -> tuple[list, AlterUserScramCredentialsResponse]:
    to_delete, to_upsert, errors = plan_alteration(
        lambda user, mechanism: (user, mechanism) in image.scram_credentials,
        [
            Upsertion(
                u.name, u.mechanism, u.iterations, bytes(u.salt or b""), bytes(u.salted_password or b"")
            )
            for u in request.upsertions or []
        ],
        [Deletion(d.name, d.mechanism) for d in request.deletions or []],
    )
    records: list = [
        RemoveUserScramCredentialRecord(name=d.user, mechanism=d.mechanism) for d in to_delete.values()
    ]
    for upsertion in to_upsert.values():
        mechanism = MECHANISMS_BY_ID[upsertion.mechanism]
        credential = credential_from_salted_password(
            mechanism, upsertion.salt, upsertion.salted_password, upsertion.iterations
        )
        records.append(credential.to_record(upsertion.user, mechanism))
    results = [_Result(user=user, error_code=0, error_message=None) for user in [*to_delete, *to_upsert]]
    results += [
        _Result(user=user, error_code=int(code), error_message=message)
        for user, (code, message) in errors.items()
    ]
    return records, AlterUserScramCredentialsResponse(throttle_time_ms=0, results=results)
