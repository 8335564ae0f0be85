"""SCRAM credentials: Kafka's alter/describe rules (one change per user per request, iterations in
4096..16384, deleting what exists only), keys derived from the salted password, and a store that
survives a restart, readable by its owner only."""

from __future__ import annotations

import stat

import scramp

from onceflow.broker.security.credentials import Deletion, FileScramStore, ScramCredentials, Upsertion
from onceflow.broker.security.scram import credential_from_password, salted_password
from onceflow.protocol.errors import ErrorCode

SHA256, SHA512 = 1, 2


def upsert(user, password="pw", mechanism=SHA512, iterations=4096, salt=b"s" * 16):
    name = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}.get(mechanism, "SCRAM-SHA-512")
    return Upsertion(user, mechanism, iterations, salt, salted_password(name, password, salt, iterations))


def test_keys_match_an_independent_scram_implementation():
    salt = b"0123456789abcdef"
    ours = credential_from_password("SCRAM-SHA-256", "pencil", 4096, salt)
    _salt, stored_key, server_key, _i = scramp.ScramMechanism("SCRAM-SHA-256").make_auth_info(
        "pencil", 4096, salt
    )
    assert (ours.stored_key, ours.server_key) == (stored_key, server_key)


def test_alter_rules(tmp_path):
    scram = ScramCredentials(FileScramStore(tmp_path))
    results = scram.alter(
        [
            upsert("alice"),
            upsert("bob", iterations=1000),
            upsert("carol", iterations=20000),
            upsert("", mechanism=SHA256),
            upsert("dave", mechanism=9),
            upsert("erin"),
            upsert("erin", mechanism=SHA256),
        ],
        [Deletion("frank", SHA512)],
    )
    codes = {user: code for user, code, _ in results}
    assert codes == {
        "alice": ErrorCode.NONE,
        "bob": ErrorCode.UNACCEPTABLE_CREDENTIAL,
        "carol": ErrorCode.UNACCEPTABLE_CREDENTIAL,
        "": ErrorCode.UNACCEPTABLE_CREDENTIAL,
        "dave": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
        "erin": ErrorCode.DUPLICATE_RESOURCE,  # two changes for one user in one request
        "frank": ErrorCode.RESOURCE_NOT_FOUND,
    }
    assert (
        scram.lookup("alice", "SCRAM-SHA-512") is not None and scram.lookup("erin", "SCRAM-SHA-512") is None
    )


def test_describe_rules(tmp_path):
    scram = ScramCredentials(FileScramStore(tmp_path))
    scram.alter([upsert("alice", mechanism=SHA256, iterations=8192)], [])
    scram.alter([upsert("bob")], [])
    scram.alter([upsert("alice")], [])
    assert [(u, c) for u, c, _, _ in scram.describe(None)] == [
        ("alice", ErrorCode.NONE),
        ("bob", ErrorCode.NONE),
    ]
    [(user, code, _, infos)] = scram.describe(["alice"])
    assert infos == [(SHA256, 8192), (SHA512, 4096)]
    described = {u: c for u, c, _, _ in scram.describe(["bob", "bob", "nobody"])}
    assert described == {"bob": ErrorCode.DUPLICATE_RESOURCE, "nobody": ErrorCode.RESOURCE_NOT_FOUND}


def test_credentials_survive_a_restart_in_an_owner_only_file(tmp_path):
    scram = ScramCredentials(FileScramStore(tmp_path))
    scram.alter([upsert("alice", password="secret")], [])
    path = tmp_path / "scram-credentials.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "secret" not in path.read_text()
    again = ScramCredentials(FileScramStore(tmp_path))
    assert again.lookup("alice", "SCRAM-SHA-512") == scram.lookup("alice", "SCRAM-SHA-512")
    assert again.alter([], [Deletion("alice", SHA512)]) == [("alice", ErrorCode.NONE, None)]
    assert ScramCredentials(FileScramStore(tmp_path)).users() == {}
