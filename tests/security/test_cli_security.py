"""The security CLI against a broker with SASL and an authorizer: ``--command-config`` as Kafka's tools,
``onceflow acls add|list|remove`` with kafka-acls' flags, ``onceflow users scram set|list|delete``
online and on a stopped broker's data dir."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from onceflow.cli.main import cli
from onceflow.client import AdminClient

pytestmark = pytest.mark.timeout(180)


def run(*args: str, check: bool = True) -> SimpleNamespace:
    """``onceflow ARGS`` in this process (click's runner): stdout, stderr and the exit code."""
    result = CliRunner().invoke(cli, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    done = SimpleNamespace(stdout=result.stdout, stderr=result.stderr, returncode=result.exit_code)
    if check and done.returncode != 0:
        raise AssertionError(f"onceflow {' '.join(args)} failed: {done.stdout} {done.stderr}")
    return done


@pytest.fixture(scope="module")
def admin_config(secure_broker, tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "admin.properties"
    path.write_text(
        "# as for kafka-acls.sh --command-config\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="admin" password="admin-secret";\n'
        f"ssl.truststore.location={secure_broker.pki.ca}\n"
        "ssl.truststore.type=PEM\n"
    )
    return str(path)


def test_acls_add_list_remove(secure_broker, admin_config):
    where = ["--bootstrap-server", secure_broker.bootstrap, "--command-config", admin_config]
    added = run(
        "acls",
        "add",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--operation",
        "describe",
        "--topic",
        "cli-orders",
        *where,
    )
    assert "Adding ACLs: 2" in added.stdout
    run(
        "acls",
        "add",
        "--allow-principal",
        "User:bob",
        "--producer",
        "--topic",
        "cli-",
        "--transactional-id",
        "cli-tx",
        "--resource-pattern-type",
        "prefixed",
        *where,
    )
    listed = run("acls", "list", "--topic", "cli-orders", "--resource-pattern-type", "match", *where).stdout
    assert "principal=User:alice, host=*, operation=READ, permissionType=ALLOW" in listed
    assert "name=cli-, patternType=PREFIXED" in listed and "operation=WRITE" in listed
    with AdminClient(secure_broker.bootstrap, security=secure_broker.scram()) as admin:
        assert len(admin.describe_acls()) >= 2 + 3 + 2
    removed = run(
        "acls",
        "remove",
        "--allow-principal",
        "User:alice",
        "--operation",
        "read",
        "--topic",
        "cli-orders",
        *where,
    )
    assert "Removed ACLs: 1" in removed.stdout
    run(
        "acls",
        "remove",
        "--topic",
        "cli-",
        "--transactional-id",
        "cli-tx",
        "--resource-pattern-type",
        "prefixed",
        "--force",
        *where,
    )
    remaining = run("acls", "list", *where).stdout
    assert "User:bob" not in remaining and "operation=DESCRIBE" in remaining


def test_acls_refused_without_authentication_or_rights(secure_broker, tmp_path):
    bob = tmp_path / "bob.properties"
    bob.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.username=bob\nsasl.password=bob-secret\n"
        f"ssl.ca.location={secure_broker.pki.ca}\n"
    )
    refused = run(
        "acls",
        "add",
        "--allow-principal",
        "User:bob",
        "--operation",
        "all",
        "--cluster",
        "--bootstrap-server",
        secure_broker.bootstrap,
        "--command-config",
        str(bob),
        check=False,
    )
    assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr
    assert "Traceback" not in refused.stderr
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(bob.read_text().replace("bob-secret", "guess"))
    failed = run(
        "acls",
        "list",
        "--bootstrap-server",
        secure_broker.bootstrap,
        "--command-config",
        str(wrong),
        check=False,
    )
    assert (
        failed.returncode == 1
        and "authentication as 'bob'" in failed.stderr
        and "Traceback" not in failed.stderr
    )
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\nsasl.username=x\nsasl.password=y\n")
    unusable = run("acls", "list", "--command-config", str(bad), check=False)
    assert unusable.returncode == 2 and "GSSAPI" in unusable.stderr


def test_users_scram_online(secure_broker, admin_config):
    where = ["--bootstrap-server", secure_broker.bootstrap, "--command-config", admin_config]
    run(
        "users",
        "scram",
        "set",
        "--user",
        "erin",
        "--add-config",
        "SCRAM-SHA-256=[iterations=8192,password=erin-secret]",
        *where,
    )
    listed = run("users", "scram", "list", "--user", "erin", *where).stdout
    assert "SCRAM-SHA-256 (8192)" in listed
    # erin can now log in with it, and no longer once it is deleted.
    with AdminClient(
        secure_broker.bootstrap, security=secure_broker.scram("erin", "SCRAM-SHA-256", "erin-secret")
    ) as admin:
        admin.list_topics()
    run("users", "scram", "delete", "--user", "erin", "--delete-config", "SCRAM-SHA-256", *where)
    gone = run("users", "scram", "list", "--user", "erin", *where, check=False)
    assert gone.returncode == 1 and "RESOURCE_NOT_FOUND" in gone.stderr


def test_users_scram_offline_refuses_a_running_broker(secure_broker, tmp_path):
    busy = run(
        "users",
        "scram",
        "set",
        "--user",
        "x",
        "--password",
        "y",
        "--data-dir",
        str(secure_broker.data_dir),
        check=False,
    )
    assert busy.returncode == 1 and "stop the broker" in busy.stderr
    run("users", "scram", "set", "--user", "zed", "--password", "zed-secret", "--data-dir", str(tmp_path))
    assert "zed" in run("users", "scram", "list", "--data-dir", str(tmp_path)).stdout


def test_cluster_status_and_metadata_quorum_describe_take_the_command_config(secure_broker, admin_config):
    where = ["--bootstrap-server", secure_broker.bootstrap]
    status = run("cluster", "status", *where, "--command-config", admin_config)
    assert "(controller)" in status.stdout and "alive" in status.stdout
    quorum = run("metadata-quorum", "describe", "--status", *where, "--command-config", admin_config)
    assert "LeaderEpoch:" in quorum.stdout and "CurrentVoters:" in quorum.stdout
    # Without it they speak plain text to a SASL_SSL listener, which answers nothing.
    assert run("cluster", "status", *where, check=False).returncode != 0
