"""Kafka's StandardAuthorizer rules: DENY over ALLOW, LITERAL / PREFIXED / wildcard resources, host
and principal matching, implied DESCRIBE, super users, the no-ACL default, authorizeByResourceType,
and ACLs that survive a restart."""

from __future__ import annotations

import pytest

from onceflow.broker.security.acl_store import FileAclStore, MemoryAclStore
from onceflow.broker.security.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    check_new_binding,
)
from onceflow.broker.security.authorizer import StandardAuthorizer
from onceflow.broker.security.config import AuthorizerSettings
from onceflow.broker.security.principal import KafkaPrincipal, user

T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = PermissionType.ALLOW, PermissionType.DENY
Op = AclOperation
ALICE, BOB = user("alice"), user("bob")


def acl(rtype, name, op, permission=ALLOW, *, principal="User:alice", host="*", pattern=LIT) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, permission)


def authorizer(*acls, super_users=(), allow_if_none=False) -> StandardAuthorizer:
    settings = AuthorizerSettings(frozenset(KafkaPrincipal.parse(s) for s in super_users), allow_if_none)
    return StandardAuthorizer(settings, MemoryAclStore(acls))


def can(auth, op, rtype, name, principal=ALICE, host="10.0.0.1") -> bool:
    return auth.authorize(principal, host, op, rtype, name)


def test_literal_allow_is_exact():
    auth = authorizer(acl(T, "orders", Op.WRITE))
    assert can(auth, Op.WRITE, T, "orders")
    assert not can(auth, Op.WRITE, T, "orders-2")
    assert not can(auth, Op.READ, T, "orders")
    assert not can(auth, Op.WRITE, T, "orders", principal=BOB)


def test_prefixed_and_wildcard():
    auth = authorizer(acl(T, "orders-", Op.READ, pattern=PRE), acl(G, "*", Op.READ))
    assert can(auth, Op.READ, T, "orders-eu")
    assert not can(auth, Op.READ, T, "order")
    assert can(auth, Op.READ, G, "any-group")


def test_deny_wins_over_allow_however_broad():
    auth = authorizer(
        acl(T, "*", Op.ALL),
        acl(T, "secret-", Op.READ, DENY, pattern=PRE),
        acl(T, "payroll", Op.WRITE, DENY, principal="User:*"),
    )
    assert can(auth, Op.READ, T, "public")
    assert not can(auth, Op.READ, T, "secret-keys")
    assert can(auth, Op.WRITE, T, "secret-keys")  # DENY READ does not deny WRITE
    assert not can(auth, Op.WRITE, T, "payroll")


def test_allow_of_read_write_delete_alter_implies_describe_but_deny_does_not_imply():
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert can(authorizer(acl(T, "t", op)), Op.DESCRIBE, T, "t")
    assert not can(authorizer(acl(T, "t", Op.CREATE)), Op.DESCRIBE, T, "t")
    assert can(authorizer(acl(T, "t", Op.ALTER_CONFIGS)), Op.DESCRIBE_CONFIGS, T, "t")
    auth = authorizer(acl(T, "t", Op.ALL), acl(T, "t", Op.READ, DENY))
    assert can(auth, Op.DESCRIBE, T, "t")


def test_hosts_and_wildcard_principal():
    auth = authorizer(acl(T, "t", Op.READ, host="10.0.0.1"), acl(T, "u", Op.READ, principal="User:*"))
    assert can(auth, Op.READ, T, "t", host="10.0.0.1")
    assert not can(auth, Op.READ, T, "t", host="10.0.0.2")
    assert can(auth, Op.READ, T, "u", principal=BOB)


def test_super_users_and_the_no_acl_default():
    auth = authorizer(acl(T, "t", Op.READ, DENY, principal="User:admin"), super_users=["User:admin"])
    assert can(auth, Op.READ, T, "t", principal=user("admin"))  # super users pass even a DENY
    assert not can(auth, Op.READ, T, "nothing-about-it")
    open_auth = authorizer(acl(T, "guarded", Op.READ, principal="User:bob"), allow_if_none=True)
    assert can(open_auth, Op.READ, T, "unguarded")  # no ACL on it: allow.everyone.if.no.acl.found
    assert not can(open_auth, Op.READ, T, "guarded")  # an ACL exists (for someone else): denied


def test_authorize_by_resource_type():
    assert not authorizer().authorize_by_type(ALICE, "h", Op.WRITE, T)
    assert authorizer(acl(T, "orders", Op.WRITE)).authorize_by_type(ALICE, "h", Op.WRITE, T)
    assert authorizer(acl(T, "o", Op.WRITE, pattern=PRE)).authorize_by_type(ALICE, "h", Op.WRITE, T)
    # A literal allow dominated by a prefixed deny, or a wildcard deny, allows nothing.
    dominated = authorizer(acl(T, "orders", Op.WRITE), acl(T, "ord", Op.WRITE, DENY, pattern=PRE))
    assert not dominated.authorize_by_type(ALICE, "h", Op.WRITE, T)
    assert not authorizer(acl(T, "a", Op.WRITE), acl(T, "*", Op.WRITE, DENY)).authorize_by_type(
        ALICE, "h", Op.WRITE, T
    )
    assert authorizer(super_users=["User:alice"]).authorize_by_type(ALICE, "h", Op.WRITE, T)


def test_operations_lists_what_is_allowed():
    auth = authorizer(acl(T, "t", Op.READ), acl(T, "t", Op.ALTER_CONFIGS))
    assert auth.operations(ALICE, "h", T, "t") == {
        Op.READ,
        Op.DESCRIBE,
        Op.ALTER_CONFIGS,
        Op.DESCRIBE_CONFIGS,
    }


def test_filters_match_as_kafkas():
    acls = [
        acl(T, "orders", Op.READ),
        acl(T, "ord", Op.WRITE, pattern=PRE),
        acl(T, "*", Op.DESCRIBE),
        acl(G, "g", Op.READ),
    ]
    auth = authorizer(*acls)

    def names(
        rtype=ResourceType.ANY,
        name=None,
        pattern=PatternType.ANY,
        principal=None,
        op=Op.ANY,
        perm=PermissionType.ANY,
    ):
        found = auth.acls(AclBindingFilter(rtype, name, pattern, principal, None, op, perm))
        return sorted((a.name, a.pattern_type.name) for a in found)

    assert len(names()) == 4
    assert names(T, "orders", PatternType.MATCH) == [
        ("*", "LITERAL"),
        ("ord", "PREFIXED"),
        ("orders", "LITERAL"),
    ]
    assert names(T, "orders", PatternType.ANY) == [("orders", "LITERAL")]
    assert names(T, "ord", PatternType.PREFIXED) == [("ord", "PREFIXED")]
    assert names(op=Op.READ) == [("g", "LITERAL"), ("orders", "LITERAL")]
    assert names(principal="User:bob") == []


def test_create_and_delete_persist_and_reload(tmp_path):
    store = FileAclStore(tmp_path)
    auth = StandardAuthorizer(AuthorizerSettings(frozenset(), False), store)
    auth.create([acl(T, "orders", Op.READ), acl(T, "orders", Op.READ)])  # the same twice: one ACL
    assert len(auth) == 1 and can(auth, Op.READ, T, "orders")
    reloaded = StandardAuthorizer(AuthorizerSettings(frozenset(), False), FileAclStore(tmp_path))
    assert can(reloaded, Op.READ, T, "orders")
    matched = reloaded.delete(
        [AclBindingFilter(T, "orders", PatternType.ANY, None, None, Op.ANY, PermissionType.ANY)]
    )
    assert [a.name for a in matched[0]] == ["orders"]
    assert not can(
        StandardAuthorizer(AuthorizerSettings(frozenset(), False), FileAclStore(tmp_path)),
        Op.READ,
        T,
        "orders",
    )


def test_damaged_acl_file_refuses_to_start(tmp_path):
    (tmp_path / "acls.json").write_text('{"version": 1, "acls": [{"resource_type": "TOPIC"}]}')
    with pytest.raises(ValueError, match="acls.json is damaged"):
        FileAclStore(tmp_path).load()


@pytest.mark.parametrize(
    ("binding", "words"),
    [
        (acl(ResourceType.ANY, "t", Op.READ), "Invalid resourceType"),
        (acl(T, "t", Op.READ, pattern=PatternType.MATCH), "Invalid patternType"),
        (acl(T, "t", Op.ANY), "Invalid operation"),
        (acl(T, "t", Op.READ, PermissionType.ANY), "Invalid permissionType"),
        (acl(T, "", Op.READ), "empty"),
        (acl(C, "my-cluster", Op.ALTER), "kafka-cluster"),
        (acl(T, "t", Op.READ, principal="alice"), "Invalid principal"),
    ],
)
def test_bindings_kafka_refuses(binding, words):
    assert words in check_new_binding(binding)
    assert check_new_binding(acl(X, "tx", Op.WRITE)) is None
