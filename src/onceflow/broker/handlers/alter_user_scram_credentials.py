"""AlterUserScramCredentials (51, KIP-554): set or delete users' SCRAM credentials (``kafka-configs
--alter --add-config 'SCRAM-SHA-256=[password=...]' --entity-type users``, ``onceflow users scram
set|delete``). The client sends the salt and the salted password, never the password; the broker
keeps the salt, iterations and the stored and server keys derived from it (``security.credentials``),
saved before the answer. Needs ALTER on the cluster; each user gets its own result (Kafka's checks).
A salt shorter than 12 bytes is refused (UNACCEPTABLE_CREDENTIAL): the SCRAM library onceflow uses
rejects such salts at login, so accepting one would lock the user out.
"""

from __future__ import annotations

import logging

from kafka.protocol.admin import AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import ALTER, CLUSTER, authorize
from onceflow.broker.security.credentials import Deletion, Upsertion
from onceflow.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

API_KEY = 51
MIN_VERSION = 0
MAX_VERSION = 0
REQUEST = AlterUserScramCredentialsRequest
MIN_SALT_BYTES = 12

_Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult


def _answer(results: list[tuple[str, int, str | None]]) -> AlterUserScramCredentialsResponse:
    return AlterUserScramCredentialsResponse(
        throttle_time_ms=0,
        results=[_Result(user=u, error_code=int(c), error_message=m) for u, c, m in results],
    )


async def handle(
    ctx: RequestContext, request: AlterUserScramCredentialsRequest
) -> AlterUserScramCredentialsResponse:
    deletions = [Deletion(d.name, d.mechanism) for d in request.deletions or []]
    upsertions = [
        Upsertion(u.name, u.mechanism, u.iterations, bytes(u.salt or b""), bytes(u.salted_password or b""))
        for u in request.upsertions or []
    ]
    users = list(dict.fromkeys([d.user for d in deletions] + [u.user for u in upsertions]))
    if not authorize(ctx, ALTER, CLUSTER):
        return _answer([(u, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None) for u in users])
    scram = ctx.services.scram
    if scram is None:
        return _answer(
            [
                (
                    u,
                    ErrorCode.UNSUPPORTED_VERSION,
                    "SCRAM credentials are kept by a single node only so far, not in a cluster's metadata",
                )
                for u in users
            ]
        )
    short = {u.user for u in upsertions if u.salt and len(u.salt) < MIN_SALT_BYTES}
    refused = [
        (user, ErrorCode.UNACCEPTABLE_CREDENTIAL, f"The salt must be at least {MIN_SALT_BYTES} bytes")
        for user in short
    ]
    try:
        results = scram.alter(
            [u for u in upsertions if u.user not in short], [d for d in deletions if d.user not in short]
        )
    except OSError as exc:
        log.exception("could not save SCRAM credentials")
        return _answer(
            [(u, ErrorCode.KAFKA_STORAGE_ERROR, f"could not save SCRAM credentials: {exc}") for u in users]
        )
    for user, code, _message in results:
        if code == ErrorCode.NONE:
            log.info("SCRAM credentials of user %s changed by %s", user, ctx.session.principal)
    return _answer(results + refused)
