"""Where ACLs persist. ``AclStore`` is the seam, as ``quotas.store``: the authorizer loads every ACL at
start and saves the whole set after each accepted CreateAcls / DeleteAcls, before answering it. Today's
store is ``<data-dir>/acls.json`` written atomically; the cluster work keeps them as
AccessControlEntryRecord / RemoveAccessControlEntryRecord in the metadata log behind the same two calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from onceflow.broker.security.acls import (
    AclBinding,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    check_new_binding,
)
from onceflow.log.durable_file import write_atomically

FILE_NAME = "acls.json"
FORMAT_VERSION = 1


class AclStore(Protocol):
    def load(self) -> list[AclBinding]: ...

    def save(self, acls: Iterable[AclBinding]) -> None: ...


class MemoryAclStore:
    """Keeps nothing across restarts (tests, offline tools that only read)."""

    def __init__(self, acls: Iterable[AclBinding] = ()) -> None:
        self.saved = list(acls)

    def load(self) -> list[AclBinding]:
        return list(self.saved)

    def save(self, acls: Iterable[AclBinding]) -> None:
        self.saved = sorted(acls)


class FileAclStore:
    """``{"version": 1, "acls": [{"resource_type": "TOPIC", "name": ..., "pattern_type": "LITERAL",
    "principal": "User:alice", "host": "*", "operation": "READ", "permission": "ALLOW"}, ...]}``."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / FILE_NAME

    def load(self) -> list[AclBinding]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        try:
            document = json.loads(text)
            if document.get("version") != FORMAT_VERSION:
                raise ValueError(f"unknown format version {document.get('version')!r}")
            acls = []
            for item in document["acls"]:
                acl = AclBinding(
                    ResourceType[item["resource_type"]],
                    str(item["name"]),
                    PatternType[item["pattern_type"]],
                    str(item["principal"]),
                    str(item["host"]),
                    AclOperation[item["operation"]],
                    PermissionType[item["permission"]],
                )
                problem = check_new_binding(acl)
                if problem is not None:
                    raise ValueError(problem)
                acls.append(acl)
        except Exception as exc:  # any damage: refuse to start with the ACLs half-known
            raise ValueError(f"{self.path} is damaged ({exc!r}); fix or remove it") from None
        return acls

    def save(self, acls: Iterable[AclBinding]) -> None:
        document = {
            "version": FORMAT_VERSION,
            "acls": [
                {
                    "resource_type": acl.resource_type.name,
                    "name": acl.name,
                    "pattern_type": acl.pattern_type.name,
                    "principal": acl.principal,
                    "host": acl.host,
                    "operation": acl.operation.name,
                    "permission": acl.permission.name,
                }
                for acl in sorted(acls)
            ],
        }
        write_atomically(self.path, json.dumps(document, indent=1) + "\n")
