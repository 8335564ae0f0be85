"""ACL and SCRAM records in the image: replay, Kafka's replay checks, snapshots and the bytes."""

from __future__ import annotations

import uuid

import pytest

from onceflow.metadata import records as r
from onceflow.metadata.acls import AclBinding
from onceflow.metadata.image import MetadataImage, ReplayError
from onceflow.metadata.scram import credential_from_password
from onceflow.metadata.snapshot import load_snapshot, snapshot_bytes
from onceflow.protocol.acl_types import AclOperation, PatternType, PermissionType, ResourceType

A1, A2 = uuid.UUID(int=11), uuid.UUID(int=12)


def _acl(acl_id, name="orders", principal="User:alice", permission=3) -> r.AccessControlEntryRecord:
    return r.AccessControlEntryRecord(
        id=acl_id,
        resource_type=2,
        resource_name=name,
        pattern_type=4,
        principal=principal,
        host="*",
        operation=4,
        permission_type=permission,
    )


def _scram(name="alice", mechanism=2, password="secret") -> r.UserScramCredentialRecord:
    credential = credential_from_password({1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}[mechanism], password, 4096)
    return r.UserScramCredentialRecord(
        name=name,
        mechanism=mechanism,
        salt=credential.salt,
        stored_key=credential.stored_key,
        server_key=credential.server_key,
        iterations=4096,
    )


def test_acl_records_replay_into_bindings_by_id():
    image = MetadataImage.EMPTY.apply_all([_acl(A1), _acl(A2, principal="User:bob", permission=2)])
    assert image.acls[A1] == AclBinding(
        ResourceType.TOPIC,
        "orders",
        PatternType.PREFIXED,
        "User:alice",
        "*",
        AclOperation.WRITE,
        PermissionType.ALLOW,
    )
    assert image.acls[A2].permission is PermissionType.DENY
    assert image.acl_id(image.acls[A2]) == A2
    after = image.apply(r.RemoveAccessControlEntryRecord(id=A1))
    assert list(after.acls) == [A2]
    assert after.acl_id(image.acls[A1]) is None
    assert list(image.acls) == [A1, A2]  # images are immutable


def test_removing_an_unknown_acl_or_credential_is_a_replay_error():
    with pytest.raises(ReplayError, match="unknown ACL id"):
        MetadataImage.EMPTY.apply(r.RemoveAccessControlEntryRecord(id=A1))
    with pytest.raises(ReplayError, match="alice"):
        MetadataImage.EMPTY.apply(r.RemoveUserScramCredentialRecord(name="alice", mechanism=2))
    with pytest.raises(ReplayError, match="mechanism"):
        MetadataImage.EMPTY.apply(
            r.UserScramCredentialRecord(
                name="x", mechanism=9, salt=b"s", stored_key=b"k", server_key=b"k", iterations=4096
            )
        )


def test_scram_records_replay_per_user_and_mechanism():
    record = _scram()
    image = MetadataImage.EMPTY.apply_all([record, _scram(mechanism=1)])
    credential = image.scram_credentials[("alice", "SCRAM-SHA-512")]
    assert (credential.salt, credential.stored_key, credential.server_key) == (
        record.salt,
        record.stored_key,
        record.server_key,
    )
    after = image.apply(r.RemoveUserScramCredentialRecord(name="alice", mechanism=1))
    assert list(after.scram_credentials) == [("alice", "SCRAM-SHA-512")]


def test_a_snapshot_carries_acls_with_their_ids_and_credentials():
    image = MetadataImage.EMPTY.apply_all(
        [
            r.FeatureLevelRecord(name="metadata.version", feature_level=14),
            _acl(A1),
            _acl(A2, name="x"),
            _scram(),
        ]
    )
    loaded = load_snapshot(snapshot_bytes(image))
    assert loaded.acls == image.acls
    assert loaded.scram_credentials == image.scram_credentials
    assert loaded == image


@pytest.mark.parametrize(
    "record",
    [
        _acl(A1),
        r.RemoveAccessControlEntryRecord(id=A2),
        _scram(),
        r.RemoveUserScramCredentialRecord(name="a", mechanism=1),
    ],
)
def test_security_records_round_trip_as_kafkas_bytes(record):
    assert r.from_bytes(r.to_bytes(record)) == record
