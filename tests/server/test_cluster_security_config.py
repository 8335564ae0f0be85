"""A cluster node's security: a node whose inter-broker listener makes the other brokers
``User:ANONYMOUS`` (no super user) is warned at start, and a data dir's users and ACLs come into the
metadata log at the cluster's first start."""

from __future__ import annotations

from onceflow.server.cluster_authorization import inter_broker_warning
from onceflow.server.config import server_config
from onceflow.server.security import broker_security

CLUSTER = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.quorum.voters": "1@127.0.0.1:19093",
    "controller.listener.names": "CONTROLLER",
    "listeners": "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093,CLIENT://127.0.0.1:19094",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,CLIENT:SASL_PLAINTEXT",
}
SECURITY = {"authorizer.class.name": "standard", "sasl.enabled.mechanisms": "SCRAM-SHA-512"}


def test_an_anonymous_inter_broker_principal_without_super_user_is_warned_about():
    server = server_config(CLUSTER)
    warning = inter_broker_warning(server, broker_security(server, SECURITY))
    assert warning is not None
    assert "User:ANONYMOUS" in warning and "super.users" in warning and "PLAINTEXT" in warning


def test_no_warning_when_anonymous_is_a_super_user_or_without_an_authorizer_or_on_one_node():
    server = server_config(CLUSTER)
    granted = {**SECURITY, "super.users": "User:admin;User:ANONYMOUS"}
    assert inter_broker_warning(server, broker_security(server, granted)) is None
    no_authorizer = {"sasl.enabled.mechanisms": "SCRAM-SHA-512"}
    assert inter_broker_warning(server, broker_security(server, no_authorizer)) is None
    single = server_config({})
    assert (
        inter_broker_warning(single, broker_security(single, {"authorizer.class.name": "standard"})) is None
    )


def test_a_cluster_node_brings_its_data_dirs_users_and_acls_into_the_metadata_log(tmp_path):
    from onceflow.broker.security.acl_store import FileAclStore
    from onceflow.broker.security.credentials import FileScramStore
    from onceflow.metadata.acls import AclBinding, AclOperation, PatternType, PermissionType, ResourceType
    from onceflow.metadata.image import MetadataImage
    from onceflow.metadata.scram import credential_from_password
    from onceflow.server.migration import retire_single_node_files, single_node_records

    credential = credential_from_password("SCRAM-SHA-512", "admin-secret")
    FileScramStore(tmp_path).save({("admin", "SCRAM-SHA-512"): credential})
    acl = AclBinding(
        ResourceType.TOPIC,
        "orders",
        PatternType.LITERAL,
        "User:app",
        "*",
        AclOperation.READ,
        PermissionType.ALLOW,
    )
    FileAclStore(tmp_path).save([acl])

    assert single_node_records(tmp_path, 1) == []  # a single node keeps using its files
    image = MetadataImage.EMPTY.apply_all(single_node_records(tmp_path, 1, security=True))
    assert dict(image.scram_credentials) == {("admin", "SCRAM-SHA-512"): credential}
    assert list(image.acls.values()) == [acl]

    retire_single_node_files(tmp_path, security=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "acls.json.migrated",
        "scram-credentials.json.migrated",
    ]


def test_brokers_reaching_each_other_as_a_sasl_user_need_it_in_super_users():
    server = server_config(CLUSTER)
    config = broker_security(server, {**SECURITY, "super.users": "User:admin"})
    warning = inter_broker_warning(server, config, "node")
    assert warning is not None and "User:node" in warning and "super.users" in warning
    granted = broker_security(server, {**SECURITY, "super.users": "User:admin;User:node"})
    assert inter_broker_warning(server, granted, "node") is None
