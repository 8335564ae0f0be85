"""CreateAcls (30): add ACL bindings (``kafka-acls --add``, ``onceflow acls add``). Needs ALTER on the
cluster. Each creation gets its own answer: INVALID_REQUEST for a binding Kafka refuses (an ANY or
unknown field, an empty name, a CLUSTER name other than kafka-cluster, a principal not of the form
Type:name); the valid ones are saved together before the answer (an existing binding is no change).
Without an authorizer every creation is SECURITY_DISABLED, as in Kafka.

On a cluster broker the ACLs are the metadata image's: the request goes on to the active controller
(``controller.acls``, the same checks), which writes an AccessControlEntryRecord per new binding; the
answer goes once this broker's image has them, and every other broker enforces them once its image
does."""

from __future__ import annotations

import logging

from kafka.protocol.admin import CreateAclsRequest, CreateAclsResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.forwarding import forward, wait_visible
from onceflow.broker.handlers.describe_acls import NO_AUTHORIZER
from onceflow.broker.security.access import ALTER, CLUSTER, authorize
from onceflow.broker.security.acls import AclBinding, check_new_binding
from onceflow.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

API_KEY = 30
MIN_VERSION = 1
MAX_VERSION = 3
REQUEST = CreateAclsRequest

_Result = CreateAclsResponse.AclCreationResult


def _answer(results: list[tuple[ErrorCode, str | None]]) -> CreateAclsResponse:
    return CreateAclsResponse(
        throttle_time_ms=0, results=[_Result(error_code=int(c), error_message=m) for c, m in results]
    )


async def handle(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    creations = request.creations or []
    if not authorize(ctx, ALTER, CLUSTER):
        return _answer([(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)] * len(creations))
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return _answer([(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)] * len(creations))
    if ctx.services.security_from_metadata:
        return await _forwarded(ctx, request)
    results: list[tuple[ErrorCode, str | None]] = []
    valid = []
    for c in creations:
        binding = AclBinding.from_creation(c)
        problem = check_new_binding(binding)
        if problem is not None:
            results.append((ErrorCode.INVALID_REQUEST, problem))
        else:
            results.append((ErrorCode.NONE, None))
            valid.append(binding)
    try:
        authorizer.create(valid)
    except OSError as exc:
        log.exception("could not save ACLs")
        return _answer(
            [
                (ErrorCode.KAFKA_STORAGE_ERROR, f"could not save ACLs: {exc}") if c == 0 else (c, m)
                for c, m in results
            ]
        )
    for binding in valid:
        log.info("ACL added by %s: %s", ctx.session.principal, binding.describe())
    return _answer(results)


async def _forwarded(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    creations = request.creations or []
    try:
        response = await forward(ctx, request)
    except KafkaError as exc:
        return _answer([(exc.code, str(exc))] * len(creations))
    created = [
        AclBinding.from_creation(c)
        for c, result in zip(creations, response.results, strict=False)
        if result.error_code == 0
    ]
    if created:
        await wait_visible(ctx, lambda image: all(image.acl_id(b) is not None for b in created))
        for binding in created:
            log.info("ACL added by %s: %s", ctx.session.principal, binding.describe())
    return response
