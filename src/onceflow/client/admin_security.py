"""The admin client's security calls: ACLs (CreateAcls / DescribeAcls / DeleteAcls) and SCRAM
credentials (KIP-554's DescribeUserScramCredentials / AlterUserScramCredentials), as Kafka's Admin
offers them. A SCRAM password never leaves the client: it is salted and iterated here, and the broker
gets the salt and the salted password only.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass

from kafka.protocol.admin import (
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
    DescribeUserScramCredentialsRequest,
)

from onceflow.protocol.acl_types import (
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    binding_wire_fields,
)
from onceflow.protocol.errors import ErrorCode, kafka_error

SCRAM_MECHANISMS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
DEFAULT_ITERATIONS = 4096


@dataclass(frozen=True, order=True)
class AclBinding:
    """One ACL: ``principal`` from ``host`` is ``permission`` (ALLOW/DENY) ``operation`` on the
    resources of ``resource_type`` named ``name`` (LITERAL) or starting with it (PREFIXED)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: PermissionType


@dataclass(frozen=True)
class AclFilter:
    """What to list or remove: None (or ANY) matches every value of a field; pattern MATCH matches
    the ACLs that apply to the named resource (literal, ``*`` and prefixes)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: PermissionType = PermissionType.ANY


def _filter_fields(f: AclFilter) -> dict:
    """An ACL filter as DescribeAcls and DeleteAcls carry it (the same fields in both)."""
    return {
        "resource_type_filter": int(f.resource_type),
        "resource_name_filter": f.name,
        "pattern_type_filter": int(f.pattern_type),
        "principal_filter": f.principal,
        "host_filter": f.host,
        "operation": int(f.operation),
        "permission_type": int(f.permission),
    }


def _binding(resource_type: int, name: str, pattern_type: int, acl) -> AclBinding:
    """An ACL of a DescribeAcls resource or a DeleteAcls match (``acl``: principal, host,
    operation, permission_type)."""
    return AclBinding(
        ResourceType(resource_type),
        name,
        PatternType(pattern_type),
        acl.principal,
        acl.host,
        AclOperation(acl.operation),
        PermissionType(acl.permission_type),
    )


def _check(code: int, what: str, message: str | None = None) -> None:
    if code != ErrorCode.NONE:
        error = ErrorCode(code)
        raise kafka_error(error, f"{what}: {error.name}" + (f" ({message})" if message else ""))


class SecurityAdmin:
    """Mixed into ``AsyncAdminClient``, which provides ``_any()``: a connection to some broker."""

    async def _any(self):  # pragma: no cover - provided by the admin client
        raise NotImplementedError

    async def create_acls(self, acls: Iterable[AclBinding]) -> None:
        """Add ACLs; raises the first refusal (e.g. CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST)."""
        r = CreateAclsRequest
        creations = [r.AclCreation(**binding_wire_fields(a, "resource_pattern_type")) for a in acls]
        response = await (await self._any()).send(r(creations=creations))
        for result in response.results:
            _check(result.error_code, "create ACLs", result.error_message)

    async def describe_acls(self, acl_filter: AclFilter | None = None) -> list[AclBinding]:
        """The ACLs matching ``acl_filter`` (all by default)."""
        f = acl_filter or AclFilter()
        response = await (await self._any()).send(DescribeAclsRequest(**_filter_fields(f)))
        _check(response.error_code, "describe ACLs", response.error_message)
        return sorted(
            _binding(res.resource_type, res.resource_name, res.pattern_type, a)
            for res in response.resources
            for a in res.acls
        )

    async def delete_acls(self, filters: Iterable[AclFilter]) -> list[AclBinding]:
        """Remove the ACLs each filter matches; returns what was removed."""
        r = DeleteAclsRequest
        wire = [r.DeleteAclsFilter(**_filter_fields(f)) for f in filters]
        response = await (await self._any()).send(r(filters=wire))
        removed = []
        for result in response.filter_results:
            _check(result.error_code, "delete ACLs", result.error_message)
            removed += [
                _binding(m.resource_type, m.resource_name, m.pattern_type, m) for m in result.matching_acls
            ]
        return sorted(removed)

    async def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None
    ) -> dict[str, dict[str, int]]:
        """user -> {mechanism: iterations}; every user with a credential when ``users`` is None. A
        named user without one raises RESOURCE_NOT_FOUND."""
        names = list(users) if users is not None else None
        request = DescribeUserScramCredentialsRequest(
            users=[DescribeUserScramCredentialsRequest.UserName(name=n) for n in names] if names else None
        )
        response = await (await self._any()).send(request)
        _check(response.error_code, "describe SCRAM credentials", response.error_message)
        by_id = {v: k for k, v in SCRAM_MECHANISMS.items()}
        result = {}
        for r in response.results:
            _check(r.error_code, f"describe SCRAM credentials of {r.user!r}", r.error_message)
            result[r.user] = {
                by_id.get(c.mechanism, str(c.mechanism)): c.iterations for c in r.credential_infos
            }
        return result

    async def set_scram_credential(
        self, user: str, password: str, mechanism: str = "SCRAM-SHA-512", iterations: int = DEFAULT_ITERATIONS
    ) -> None:
        """Create or replace ``user``'s credential for ``mechanism`` (salted here; the password stays)."""
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"mechanism {mechanism!r}: use SCRAM-SHA-256 or SCRAM-SHA-512")
        salt = os.urandom(32)
        salted = hashlib.pbkdf2_hmac(_HASHES[mechanism], password.encode(), salt, iterations)
        r = AlterUserScramCredentialsRequest
        upsertion = r.ScramCredentialUpsertion(
            name=user,
            mechanism=SCRAM_MECHANISMS[mechanism],
            iterations=iterations,
            salt=salt,
            salted_password=salted,
        )
        await self._alter_scram(r(deletions=[], upsertions=[upsertion]), user)

    async def delete_scram_credential(self, user: str, mechanism: str = "SCRAM-SHA-512") -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"mechanism {mechanism!r}: use SCRAM-SHA-256 or SCRAM-SHA-512")
        r = AlterUserScramCredentialsRequest
        deletion = r.ScramCredentialDeletion(name=user, mechanism=SCRAM_MECHANISMS[mechanism])
        await self._alter_scram(r(deletions=[deletion], upsertions=[]), user)

    async def _alter_scram(self, request, user: str) -> None:
        response = await (await self._any()).send(request)
        for result in response.results:
            _check(
                result.error_code, f"alter SCRAM credentials of {result.user or user!r}", result.error_message
            )
