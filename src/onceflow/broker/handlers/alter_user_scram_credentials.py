"""AlterUserScramCredentials (51, KIP-554): set or delete users' SCRAM credentials (``kafka-configs
--alter --add-config 'SCRAM-SHA-256=[password=...]' --entity-type users``, ``onceflow users scram
set|delete``). The client sends the salt and the salted password, never the password; the broker
keeps the salt, iterations and the stored and server keys derived from it (``security.credentials``),
saved before the answer. Needs ALTER on the cluster; each user gets its own result (Kafka's checks).
A salt shorter than 12 bytes is refused (UNACCEPTABLE_CREDENTIAL): the SCRAM library onceflow uses
rejects such salts at login, so accepting one would lock the user out.

On a cluster broker the credentials are the metadata image's: the request goes on to the active
controller (``controller.scram``, the same checks), which derives the keys and writes
UserScramCredentialRecord / RemoveUserScramCredentialRecord; the answer goes once this broker's image
has the change, and a user can log in on every broker once its image does.
"""

from __future__ import annotations

import logging

from kafka.protocol.admin import AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.forwarding import forward, wait_visible
from onceflow.broker.security.access import ALTER, CLUSTER, authorize
from onceflow.broker.security.credentials import Deletion, Upsertion
from onceflow.broker.security.scram import MECHANISMS_BY_ID
from onceflow.protocol.errors import ErrorCode, KafkaError

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
    short = {u.user for u in upsertions if u.salt and len(u.salt) < MIN_SALT_BYTES}
    refused = [
        (user, ErrorCode.UNACCEPTABLE_CREDENTIAL, f"The salt must be at least {MIN_SALT_BYTES} bytes")
        for user in short
    ]
    if ctx.services.security_from_metadata:
        request.upsertions = [u for u in request.upsertions or [] if u.name not in short]
        request.deletions = [d for d in request.deletions or [] if d.name not in short]
        return await _forwarded(ctx, request, refused)
    if scram is None:
        return _answer(
            [(u, ErrorCode.UNSUPPORTED_VERSION, "this broker keeps no SCRAM credentials") for u in users]
        )
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


async def _forwarded(
    ctx: RequestContext, request: AlterUserScramCredentialsRequest, refused: list
) -> AlterUserScramCredentialsResponse:
    try:
        response = await forward(ctx, request)
    except KafkaError as exc:
        users = list(
            dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions])
        )
        return _answer([(u, exc.code, str(exc)) for u in users] + refused)
    changed = {r.user for r in response.results if r.error_code == 0}
    gone = [(d.name, MECHANISMS_BY_ID[d.mechanism]) for d in request.deletions if d.name in changed]
    upserted = {
        (u.name, MECHANISMS_BY_ID[u.mechanism]): (bytes(u.salt), u.iterations)
        for u in request.upsertions
        if u.name in changed
    }

    def visible(image) -> bool:
        credentials = image.scram_credentials
        if any(key in credentials for key in gone):
            return False
        for key, (salt, iterations) in upserted.items():
            credential = credentials.get(key)
            if credential is None or credential.salt != salt or credential.iterations != iterations:
                return False
        return True

    if changed:
        await wait_visible(ctx, visible)
        for user in sorted(changed):
            log.info("SCRAM credentials of user %s changed by %s", user, ctx.session.principal)
    return AlterUserScramCredentialsResponse(
        throttle_time_ms=0,
        results=list(response.results)
        + [_Result(user=u, error_code=int(c), error_message=m) for u, c, m in refused],
    )
