"""The controller's ACLs and SCRAM credentials (Kafka's AclControlManager and ScramControlManager):
the records CreateAcls, DeleteAcls and AlterUserScramCredentials write, their per-result errors, and
the image every controller and broker replays them into (also from a snapshot)."""

from __future__ import annotations

import random
import uuid
from types import SimpleNamespace

from kafka.protocol.admin import (
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    DeleteAclsRequest,
)
from tests.controller.harness import controller, run

from onceflow.controller.quorum_controller import QuorumController
from onceflow.metadata.acls import AclBinding
from onceflow.metadata.records import (
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from onceflow.metadata.scram import credential_from_password, salted_password
from onceflow.protocol.acl_types import AclOperation, PatternType, PermissionType, ResourceType
from onceflow.protocol.errors import ErrorCode

_Creation = CreateAclsRequest.AclCreation
_Filter = DeleteAclsRequest.DeleteAclsFilter
_Upsertion = AlterUserScramCredentialsRequest.ScramCredentialUpsertion
_Deletion = AlterUserScramCredentialsRequest.ScramCredentialDeletion
SALT = b"0123456789abcdef"


def creation(name="orders", principal="User:alice", op=AclOperation.READ, pattern=PatternType.LITERAL, **kw):
    return _Creation(
        resource_type=int(kw.get("resource_type", ResourceType.TOPIC)),
        resource_name=name,
        resource_pattern_type=int(pattern),
        principal=principal,
        host=kw.get("host", "*"),
        operation=int(op),
        permission_type=int(kw.get("permission", PermissionType.ALLOW)),
    )


def acl_filter(
    name=None, principal=None, op=AclOperation.ANY, pattern=PatternType.ANY, resource=ResourceType.ANY
):
    return _Filter(
        resource_type_filter=int(resource),
        resource_name_filter=name,
        pattern_type_filter=int(pattern),
        principal_filter=principal,
        host_filter=None,
        operation=int(op),
        permission_type=int(PermissionType.ANY),
    )


def create(ctl, log, *creations):
    result = ctl.create_acls(CreateAclsRequest(creations=list(creations)), 0)
    return result.records, run(ctl, log, result)


def delete(ctl, log, *filters):
    result = ctl.delete_acls(DeleteAclsRequest(filters=list(filters)), 0)
    return result.records, run(ctl, log, result)


def alter_scram(ctl, log, upsertions=(), deletions=()):
    request = AlterUserScramCredentialsRequest(upsertions=list(upsertions), deletions=list(deletions))
    result = ctl.alter_user_scram_credentials(request, 0)
    response = run(ctl, log, result)
    return result.records, {r.user: (ErrorCode(r.error_code), r.error_message) for r in response.results}


def upsertion(user, password="secret", mechanism=2, iterations=4096, salt=SALT):
    name = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}.get(mechanism, "SCRAM-SHA-512")
    return _Upsertion(
        name=user,
        mechanism=mechanism,
        iterations=iterations,
        salt=salt,
        salted_password=salted_password(name, password, salt, iterations) if salt else b"",
    )


# ---------------------------------------------------------------- CreateAcls


def test_each_new_binding_is_one_record_with_its_own_id_and_the_image_has_it():
    ctl, log = controller()
    records, response = create(ctl, log, creation(), creation(op=AclOperation.WRITE))
    assert [r.error_code for r in response.results] == [0, 0]
    assert [type(r) for r in records] == [AccessControlEntryRecord] * 2
    ids = {r.id for r in records}
    assert len(ids) == 2 and uuid.UUID(int=0) not in ids
    record = records[0]
    assert (record.resource_type, record.resource_name, record.pattern_type) == (2, "orders", 3)
    assert (record.principal, record.host, record.operation, record.permission_type) == (
        "User:alice",
        "*",
        3,
        3,
    )
    image = ctl.committed_image
    assert set(image.acls) == ids
    binding = AclBinding(
        ResourceType.TOPIC,
        "orders",
        PatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.READ,
        PermissionType.ALLOW,
    )
    assert image.acl_id(binding) == record.id


def test_an_existing_or_repeated_binding_succeeds_without_a_record():
    ctl, log = controller()
    create(ctl, log, creation())
    records, response = create(ctl, log, creation(), creation(name="new"), creation(name="new"))
    assert [r.error_code for r in response.results] == [0, 0, 0]
    assert [r.resource_name for r in records] == ["new"]
    assert len(ctl.committed_image.acls) == 2


def test_invalid_bindings_are_refused_one_by_one_and_the_valid_ones_written():
    ctl, log = controller()
    records, response = create(
        ctl,
        log,
        creation(pattern=PatternType.MATCH),
        creation(op=AclOperation.ANY),
        creation(name=""),
        creation(principal="alice"),
        creation(resource_type=ResourceType.CLUSTER, name="not-the-cluster", op=AclOperation.ALTER),
        creation(permission=PermissionType.ANY),
        creation(name="fine"),
    )
    codes = [ErrorCode(r.error_code) for r in response.results]
    assert codes == [ErrorCode.INVALID_REQUEST] * 6 + [ErrorCode.NONE]
    assert all(r.error_message for r in response.results[:6])
    assert [r.resource_name for r in records] == ["fine"]


def test_create_acls_on_a_standby_controller_is_not_controller():
    ctl = QuorumController()
    try:
        ctl.create_acls(CreateAclsRequest(creations=[creation()]), 0)
    except Exception as exc:  # noqa: BLE001 - the exception's code is what matters
        assert getattr(exc, "code", None) is ErrorCode.NOT_CONTROLLER
    else:
        raise AssertionError("a standby controller wrote ACLs")


# ---------------------------------------------------------------- DeleteAcls


def test_a_filter_removes_what_it_matches_by_id_and_reports_it():
    ctl, log = controller()
    created, _ = create(ctl, log, creation(), creation(name="payments"), creation(principal="User:bob"))
    ids = {(r.resource_name, r.principal): r.id for r in created}
    records, response = delete(ctl, log, acl_filter(principal="User:alice"))
    assert [type(r) for r in records] == [RemoveAccessControlEntryRecord] * 2
    assert {r.id for r in records} == {ids[("orders", "User:alice")], ids[("payments", "User:alice")]}
    (result,) = response.filter_results
    assert result.error_code == 0
    assert sorted(m.resource_name for m in result.matching_acls) == ["orders", "payments"]
    assert list(ctl.committed_image.acls) == [ids[("orders", "User:bob")]]


def test_two_filters_matching_one_binding_remove_it_once_and_both_report_it():
    ctl, log = controller()
    create(ctl, log, creation())
    records, response = delete(ctl, log, acl_filter(name="orders"), acl_filter(principal="User:alice"))
    assert len(records) == 1
    assert [len(r.matching_acls) for r in response.filter_results] == [1, 1]
    assert not ctl.committed_image.acls


def test_a_match_filter_removes_the_bindings_that_apply_to_the_name():
    ctl, log = controller()
    create(
        ctl,
        log,
        creation(name="ord", pattern=PatternType.PREFIXED),
        creation(name="*"),
        creation(name="other"),
    )
    _records, response = delete(ctl, log, acl_filter(name="orders", pattern=PatternType.MATCH))
    assert sorted(m.resource_name for m in response.filter_results[0].matching_acls) == ["*", "ord"]
    assert [a.name for a in ctl.committed_image.acls.values()] == ["other"]


def test_an_unknown_filter_is_invalid_and_the_others_still_apply():
    ctl, log = controller()
    create(ctl, log, creation())
    records, response = delete(ctl, log, acl_filter(op=AclOperation.UNKNOWN), acl_filter(name="orders"))
    assert [ErrorCode(r.error_code) for r in response.filter_results] == [
        ErrorCode.INVALID_REQUEST,
        ErrorCode.NONE,
    ]
    assert len(records) == 1


def test_a_filter_matching_nothing_writes_nothing():
    ctl, log = controller()
    records, response = delete(ctl, log, acl_filter(name="nothing"))
    assert records == ()
    assert response.filter_results[0].error_code == 0 and response.filter_results[0].matching_acls == []


# ---------------------------------------------------------------- AlterUserScramCredentials


def test_an_upsertion_writes_the_derived_keys_never_the_salted_password():
    ctl, log = controller()
    request = upsertion("alice", "alice-secret", mechanism=2, iterations=8192)
    records, results = alter_scram(ctl, log, [request])
    assert results == {"alice": (ErrorCode.NONE, None)}
    (record,) = records
    assert isinstance(record, UserScramCredentialRecord)
    expected = credential_from_password("SCRAM-SHA-512", "alice-secret", 8192, SALT)
    assert (record.name, record.mechanism, record.iterations, record.salt) == ("alice", 2, 8192, SALT)
    assert (record.stored_key, record.server_key) == (expected.stored_key, expected.server_key)
    assert request.salted_password not in (record.stored_key, record.server_key)
    assert ctl.committed_image.scram_credentials[("alice", "SCRAM-SHA-512")] == expected


def test_scram_checks_are_kafkas_one_result_per_user():
    ctl, log = controller()
    alter_scram(ctl, log, [upsertion("bob", mechanism=1)])
    records, results = alter_scram(
        ctl,
        log,
        upsertions=[
            upsertion("few", iterations=4095),
            upsertion("many", iterations=16385),
            upsertion("", mechanism=2),
            upsertion("unknown", mechanism=3),
            upsertion("twice"),
            upsertion("twice"),
            upsertion("nosalt", salt=b""),
        ],
        deletions=[_Deletion(name="missing", mechanism=2), _Deletion(name="bob", mechanism=2)],
    )
    assert results["few"] == (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
    assert results["many"] == (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
    assert results[""][0] is ErrorCode.UNACCEPTABLE_CREDENTIAL
    assert results["unknown"][0] is ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert results["twice"][0] is ErrorCode.DUPLICATE_RESOURCE
    assert results["nosalt"][0] is ErrorCode.UNACCEPTABLE_CREDENTIAL
    assert results["missing"][0] is ErrorCode.RESOURCE_NOT_FOUND
    assert results["bob"][0] is ErrorCode.RESOURCE_NOT_FOUND  # bob has SCRAM-SHA-256 only
    assert records == ()
    assert list(ctl.committed_image.scram_credentials) == [("bob", "SCRAM-SHA-256")]


def test_a_deletion_removes_one_mechanism_of_a_user():
    ctl, log = controller()
    alter_scram(ctl, log, [upsertion("carol", mechanism=1)])
    alter_scram(ctl, log, [upsertion("carol", mechanism=2)])
    records, results = alter_scram(ctl, log, deletions=[_Deletion(name="carol", mechanism=1)])
    assert results == {"carol": (ErrorCode.NONE, None)}
    assert records == (RemoveUserScramCredentialRecord(name="carol", mechanism=1),)
    assert list(ctl.committed_image.scram_credentials) == [("carol", "SCRAM-SHA-512")]


# ---------------------------------------------------------------- replay elsewhere


def test_a_standby_and_a_controller_started_from_a_snapshot_have_the_same_acls_and_credentials():
    ctl, log = controller()
    create(ctl, log, creation(), creation(name="pay", pattern=PatternType.PREFIXED, op=AclOperation.WRITE))
    alter_scram(ctl, log, [upsertion("alice")])
    standby = QuorumController(rng=random.Random(1))
    for batch in log.batches:
        standby.handle_commit(batch)
    assert standby.committed_image.acls == ctl.committed_image.acls
    assert standby.committed_image.scram_credentials == ctl.committed_image.scram_credentials

    offset, records = ctl.snapshot()
    restarted = QuorumController(rng=random.Random(2))
    restarted.handle_load_snapshot(SimpleNamespace(offset=offset, records=records))
    assert restarted.committed_image.acls == ctl.committed_image.acls  # the same ids too
    assert restarted.committed_image.scram_credentials == ctl.committed_image.scram_credentials
