"""DeleteAcls (31): remove every ACL each filter matches (``kafka-acls --remove``, ``onceflow acls
remove``), answering with what each filter matched. Needs ALTER on the cluster; a filter with an
unknown field is INVALID_REQUEST; the removals are saved before the answer. Without an authorizer
every filter fails with SECURITY_DISABLED and matches nothing, as in Kafka.

On a cluster broker the request goes on to the active controller (``controller.acls``), which writes a
RemoveAccessControlEntryRecord per matched ACL; the answer goes once this broker's image has lost
them, and every other broker stops enforcing them once its image has."""

from __future__ import annotations

import logging

from kafka.protocol.admin import DeleteAclsRequest, DeleteAclsResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.forwarding import forward, wait_visible
from onceflow.broker.handlers.describe_acls import NO_AUTHORIZER
from onceflow.broker.security.access import ALTER, CLUSTER, authorize
from onceflow.broker.security.acls import AclBinding, AclBindingFilter
from onceflow.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

API_KEY = 31
MIN_VERSION = 1
MAX_VERSION = 3
REQUEST = DeleteAclsRequest

_Result = DeleteAclsResponse.DeleteAclsFilterResult
_Matching = _Result.DeleteAclsMatchingAcl


def _failed(count: int, code: ErrorCode, message: str | None) -> DeleteAclsResponse:
    return DeleteAclsResponse(
        throttle_time_ms=0,
        filter_results=[
            _Result(error_code=int(code), error_message=message, matching_acls=[]) for _ in range(count)
        ],
    )


async def handle(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    filters = request.filters or []
    if not authorize(ctx, ALTER, CLUSTER):
        return _failed(len(filters), ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return _failed(len(filters), ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    if ctx.services.security_from_metadata:
        return await _forwarded(ctx, request)
    parsed = [AclBindingFilter.from_delete_filter(f) for f in filters]
    valid = [f for f in parsed if not f.unknown]
    try:
        matched = iter(authorizer.delete(valid))
    except OSError as exc:
        log.exception("could not save ACLs")
        return _failed(len(filters), ErrorCode.KAFKA_STORAGE_ERROR, f"could not save ACLs: {exc}")
    results = []
    for acl_filter in parsed:
        if acl_filter.unknown:
            results.append(
                _Result(
                    error_code=int(ErrorCode.INVALID_REQUEST),
                    error_message="Unknown filter field",
                    matching_acls=[],
                )
            )
            continue
        acls = next(matched)
        for acl in acls:
            log.info("ACL removed by %s: %s", ctx.session.principal, acl.describe())
        results.append(
            _Result(
                error_code=0,
                error_message=None,
                matching_acls=[
                    _Matching(error_code=0, error_message=None, **acl.wire_fields()) for acl in acls
                ],
            )
        )
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=results)


async def _forwarded(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    try:
        response = await forward(ctx, request)
    except KafkaError as exc:
        return _failed(len(request.filters or []), exc.code, str(exc))
    removed = [
        AclBinding.from_record(m) for result in response.filter_results for m in result.matching_acls or []
    ]
    if removed:
        await wait_visible(ctx, lambda image: all(image.acl_id(b) is None for b in removed))
        for binding in removed:
            log.info("ACL removed by %s: %s", ctx.session.principal, binding.describe())
    return response
