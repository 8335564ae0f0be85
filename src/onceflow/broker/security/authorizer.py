"""Kafka's StandardAuthorizer: which principal may do what, from where, to which resource.

For an action (operation O on the resource of type T named N, by principal P from host H):

1. a super user (``super.users``) may do anything;
2. the ACLs that apply to the resource are those of type T that are LITERAL with name N or ``*``, or
   PREFIXED with a prefix of N; an ACL matches the action if its principal is P or ``User:*``, its
   host is H or ``*``, and its operation is O or ALL; an ALLOW of READ, WRITE, DELETE or ALTER also
   allows DESCRIBE, and an ALLOW of ALTER_CONFIGS also DESCRIBE_CONFIGS (these implications do not
   hold for DENY);
3. a matching DENY wins over any ALLOW; else a matching ALLOW allows;
4. with no match: denied if the resource has any ACL at all, else ``allow.everyone.if.no.acl.found``.

``authorize_by_type`` answers "may P do O on at least one resource of type T" (Kafka's default
``authorizeByResourceType``), which idempotent producers without IDEMPOTENT_WRITE rely on.

Every denial of an action the client asked for is logged at INFO, one line each, on the
``onceflow.authorizer`` logger, in Kafka's authorizer-log words; filtering denials (listing topics,
authorized operations) are logged at DEBUG. ACL changes are saved (``acl_store``) before they apply,
and decisions are cached until the next change. On a cluster broker the ACLs are the metadata
image's: the controller decides changes, and :meth:`StandardAuthorizer.replace` applies the image's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from onceflow.broker.security.acl_store import AclStore
from onceflow.broker.security.acls import (
    RESOURCE_TYPE_NAMES,
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
)
from onceflow.broker.security.config import AuthorizerSettings
from onceflow.broker.security.principal import KafkaPrincipal

audit = logging.getLogger("onceflow.authorizer")

_IMPLIES_DESCRIBE = frozenset(
    {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
)
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})
_MAX_CACHED = 100_000


def _applies(
    acl: AclBinding, principals: tuple[str, str], host: str, operation: AclOperation
) -> PermissionType | None:
    """The ACL's permission if it matches the action (name already matched), else None."""
    if acl.principal not in principals:
        return None
    if acl.host != WILDCARD_HOST and acl.host != host:
        return None
    if acl.operation != AclOperation.ALL:
        if acl.permission == PermissionType.ALLOW:
            if operation == AclOperation.DESCRIBE:
                if acl.operation not in _IMPLIES_DESCRIBE:
                    return None
            elif operation == AclOperation.DESCRIBE_CONFIGS:
                if acl.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif acl.operation != operation:
                return None
        elif acl.operation != operation:
            return None
    return acl.permission


class StandardAuthorizer:
    def __init__(self, settings: AuthorizerSettings, store: AclStore) -> None:
        self._super_users = frozenset(str(p) for p in settings.super_users)
        self._allow_if_none = settings.allow_everyone_if_no_acl_found
        self._store = store
        self._acls: set[AclBinding] = set(store.load())
        self._index()

    def _index(self) -> None:
        self._literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self._prefixed: dict[ResourceType, list[AclBinding]] = {}
        for acl in sorted(self._acls):
            if acl.pattern_type == PatternType.LITERAL:
                self._literal.setdefault((acl.resource_type, acl.name), []).append(acl)
            else:
                self._prefixed.setdefault(acl.resource_type, []).append(acl)
        self._cache: dict[tuple, tuple[bool, str]] = {}

    # -- decisions -------------------------------------------------------------------------------------

    def authorize(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        *,
        request: str = "",
        log_denied: bool = True,
    ) -> bool:
        key = (principal, host, operation, resource_type, name)
        decided = self._cache.get(key)
        if decided is None:
            decided = self._decide(str(principal), host, operation, resource_type, name)
            if len(self._cache) >= _MAX_CACHED:
                self._cache.clear()
            self._cache[key] = decided
        allowed, rule = decided
        if not allowed:
            level = logging.INFO if log_denied else logging.DEBUG
            if audit.isEnabledFor(level):
                audit.log(
                    level,
                    "Principal = %s is Denied operation = %s from host = %s on resource = %s:LITERAL:%s "
                    "for request = %s based on rule %s",
                    principal,
                    operation.name,
                    host,
                    RESOURCE_TYPE_NAMES.get(resource_type, resource_type.name),
                    name,
                    request or "?",
                    rule,
                )
        return allowed

    def _decide(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> tuple[bool, str]:
        if principal in self._super_users:
            return True, "SuperUser"
        principals = (principal, WILDCARD_PRINCIPAL)
        candidates = [
            *self._literal.get((resource_type, name), ()),
            *self._literal.get((resource_type, WILDCARD_RESOURCE), ()),
            *(acl for acl in self._prefixed.get(resource_type, ()) if name.startswith(acl.name)),
        ]
        allow = None
        for acl in candidates:
            permission = _applies(acl, principals, host, operation)
            if permission == PermissionType.DENY:
                return False, f"MatchingAcl({acl.describe()})"
            if permission == PermissionType.ALLOW and allow is None:
                allow = acl
        if allow is not None:
            return True, f"MatchingAcl({allow.describe()})"
        if not candidates:
            return self._allow_if_none, "DefaultAllow" if self._allow_if_none else "DefaultDeny"
        return False, "DefaultDeny"

    def authorize_by_type(
        self, principal: KafkaPrincipal, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether ``principal`` may do ``operation`` on at least one resource of ``resource_type``."""
        # A made-up name first: super users (and the no-ACL default) pass whatever the ACLs say.
        if self.authorize(principal, host, operation, resource_type, "hardcode", log_denied=False):
            return True
        who = str(principal)
        deny: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        allow: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        for acl in self._acls:
            if acl.resource_type != resource_type:
                continue
            if acl.host not in (host, WILDCARD_HOST) or acl.principal not in (who, WILDCARD_PRINCIPAL):
                continue
            if acl.operation not in (operation, AclOperation.ALL):
                continue
            if acl.permission == PermissionType.DENY:
                if acl.pattern_type == PatternType.LITERAL and acl.name == WILDCARD_RESOURCE:
                    return False
                deny[acl.pattern_type].add(acl.name)
            elif acl.pattern_type == PatternType.LITERAL and acl.name == WILDCARD_RESOURCE:
                return True
            else:
                allow[acl.pattern_type].add(acl.name)
        for pattern_type, names in allow.items():
            for name in names:
                if pattern_type == PatternType.LITERAL and name in deny[PatternType.LITERAL]:
                    continue
                if not any(name[:i] in deny[PatternType.PREFIXED] for i in range(1, len(name) + 1)):
                    return True
        return False

    def operations(
        self, principal: KafkaPrincipal, host: str, resource_type: ResourceType, name: str
    ) -> frozenset[AclOperation]:
        """The operations ``principal`` may perform on the resource (KIP-430), never logged as denials."""
        return frozenset(
            op
            for op in SUPPORTED_OPERATIONS[resource_type]
            if self.authorize(principal, host, op, resource_type, name, log_denied=False)
        )

    # -- the ACLs --------------------------------------------------------------------------------------

    def acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        return [acl for acl in sorted(self._acls) if acl_filter.matches(acl)]

    def create(self, bindings: Iterable[AclBinding]) -> None:
        """Add bindings (already checked; existing ones are no change); saved before they apply."""
        added = self._acls | set(bindings)
        if added != self._acls:
            self._store.save(added)
            self._acls = added
            self._index()

    def delete(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove every binding each filter matches; per filter, what it matched. Saved before it applies."""
        matched = [[acl for acl in sorted(self._acls) if f.matches(acl)] for f in filters]
        removed = {acl for acls in matched for acl in acls}
        if removed:
            remaining = self._acls - removed
            self._store.save(remaining)
            self._acls = remaining
            self._index()
        return matched

    def replace(self, acls: Iterable[AclBinding]) -> None:
        """A cluster broker: the ACLs are now these (its metadata image's), nothing saved."""
        acls = set(acls)
        if acls != self._acls:
            self._acls = acls
            self._index()

    def __len__(self) -> int:
        return len(self._acls)
