"""What handlers call to authorize a request: the one seam between them and the authorizer.

Every call is a no-op answer ("allowed") on a broker without an authorizer, so handlers check the same
way with or without one and the hot path pays one attribute test. The checks each API makes are
Kafka's (``api_access.API_ACCESS`` lists them); handlers make them first, before changing anything.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from onceflow.broker.security.acls import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType

if TYPE_CHECKING:
    from onceflow.broker.context import RequestContext

# Re-exported for handlers: ``from onceflow.broker.security.access import READ, TOPIC, ...``.
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = (
    AclOperation.READ,
    AclOperation.WRITE,
    AclOperation.CREATE,
    AclOperation.DELETE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE,
)
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = (
    AclOperation.CLUSTER_ACTION,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
    AclOperation.IDEMPOTENT_WRITE,
)
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)


def authorize(
    ctx: RequestContext,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str | None = CLUSTER_NAME,
    *,
    log_denied: bool = True,
) -> bool:
    """Whether the request's principal may do ``operation`` on the resource (the cluster by default)."""
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return True
    session = ctx.session
    return authorizer.authorize(
        session.principal,
        session.client_host,
        operation,
        resource_type,
        name if name is not None else "",
        request=api_name(ctx.api_key),
        log_denied=log_denied,
    )


def allowed_names(
    ctx: RequestContext,
    operation: AclOperation,
    resource_type: ResourceType,
    names: Iterable[str | None],
    *,
    log_denied: bool = True,
) -> frozenset[str] | None:
    """The names among ``names`` the principal may do ``operation`` on; None: all (no authorizer)."""
    if ctx.services.authorizer is None:
        return None
    return frozenset(
        name
        for name in {n for n in names if n is not None}
        if authorize(ctx, operation, resource_type, name, log_denied=log_denied)
    )


def authorize_any(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType) -> bool:
    """Whether the principal may do ``operation`` on at least one resource of the type."""
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return True
    session = ctx.session
    return authorizer.authorize_by_type(session.principal, session.client_host, operation, resource_type)


def operations(
    ctx: RequestContext, resource_type: ResourceType, name: str = CLUSTER_NAME
) -> frozenset[AclOperation]:
    """The operations the principal may perform on the resource (KIP-430's authorized operations)."""
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return SUPPORTED_OPERATIONS[resource_type]
    session = ctx.session
    return authorizer.operations(session.principal, session.client_host, resource_type, name)


_API_NAMES: dict[int, str] = {}


def api_name(api_key: int) -> str:
    """Kafka's name of an API (``Produce``), for the authorizer log."""
    name = _API_NAMES.get(api_key)
    if name is None:
        from onceflow.protocol import apis

        request_class = apis.request_class(api_key)
        name = request_class.name.removesuffix("Request") if request_class is not None else str(api_key)
        _API_NAMES[api_key] = name
    return name


def with_items(request: Any, field: str, items: list[Any]) -> Any:
    """A copy of ``request`` whose list ``field`` is ``items``: what a broker forwards to the
    controller once it has refused the items the principal may not touch."""
    clone = copy.copy(request)
    setattr(clone, field, items)
    return clone


def merged_in_order(items: Iterable[Any], refused: Mapping[int, Any], answered: Iterable[Any]) -> list[Any]:
    """The results of ``items`` in request order: ``refused[i]`` for the i-th item where the broker
    refused it, else the next of the controller's ``answered`` (which answered the others in order)."""
    rest = iter(answered)
    return [refused[i] if i in refused else next(rest) for i, _item in enumerate(items)]
